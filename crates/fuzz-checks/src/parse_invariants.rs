//! Invariants of every request `cairn_proto::parse` accepts. cairn-proto has response
//! encoders but no request encoder, so instead of an encode -> parse round trip this checks
//! each parsed request against the raw bytes it was parsed from:
//!
//! - keys are 1..=max_key_len bytes with no space, newline or NUL (memcached's rule; a meta key sent in
//!   base64 may hold any bytes once decoded, but is still 1..=max_key_len long, and
//!   `wire_key()` gives back exactly the word on the line);
//! - keys, values and numbers are the ones on the line: a storage value is the `<bytes>`
//!   long block right after the line, followed by `\r\n`, and within the value limit;
//! - counts are within limits (keys per get), exptimes within memcached's 32-bit range,
//!   meta flags appear at most once each.

use cairn_proto::{key_is_valid, parse, GetKind, Limits, MetaCmd, Request};

/// Runs the check on `data` with the default limits and with tiny ones.
pub fn check(data: &[u8]) {
    for limits in [Limits::default(), crate::limits::TINY] {
        let mut rest = data;
        loop {
            match parse(rest, &limits) {
                Ok(Some((req, n))) => {
                    check_request(&req, &rest[..n], &limits);
                    let skip = match req {
                        Request::NotSupported { skip, .. } => skip,
                        _ => 0,
                    };
                    rest = &rest[n.saturating_add(skip).min(rest.len())..];
                }
                Ok(None) => break,
                Err(e) if e.close => break,
                Err(e) => rest = &rest[e.consumed.saturating_add(e.swallow).min(rest.len())..],
            }
        }
    }
}

/// The i32 range memcached's `safe_strtol` accepts for times.
fn is_time(t: i64) -> bool {
    (i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(&t)
}

fn check_request(req: &Request, frame: &[u8], limits: &Limits) {
    let nl = frame
        .iter()
        .position(|&b| b == b'\n')
        .expect("a request has a line");
    let line = frame[..nl].strip_suffix(b"\r").unwrap_or(&frame[..nl]);
    let line_len = nl + 1;
    let block_len = match req {
        Request::Store { value, .. } => Some(value.len()),
        Request::Meta(m) => m.value.as_ref().map(|v| v.len()),
        _ => None,
    };
    match block_len {
        // Every request but a storage one is exactly one line.
        None => assert_eq!(frame.len(), line_len),
        Some(len) => {
            assert!(len <= limits.max_value_len);
            assert_eq!(frame.len(), line_len + len + 2, "block is <bytes> + \\r\\n");
            assert!(frame.ends_with(b"\r\n"));
        }
    }
    let words: Vec<&[u8]> = line
        .split(|&b| b == b' ')
        .filter(|w| !w.is_empty())
        .collect();
    let plain_key = |key: &[u8], word: &[u8]| {
        assert!(key_is_valid(key, limits), "bad key {key:?}");
        assert_eq!(key, word);
    };
    check_line(req, &words, limits, plain_key);
}

/// A decimal word the parser accepted (it may have leading zeros or be "-0").
fn number(word: &[u8]) -> i64 {
    std::str::from_utf8(word).unwrap().parse().unwrap()
}

fn check_line(req: &Request, words: &[&[u8]], limits: &Limits, plain_key: impl Fn(&[u8], &[u8])) {
    match req {
        Request::Get {
            kind,
            exptime,
            keys,
        } => {
            let first_key = match kind {
                GetKind::Get | GetKind::Gets => {
                    assert!(exptime.is_none());
                    assert!(!keys.is_empty());
                    1
                }
                GetKind::Gat | GetKind::Gats => {
                    assert!(is_time(exptime.expect("gat has an exptime")));
                    2
                }
            };
            assert!(keys.len() <= limits.max_keys_per_get);
            assert_eq!(keys.len(), words.len() - first_key);
            for (key, word) in keys.iter().zip(&words[first_key..]) {
                plain_key(key, word);
            }
        }
        Request::Store {
            key,
            exptime,
            value,
            ..
        } => {
            plain_key(key, words[1]);
            assert!(is_time(*exptime));
            assert_eq!(number(words[4]), value.len() as i64);
        }
        Request::Delete { key, .. } | Request::Arith { key, .. } => plain_key(key, words[1]),
        Request::Touch { key, exptime, .. } => {
            plain_key(key, words[1]);
            assert!(is_time(*exptime));
        }
        Request::FlushAll { delay, .. } => assert!((0..=i64::from(i32::MAX)).contains(delay)),
        Request::Stats { args } => assert_eq!(args.len(), words.len() - 1),
        Request::Version
        | Request::Quit
        | Request::Verbosity { .. }
        | Request::Shutdown { .. }
        | Request::CacheMemlimit { .. }
        | Request::Slabs { .. }
        | Request::DebugTime { .. }
        | Request::LruCrawler(_) => {}
        Request::NotSupported {
            skip,
            pipe,
            noreply,
        } => {
            assert!(!(*pipe && *noreply));
            assert_eq!(*pipe, words.last() == Some(&&b"pipe"[..]));
            assert!(*skip == 0 || *skip >= 2, "a block ends in \\r\\n");
        }
        Request::Admin { words: w } => {
            assert!(w[0] == "config" || w[0] == "checkpoint");
            assert_eq!(w.len(), words.len());
        }
        Request::Meta(m) => {
            if m.cmd == MetaCmd::Noop {
                assert!(m.key.is_empty() && m.value.is_none());
                return;
            }
            if m.flags.base64 {
                assert!((1..=limits.max_key_len).contains(&m.key.len()));
                assert_eq!(m.wire_key(), words[1], "base64 key does not echo as sent");
            } else {
                plain_key(&m.key, words[1]);
            }
            assert_eq!(m.value.is_some(), m.cmd == MetaCmd::Set);
            if let Some(value) = &m.value {
                assert_eq!(number(words[2]), value.len() as i64);
            }
            let mut seen = [false; 128];
            for &letter in &m.flags.order {
                assert!(letter.is_ascii_alphabetic(), "flag {letter}");
                assert!(!std::mem::replace(&mut seen[usize::from(letter)], true));
            }
            assert!(m.flags.opaque.as_ref().is_none_or(|o| o.len() <= 32));
            for t in [m.flags.vivify_ttl, m.flags.recache_ttl, m.flags.new_ttl] {
                assert!(t.is_none_or(is_time));
            }
        }
    }
}
