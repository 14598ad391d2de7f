//! Stat: the text protocol's `stats [group]` reply (cmd/stats.rs), re-worded as binary
//! packets, so both protocols report the same figures from the one renderer.
//!
//! ```text
//!   STAT name value\r\n ... END\r\n ─> (key name, value value) ... (empty key, empty value)
//!   RESET / OK ─────────────────────> the empty packet alone
//!   anything else (an unknown group) > 0x0001 Not found, as memcached
//! ```

use cairn_proto::binary::{opcode, response, Status};

use crate::cmd::stats::stats;
use crate::Ctx;

/// Appends the Stat reply for `group` (empty: the general figures).
pub fn answer(ctx: &Ctx, group: &[u8], opaque: u32, out: &mut Vec<u8>) {
    let args: Vec<String> = String::from_utf8_lossy(group)
        .split_whitespace()
        .map(String::from)
        .collect();
    let mut text = Vec::new();
    stats(ctx, &args, &mut text);
    let start = out.len();
    for line in text.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(stat) = line.strip_prefix(b"STAT ") {
            let split = stat.iter().position(|&b| b == b' ').unwrap_or(stat.len());
            let (name, figure) = stat.split_at(split);
            response::stat(
                out,
                opaque,
                name,
                figure.strip_prefix(b" ").unwrap_or(figure),
            );
        } else if !(line.is_empty() || line == b"END" || line == b"RESET" || line == b"OK") {
            out.truncate(start);
            let status = Status::KeyNotFound;
            response::error(out, opcode::STAT, opaque, status, status.text());
            return;
        }
    }
    response::stat(out, opaque, b"", b"");
}
