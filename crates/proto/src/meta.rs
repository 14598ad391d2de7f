//! The meta protocol of memcached 1.6: mg, ms, md, ma, mn, me.
//!
//! ```text
//!   mg <key> <flag>*\r\n                 ms <key> <datalen> <flag>*\r\n<data>\r\n
//!   md <key> <flag>*\r\n                 ma <key> <flag>*\r\n
//!   mn\r\n                               me <key>\r\n
//!   flag = one letter, optionally followed by its token: v  t  T30  Oabc  MS  C123
//! ```
//!
//! Flags are parsed into [`MetaFlags`]; which flags a command accepts is checked here, what they
//! do is up to the server. Once `ms` has a valid data length, any later error still skips the
//! data block so the stream stays in sync.

use std::borrow::Cow;

use base64::Engine;

use crate::error::{ErrorKind, ProtocolError};
use crate::lex::{data_block, data_len, parse_i64, parse_u32, parse_u64, refuse_block};
use crate::limits::{key_is_valid, Limits};
use crate::meta_request::{MetaCmd, MetaFlags, MetaMode, MetaRequest, MAX_EXPLICIT_CAS};
use crate::request::Request;

/// Every flag letter memcached 1.6.4x knows. As memcached, any meta command accepts any of
/// them (with a well-formed token) and ignores those that mean nothing to it; another letter
/// is `CLIENT_ERROR invalid flag`.
const KNOWN_FLAGS: &[u8] = b"bcCDEfFhIJklMNOqRstTuvx";

fn bad_token(consumed: usize) -> ProtocolError {
    ProtocolError::client("bad token in command line format", consumed)
}

fn parse_flags(cmd: MetaCmd, words: &[&[u8]], line_len: usize) -> Result<MetaFlags, ProtocolError> {
    let mut f = MetaFlags::default();
    let mut seen = [false; 128];
    for w in words {
        let letter = w[0];
        let token = &w[1..];
        if !KNOWN_FLAGS.contains(&letter) {
            return Err(ProtocolError::client("invalid flag", line_len));
        }
        if std::mem::replace(&mut seen[letter as usize], true) {
            return Err(ProtocolError::client("duplicate flag", line_len));
        }
        f.order.push(letter);
        let ttl = || parse_i64(token).ok_or_else(|| bad_token(line_len));
        let num = || parse_u64(token).ok_or_else(|| bad_token(line_len));
        match letter {
            b'b' => f.base64 = true,
            b'c' => f.return_cas = true,
            b'f' => f.return_flags = true,
            b'h' => f.return_hit = true,
            b'k' => f.return_key = true,
            b'l' => f.return_last_access = true,
            b'q' => f.quiet = true,
            b's' => f.return_size = true,
            b't' => f.return_ttl = true,
            b'u' => f.no_bump = true,
            b'v' => f.return_value = true,
            b'I' => f.invalidate = true,
            b'x' => f.remove_value = true,
            b'O' => {
                if token.len() > 32 {
                    return Err(ProtocolError::client("opaque token too long", line_len));
                }
                f.opaque = Some(token.to_vec());
            }
            b'N' => f.vivify_ttl = Some(ttl()?),
            b'R' => f.recache_ttl = Some(ttl()?),
            b'T' => f.new_ttl = Some(ttl()?),
            b'C' => f.compare_cas = Some(num()?),
            b'E' => {
                let cas = num()?;
                if cas > MAX_EXPLICIT_CAS {
                    return Err(ProtocolError::client("E cas over 2^63 - 1", line_len));
                }
                f.explicit_cas = Some(cas);
            }
            b'D' => f.delta = Some(num()?),
            b'J' => f.initial = Some(num()?),
            b'F' => f.client_flags = Some(parse_u32(token).ok_or_else(|| bad_token(line_len))?),
            b'M' => {
                if token.len() != 1 {
                    return Err(ProtocolError::client(
                        "incorrect length for M token",
                        line_len,
                    ));
                }
                let mode = match (cmd, token) {
                    (MetaCmd::Set, b"S" | b"s") => MetaMode::Set,
                    (MetaCmd::Set, b"E" | b"e") => MetaMode::Add,
                    (MetaCmd::Set, b"R" | b"r") => MetaMode::Replace,
                    (MetaCmd::Set, b"A" | b"a") => MetaMode::Append,
                    (MetaCmd::Set, b"P" | b"p") => MetaMode::Prepend,
                    (MetaCmd::Arith, b"I" | b"i" | b"+") => MetaMode::Incr,
                    (MetaCmd::Arith, b"D" | b"d" | b"-") => MetaMode::Decr,
                    (MetaCmd::Arith, _) => {
                        return Err(ProtocolError::client(
                            "invalid mode for ma M token",
                            line_len,
                        ))
                    }
                    (MetaCmd::Set, _) => {
                        return Err(ProtocolError::client(
                            "invalid mode for ms M token",
                            line_len,
                        ))
                    }
                    // A mode means nothing to mg, md, me: ignored, as memcached does.
                    _ => continue,
                };
                f.mode = Some(mode);
            }
            _ => unreachable!("letter checked against KNOWN_FLAGS"),
        }
    }
    Ok(f)
}

fn decode_key<'a>(
    raw: &'a [u8],
    base64: bool,
    limits: &Limits,
    line_len: usize,
) -> Result<Cow<'a, [u8]>, ProtocolError> {
    if !base64 {
        if !key_is_valid(raw, limits) {
            return Err(ProtocolError::client("bad command line format", line_len));
        }
        return Ok(Cow::Borrowed(raw));
    }
    // A base64 key may be longer on the wire than the key limit; the decoded key may not.
    if raw.len() > limits.max_key_len.div_ceil(3) * 4 {
        return Err(ProtocolError::client("bad command line format", line_len));
    }
    let key = base64::engine::general_purpose::STANDARD
        .decode(raw)
        .map_err(|_| ProtocolError::client("error decoding key", line_len))?;
    if key.is_empty() || key.len() > limits.max_key_len {
        return Err(ProtocolError::client("bad command line format", line_len));
    }
    Ok(Cow::Owned(key))
}

pub(crate) fn parse<'a>(
    cmd_word: &[u8],
    args: &[&'a [u8]],
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    let cmd = match cmd_word {
        b"mg" => MetaCmd::Get,
        b"ms" => MetaCmd::Set,
        b"md" => MetaCmd::Delete,
        b"ma" => MetaCmd::Arith,
        b"mn" => MetaCmd::Noop,
        _ => MetaCmd::Debug,
    };
    if cmd == MetaCmd::Noop {
        let req = MetaRequest {
            cmd,
            key: Cow::Borrowed(&[]),
            flags: MetaFlags::default(),
            value: None,
        };
        return Ok(Some((Request::Meta(req), line_len)));
    }
    let Some((raw_key, rest)) = args.split_first() else {
        // memcached 1.6.4x: a meta command needs a key (1.6.18 answered `ERROR`).
        return Err(ProtocolError::client("bad command line format", line_len));
    };
    if cmd == MetaCmd::Set {
        let Some((len_word, flag_words)) = rest.split_first() else {
            return Err(ProtocolError::client("bad command line format", line_len));
        };
        // Read as `set` and memcached read it (32 bits), so a refused block's `len + 2` fits.
        let Some(len) = data_len(len_word) else {
            return Err(ProtocolError::client("bad command line format", line_len));
        };
        // From here on the data length is known: every error skips the block.
        let refuse = |e: ProtocolError| refuse_block(e.kind, line_len, len);
        let flags = parse_flags(cmd, flag_words, line_len).map_err(refuse)?;
        let key = decode_key(raw_key, flags.base64, limits, line_len).map_err(refuse)?;
        if len > limits.max_value_len {
            // As `set`: a refused set leaves no stale value behind.
            let set = matches!(flags.mode, None | Some(MetaMode::Set));
            return Err(ProtocolError {
                forget: set.then(|| key.into_owned()),
                ..refuse_block(ErrorKind::TooLarge, line_len, len)
            });
        }
        let Some((value, total)) = data_block(buf, line_len, len)? else {
            return Ok(None);
        };
        let req = MetaRequest {
            cmd,
            key,
            flags,
            value: Some(Cow::Borrowed(value)),
        };
        return Ok(Some((Request::Meta(req), total)));
    }
    let flags = parse_flags(cmd, rest, line_len)?;
    let key = decode_key(raw_key, flags.base64, limits, line_len)?;
    let req = MetaRequest {
        cmd,
        key,
        flags,
        value: None,
    };
    Ok(Some((Request::Meta(req), line_len)))
}
