//! What a client asks: the parsed request, borrowing its keys and value from the input.

use std::borrow::Cow;

use crate::meta_request::MetaRequest;

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
    /// `slabs automove ...` or `slabs reassign <src> <dst>`: memcached's slab tuning, checked
    /// as memcached checks it (cairn has no slab classes to move pages between).
    Slabs {
        cmd: Slabs,
        noreply: bool,
    },
    /// `debugtime <seconds>`: a command of memcached's debug build (`memcached-debug`) that
    /// moves the server's clock ahead; the server answers it only when debug commands are on.
    /// `None`: the word is not a number of seconds to move ahead (0 to 2^32 - 1).
    DebugTime {
        secs: Option<u32>,
    },
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

/// The `slabs` subcommands that are well formed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slabs {
    /// `slabs automove 0|1|2`, `slabs automove ratio|freeratio <float>`, `slabs automove
    /// window <3..1800>`: the slab mover's settings.
    Automove,
    /// `slabs reassign <src> <dst>`: move a page from one slab class to another (`-1`: any).
    Reassign { src: i32, dst: i32 },
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
