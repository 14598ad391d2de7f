//! The classic text protocol: one command line, then a data block for storage commands.
//!
//! ```text
//!   set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//!   ^-- line (<= max_line_len) --------------------^ ^-- bytes + 2 --^
//! ```
//!
//! A line is found first (or "need more"); it is split on spaces; the command word picks the
//! family. Errors follow memcached 1.6 word for word.

use crate::{key_is_valid, meta, GetKind, Limits, ProtocolError, Request, StoreKind};

/// Splits one line into words on spaces (memcached's tokenizer), ignoring empty words.
pub(crate) fn words(line: &[u8]) -> impl Iterator<Item = &[u8]> {
    line.split(|&b| b == b' ').filter(|w| !w.is_empty())
}

/// Finds the end of the first line: (line without `\r\n`, bytes including the terminator).
pub(crate) fn find_line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let nl = buf.iter().position(|&b| b == b'\n')?;
    let line = if nl > 0 && buf[nl - 1] == b'\r' {
        &buf[..nl - 1]
    } else {
        &buf[..nl]
    };
    Some((line, nl + 1))
}

fn is_retrieval(buf: &[u8]) -> bool {
    buf.starts_with(b"get ")
        || buf.starts_with(b"gets ")
        || buf.starts_with(b"gat ")
        || buf.starts_with(b"gats ")
}

pub(crate) fn parse_u64(word: &[u8]) -> Option<u64> {
    if word.is_empty() || word.len() > 20 || !word.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(word).ok()?.parse().ok()
}

pub(crate) fn parse_u32(word: &[u8]) -> Option<u32> {
    parse_u64(word).and_then(|v| u32::try_from(v).ok())
}

/// A signed decimal as memcached's `safe_strtol` reads it (32-bit range).
pub(crate) fn parse_i64(word: &[u8]) -> Option<i64> {
    let (neg, digits) = match word.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, word),
    };
    let v = parse_u64(digits)?;
    let v = i64::try_from(v).ok()?;
    let v = if neg { -v } else { v };
    (i64::from(i32::MIN)..=i64::from(i32::MAX))
        .contains(&v)
        .then_some(v)
}

pub(crate) fn parse(
    buf: &[u8],
    limits: &Limits,
) -> Result<Option<(Request, usize)>, ProtocolError> {
    let Some((line, line_len)) = find_line(buf) else {
        let limit = if is_retrieval(buf) {
            limits.max_get_line_len()
        } else {
            limits.max_line_len
        };
        if buf.len() > limit {
            return Err(ProtocolError {
                close: true,
                ..ProtocolError::client("line too long", buf.len())
            });
        }
        return Ok(None);
    };
    let too_long = if is_retrieval(line) {
        line.len() > limits.max_get_line_len()
    } else {
        line.len() > limits.max_line_len
    };
    if too_long {
        return Err(ProtocolError::client("line too long", line_len));
    }
    let mut it = words(line);
    let Some(cmd) = it.next() else {
        return Err(ProtocolError::unknown(line_len));
    };
    let args: Vec<&[u8]> = it.collect();
    let request = match cmd {
        b"get" => retrieval(GetKind::Get, &args, line_len, limits)?,
        b"gets" => retrieval(GetKind::Gets, &args, line_len, limits)?,
        b"gat" => retrieval(GetKind::Gat, &args, line_len, limits)?,
        b"gats" => retrieval(GetKind::Gats, &args, line_len, limits)?,
        b"set" => return storage(StoreKind::Set, &args, buf, line_len, limits),
        b"add" => return storage(StoreKind::Add, &args, buf, line_len, limits),
        b"replace" => return storage(StoreKind::Replace, &args, buf, line_len, limits),
        b"append" => return storage(StoreKind::Append, &args, buf, line_len, limits),
        b"prepend" => return storage(StoreKind::Prepend, &args, buf, line_len, limits),
        b"cas" => return storage(StoreKind::Cas, &args, buf, line_len, limits),
        b"delete" => delete(&args, line_len, limits)?,
        b"incr" | b"decr" => arith(cmd == b"incr", &args, line_len, limits)?,
        b"touch" => touch(&args, line_len, limits)?,
        b"flush_all" => flush_all(&args, line_len)?,
        b"stats" => Request::Stats {
            args: args
                .iter()
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        },
        b"version" => Request::Version,
        b"quit" => Request::Quit,
        // As memcached: one or two words; a trailing (or lone) `noreply` silences the reply.
        b"verbosity" => match args.as_slice() {
            [_] | [_, _] => Request::Verbosity {
                noreply: args.last() == Some(&&b"noreply"[..]),
            },
            _ => return Err(ProtocolError::unknown(line_len)),
        },
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => {
            return meta::parse(cmd, &args, buf, line_len, limits)
        }
        b"config" | b"checkpoint" => Request::Admin {
            words: std::iter::once(cmd)
                .chain(args.iter().copied())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        },
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    Ok(Some((request, line_len)))
}

fn bad_format(consumed: usize) -> ProtocolError {
    ProtocolError::client("bad command line format", consumed)
}

fn retrieval(
    kind: GetKind,
    args: &[&[u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request, ProtocolError> {
    let (exptime, keys) = match kind {
        GetKind::Get | GetKind::Gets => (None, args),
        GetKind::Gat | GetKind::Gats => {
            let Some((exp, keys)) = args.split_first() else {
                return Err(ProtocolError::unknown(line_len));
            };
            let exp = parse_i64(exp)
                .ok_or_else(|| ProtocolError::client("invalid exptime argument", line_len))?;
            (Some(exp), keys)
        }
    };
    if keys.is_empty() && exptime.is_none() {
        return Err(ProtocolError::unknown(line_len));
    }
    if keys.len() > limits.max_keys_per_get {
        return Err(ProtocolError::client("too many keys", line_len));
    }
    if !keys.iter().all(|k| key_is_valid(k, limits)) {
        return Err(bad_format(line_len));
    }
    Ok(Request::Get {
        kind,
        exptime,
        keys: keys.iter().map(|k| k.to_vec()).collect(),
    })
}

/// Checks that a data block of `len` bytes plus `\r\n` follows the line, or asks for more.
/// Returns the value and the total bytes consumed.
pub(crate) fn data_block(
    buf: &[u8],
    line_len: usize,
    len: usize,
) -> Result<Option<(Vec<u8>, usize)>, ProtocolError> {
    let total = line_len + len + 2;
    if buf.len() < total {
        return Ok(None);
    }
    if &buf[line_len + len..total] != b"\r\n" {
        return Err(ProtocolError::client("bad data chunk", total));
    }
    Ok(Some((buf[line_len..line_len + len].to_vec(), total)))
}

/// The error for a data block that is refused before it is read: skip it as it arrives.
pub(crate) fn refuse_block(
    kind: crate::ErrorKind,
    line_len: usize,
    len: usize,
    silent: bool,
) -> ProtocolError {
    ProtocolError {
        kind,
        consumed: line_len,
        swallow: len + 2,
        close: false,
        silent,
    }
}

fn storage(
    kind: StoreKind,
    args: &[&[u8]],
    buf: &[u8],
    line_len: usize,
    limits: &Limits,
) -> Result<Option<(Request, usize)>, ProtocolError> {
    let fixed = if kind == StoreKind::Cas { 5 } else { 4 };
    let noreply = match args.len() {
        n if n == fixed => false,
        n if n == fixed + 1 => args[fixed] == b"noreply",
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    let flags = parse_u32(args[1]);
    let exptime = parse_i64(args[2]);
    let len = parse_i64(args[3]).and_then(|l| usize::try_from(l).ok());
    let cas_unique = if kind == StoreKind::Cas {
        parse_u64(args[4])
    } else {
        Some(0)
    };
    let (Some(flags), Some(exptime), Some(len), Some(cas_unique)) =
        (flags, exptime, len, cas_unique)
    else {
        return Err(bad_format(line_len));
    };
    if len > limits.max_value_len {
        return Err(refuse_block(
            crate::ErrorKind::TooLarge,
            line_len,
            len,
            noreply,
        ));
    }
    if !key_is_valid(args[0], limits) {
        return Err(refuse_block(
            crate::ErrorKind::Client("bad command line format"),
            line_len,
            len,
            false,
        ));
    }
    let Some((value, total)) = data_block(buf, line_len, len)? else {
        return Ok(None);
    };
    Ok(Some((
        Request::Store {
            kind,
            key: args[0].to_vec(),
            flags,
            exptime,
            cas_unique,
            value,
            noreply,
        },
        total,
    )))
}

fn delete(args: &[&[u8]], line_len: usize, limits: &Limits) -> Result<Request, ProtocolError> {
    const USAGE: &str = "bad command line format.  Usage: delete <key> [noreply]";
    let noreply = match args {
        [_] => false,
        [_, b"noreply"] | [_, b"0", b"noreply"] => true,
        [_, b"0"] => false,
        [] => return Err(ProtocolError::unknown(line_len)),
        _ => return Err(ProtocolError::client(USAGE, line_len)),
    };
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len));
    }
    Ok(Request::Delete {
        key: args[0].to_vec(),
        noreply,
    })
}

fn arith(
    incr: bool,
    args: &[&[u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request, ProtocolError> {
    let noreply = match args {
        [_, _] => false,
        [_, _, b"noreply"] => true,
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len));
    }
    let delta = parse_u64(args[1])
        .ok_or_else(|| ProtocolError::client("invalid numeric delta argument", line_len))?;
    Ok(Request::Arith {
        incr,
        key: args[0].to_vec(),
        delta,
        noreply,
    })
}

fn touch(args: &[&[u8]], line_len: usize, limits: &Limits) -> Result<Request, ProtocolError> {
    let noreply = match args {
        [_, _] => false,
        [_, _, b"noreply"] => true,
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len));
    }
    let exptime = parse_i64(args[1])
        .ok_or_else(|| ProtocolError::client("invalid exptime argument", line_len))?;
    Ok(Request::Touch {
        key: args[0].to_vec(),
        exptime,
        noreply,
    })
}

fn flush_all(args: &[&[u8]], line_len: usize) -> Result<Request, ProtocolError> {
    let (delay, noreply) = match args {
        [] => (Some(0), false),
        [b"noreply"] => (Some(0), true),
        [d] => (parse_i64(d), false),
        [d, b"noreply"] => (parse_i64(d), true),
        _ => (None, false),
    };
    // memcached takes a negative delay as "now".
    match delay {
        Some(delay) => Ok(Request::FlushAll {
            delay: delay.max(0),
            noreply,
        }),
        None => Err(bad_format(line_len)),
    }
}
