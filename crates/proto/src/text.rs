//! The classic text protocol: one command line, then a data block for storage commands.
//!
//! ```text
//!   set <key> <flags> <exptime> <bytes> [noreply]\r\n<data>\r\n
//!   ^-- line (<= max_line_len) --------------------^ ^-- bytes + 2 --^
//! ```
//!
//! A line is found first (or "need more"); it is split on spaces; the command word picks the
//! family. Errors follow memcached 1.6 word for word, with two rules that keep a pipeline in
//! step (memcached 1.6.4x's): a command whose last word is `noreply` gets no CLIENT_ERROR
//! reply, and a malformed storage command skips its data block once its length is known. A
//! wrong number of words is `ERROR`, answered even after `noreply`, as memcached does.

use std::borrow::Cow;

use crate::error::{ErrorKind, ProtocolError};
use crate::lex::{
    data_block, data_len, find_line, parse_i64, parse_u32, parse_u64, refuse_block, words,
};
use crate::limits::{key_is_valid, Limits};
use crate::meta;
use crate::request::{ArithCreate, Crawler, GetKind, KeyList, Request, ShutdownMode, StoreKind};

/// A line's words after the command: memcached's tokenizer keeps 24 tokens on its stack.
type Words<'a> = smallvec::SmallVec<[&'a [u8]; 24]>;

/// Whether a line is a get/gets/gat/gats, whose lines may be far longer than others.
fn is_retrieval(buf: &[u8]) -> bool {
    buf.starts_with(b"get ")
        || buf.starts_with(b"gets ")
        || buf.starts_with(b"gat ")
        || buf.starts_with(b"gats ")
}

/// The longest line allowed for a request starting with `line`.
fn line_limit(line: &[u8], limits: &Limits) -> usize {
    if is_retrieval(line) {
        limits.max_get_line_len()
    } else {
        limits.max_line_len
    }
}

/// Parses one request from the front of `buf`.
///
/// Returns `Ok(Some((request, consumed)))` for a complete request, `Ok(None)` when more bytes
/// are needed, and `Err` for a request that must be answered with an error.
pub fn parse<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    let Some((line, line_len)) = find_line(buf) else {
        if buf.len() > line_limit(buf, limits) {
            return Err(ProtocolError::hang_up("line too long", buf.len()));
        }
        return Ok(None);
    };
    // memcached 1.6.4x: a line shorter than the shortest command (two bytes: `mn`) is
    // malformed, not an unknown command (an empty line, a lone space: 1.6.18 said ERROR).
    if line.len() < 2 {
        return Err(bad_format(line_len));
    }
    if line.len() > line_limit(line, limits) {
        return Err(ProtocolError::hang_up("line too long", line_len));
    }
    let mut it = words(line);
    let Some(cmd) = it.next() else {
        return Err(ProtocolError::unknown(line_len));
    };
    // The words after the command, on the stack up to a meta command's worth (a get of more
    // keys spills to the heap): a request allocates nothing to be split.
    let args: Words<'_> = it.collect();
    let request = match cmd {
        b"get" => retrieval(GetKind::Get, line, &args, line_len, limits)?,
        b"gets" => retrieval(GetKind::Gets, line, &args, line_len, limits)?,
        b"gat" => retrieval(GetKind::Gat, line, &args, line_len, limits)?,
        b"gats" => retrieval(GetKind::Gats, line, &args, line_len, limits)?,
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
        b"verbosity" => verbosity(&args, line_len)?,
        b"shutdown" => Request::Shutdown {
            mode: match args.as_slice() {
                [] => ShutdownMode::Now,
                [b"graceful"] => ShutdownMode::Graceful,
                _ => ShutdownMode::Invalid,
            },
        },
        b"cache_memlimit" => cache_memlimit(&args, line_len)?,
        b"lru_crawler" => lru_crawler(&args, line_len)?,
        b"slabs" => crate::slabs::parse(&args, line_len)?,
        b"debugtime" => debugtime(&args, line_len)?,
        b"mg" | b"ms" | b"md" | b"ma" | b"mn" | b"me" => {
            return meta::parse(cmd, &args, buf, line_len, limits)
        }
        _ if crate::arcus::is_arcus_command(cmd) => {
            crate::arcus::not_supported(cmd, &args, line_len)?
        }
        b"config" | b"checkpoint" | b"failover" => Request::Admin {
            words: std::iter::once(cmd)
                .chain(args.iter().copied())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        },
        // memcached hangs up on a web browser or an HTTP health check.
        _ if args.last().unwrap_or(&cmd).starts_with(b"HTTP/") => {
            return Err(ProtocolError::hang_up("HTTP request", line_len))
        }
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    Ok(Some((request, line_len)))
}

fn bad_format(consumed: usize) -> ProtocolError {
    ProtocolError::client("bad command line format", consumed)
}

/// Whether the last word asks for no reply (memcached's `set_noreply_maybe`).
fn ends_in_noreply(args: &[&[u8]]) -> bool {
    args.last() == Some(&&b"noreply"[..])
}

/// get/gets `<key>*` and gat/gats `<exptime> <key>*`; `args` are the words of `line` after
/// the command.
fn retrieval<'a>(
    kind: GetKind,
    line: &'a [u8],
    args: &[&'a [u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request<'a>, ProtocolError> {
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
    // The keys are the stretch of the line from the first key's start to the last one's end.
    let keys = match (keys.first(), keys.last()) {
        (Some(first), Some(last)) => {
            let start = first.as_ptr() as usize - line.as_ptr() as usize;
            let end = last.as_ptr() as usize - line.as_ptr() as usize + last.len();
            KeyList::borrowed(&line[start..end], keys.len())
        }
        _ => KeyList::default(),
    };
    Ok(Request::Get {
        kind,
        exptime,
        keys,
    })
}

/// set/add/replace/append/prepend `<key> <flags> <exptime> <bytes> [noreply]` and
/// cas `<key> <flags> <exptime> <bytes> <cas unique> [noreply]`.
fn storage<'a>(
    kind: StoreKind,
    args: &[&'a [u8]],
    buf: &'a [u8],
    line_len: usize,
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    // memcached takes one more word than the command needs (noreply, or ignored); a cas
    // without its unique is a malformed cas, not another command.
    let words = if kind == StoreKind::Cas { 4..=6 } else { 4..=5 };
    if !words.contains(&args.len()) {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    let Some(len) = data_len(args[3]) else {
        return Err(bad_format(line_len).quiet_if(noreply));
    };
    // From here on the block's length is known: every error skips it.
    let refuse = |kind| refuse_block(kind, line_len, len).quiet_if(noreply);
    let flags = parse_u32(args[1]);
    let exptime = parse_i64(args[2]);
    let cas_unique = if kind == StoreKind::Cas {
        args.get(4).and_then(|w| parse_u64(w))
    } else {
        Some(0)
    };
    let (Some(flags), Some(exptime), Some(cas_unique)) = (flags, exptime, cas_unique) else {
        return Err(refuse(ErrorKind::Client("bad command line format")));
    };
    if !key_is_valid(args[0], limits) {
        return Err(refuse(ErrorKind::Client("bad command line format")));
    }
    if len > limits.max_value_len {
        return Err(ProtocolError {
            forget: (kind == StoreKind::Set).then(|| args[0].to_vec()),
            ..refuse(ErrorKind::TooLarge)
        });
    }
    let Some((value, total)) = data_block(buf, line_len, len).map_err(|e| e.quiet_if(noreply))?
    else {
        return Ok(None);
    };
    Ok(Some((
        Request::Store {
            kind,
            key: Cow::Borrowed(args[0]),
            flags,
            exptime,
            cas_unique,
            value: Cow::Borrowed(value),
            noreply,
        },
        total,
    )))
}

/// delete `<key> [0] [noreply]` (the 0 is what is left of a hold time memcached dropped).
fn delete<'a>(
    args: &[&'a [u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request<'a>, ProtocolError> {
    const USAGE: &str = "bad command line format.  Usage: delete <key> [noreply]";
    if args.is_empty() || args.len() > 3 {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    let valid = match args.len() {
        1 => true,
        2 => args[1] == b"0" || noreply,
        _ => args[1] == b"0" && noreply,
    };
    if !valid {
        return Err(ProtocolError::client(USAGE, line_len).quiet_if(noreply));
    }
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len).quiet_if(noreply));
    }
    Ok(Request::Delete {
        key: Cow::Borrowed(args[0]),
        noreply,
    })
}

/// incr/decr `<key> <delta> [noreply]`, and ARCUS's `<key> <delta> <flags> <exptime>
/// <initial> [noreply]`, which creates a missing key holding `initial`.
///
/// As arcus-memcached's `process_arithmetic_command`: 2, 3, 5 or 6 words (another count is
/// `ERROR`); the key is checked first, then the delta (`invalid numeric delta argument`),
/// then flags, exptime and initial (`bad command line format`); the word after them is
/// `noreply` or ignored, as the third of memcached's form is.
fn arith<'a>(
    incr: bool,
    args: &[&'a [u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request<'a>, ProtocolError> {
    if !matches!(args.len(), 2 | 3 | 5 | 6) {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len).quiet_if(noreply));
    }
    let delta = parse_u64(args[1]).ok_or_else(|| {
        ProtocolError::client("invalid numeric delta argument", line_len).quiet_if(noreply)
    })?;
    let create = match args {
        [_, _, flags, exptime, initial, ..] => {
            let fields = (parse_u32(flags), parse_i64(exptime), parse_u64(initial));
            let (Some(flags), Some(exptime), Some(initial)) = fields else {
                return Err(bad_format(line_len).quiet_if(noreply));
            };
            Some(ArithCreate {
                flags,
                exptime,
                initial,
            })
        }
        _ => None,
    };
    Ok(Request::Arith {
        incr,
        key: Cow::Borrowed(args[0]),
        delta,
        create,
        noreply,
    })
}

/// touch `<key> <exptime> [noreply]`.
fn touch<'a>(
    args: &[&'a [u8]],
    line_len: usize,
    limits: &Limits,
) -> Result<Request<'a>, ProtocolError> {
    if !(2..=3).contains(&args.len()) {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    if !key_is_valid(args[0], limits) {
        return Err(bad_format(line_len).quiet_if(noreply));
    }
    let exptime = parse_i64(args[1]).ok_or_else(|| {
        ProtocolError::client("invalid exptime argument", line_len).quiet_if(noreply)
    })?;
    Ok(Request::Touch {
        key: Cow::Borrowed(args[0]),
        exptime,
        noreply,
    })
}

/// flush_all `[delay] [noreply]`.
fn flush_all(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    if args.len() > 2 {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    let given = args.len() - usize::from(noreply);
    let delay = if given == 0 {
        Some(0)
    } else {
        parse_i64(args[0])
    };
    // memcached takes a negative delay as "now".
    match delay {
        Some(delay) => Ok(Request::FlushAll {
            delay: delay.max(0),
            noreply,
        }),
        None => Err(ProtocolError::client("invalid exptime argument", line_len).quiet_if(noreply)),
    }
}

/// verbosity `<level> [noreply]`.
fn verbosity(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    if !(1..=2).contains(&args.len()) {
        return Err(ProtocolError::unknown(line_len));
    }
    let noreply = ends_in_noreply(args);
    let level = parse_u32(args[0]).ok_or_else(|| bad_format(line_len).quiet_if(noreply))?;
    Ok(Request::Verbosity { level, noreply })
}

/// debugtime `<seconds>` (memcached's debug build). Another word (`p` and `r`, its pause and
/// resume of the clock, or a negative jump: cairn's clock only moves ahead) is `secs: None`,
/// for the server to refuse: whether the command exists at all is its to say.
fn debugtime(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    match args {
        [secs, ..] => Ok(Request::DebugTime {
            secs: parse_u32(secs),
        }),
        // As memcached: without an argument, ERROR.
        [] => Err(ProtocolError::unknown(line_len)),
    }
}

/// cache_memlimit `<megabytes> [noreply]` (the range is the server's to check).
fn cache_memlimit(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    let noreply = ends_in_noreply(args);
    match args {
        [mb] | [mb, _] => match parse_u64(mb) {
            Some(megabytes) => Ok(Request::CacheMemlimit { megabytes, noreply }),
            None => Err(ProtocolError::unknown(line_len)),
        },
        _ => Err(ProtocolError::unknown(line_len)),
    }
}

/// lru_crawler `metadump|crawl <classes>`, `sleep|tocrawl <n>`, `enable|disable`.
fn lru_crawler(args: &[&[u8]], line_len: usize) -> Result<Request<'static>, ProtocolError> {
    let crawler = match args {
        [b"metadump", b"all" | b"hash"] => Crawler::Metadump { dump: true },
        [b"metadump", ids] => Crawler::Metadump {
            dump: slab_classes(ids, line_len)?.contains(&1),
        },
        [b"crawl", b"all"] => Crawler::Crawl,
        [b"crawl", ids] => {
            slab_classes(ids, line_len)?;
            Crawler::Crawl
        }
        [b"sleep" | b"tocrawl", n] if parse_u32(n).is_some() => Crawler::Tune,
        [b"enable" | b"disable"] => Crawler::Tune,
        _ => return Err(ProtocolError::unknown(line_len)),
    };
    Ok(Request::LruCrawler(crawler))
}

/// A comma-separated list of memcached slab class ids (1 to 63).
fn slab_classes(word: &[u8], line_len: usize) -> Result<Vec<u32>, ProtocolError> {
    word.split(|&b| b == b',')
        .map(|id| parse_u32(id).filter(|id| (1..=63).contains(id)))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| ProtocolError::new(ErrorKind::Reply("BADCLASS invalid class id"), line_len))
}
