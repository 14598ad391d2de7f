//! ARCUS's commands that cairn does not implement: the collections (`lop`, `sop`, `mop`,
//! `bop` and every subcommand), item attributes (`getattr`, `setattr`) and `flush_prefix`.
//!
//! ```text
//!   lop insert <key> <index> <bytes> [create <attributes>] [noreply|pipe]\r\n<data>\r\n
//!   ^-- the line: Request::NotSupported { skip: bytes + 2, pipe, noreply } --^ ^-skipped-^
//!   lop get <key> <range>\r\n            Request::NotSupported { skip: 0, .. }
//! ```
//!
//! Each one is one request: its line, then its data block skipped as it arrives (never held
//! in memory, whatever its length), answered by the server with ARCUS's own `NOT_SUPPORTED`
//! (what arcus-memcached answers a command its engine lacks, `ENGINE_ENOTSUP`). Not an
//! `ERROR` line: ARCUS's Java client takes any line starting with `ERROR`, `CLIENT_ERROR`
//! or `SERVER_ERROR` as an exception, drops the connection and cancels the requests queued
//! behind it (arcus-java-client 1.12.1, `OperationImpl.readFromBuffer`, then
//! `MemcachedConnection.handleIO`); `NOT_SUPPORTED` reaches the operation's `handleLine` as
//! a failed status and the connection stays.
//!
//! Where the data block is, from arcus-memcached's `process_{lop,sop,mop,bop}_command`
//! (words after the command word; `<bytes>` is the block's length without `\r\n`):
//!
//! ```text
//!   lop insert <key> <index> <bytes> ...                  block <bytes>
//!   sop insert|delete|exist <key> <bytes> ...             block <bytes>
//!   mop insert|upsert|update <key> <field> <bytes> ...    block <bytes>
//!   mop delete|get <key> <lenfields> <numfields> ...      block <lenfields> when not 0
//!   bop insert|upsert <key> <bkey> [<eflag 0x..>] <bytes> block <bytes>
//!   bop update <key> <bkey> [<eflag update>] <bytes> [noreply|pipe]
//!                                                         block <bytes> unless it is -1
//!   bop mget|smget <lenkeys> <numkeys> ...                block <lenkeys>
//!   anything else (create, get, delete, count, incr, position, getattr ...)   no block
//! ```
//!
//! A length that cannot be read is `CLIENT_ERROR bad command line format`, as ARCUS answers
//! it (the block cannot be found then). `pipe` as the last word is ARCUS's command
//! pipelining: the server holds the replies until the pipeline's last command (README
//! "Protocol").

use crate::error::ProtocolError;
use crate::lex::{data_len, parse_i64};
use crate::request::Request;

/// Whether `cmd` is an ARCUS command word this module answers.
pub(crate) fn is_arcus_command(cmd: &[u8]) -> bool {
    matches!(
        cmd,
        b"lop" | b"sop" | b"mop" | b"bop" | b"getattr" | b"setattr" | b"flush_prefix"
    )
}

/// The request for an ARCUS command line: its data block's length read from the line.
pub(crate) fn not_supported<'a>(
    cmd: &[u8],
    args: &[&[u8]],
    line_len: usize,
) -> Result<Request<'a>, ProtocolError> {
    let last = args.last().copied();
    let pipe = last == Some(&b"pipe"[..]);
    let noreply = last == Some(&b"noreply"[..]);
    let bad = || ProtocolError::client("bad command line format", line_len).quiet_if(noreply);
    // The word that holds the block's length, and whether 0 there means no block at all.
    let length_word: Option<(Option<&[u8]>, bool)> = match (cmd, args.first().copied()) {
        (b"lop", Some(b"insert")) => Some((args.get(3).copied(), false)),
        (b"sop", Some(b"insert" | b"delete" | b"exist")) => Some((args.get(2).copied(), false)),
        (b"mop", Some(b"insert" | b"upsert" | b"update")) => Some((args.get(3).copied(), false)),
        (b"mop", Some(b"delete" | b"get")) => Some((args.get(2).copied(), true)),
        (b"bop", Some(b"insert" | b"upsert")) => {
            // An eflag (0x...) may sit between the bkey and the length: ARCUS looks for it
            // only when the line has more words than the shortest insert.
            let eflag = args.len() > 4 && args[3].starts_with(b"0x");
            Some((args.get(if eflag { 4 } else { 3 }).copied(), false))
        }
        (b"bop", Some(b"update")) => {
            // The length is the last word before noreply|pipe; -1 updates the eflag only.
            let words = if pipe || noreply {
                &args[..args.len() - 1]
            } else {
                args
            };
            let word = words.get(3..).and_then(|w| w.last()).copied();
            match word.and_then(parse_i64) {
                Some(-1) => None,
                _ => Some((word, false)),
            }
        }
        (b"bop", Some(b"mget" | b"smget")) => Some((args.get(1).copied(), true)),
        _ => None,
    };
    let skip = match length_word {
        None => 0,
        Some((word, zero_is_none)) => match word.and_then(data_len) {
            None => return Err(bad()),
            Some(0) if zero_is_none => 0,
            Some(len) => len + 2,
        },
    };
    Ok(Request::NotSupported {
        skip,
        pipe,
        noreply,
    })
}
