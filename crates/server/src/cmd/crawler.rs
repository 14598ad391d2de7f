//! lru_crawler: `metadump` lists every item the way memcached does (Debian's memcached-tool
//! `dump` and `keys` read it), `crawl` reclaims expired items now.
//!
//! ```text
//!   lru_crawler metadump all\r\n  ->  key=<uri-encoded> exp=<unix|-1> la=<unix> cas=<n> fetch=<yes|no> cls=1 size=<n>\n
//!                                     ... one line per live item, shard by shard ...
//!                                     END\r\n
//! ```
//!
//! Lines end in a bare `\n`, as memcached's do. Items on the flash tier are not listed (their
//! keys are on the device only).

use cairn_store::{ItemMeta, Store};

use crate::Ctx;

/// How many expired items one `lru_crawler crawl` examines at most.
const CRAWL_ITEMS: usize = 1 << 20;

/// Appends the metadump lines of every live item of store shard `shard`.
pub fn metadump_shard(ctx: &Ctx, shard: usize, now: u32, out: &mut Vec<u8>) {
    ctx.store().visit_shard(shard, now, |key, value, meta| {
        metadump_line(key, Store::item_bytes(key, value, meta), meta, out);
    });
}

/// One metadump line.
fn metadump_line(key: &[u8], size: usize, m: &ItemMeta, out: &mut Vec<u8>) {
    use std::io::Write;
    out.extend_from_slice(b"key=");
    uri_encode(key, out);
    let exp = if m.exptime == 0 {
        -1
    } else {
        i64::from(m.exptime)
    };
    let fetch = if m.fetched { "yes" } else { "no" };
    // Writing to a Vec cannot fail.
    // memcached ends these lines with a bare \n.
    let _ = writeln!(
        out,
        " exp={exp} la={} cas={} fetch={fetch} cls=1 size={size}",
        m.last_access, m.cas
    );
}

/// memcached's `uriencode`: letters, digits and `-._~` as they are, every other byte as %XX.
fn uri_encode(key: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &b in key {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
        }
    }
}

/// `lru_crawler crawl`: reclaims expired items now (the background reclaim does it in small
/// steps anyway).
pub fn crawl(ctx: &Ctx, out: &mut Vec<u8>) {
    ctx.store().reclaim_expired(ctx.now(), CRAWL_ITEMS);
    out.extend_from_slice(b"OK\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_as_memcached_writes_them() {
        let mut out = Vec::new();
        let meta = |exptime, fetched| ItemMeta {
            flags: 0,
            exptime,
            cas: 7,
            last_access: 1_700_000_000,
            fetched,
            stale: false,
            win_sent: false,
            mod_revision: 0,
        };
        metadump_line(b"a%20b", 71, &meta(1_700_000_100, false), &mut out);
        metadump_line(b"k2~_.-", 62, &meta(0, true), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "key=a%2520b exp=1700000100 la=1700000000 cas=7 fetch=no cls=1 size=71\n\
             key=k2~_.- exp=-1 la=1700000000 cas=7 fetch=yes cls=1 size=62\n"
        );
    }
}
