//! Feeds arbitrary bytes to `cairn_proto::parse` the way a connection does: parse, act on the
//! outcome, drop what it consumed (plus `swallow` after an error), repeat until the parser
//! needs more bytes or asks to close.
//!
//! ```text
//!   input ──> parse(rest) ──> Ok(Some((req, n)))  rest = rest[n..] (+ an ARCUS command's skip)
//!                         ├─> Ok(None)             stop: need more bytes
//!                         └─> Err(e)               close? stop : rest = rest[consumed + swallow..]
//! ```
//!
//! Checks, for the default limits and for tiny ones (so limit edges are reached with short
//! inputs): no panic; every step consumes at least one byte and never more than it has (so the
//! loop ends); the outcome of a step depends only on the bytes it consumed (parsing exactly
//! those bytes gives the same outcome) and one byte fewer is "need more bytes" (or the
//! endless-line close), so a request split across reads parses the same.

use cairn_proto::{parse, ErrorKind, Limits, Request, MAX_DATA_LEN};

/// Runs the check on `data` with the default limits and with tiny ones.
pub fn check(data: &[u8]) {
    for limits in [Limits::default(), crate::limits::TINY] {
        run_connection(data, &limits);
    }
}

fn run_connection(data: &[u8], limits: &Limits) {
    let mut rest = data;
    loop {
        let outcome = parse(rest, limits);
        let consumed = match &outcome {
            Ok(None) => return,
            Ok(Some((_, n))) => *n,
            Err(e) => e.consumed,
        };
        assert!(consumed > 0, "no progress: {outcome:?}");
        assert!(
            consumed <= rest.len(),
            "consumed {consumed} of {}",
            rest.len()
        );

        if let Err(e) = &outcome {
            let line = e.reply_line();
            assert!(
                line == "ERROR"
                    || line.starts_with("CLIENT_ERROR ")
                    || line.starts_with("SERVER_ERROR ")
                    || line == "BADCLASS invalid class id",
                "reply {line:?}"
            );
            // A refused data block is swallowed with its "\r\n", never more than memcached
            // reads; a too-large one is larger than the value limit.
            assert!(e.swallow <= MAX_DATA_LEN + 2, "swallow {}", e.swallow);
            if e.kind == ErrorKind::TooLarge {
                assert!(
                    e.swallow > limits.max_value_len + 2,
                    "swallow {}",
                    e.swallow
                );
            }
            if e.close {
                // A line over the limit or an HTTP request: hang up without a word.
                assert!(e.silent, "{e:?}");
                assert!(matches!(
                    e.kind,
                    ErrorKind::Client("line too long" | "HTTP request")
                ));
                return;
            }
        }

        // The outcome depends only on the bytes it consumed...
        assert_eq!(
            parse(&rest[..consumed], limits),
            outcome,
            "trailing bytes changed it"
        );
        // ...and one byte fewer is not yet a request (or is an endless line).
        match parse(&rest[..consumed - 1], limits) {
            Ok(None) => {}
            Err(e) if e.close => {}
            other => panic!("a prefix of {outcome:?} parsed as {other:?}"),
        }

        let skip = match &outcome {
            Err(e) => consumed.saturating_add(e.swallow),
            Ok(Some((Request::NotSupported { skip, .. }, _))) => {
                // An ARCUS command's data block, skipped as a refused one is.
                assert!(*skip <= MAX_DATA_LEN + 2, "skip {skip}");
                consumed.saturating_add(*skip)
            }
            Ok(_) => consumed,
        };
        rest = &rest[skip.min(rest.len())..];
    }
}
