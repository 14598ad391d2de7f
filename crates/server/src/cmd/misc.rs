//! version, shutdown, cache_memlimit, slabs, debugtime.

use cairn_proto::{ShutdownMode, Slabs};

use super::flow::Flow;
use crate::version::VERSION;
use crate::Ctx;

/// `shutdown [graceful]`, allowed by `-A` as in memcached: the server stops as on SIGTERM
/// (stops accepting, lets connections finish the requests in hand, checkpoints, exits 0), and
/// this connection closes without a reply. `graceful` does the same: cairn's stop is graceful.
pub fn shutdown(ctx: &Ctx, mode: ShutdownMode, out: &mut Vec<u8>) -> Flow {
    if !ctx.config.enable_shutdown {
        out.extend_from_slice(b"ERROR: shutdown not enabled\r\n");
        return Flow::Continue;
    }
    if mode == ShutdownMode::Invalid {
        out.extend_from_slice(b"CLIENT_ERROR invalid shutdown mode\r\n");
        return Flow::Continue;
    }
    tracing::info!("shutdown command received");
    ctx.request_shutdown();
    Flow::Close
}

/// `cache_memlimit N`: `-m` becomes N MiB while serving (the store's part: N less the watch
/// history's), until a restart, which takes `-m` again. An admin write: refused without
/// `--enable-admin`.
pub fn cache_memlimit(ctx: &Ctx, megabytes: u64, now: u32) -> &'static [u8] {
    if let Some(refused) = super::admin::refusal(ctx) {
        return refused;
    }
    if megabytes < 8 {
        return b"MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n";
    }
    if megabytes > 1_000_000_000 {
        return b"MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n";
    }
    // The watch history's part of the limit stays what it was at start; the store gets the
    // rest (docs/CONFIGURATION.md, watch_history_mb).
    let history = ctx.config.watch_history_bytes() as u64;
    let bytes = (megabytes << 20).saturating_sub(history);
    if bytes < ctx.store().min_memory_limit() {
        // Each shard keeps two segments (or two of the largest items); fewer is not kept.
        return b"MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n";
    }
    ctx.store().set_memory_limit(bytes, now);
    b"OK\r\n"
}

/// `VERSION <v>`.
pub fn version(out: &mut Vec<u8>) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `slabs automove ...` and `slabs reassign <src> <dst>` (the parser refused the malformed
/// ones as memcached does). cairn has no slab classes: its items live in segments of one
/// kind, so the mover's settings are accepted and change nothing (`OK`), and a reassignment
/// gets memcached's own answer for a page that cannot move: `SAME` for one class, `BADCLASS`
/// for a class id out of memcached's range (1 to 63, or -1 for any source), else `NOSPARE`.
pub fn slabs(cmd: Slabs) -> &'static [u8] {
    match cmd {
        Slabs::Automove => b"OK\r\n",
        Slabs::Reassign { src, dst } if src == dst => b"SAME src and dst class are identical\r\n",
        Slabs::Reassign { src, dst }
            if !(src == -1 || (1..=63).contains(&src)) || !(1..=63).contains(&dst) =>
        {
            b"BADCLASS invalid src or dst class id\r\n"
        }
        Slabs::Reassign { .. } => b"NOSPARE source class has no spare pages\r\n",
    }
}

/// `debugtime N`, a test aid (`--enable-debug-commands`): the server's clock moves N seconds
/// ahead, for every front end, so items expire without a test waiting. Off, `ERROR`, as
/// memcached's release build answers it. memcached's `debugtime p|r` (pause, resume) and a
/// negative N are refused: cairn's clock only moves ahead.
pub fn debugtime(ctx: &Ctx, secs: Option<u32>, out: &mut Vec<u8>) {
    if !ctx.config.enable_debug_commands {
        out.extend_from_slice(b"ERROR\r\n");
        return;
    }
    let Some(secs) = secs else {
        out.extend_from_slice(
            b"CLIENT_ERROR debugtime takes the seconds to move the clock ahead (0 or more)\r\n",
        );
        return;
    };
    ctx.advance_clock(secs);
    out.extend_from_slice(b"OK\r\n");
}
