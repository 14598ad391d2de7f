//! cairn-proto: the memcached text and meta protocols, with no I/O.
//!
//! ```text
//!   bytes from a socket ──> parse(buf, limits) ──> Ok(Some((Request, consumed)))  answer it
//!                                              ├─> Ok(None)                        read more
//!                                              └─> Err(ProtocolError)             send its reply,
//!                                                                                 drop `consumed`
//!                                                                                 (+ `swallow`)
//!   responses <── encode::* (append to one output buffer, flushed once per read batch)
//! ```
//!
//! The parser is incremental: it never consumes a partial request, so the caller keeps unparsed
//! bytes and calls again after the next read. Every limit (key length, line length, value size,
//! keys per get) is checked before anything is allocated. Errors carry the exact line memcached
//! 1.6 answers and say how many bytes to skip so the stream stays in sync: a malformed storage
//! command whose data length could be read skips its data block, and a CLIENT_ERROR of a command
//! that ends in `noreply` is not answered, so a noreply stream never falls out of step. A line
//! over the line limit and an HTTP request line close the connection without a reply, as
//! memcached does.
//!
//! Non-goals: executing commands (the server does), binary protocol, UDP.

use std::borrow::Cow;

mod arcus;
pub mod encode;
mod meta;
mod text;

pub use meta::{MetaCmd, MetaFlags, MetaMode, MetaRequest};

/// Limits checked before allocating anything for a request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Longest key in bytes (memcached: 250).
    pub max_key_len: usize,
    /// Largest data block of a storage command (memcached `-I`, default 1 MiB).
    pub max_value_len: usize,
    /// Longest command line without its data block, except retrieval lines (memcached: 2048).
    pub max_line_len: usize,
    /// Most keys one get/gets/gat/gats line may name (the line is also capped at
    /// [`MAX_RETRIEVAL_LINE`] bytes).
    pub max_keys_per_get: usize,
}

/// Longest get/gets/gat/gats line: memcached reads multi-get lines of any length; cairn holds one
/// line of up to 16 MiB in memory (hundreds of thousands of keys), then answers it key by key.
pub const MAX_RETRIEVAL_LINE: usize = 16 << 20;

/// Longest data block memcached reads: a length above `i32::MAX - 2` is a malformed command
/// (`CLIENT_ERROR bad command line format`), not an item too large.
pub const MAX_DATA_LEN: usize = i32::MAX as usize - 2;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_len: 250,
            max_value_len: 1 << 20,
            max_line_len: 2048,
            max_keys_per_get: 1_000_000,
        }
    }
}

impl Limits {
    /// Longest retrieval line: every key at full length plus separators, at most
    /// [`MAX_RETRIEVAL_LINE`].
    pub fn max_get_line_len(&self) -> usize {
        self.max_keys_per_get
            .saturating_mul(self.max_key_len + 1)
            .saturating_add(self.max_line_len)
            .min(MAX_RETRIEVAL_LINE)
    }
}

/// Which retrieval command a `Get` request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GetKind {
    Get,
    Gets,
    Gat,
    Gats,
}

impl GetKind {
    /// Whether the reply lines carry the CAS unique.
    pub fn with_cas(self) -> bool {
        matches!(self, GetKind::Gets | GetKind::Gats)
    }
}

/// Which storage command a `Store` request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

/// The keys of a retrieval line, held as one buffer (`k1 k2 k3`) rather than one allocation per
/// key, so a line of a hundred thousand keys costs its own bytes and no more. A parsed line's
/// list borrows the line's own stretch of keys: a `get` allocates nothing for its keys.
#[derive(Clone, Debug, Default)]
pub struct KeyList<'a> {
    /// The keys, separated by one or more spaces.
    joined: Cow<'a, [u8]>,
    count: usize,
}

impl<'a> KeyList<'a> {
    /// A list of these keys (each non-empty and without spaces).
    pub fn new<'k>(keys: impl IntoIterator<Item = &'k [u8]>) -> KeyList<'static> {
        let mut joined = Vec::new();
        let mut count = 0;
        for k in keys {
            debug_assert!(!k.is_empty() && !k.contains(&b' '));
            joined.extend_from_slice(k);
            joined.push(b' ');
            count += 1;
        }
        KeyList {
            joined: Cow::Owned(joined),
            count,
        }
    }

    /// The `count` keys of the stretch of a line that holds them (`k1 k2  k3`).
    pub(crate) fn borrowed(joined: &'a [u8], count: usize) -> KeyList<'a> {
        KeyList {
            joined: Cow::Borrowed(joined),
            count,
        }
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The keys in line order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> {
        self.joined.split(|&b| b == b' ').filter(|k| !k.is_empty())
    }
}

/// Two lists are equal when they hold the same keys in the same order, however many spaces
/// separate them.
impl PartialEq for KeyList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.count == other.count && self.iter().eq(other.iter())
    }
}

impl Eq for KeyList<'_> {}

/// One parsed client request. Its keys and a storage command's value are borrowed from the
/// input (`Cow::Borrowed`: the parser copies no key and no value, so a `get` or a `set`
/// allocates nothing; see cairn-persist's durability module for the copies of a value between
/// socket and disk), or owned when a front end builds the request itself or a key came in
/// base64.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// get/gets <key>* and gat/gats <exptime> <key>*.
    Get {
        kind: GetKind,
        /// Only for gat/gats: the new expiration time as sent (relative or absolute).
        exptime: Option<i64>,
        keys: KeyList<'a>,
    },
    /// set/add/replace/append/prepend/cas.
    Store {
        kind: StoreKind,
        key: Cow<'a, [u8]>,
        flags: u32,
        exptime: i64,
        /// Only meaningful for `cas`.
        cas_unique: u64,
        value: Cow<'a, [u8]>,
        noreply: bool,
    },
    Delete {
        key: Cow<'a, [u8]>,
        noreply: bool,
    },
    /// incr (true) / decr (false): memcached's `<key> <delta> [noreply]`, or ARCUS's
    /// `<key> <delta> <flags> <exptime> <initial> [noreply]`.
    Arith {
        incr: bool,
        key: Cow<'a, [u8]>,
        delta: u64,
        /// ARCUS's form: a missing key is created holding `initial` (not `initial` plus or
        /// minus `delta`), with these flags and expiration time.
        create: Option<ArithCreate>,
        noreply: bool,
    },
    Touch {
        key: Cow<'a, [u8]>,
        exptime: i64,
        noreply: bool,
    },
    FlushAll {
        /// Seconds (or absolute time) after which everything is invalid; 0 = now.
        delay: i64,
        noreply: bool,
    },
    /// stats [group] [args]: the words after `stats`.
    Stats {
        args: Vec<String>,
    },
    Version,
    /// verbosity <level> [noreply]
    Verbosity {
        level: u32,
        noreply: bool,
    },
    Quit,
    /// mg/ms/md/ma/mn/me.
    Meta(MetaRequest<'a>),
    /// `shutdown [graceful]` (only with memcached's `-A`).
    Shutdown {
        mode: ShutdownMode,
    },
    /// `cache_memlimit <megabytes> [noreply]`: change the memory limit while serving.
    CacheMemlimit {
        megabytes: u64,
        noreply: bool,
    },
    /// `lru_crawler ...`.
    LruCrawler(Crawler),
    /// An ARCUS command cairn does not implement (`lop`, `sop`, `mop`, `bop`, `getattr`,
    /// `setattr`, `flush_prefix`): answered `NOT_SUPPORTED`. Only its line is consumed; the
    /// caller skips `skip` more bytes (its data block and `\r\n`) as they arrive.
    NotSupported {
        /// The bytes after the line that belong to the command (0: none).
        skip: usize,
        /// It ended in `pipe` (ARCUS's command pipelining: the replies are held until the
        /// pipeline's last command, which does not end in `pipe`).
        pipe: bool,
        noreply: bool,
    },
    /// Server administration lines the core protocol does not define (`config ...`,
    /// `checkpoint`, ...): the command word and its arguments, for the server to answer.
    Admin {
        words: Vec<String>,
    },
}

/// What ARCUS's `incr|decr <key> <delta> <flags> <exptime> <initial>` creates when the key is
/// missing (arcus-memcached's `process_arithmetic_command` and `item_arithmetic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArithCreate {
    pub flags: u32,
    /// As sent (relative or absolute), like a storage command's.
    pub exptime: i64,
    /// The new item's value, answered as the command's result.
    pub initial: u64,
}

/// How `shutdown` was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShutdownMode {
    /// `shutdown`.
    Now,
    /// `shutdown graceful`.
    Graceful,
    /// Another word: `CLIENT_ERROR invalid shutdown mode` once shutdown is allowed at all.
    Invalid,
}

/// The `lru_crawler` subcommands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Crawler {
    /// `lru_crawler metadump <classes|all|hash>`: one line per item. cairn's items are all in
    /// class 1, so `dump` is whether the class list names it.
    Metadump { dump: bool },
    /// `lru_crawler crawl <classes|all>`: reclaim expired items now.
    Crawl,
    /// `lru_crawler sleep N | tocrawl N | enable | disable`: crawler tuning; cairn's background
    /// reclaim has its own pace, so these are accepted and change nothing.
    Tune,
}

/// What kind of error line a bad request gets.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// `ERROR`: a nonexistent command name.
    #[error("ERROR")]
    UnknownCommand,
    /// `CLIENT_ERROR <why>`.
    #[error("CLIENT_ERROR {0}")]
    Client(&'static str),
    /// `SERVER_ERROR object too large for cache`.
    #[error("SERVER_ERROR object too large for cache")]
    TooLarge,
    /// Another reply line memcached uses for this error (`BADCLASS invalid class id`).
    #[error("{0}")]
    Reply(&'static str),
}

/// A request that cannot be answered normally. The caller sends `kind` as a line (unless
/// `silent`), drops `consumed` bytes of its buffer, then drops `swallow` more bytes as they
/// arrive (a data block that is refused but must be skipped), removes the key `forget` names,
/// and closes the connection if `close` is set.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct ProtocolError {
    pub kind: ErrorKind,
    /// Bytes of the current buffer that belong to the bad request.
    pub consumed: usize,
    /// Further bytes beyond `consumed` that belong to it (possibly not received yet).
    pub swallow: usize,
    /// The stream cannot be resynchronised: reply, then close.
    pub close: bool,
    /// The request asked for `noreply` and memcached stays silent for this error (or the
    /// connection closes without a word).
    pub silent: bool,
    /// A `set` refused as too large: memcached removes the key's old value rather than leave
    /// stale data behind, and so does the caller.
    pub forget: Option<Vec<u8>>,
}

impl ProtocolError {
    pub(crate) fn new(kind: ErrorKind, consumed: usize) -> Self {
        ProtocolError {
            kind,
            consumed,
            swallow: 0,
            close: false,
            silent: false,
            forget: None,
        }
    }

    pub(crate) fn client(why: &'static str, consumed: usize) -> Self {
        ProtocolError::new(ErrorKind::Client(why), consumed)
    }

    pub(crate) fn unknown(consumed: usize) -> Self {
        ProtocolError::new(ErrorKind::UnknownCommand, consumed)
    }

    /// Close the connection without a reply (a line over the limit, an HTTP request).
    pub(crate) fn hang_up(why: &'static str, consumed: usize) -> Self {
        ProtocolError {
            close: true,
            silent: true,
            ..ProtocolError::client(why, consumed)
        }
    }

    /// The same error, not answered when `noreply` is set.
    pub(crate) fn quiet_if(self, noreply: bool) -> Self {
        ProtocolError {
            silent: self.silent || noreply,
            ..self
        }
    }

    /// The line the server answers with, without `\r\n`.
    pub fn reply_line(&self) -> String {
        self.kind.to_string()
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
    text::parse(buf, limits)
}

/// Checks a key as memcached's text protocol does: 1..=max bytes, any byte but a space (the
/// word separator), a newline (the line's end, so no text line can carry one) and NUL.
/// memcached's tokenizer splits on spaces only, so tabs, other control bytes (memaslap's keys
/// start with eight 0x10 bytes), DEL and bytes over 0x7f are key bytes; a NUL ends memcached's
/// C string, so the rest of its line is lost, and cairn refuses the key instead
/// (`CLIENT_ERROR bad command line format`, skipping a storage command's data block). gRPC
/// keys follow the same rule, so every key is reachable from both protocols.
pub fn key_is_valid(key: &[u8], limits: &Limits) -> bool {
    !key.is_empty()
        && key.len() <= limits.max_key_len
        && !key.iter().any(|&b| matches!(b, b' ' | b'\n' | 0))
}

#[cfg(test)]
mod tests;
