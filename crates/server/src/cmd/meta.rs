//! The meta commands: mg, ms, md, ma, mn, me, as memcached 1.6.4x's protocol.txt has them.
//!
//! ```text
//!   mg key v t c f k s h l Oxx C E N R T u q  ->  VA <len> <flags>\r\n<data>\r\n | HD <flags> | EN | EX
//!   ms key <len> F T C E I M N c k s O q b    ->  HD | NS | EX | NF   (then <flags>)
//!   md key C E I T x k O q b                  ->  HD | NF | EX
//!   ma key N J D T M C E t c v k O q b        ->  HD | VA <len>\r\n<number>\r\n | NF | NS | EX
//!   mn -> MN      me key [b] -> ME key exp=.. la=.. cas=.. fetch=.. cls=1 size=..
//! ```
//!
//! Return flags are written in the order the request gave them, then Z (a win token was
//! already handed out), X (the item is stale) and W (this client won the right to recache).
//! Every reply echoes O and k; `c` is on every reply of mg, ms and ma that reports an item (ms
//! answers `c0` when it stored nothing, as memcached does). `E` sets the CAS of whatever a
//! command writes: ms, ma, md with I or x, mg when N creates or T touches.
//!
//! Quiet mode (q) hides the nominal reply only: EN for mg; HD for ms and md; HD and VA for ma.
//! NS, EX and NF are still answered (checked against memcached 1.6.18).

use cairn_engine::{compare, put, Compare, Mismatch, Put, PutMode, Tx};
use cairn_proto::encode::{self, MetaLine};
use cairn_proto::{MetaCmd, MetaFlags, MetaMode, MetaRequest};
use cairn_store::{Entry, Item, ItemMeta, Store, StoreError};

use super::arith;
use super::exptime::absolute_exptime;
use crate::stats::bump;
use crate::Ctx;

/// Dispatches one meta request.
pub fn meta(ctx: &Ctx, tx: &Tx<'_>, req: MetaRequest, now: u32, out: &mut Vec<u8>) {
    bump(&ctx.counters.cmd_meta);
    match req.cmd {
        MetaCmd::Get => get(ctx, tx, &req, now, out),
        MetaCmd::Set => set(ctx, tx, &req, now, out),
        MetaCmd::Delete => delete(ctx, tx, &req, now, out),
        MetaCmd::Arith => arith_cmd(ctx, tx, &req, now, out),
        MetaCmd::Noop => out.extend_from_slice(b"MN\r\n"),
        MetaCmd::Debug => debug(tx, &req, now, out),
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

/// What one reply line reports besides its code.
#[derive(Clone, Copy, Default)]
struct Report<'a> {
    /// The item's metadata and value length, if the reply is about one.
    item: Option<(&'a ItemMeta, usize)>,
    /// `h`: whether the item was fetched before this request.
    hit_before: bool,
    /// Answer `c0` when there is no item (ms, as memcached).
    zero_cas: bool,
}

/// Appends the return flags of `req` to `line`.
fn return_flags<'o>(
    mut line: MetaLine<'o>,
    req: &MetaRequest,
    r: Report<'_>,
    now: u32,
) -> MetaLine<'o> {
    let f = &req.flags;
    for &letter in &f.order {
        line = match (letter, r.item) {
            (b'O', _) => line.flag(b'O', f.opaque.as_deref().unwrap_or_default()),
            // memcached puts `b` right after the key it encodes.
            (b'k', _) if f.base64 => line.flag(b'k', &req.wire_key()).flag(b'b', b""),
            (b'k', _) => line.flag(b'k', &req.wire_key()),
            (b'c', Some((m, _))) => line.num(b'c', m.cas),
            (b'c', None) if r.zero_cas => line.num(b'c', 0),
            (b'f', Some((m, _))) => line.num(b'f', u64::from(m.flags)),
            (b'h', Some(_)) => line.num(b'h', u64::from(r.hit_before)),
            (b'l', Some((m, _))) => line.num(b'l', u64::from(now.saturating_sub(m.last_access))),
            (b's', Some((_, len))) => line.num(b's', len as u64),
            (b't', Some((m, _))) => line.signed(b't', ttl_left(m, now)),
            _ => line,
        };
    }
    line
}

/// The outcome code of a command.
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

/// Writes `code` and the return flags, unless quiet mode hides it (`q` hides HD).
fn write_reply(req: &MetaRequest, code: Code, r: Report<'_>, now: u32, out: &mut Vec<u8>) {
    if req.flags.quiet && code == Code::Stored {
        return;
    }
    return_flags(MetaLine::new(out, code.bytes()), req, r, now).end();
}

/// Checks the C flag against the live item (the engine's compare, as `cas` and gRPC's).
/// `Err` is the code to answer.
fn compare_cas(f: &MetaFlags, current: Option<(ItemMeta, usize)>) -> Result<(), Code> {
    let Some(expected) = f.compare_cas else {
        return Ok(());
    };
    compare(Compare::Cas(expected), current.as_ref().map(|(m, _)| m)).map_err(|m| match m {
        Mismatch::Absent => Code::NotFound,
        Mismatch::Differs(_) => Code::Exists,
    })
}

/// What mg found.
enum Found {
    /// No live item (and no N): EN. Whether an expired one was found.
    Miss { expired: bool },
    /// C named another CAS unique: EX, and nothing changed.
    Mismatch,
    /// The item after this request's changes; `before` as it was (for `h` and `l`).
    Hit {
        item: Item,
        before: ItemMeta,
        won: bool,
    },
}

fn get(ctx: &Ctx, tx: &Tx<'_>, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    bump(&c.cmd_get);
    let found = tx.entry(&req.key, now, |e| {
        let expired = e.was_expired();
        let mut won = false;
        let mut created = false;
        match e.peek() {
            None => {
                let Some(ttl) = f.vivify_ttl else {
                    return Found::Miss { expired };
                };
                // Autovivify: an empty placeholder; this client wins the right to fill it.
                let exptime = absolute_exptime(ttl, now);
                if e.store(&[], 0, exptime, f.explicit_cas).is_err() {
                    return Found::Miss { expired };
                }
                e.update_meta(|m| m.win_sent = true);
                won = true;
                created = true;
            }
            Some(current) => {
                if compare_cas(f, Some(current)).is_err() {
                    return Found::Mismatch;
                }
                let (meta, _) = current;
                let recache = f
                    .recache_ttl
                    .is_some_and(|r| meta.exptime != 0 && ttl_left(&meta, now) < r);
                if (meta.stale || recache) && !meta.win_sent {
                    won = true;
                }
            }
        }
        let (before, _) = e.peek().expect("present: stored or found above");
        e.update_meta(|m| {
            if let Some(ttl) = f.new_ttl {
                m.exptime = absolute_exptime(ttl, now);
                // E: the touch is a change, so it takes the unique the client chose.
                if let (Some(cas), false) = (f.explicit_cas, created) {
                    m.cas = cas;
                }
            }
            if won {
                m.win_sent = true;
            }
            if !f.no_bump {
                m.fetched = true;
                m.last_access = now;
            }
        });
        let item = e.item().expect("present: stored or found above");
        Found::Hit { item, before, won }
    });
    match found {
        Found::Miss { expired } => {
            bump(&c.get_misses);
            if expired {
                bump(&c.get_expired);
            }
            if !f.quiet {
                // A miss still echoes O and k (in request order) so pipelines can match it.
                return_flags(MetaLine::new(out, b"EN"), req, Report::default(), now).end();
            }
        }
        Found::Mismatch => {
            bump(&c.get_hits);
            return_flags(MetaLine::new(out, b"EX"), req, Report::default(), now).end();
        }
        Found::Hit { item, before, won } => {
            bump(&c.get_hits);
            if f.new_ttl.is_some() {
                bump(&c.cmd_touch);
                bump(&c.touch_hits);
            }
            let Item { value, mut meta } = item;
            // `l` answers for the access before this one.
            meta.last_access = before.last_access;
            let line = if f.return_value {
                MetaLine::value(out, value.len())
            } else {
                MetaLine::new(out, b"HD")
            };
            let report = Report {
                item: Some((&meta, value.len())),
                hit_before: before.fetched,
                zero_cas: false,
            };
            let mut line = return_flags(line, req, report, now);
            // memcached's order: Z (token already out), X (stale), W (this client won).
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

fn set(ctx: &Ctx, tx: &Tx<'_>, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    bump(&c.cmd_set);
    let value = req.value.as_deref().unwrap_or_default();
    let exptime = absolute_exptime(f.new_ttl.unwrap_or(0), now);
    let flags = f.client_flags.unwrap_or(0);
    let mode = f.mode.unwrap_or(MetaMode::Set);
    // The code, and the stored item's meta and value length.
    type Outcome = Result<(Code, Option<(ItemMeta, usize)>), StoreError>;
    let result: Outcome = tx.entry(&req.key, now, |e| {
        let current = e.peek();
        let mut stale = false;
        if let Err(code) = compare_cas(f, current) {
            // I: a compare-and-swap with an older CAS still stores, but marks the item stale.
            let older = matches!((f.compare_cas, current), (Some(cc), Some((m, _))) if cc < m.cas);
            if !(f.invalidate && older) {
                bump(if code == Code::NotFound {
                    &c.cas_misses
                } else {
                    &c.cas_badval
                });
                return Ok((code, None));
            }
            stale = true;
        }
        let (stored, len) = match mode {
            // The engine's rule, as text set/add/replace and gRPC's: add only when absent,
            // replace only when there, and a set refused as too large leaves no stale value.
            MetaMode::Set | MetaMode::Add | MetaMode::Replace => {
                let mode = match mode {
                    MetaMode::Set => PutMode::Set,
                    MetaMode::Add => PutMode::Add,
                    _ => PutMode::Replace,
                };
                match put(e, mode, &[value], flags, exptime, f.explicit_cas)? {
                    Put::Stored(m) => (m, value.len()),
                    Put::NotStored => return Ok((Code::NotStored, None)),
                }
            }
            MetaMode::Append | MetaMode::Prepend => match e.item() {
                // NS for a missing key, unless N creates it.
                None => match f.vivify_ttl {
                    Some(ttl) => {
                        let exptime = absolute_exptime(ttl, now);
                        (
                            e.store(&[value], flags, exptime, f.explicit_cas)?,
                            value.len(),
                        )
                    }
                    None => return Ok((Code::NotStored, None)),
                },
                Some(old) => {
                    let parts: [&[u8]; 2] = if mode == MetaMode::Append {
                        [&old.value, value]
                    } else {
                        [value, &old.value]
                    };
                    let m = e.store(&parts, old.meta.flags, old.meta.exptime, f.explicit_cas)?;
                    (m, old.value.len() + value.len())
                }
            },
            MetaMode::Incr | MetaMode::Decr => return Ok((Code::NotStored, None)),
        };
        if f.compare_cas.is_some() {
            bump(&c.cas_hits);
        }
        let mut meta = stored;
        if stale {
            e.update_meta(|m| m.stale = true);
            meta.stale = true;
        }
        Ok((Code::Stored, Some((meta, len))))
    });
    match result {
        Ok((code, stored)) => {
            let report = Report {
                item: stored.as_ref().map(|(m, len)| (m, *len)),
                hit_before: false,
                zero_cas: true,
            };
            write_reply(req, code, report, now, out)
        }
        Err(e) => out.extend_from_slice(super::storage::store_error(ctx, e)),
    }
}

fn delete(ctx: &Ctx, tx: &Tx<'_>, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    let code = tx.entry(&req.key, now, |e| {
        let current = e.peek();
        if current.is_none() {
            return Code::NotFound;
        }
        if let Err(code) = compare_cas(f, current) {
            return code;
        }
        if !(f.invalidate || f.remove_value) {
            e.delete();
            return Code::Stored;
        }
        if f.remove_value {
            if let Some(old) = e.item() {
                // x: the value goes, the item and its flags stay (a new copy, so E applies).
                let _ = e.store(&[], old.meta.flags, old.meta.exptime, f.explicit_cas);
            }
        }
        // I: marked stale, with a new CAS unique (E's, if given).
        let cas = (f.invalidate && !f.remove_value).then(|| e.new_cas(f.explicit_cas));
        e.update_meta(|m| {
            if f.invalidate {
                m.stale = true;
                m.win_sent = false;
            }
            if let Some(cas) = cas {
                m.cas = cas;
            }
            if let Some(ttl) = f.new_ttl {
                m.exptime = absolute_exptime(ttl, now);
            }
        });
        Code::Stored
    });
    bump(if code == Code::Stored {
        &c.delete_hits
    } else {
        &c.delete_misses
    });
    write_reply(req, code, Report::default(), now, out);
}

fn arith_cmd(ctx: &Ctx, tx: &Tx<'_>, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let c = &ctx.counters;
    let f = &req.flags;
    let incr = f.mode != Some(MetaMode::Decr);
    let delta = f.delta.unwrap_or(1);
    type Outcome = Result<(Code, Option<(u64, ItemMeta)>), arith::ArithError>;
    let result: Outcome = tx.entry(&req.key, now, |e: &mut Entry<'_>| {
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
                .store(&[&text], 0, absolute_exptime(ttl, now), f.explicit_cas)
                .map_err(arith::ArithError::Store)?;
            return Ok((Code::Stored, Some((initial, meta))));
        };
        let current = arith::parse_counter(&item.value).ok_or(arith::ArithError::NonNumeric)?;
        let next = arith::apply(current, incr, delta);
        let mut text = Vec::new();
        encode::decimal(&mut text, next);
        let exptime = f
            .new_ttl
            .map_or(item.meta.exptime, |t| absolute_exptime(t, now));
        let meta = e
            .store(&[&text], item.meta.flags, exptime, f.explicit_cas)
            .map_err(arith::ArithError::Store)?;
        Ok((Code::Stored, Some((next, meta))))
    });
    match result {
        Ok((Code::Stored, Some((n, meta)))) => {
            bump(if incr { &c.incr_hits } else { &c.decr_hits });
            if f.quiet {
                return;
            }
            let mut number = Vec::new();
            encode::decimal(&mut number, n);
            let report = Report {
                item: Some((&meta, number.len())),
                ..Report::default()
            };
            if f.return_value {
                return_flags(MetaLine::value(out, number.len()), req, report, now).end();
                out.extend_from_slice(&number);
                out.extend_from_slice(b"\r\n");
            } else {
                write_reply(req, Code::Stored, report, now, out);
            }
        }
        Ok((code, _)) => {
            if code == Code::NotFound {
                bump(if incr { &c.incr_misses } else { &c.decr_misses });
            }
            write_reply(req, code, Report::default(), now, out);
        }
        Err(arith::ArithError::NonNumeric) => out
            .extend_from_slice(b"CLIENT_ERROR cannot increment or decrement non-numeric value\r\n"),
        Err(arith::ArithError::NotFound) => {
            write_reply(req, Code::NotFound, Report::default(), now, out)
        }
        Err(arith::ArithError::Store(e)) => {
            out.extend_from_slice(super::storage::store_error(ctx, e))
        }
    }
}

/// `me key`: memcached's debug line; `size` is the item's bytes in memory.
fn debug(tx: &Tx<'_>, req: &MetaRequest, now: u32, out: &mut Vec<u8>) {
    let found = tx.entry(&req.key, now, |e| e.item());
    match found {
        None => out.extend_from_slice(b"EN\r\n"),
        Some(item) => {
            use std::io::Write;
            let m = &item.meta;
            let exp = ttl_left(m, now);
            let la = now.saturating_sub(m.last_access);
            let fetch = if m.fetched { "yes" } else { "no" };
            let size = Store::item_bytes(&req.key, &item.value, m);
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
