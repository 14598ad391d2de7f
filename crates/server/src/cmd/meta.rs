//! The meta commands: mg, ms, md, ma, mn, me (memcached 1.6).
//!
//! ```text
//!   mg key v t c f k Oxx  ->  VA <len> t<ttl> c<cas> f<flags> k<key> Oxx\r\n<data>\r\n | EN
//!   ms key <len> F T C I M ->  HD | NS | EX | NF
//!   md key C I T x q      ->  HD | NF | EX
//!   ma key N J D T M v    ->  HD | VA <len>\r\n<number>\r\n | NF | NS | EX
//!   mn -> MN      me key -> ME key exp=.. la=.. cas=.. fetch=.. cls=1 size=..
//! ```
//!
//! Return flags are written in the order the request gave them, then W (this client won the
//! right to recache), X (the item is stale) and Z (a win token was already handed out).
//! Quiet mode (q) hides the common-case reply: EN for mg; HD for ms, md and ma.

use cairn_proto::encode::{self, MetaLine};
use cairn_proto::{MetaCmd, MetaFlags, MetaMode, MetaRequest};
use cairn_store::{Entry, Item, ItemMeta, StoreError};

use super::arith;
use crate::stats::bump;
use crate::Ctx;

/// Dispatches one meta request.
pub fn meta(ctx: &Ctx, req: MetaRequest, now: u32, out: &mut Vec<u8>) {
    bump(&ctx.counters.cmd_meta);
    match req.cmd {
        MetaCmd::Get => get(ctx, &req, now, out),
        MetaCmd::Set => set(ctx, &req, now, out),
        MetaCmd::Delete => delete(ctx, &req, now, out),
        MetaCmd::Arith => arith_cmd(ctx, &req, now, out),
        MetaCmd::Noop => out.extend_from_slice(b"MN\r\n"),
        MetaCmd::Debug => debug(ctx, &req, now, out),
    }
}

/// Remaining TTL as meta reports it: -1 for never.
fn ttl_left(meta: &ItemMeta, now: u32) -> i64 {
    if meta.exptime == 0 {
        -1
    } else {
        i64::from(meta.exptime.saturating_sub(now))
    }
}

/// Writes the return flags of `req` for `item` (or for a miss when `item` is None).
fn return_flags<'o>(
    mut line: MetaLine<'o>,
    req: &MetaRequest,
    item: Option<(&ItemMeta, usize)>,
    hit_before: bool,
    now: u32,
) -> MetaLine<'o> {
    let f = &req.flags;
    for &letter in &f.order {
        line = match (letter, item) {
            (b'O', _) => line.flag(b'O', f.opaque.as_deref().unwrap_or_default()),
            // memcached puts `b` right after the key it encodes.
            (b'k', _) if f.base64 => line.flag(b'k', &req.wire_key()).flag(b'b', b""),
            (b'k', _) => line.flag(b'k', &req.wire_key()),
            (b'c', Some((m, _))) => line.num(b'c', m.cas),
            (b'f', Some((m, _))) => line.num(b'f', u64::from(m.flags)),
            (b'h', Some(_)) => line.num(b'h', u64::from(hit_before)),
            (b'l', Some((m, _))) => line.num(b'l', u64::from(now.saturating_sub(m.last_access))),
            (b's', Some((_, len))) => line.num(b's', len as u64),
            (b't', Some((m, _))) => line.signed(b't', ttl_left(m, now)),
            _ => line,
        };
    }
    line
}

fn get(ctx: &Ctx, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    bump(&c.cmd_get);
    let result = ctx.store.entry(&req.key, now, |e| {
        let expired = e.was_expired();
        let mut won = false;
        if e.peek().is_none() {
            let Some(ttl) = f.vivify_ttl else {
                return Err(expired);
            };
            // Autovivify: an empty placeholder; this client wins the right to fill it.
            e.store(&[], 0, crate::absolute_exptime(ttl, now), None)
                .map_err(|_| expired)?;
            e.update_meta(|m| m.win_sent = true);
            won = true;
        } else {
            let (meta, _) = e.peek().expect("checked above");
            let recache = f
                .recache_ttl
                .is_some_and(|r| meta.exptime != 0 && ttl_left(&meta, now) < r);
            if (meta.stale || recache) && !meta.win_sent {
                won = true;
            }
        }
        // `h` and `l` answer for the accesses before this one.
        let (before, _) = e.peek().expect("present: stored or found above");
        e.update_meta(|m| {
            if let Some(ttl) = f.new_ttl {
                m.exptime = crate::absolute_exptime(ttl, now);
            }
            if won {
                m.win_sent = true;
            }
            if !f.no_bump {
                m.fetched = true;
                m.last_access = now;
            }
        });
        let mut item = e.item().expect("present: stored or found above");
        item.meta.last_access = before.last_access;
        Ok((item, before.fetched, won))
    });
    match result {
        Err(expired) => {
            bump(&c.get_misses);
            if expired {
                bump(&c.get_expired);
            }
            if !f.quiet {
                // A miss still echoes O and k (in request order) so pipelines can match it.
                return_flags(MetaLine::new(out, b"EN"), req, None, false, now).end();
            }
        }
        Ok((item, hit_before, won)) => {
            bump(&c.get_hits);
            if f.new_ttl.is_some() {
                bump(&c.cmd_touch);
                bump(&c.touch_hits);
            }
            let Item { value, meta } = item;
            let line = if f.return_value {
                MetaLine::value(out, value.len())
            } else {
                MetaLine::new(out, b"HD")
            };
            // memcached's order: Z (token already out), X (stale), W (this client won).
            let mut line = return_flags(line, req, Some((&meta, value.len())), hit_before, now);
            if meta.win_sent && !won {
                line = line.flag(b'Z', b"");
            }
            if meta.stale {
                line = line.flag(b'X', b"");
            }
            if won {
                line = line.flag(b'W', b"");
            }
            line.end();
            if f.return_value {
                out.extend_from_slice(&value);
                out.extend_from_slice(b"\r\n");
            }
        }
    }
}

/// The outcome code of a write command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Code {
    Stored,
    NotStored,
    Exists,
    NotFound,
}

impl Code {
    fn bytes(self) -> &'static [u8] {
        match self {
            Code::Stored => b"HD",
            Code::NotStored => b"NS",
            Code::Exists => b"EX",
            Code::NotFound => b"NF",
        }
    }
}

/// Checks the C flag against the live item. `Err` is the code to answer.
fn compare_cas(f: &MetaFlags, current: Option<(ItemMeta, usize)>) -> Result<(), Code> {
    match (f.compare_cas, current) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(Code::NotFound),
        (Some(c), Some((m, _))) if c == m.cas => Ok(()),
        (Some(_), Some(_)) => Err(Code::Exists),
    }
}

fn write_reply(
    req: &MetaRequest,
    code: Code,
    meta: Option<ItemMeta>,
    size: usize,
    now: u32,
    out: &mut Vec<u8>,
) {
    let quiet = req.flags.quiet && code == Code::Stored;
    if quiet {
        return;
    }
    let line = MetaLine::new(out, code.bytes());
    return_flags(line, req, meta.as_ref().map(|m| (m, size)), false, now).end();
}

fn set(ctx: &Ctx, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    bump(&c.cmd_set);
    let value = req.value.as_deref().unwrap_or_default();
    let exptime = crate::absolute_exptime(f.new_ttl.unwrap_or(0), now);
    let flags = f.client_flags.unwrap_or(0);
    let mode = f.mode.unwrap_or(MetaMode::Set);
    let result: Result<(Code, Option<ItemMeta>), StoreError> =
        ctx.store.entry(&req.key, now, |e| {
            let current = e.peek();
            let mut stale = false;
            if let Err(code) = compare_cas(f, current) {
                // I: a compare-and-swap with an older CAS still stores, but marks the item stale.
                let older =
                    matches!((f.compare_cas, current), (Some(cc), Some((m, _))) if cc < m.cas);
                if !(f.invalidate && older) {
                    if f.compare_cas.is_some() {
                        bump(if code == Code::NotFound {
                            &c.cas_misses
                        } else {
                            &c.cas_badval
                        });
                    }
                    return Ok((code, None));
                }
                stale = true;
            }
            let stored = match mode {
                MetaMode::Add if current.is_some() => return Ok((Code::NotStored, None)),
                MetaMode::Replace if current.is_none() => return Ok((Code::NotStored, None)),
                MetaMode::Append | MetaMode::Prepend => match e.item() {
                    None => match f.vivify_ttl {
                        Some(ttl) => e.store(
                            &[value],
                            flags,
                            crate::absolute_exptime(ttl, now),
                            f.explicit_cas,
                        )?,
                        None => return Ok((Code::NotStored, None)),
                    },
                    Some(old) => {
                        let parts: [&[u8]; 2] = if mode == MetaMode::Append {
                            [&old.value, value]
                        } else {
                            [value, &old.value]
                        };
                        e.store(&parts, old.meta.flags, old.meta.exptime, f.explicit_cas)?
                    }
                },
                MetaMode::Incr | MetaMode::Decr => return Ok((Code::NotStored, None)),
                _ => e.store(&[value], flags, exptime, f.explicit_cas)?,
            };
            if f.compare_cas.is_some() {
                bump(&c.cas_hits);
            }
            let mut meta = stored;
            if stale {
                e.update_meta(|m| m.stale = true);
                meta.stale = true;
            }
            Ok((Code::Stored, Some(meta)))
        });
    match result {
        Ok((code, meta)) => write_reply(req, code, meta, value.len(), now, out),
        Err(e) => out.extend_from_slice(super::storage::store_error(ctx, e)),
    }
}

fn delete(ctx: &Ctx, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    let code = ctx.store.entry(&req.key, now, |e| {
        let current = e.peek();
        if current.is_none() {
            return Code::NotFound;
        }
        if let Err(code) = compare_cas(f, current) {
            return code;
        }
        if f.invalidate || f.remove_value {
            let keep: Option<Item> = e.item();
            if f.remove_value {
                if let Some(old) = keep {
                    // x: the value goes, the item and its flags stay.
                    let _ = e.store(&[], old.meta.flags, old.meta.exptime, None);
                }
            }
            e.update_meta(|m| {
                if f.invalidate {
                    m.stale = true;
                    m.win_sent = false;
                }
                if let Some(ttl) = f.new_ttl {
                    m.exptime = crate::absolute_exptime(ttl, now);
                }
            });
        } else {
            e.delete();
        }
        Code::Stored
    });
    bump(if code == Code::Stored {
        &c.delete_hits
    } else {
        &c.delete_misses
    });
    write_reply(req, code, None, 0, now, out);
}

fn arith_cmd(ctx: &Ctx, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    let incr = f.mode != Some(MetaMode::Decr);
    if matches!(f.mode, Some(m) if m != MetaMode::Incr && m != MetaMode::Decr) {
        out.extend_from_slice(b"CLIENT_ERROR invalid mode for ma M token\r\n");
        return;
    }
    let delta = f.delta.unwrap_or(1);
    type Outcome = Result<(Code, Option<(u64, ItemMeta)>), arith::ArithError>;
    let result: Outcome = ctx.store.entry(&req.key, now, |e: &mut Entry<'_>| {
        let current = e.peek();
        if current.is_some() {
            if let Err(code) = compare_cas(f, current) {
                return Ok((code, None));
            }
        }
        let Some(item) = e.item() else {
            let Some(ttl) = f.vivify_ttl else {
                return Ok((Code::NotFound, None));
            };
            let initial = f.initial.unwrap_or(0);
            let mut text = Vec::new();
            encode::decimal(&mut text, initial);
            let meta = e
                .store(
                    &[&text],
                    0,
                    crate::absolute_exptime(ttl, now),
                    f.explicit_cas,
                )
                .map_err(arith::ArithError::Store)?;
            return Ok((Code::Stored, Some((initial, meta))));
        };
        let current = arith::parse_counter(&item.value).ok_or(arith::ArithError::NonNumeric)?;
        let next = arith::apply(current, incr, delta);
        let mut text = Vec::new();
        encode::decimal(&mut text, next);
        let exptime = f
            .new_ttl
            .map_or(item.meta.exptime, |t| crate::absolute_exptime(t, now));
        let meta = e
            .store(&[&text], item.meta.flags, exptime, f.explicit_cas)
            .map_err(arith::ArithError::Store)?;
        Ok((Code::Stored, Some((next, meta))))
    });
    match result {
        Ok((Code::Stored, Some((n, meta)))) => {
            bump(if incr { &c.incr_hits } else { &c.decr_hits });
            let mut number = Vec::new();
            encode::decimal(&mut number, n);
            if f.return_value {
                let line = MetaLine::value(out, number.len());
                return_flags(line, req, Some((&meta, number.len())), false, now).end();
                out.extend_from_slice(&number);
                out.extend_from_slice(b"\r\n");
            } else {
                write_reply(req, Code::Stored, Some(meta), number.len(), now, out);
            }
        }
        Ok((code, _)) => {
            if code == Code::NotFound {
                bump(if incr { &c.incr_misses } else { &c.decr_misses });
            }
            write_reply(req, code, None, 0, now, out);
        }
        Err(arith::ArithError::NonNumeric) => out
            .extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"),
        Err(arith::ArithError::NotFound) => write_reply(req, Code::NotFound, None, 0, now, out),
        Err(arith::ArithError::Store(e)) => {
            out.extend_from_slice(super::storage::store_error(ctx, e))
        }
    }
}

fn debug(ctx: &Ctx, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let found = ctx.store.entry(&req.key, now, |e| e.peek());
    match found {
        None => out.extend_from_slice(b"EN\r\n"),
        Some((m, size)) => {
            use std::io::Write;
            let exp = ttl_left(&m, now);
            let la = now.saturating_sub(m.last_access);
            let fetch = if m.fetched { "yes" } else { "no" };
            out.extend_from_slice(b"ME ");
            out.extend_from_slice(&req.wire_key());
            // Writing to a Vec cannot fail.
            let _ = write!(
                out,
                " exp={exp} la={la} cas={} fetch={fetch} cls=1 size={size}\r\n",
                m.cas
            );
        }
    }
}
