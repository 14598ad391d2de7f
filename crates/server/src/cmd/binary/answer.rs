//! One binary request answered: its command run by the text protocol's command file, its
//! outcome worded as memcached's binary protocol words it (`proto_bin.c`).
//!
//! ```text
//!   Get/GetQ/GetK/GetKQ ──> get::lookup_async   hit: flags, [key], value, CAS; miss: 0x0001
//!                                                (GetK: the key; quiet: nothing)
//!   GAT(Q)/GATK(Q), Touch > admitted, get::lookup_async with the expiry / touch::outcome
//!   Set/Add/Replace(Q) ───> storage::outcome     a CAS in the header makes it a cas
//!   Append/Prepend(Q) ────> storage::outcome     a CAS in the header must match
//!   Delete(Q) ────────────> delete::outcome      a CAS in the header must match
//!   Incr/Decr(Q) ─────────> arith::change        created from `initial` unless 0xffffffff
//!   Flush(Q) ─────────────> flush::flush_all     Stat ──> stats.rs
//!   Noop, Version, Quit(Q), Verbosity ─> here    SASL, unknown ─> 0x0081
//! ```
//!
//! Every write takes the one write path: `Engine::admit`, `Engine::resolve` (its key's item
//! back from flash), `Engine::apply` with the command file's calls on the `Tx`, its `Ack`
//! noted on the session so the reply waits for it. A quiet request answers only errors
//! (quiet gets: only hits), as memcached.
//!
//! Non-goals: parsing (cairn_proto::binary), the connection (step.rs, connection.rs).

use std::sync::Arc;

use cairn_engine::{Tx, WriteError};
use cairn_proto::binary::{response, BinRequest, Command, Reply, Status, NO_CREATE};
use cairn_proto::{ArithCreate, StoreKind};
use cairn_store::ReadOutcome;

use super::{stats, wording};
use crate::cmd::arith::{self, ArithError, Changed};
use crate::cmd::delete::{self, Deleted};
use crate::cmd::dispatch::Session;
use crate::cmd::flow::{Closed, Flow};
use crate::cmd::storage::{self, Stored};
use crate::cmd::{flush, get, touch};
use crate::version::VERSION;
use crate::Ctx;

/// Runs `f` through the one write path (`Engine::apply_write`); its acknowledgement joins
/// what the session's output waits for.
async fn write<C: Session, R>(
    ctx: &Ctx,
    c: &mut C,
    key: Option<&[u8]>,
    f: impl FnOnce(&Tx<'_>) -> R,
) -> Result<R, WriteError> {
    let (r, ack) = ctx.engine.apply_write(key, f).await?;
    c.note(ack);
    Ok(r)
}

/// Answers one request into the session's output.
pub async fn answer<C: Session>(
    ctx: &Arc<Ctx>,
    c: &mut C,
    request: BinRequest<'_>,
) -> Result<Flow, Closed> {
    let h = request.header;
    let (op, opaque) = (h.opcode, h.opaque);
    let now = ctx.now();
    let fail =
        |c: &mut C, status: Status| response::error(c.output(), op, opaque, status, status.text());
    let done = |c: &mut C, quiet: bool, cas: u64| {
        if !quiet {
            response::ok(c.output(), op, opaque, cas);
        }
    };
    macro_rules! write_or_refuse {
        ($key:expr, $f:expr) => {
            match write(ctx, c, $key, $f).await {
                Ok(r) => r,
                Err(e) => {
                    wording::refusal(c.output(), op, opaque, &e);
                    return Ok(Flow::Refused);
                }
            }
        };
    }
    match request.command {
        Command::Get {
            key,
            quiet,
            with_key,
        } => {
            let found = Found {
                key,
                quiet,
                with_key,
            };
            found.answer(ctx, c, (op, opaque), None, now).await;
        }
        Command::Gat {
            key,
            exptime,
            quiet,
            with_key,
        } => {
            if let Err(e) = ctx.engine.admit().await {
                wording::refusal(c.output(), op, opaque, &e);
                return Ok(Flow::Refused);
            }
            let found = Found {
                key,
                quiet,
                with_key,
            };
            let exptime = Some(i64::from(exptime));
            found.answer(ctx, c, (op, opaque), exptime, now).await;
        }
        Command::Touch { key, exptime } => {
            let touched = write_or_refuse!(Some(key), |tx: &Tx<'_>| {
                touch::outcome(ctx, tx, key, i64::from(exptime), now)
            });
            match touched {
                Some(meta) => {
                    let reply = ok_reply(op, opaque, meta.cas);
                    response::value(c.output(), &reply, meta.flags, &[], &[]);
                }
                None => fail(c, Status::KeyNotFound),
            }
        }
        Command::Store {
            kind,
            key,
            flags,
            exptime,
            value,
            quiet,
        } => {
            // memcached: a CAS in the header makes set, add and replace a compare-and-swap.
            let as_kind = match kind {
                StoreKind::Set | StoreKind::Add | StoreKind::Replace if h.cas != 0 => {
                    StoreKind::Cas
                }
                k => k,
            };
            let stored = write_or_refuse!(Some(key), |tx: &Tx<'_>| {
                let exptime = i64::from(exptime);
                storage::outcome(ctx, tx, as_kind, key, flags, exptime, h.cas, value, now)
            });
            match stored {
                Ok(Stored::Stored(cas)) => done(c, quiet, cas),
                Ok(Stored::NotStored) => fail(
                    c,
                    match kind {
                        StoreKind::Add => Status::KeyExists,
                        StoreKind::Replace => Status::KeyNotFound,
                        _ => Status::NotStored,
                    },
                ),
                Ok(Stored::Exists) => fail(c, Status::KeyExists),
                Ok(Stored::NotFound) => fail(c, Status::KeyNotFound),
                Err(e) => fail(c, wording::store_error(e)),
            }
        }
        Command::Delete { key, quiet } => {
            let deleted = write_or_refuse!(Some(key), |tx: &Tx<'_>| {
                delete::outcome(ctx, tx, key, h.cas, now)
            });
            match deleted {
                Deleted::Deleted => done(c, quiet, 0),
                Deleted::NotFound => fail(c, Status::KeyNotFound),
                Deleted::Exists => fail(c, Status::KeyExists),
            }
        }
        Command::Arith {
            incr,
            key,
            delta,
            initial,
            exptime,
            quiet,
        } => {
            let create = (exptime != NO_CREATE).then_some(ArithCreate {
                flags: 0,
                exptime: i64::from(exptime),
                initial,
            });
            let changed = write_or_refuse!(Some(key), |tx: &Tx<'_>| {
                arith::change(ctx, tx, incr, key, delta, create, h.cas, now)
            });
            match changed {
                Ok(Changed::To { value, cas }) => {
                    if !quiet {
                        response::counter(c.output(), op, opaque, cas, value);
                    }
                }
                Ok(Changed::CasDiffers) => fail(c, Status::KeyExists),
                Err(ArithError::NotFound) => fail(c, Status::KeyNotFound),
                Err(ArithError::NonNumeric) => fail(c, Status::NonNumeric),
                Err(ArithError::Store(e)) => fail(c, wording::store_error(e)),
            }
        }
        Command::Flush { delay, quiet } => {
            let flushed = write_or_refuse!(None, |tx: &Tx<'_>| {
                flush::flush_all(ctx, tx, i64::from(delay), now)
            });
            match flushed {
                Ok(()) => done(c, quiet, 0),
                // `-F`: memcached answers a refused flush with an auth error.
                Err(flush::FlushDisabled) => fail(c, Status::AuthError),
            }
        }
        Command::Quit { quiet } => {
            done(c, quiet, 0);
            return Ok(Flow::Close);
        }
        Command::Noop => done(c, false, 0),
        Command::Version => {
            let reply = ok_reply(op, opaque, 0);
            response::response(c.output(), &reply, &[], &[], VERSION.as_bytes());
        }
        Command::Stat { group } => stats::answer(ctx, group, opaque, c.output()),
        // Open to every client, as on the text protocol (it changes only the log).
        Command::Verbosity { level } => {
            ctx.set_verbosity(level);
            done(c, false, 0);
        }
        Command::Sasl | Command::Unknown => fail(c, Status::UnknownCommand),
    }
    Ok(Flow::Continue)
}

/// A Get or GAT request's key and how it wants the answer.
struct Found<'a> {
    key: &'a [u8],
    quiet: bool,
    with_key: bool,
}

impl Found<'_> {
    /// Looks the key up (`exptime`: GAT's new expiry) and answers: a hit's flags, key when
    /// asked, value and CAS; a miss unless quiet.
    async fn answer<C: Session>(
        self,
        ctx: &Ctx,
        c: &mut C,
        (op, opaque): (u8, u32),
        exptime: Option<i64>,
        now: u32,
    ) {
        let Found {
            key,
            quiet,
            with_key,
        } = self;
        let out = c.output();
        let (outcome, ack) = get::lookup_async(ctx, exptime, now, key, |meta, value| {
            let reply = ok_reply(op, opaque, meta.cas);
            let shown = if with_key { key } else { &[] };
            response::value(out, &reply, meta.flags, shown, value);
        })
        .await;
        c.note(ack);
        if !matches!(outcome, ReadOutcome::Hit(())) && !quiet {
            miss(c, op, opaque, with_key.then_some(key));
        }
    }
}

fn ok_reply(opcode: u8, opaque: u32, cas: u64) -> Reply {
    Reply {
        opcode,
        status: Status::Success,
        opaque,
        cas,
    }
}

/// A retrieval's miss: `Not found`, or for GetK/GatK the key with status 0x0001 and no text
/// (memcached's `write_bin_miss_response`).
fn miss<C: Session>(c: &mut C, opcode: u8, opaque: u32, key: Option<&[u8]>) {
    let status = Status::KeyNotFound;
    match key {
        Some(key) => {
            let reply = Reply {
                opcode,
                status,
                opaque,
                cas: 0,
            };
            response::response(c.output(), &reply, &[], key, &[]);
        }
        None => response::error(c.output(), opcode, opaque, status, status.text()),
    }
}
