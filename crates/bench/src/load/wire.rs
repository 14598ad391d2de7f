//! The bytes of the load: a set and a get written in the memcached text protocol or in Redis'
//! RESP, the reply at the front of a read buffer parsed, and the value each key gets (so that
//! `--verify` can check what comes back).
//!
//! ```text
//!   encode_set / encode_get ─> write buffer ─> server ─> read buffer ─> parse_reply ─> Reply
//! ```
//!
//! Non-goals: the rest of either protocol; a reply this tool does not expect is an error.

use super::config::Protocol;

/// The value a key gets, so `--verify` can check what comes back.
pub fn value_for(key: u64, len: usize) -> Vec<u8> {
    let unit = format!("{key:x}-");
    unit.bytes().cycle().take(len).collect()
}

/// Appends a set of `key` to `value` in `proto` to `out`.
pub(super) fn encode_set(out: &mut Vec<u8>, proto: Protocol, key: &[u8], value: &[u8]) {
    use std::io::Write;
    match proto {
        Protocol::MemcacheText => {
            out.extend_from_slice(b"set ");
            out.extend_from_slice(key);
            let _ = write!(out, " 0 0 {}\r\n", value.len());
        }
        Protocol::Redis => {
            let _ = write!(out, "*3\r\n$3\r\nSET\r\n${}\r\n", key.len());
            out.extend_from_slice(key);
            let _ = write!(out, "\r\n${}\r\n", value.len());
        }
    }
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Appends a get of `key` in `proto` to `out`.
pub(super) fn encode_get(out: &mut Vec<u8>, proto: Protocol, key: &[u8]) {
    use std::io::Write;
    match proto {
        Protocol::MemcacheText => {
            out.extend_from_slice(b"get ");
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
        Protocol::Redis => {
            let _ = write!(out, "*2\r\n$3\r\nGET\r\n${}\r\n", key.len());
            out.extend_from_slice(key);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// A parsed reply.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    Stored,
    Hit(std::ops::Range<usize>),
    Miss,
    Error,
}

fn line_end(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

/// Parses one reply at the front of `b`: Some((reply, bytes used)) or None if incomplete.
pub fn parse_reply(b: &[u8], proto: Protocol, is_set: bool) -> Option<(Reply, usize)> {
    let end = line_end(b)?;
    let line = &b[..end];
    let after = end + 2;
    match proto {
        Protocol::MemcacheText => {
            if is_set {
                let r = if line == b"STORED" {
                    Reply::Stored
                } else {
                    Reply::Error
                };
                return Some((r, after));
            }
            if line == b"END" {
                return Some((Reply::Miss, after));
            }
            if !line.starts_with(b"VALUE ") {
                return Some((Reply::Error, after));
            }
            let len: usize = std::str::from_utf8(line)
                .ok()?
                .split(' ')
                .nth(3)?
                .parse()
                .ok()?;
            let total = after + len + 2 + 5;
            if b.len() < total {
                return None;
            }
            if &b[after + len..total] != b"\r\nEND\r\n" {
                return Some((Reply::Error, total));
            }
            Some((Reply::Hit(after..after + len), total))
        }
        Protocol::Redis => match line.first() {
            Some(b'+') => Some((Reply::Stored, after)),
            Some(b'$') if line == b"$-1" => Some((Reply::Miss, after)),
            Some(b'$') => {
                let len: usize = std::str::from_utf8(&line[1..]).ok()?.parse().ok()?;
                let total = after + len + 2;
                (b.len() >= total).then_some((Reply::Hit(after..after + len), total))
            }
            _ => Some((Reply::Error, after)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_exactly() {
        let p = Protocol::MemcacheText;
        assert_eq!(
            parse_reply(b"STORED\r\nEND", p, true),
            Some((Reply::Stored, 8))
        );
        assert_eq!(parse_reply(b"END\r\n", p, false), Some((Reply::Miss, 5)));
        assert_eq!(parse_reply(b"VALUE k 0 3\r\nabc\r\nEN", p, false), None);
        assert_eq!(
            parse_reply(b"VALUE k 0 3\r\nabc\r\nEND\r\n", p, false),
            Some((Reply::Hit(13..16), 23))
        );
        assert_eq!(
            parse_reply(b"SERVER_ERROR x\r\n", p, true),
            Some((Reply::Error, 16))
        );
        let r = Protocol::Redis;
        assert_eq!(parse_reply(b"+OK\r\n", r, true), Some((Reply::Stored, 5)));
        assert_eq!(parse_reply(b"$-1\r\n", r, false), Some((Reply::Miss, 5)));
        assert_eq!(
            parse_reply(b"$3\r\nabc\r\n", r, false),
            Some((Reply::Hit(4..7), 9))
        );
        assert_eq!(parse_reply(b"$3\r\nab", r, false), None);
    }

    #[test]
    fn values_are_checkable() {
        assert_eq!(value_for(255, 7), b"ff-ff-f");
        let mut out = Vec::new();
        encode_set(&mut out, Protocol::Redis, b"k", b"vv");
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n");
    }
}
