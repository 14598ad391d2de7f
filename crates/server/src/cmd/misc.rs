//! version, and administration lines that are not part of memcached's protocol.

use crate::Ctx;

/// `VERSION <v>`.
pub fn version(out: &mut Vec<u8>) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(crate::VERSION.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `config ...` and `checkpoint`: known words with no meaning yet in a pure cache.
pub fn admin(_ctx: &Ctx, words: &[String], out: &mut Vec<u8>) {
    let _ = words;
    out.extend_from_slice(b"SERVER_ERROR persistence is not enabled\r\n");
}
