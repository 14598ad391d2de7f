//! What a meta command asks (mg, ms, md, ma, mn, me): the command, its mode and its flags,
//! as the parser (meta.rs) fills them for the server.

use std::borrow::Cow;

use base64::Engine;

/// Largest CAS unique a client may set with meta `E`. The server's own counter continues past
/// every unique it holds (and jumps 2^32 at each recovery), so the upper half of the range
/// stays free for it and never wraps.
pub const MAX_EXPLICIT_CAS: u64 = (1 << 63) - 1;

/// Which meta command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaCmd {
    Get,
    Set,
    Delete,
    Arith,
    Noop,
    Debug,
}

/// The `M` flag of ms (storage mode) and ma (arithmetic mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaMode {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Incr,
    Decr,
}

/// Every meta flag, decoded. Letters in the doc of each field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MetaFlags {
    /// b: the key is base64; return it encoded.
    pub base64: bool,
    /// c: return the CAS unique.
    pub return_cas: bool,
    /// f: return the client flags.
    pub return_flags: bool,
    /// h: return whether the item was hit before (0/1).
    pub return_hit: bool,
    /// k: return the key.
    pub return_key: bool,
    /// l: return seconds since last access.
    pub return_last_access: bool,
    /// O: opaque token echoed back.
    pub opaque: Option<Vec<u8>>,
    /// q: quiet mode, suppress the common-case reply (EN for mg, HD for ms/md/ma).
    pub quiet: bool,
    /// s: return the item size.
    pub return_size: bool,
    /// t: return the remaining TTL (-1 = never expires).
    pub return_ttl: bool,
    /// u: do not bump the item in the LRU.
    pub no_bump: bool,
    /// v: return the value.
    pub return_value: bool,
    /// N(ttl): autovivify on miss with this TTL.
    pub vivify_ttl: Option<i64>,
    /// R(ttl): win a recache if the remaining TTL is below this.
    pub recache_ttl: Option<i64>,
    /// T(ttl): update the TTL.
    pub new_ttl: Option<i64>,
    /// C(cas): compare CAS before writing.
    pub compare_cas: Option<u64>,
    /// E(cas): use this CAS unique for the new item instead of generating one.
    pub explicit_cas: Option<u64>,
    /// F(flags): client flags to store.
    pub client_flags: Option<u32>,
    /// I: invalidate (mark stale) instead of failing/removing.
    pub invalidate: bool,
    /// M(mode): storage or arithmetic mode.
    pub mode: Option<MetaMode>,
    /// D(n): delta for ma (default 1).
    pub delta: Option<u64>,
    /// J(n): initial value for ma autovivify (default 0).
    pub initial: Option<u64>,
    /// x: md removes the value but keeps the item.
    pub remove_value: bool,
    /// Every flag letter in request order: return flags are answered in this order. Held
    /// inline up to 24 letters (memcached's token count); more spill to the heap.
    pub order: smallvec::SmallVec<[u8; 24]>,
}

/// One meta request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaRequest<'a> {
    pub cmd: MetaCmd,
    /// The key, decoded from base64 if `b` was given (owned then, borrowed from the input
    /// otherwise). Empty for `mn`.
    pub key: Cow<'a, [u8]>,
    pub flags: MetaFlags,
    /// The data block of `ms`.
    pub value: Option<Cow<'a, [u8]>>,
}

impl MetaRequest<'_> {
    /// The key as it goes on the wire (base64 again if it came that way).
    pub fn wire_key(&self) -> Vec<u8> {
        if self.flags.base64 {
            base64::engine::general_purpose::STANDARD
                .encode(&self.key)
                .into_bytes()
        } else {
            self.key.to_vec()
        }
    }
}
