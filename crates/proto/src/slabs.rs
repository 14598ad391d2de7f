//! `slabs automove ...` and `slabs reassign <src> <dst>`: memcached's slab tuning, parsed and
//! refused word for word as memcached 1.6.45's `process_slabs_command` does, so that a client
//! or a test that tunes memcached's slab mover gets memcached's answers. What they do is the
//! server's (cairn has no slab classes: see docs/PROTOCOL.md).
//!
//! ```text
//!   slabs automove 0|1|2            -> Automove      another number -> ERROR
//!   slabs automove ratio <f>        -> Automove      not a number   -> ERROR
//!   slabs automove freeratio <f>    -> Automove      not a number   -> ERROR
//!   slabs automove window <3..1800> -> Automove      out of range   -> CLIENT_ERROR automove
//!                                                                      window too low or too high
//!   slabs automove <not a number>   -> CLIENT_ERROR bad command line format
//!   slabs reassign <i32> <i32>      -> Reassign      not numbers    -> CLIENT_ERROR bad
//!                                                                      command line format
//!   anything else                   -> ERROR
//! ```
//!
//! A line ending in `noreply` gets no reply, errors included, as memcached's (its tokenizer
//! sets noreply for every command that ends in it).

use crate::error::ProtocolError;
use crate::lex::{parse_i64, parse_u32};
use crate::request::{Request, Slabs};

/// The words after `slabs`.
pub(crate) fn parse(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    let noreply = args.last() == Some(&&b"noreply"[..]);
    let bad_format =
        || ProtocolError::client("bad command line format", line_len).quiet_if(noreply);
    let unknown = || ProtocolError::unknown(line_len).quiet_if(noreply);
    let cmd = match args {
        [b"reassign", src, dst] => {
            let (Some(src), Some(dst)) = (parse_i32(src), parse_i32(dst)) else {
                return Err(bad_format());
            };
            Slabs::Reassign { src, dst }
        }
        [b"automove", b"ratio" | b"freeratio", rest @ ..] => match rest.first() {
            Some(ratio) if parse_f64(ratio) => Slabs::Automove,
            _ => return Err(unknown()),
        },
        [b"automove", b"window", rest @ ..] => match rest.first().and_then(|w| parse_u32(w)) {
            Some(3..=1800) => Slabs::Automove,
            Some(_) => {
                return Err(
                    ProtocolError::client("automove window too low or too high", line_len)
                        .quiet_if(noreply),
                )
            }
            None => return Err(bad_format()),
        },
        [b"automove", level, ..] => match parse_u32(level) {
            Some(0..=2) => Slabs::Automove,
            Some(_) => return Err(unknown()),
            None => return Err(bad_format()),
        },
        _ => return Err(unknown()),
    };
    Ok(Request::Slabs { cmd, noreply })
}

/// A signed 32-bit decimal (memcached's `safe_strtol`).
fn parse_i32(word: &[u8]) -> Option<i32> {
    parse_i64(word).and_then(|v| i32::try_from(v).ok())
}

/// Whether the word is a decimal number as C's `strtod` reads one whole (`0.8`, `1`, `-2.5e1`;
/// not `inf` or `nan`, which a ratio cannot be).
fn parse_f64(word: &[u8]) -> bool {
    std::str::from_utf8(word)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .is_some_and(f64::is_finite)
}
