//! Parser tables: exact bytes in, exact outcome out.

use super::*;
use proptest::prelude::*;

fn ok(input: &[u8]) -> (Request<'_>, usize) {
    parse(input, &Limits::default())
        .expect("parses")
        .expect("complete")
}

fn err(input: &[u8]) -> ProtocolError {
    parse(input, &Limits::default()).expect_err("is an error")
}

#[test]
fn retrieval_lines() {
    let (r, n) = ok(b"get a bb\r\nget c\r\n");
    assert_eq!(n, 10);
    assert_eq!(
        r,
        Request::Get {
            kind: GetKind::Get,
            exptime: None,
            keys: KeyList::new([&b"a"[..], b"bb"])
        }
    );
    let (r, _) = ok(b"gats -1 k\r\n");
    assert_eq!(
        r,
        Request::Get {
            kind: GetKind::Gats,
            exptime: Some(-1),
            keys: KeyList::new([&b"k"[..]])
        }
    );
    assert_eq!(err(b"get\r\n").reply_line(), "ERROR");
    assert!(matches!(ok(b"gat 10\r\n").0, Request::Get { ref keys, .. } if keys.is_empty()));
    assert_eq!(
        err(b"gat x k\r\n").reply_line(),
        "CLIENT_ERROR invalid exptime argument"
    );
    let long = format!("get {}\r\n", "k".repeat(251));
    assert_eq!(
        err(long.as_bytes()).reply_line(),
        "CLIENT_ERROR bad command line format"
    );
}

#[test]
fn a_get_of_a_hundred_thousand_keys_is_one_request() {
    let keys: Vec<String> = (0..100_000).map(|i| format!("key:{i}")).collect();
    let line = format!("gets  {}\r\n", keys.join(" "));
    let (r, n) = ok(line.as_bytes());
    assert_eq!(n, line.len());
    let Request::Get { keys: got, .. } = r else {
        panic!("a get")
    };
    assert_eq!(got.len(), 100_000);
    assert!(got.iter().eq(keys.iter().map(|k| k.as_bytes())));
    // Past the retrieval line cap the connection closes, as for any line over its limit.
    let limits = Limits::default();
    let huge = vec![b'k'; MAX_RETRIEVAL_LINE];
    let e = parse(&[b"get ".as_slice(), &huge].concat(), &limits).expect_err("too long");
    assert!(e.close && e.silent);
}

#[test]
fn storage_needs_the_whole_block() {
    let limits = Limits::default();
    assert_eq!(parse(b"set k 1 2 5\r\nhel", &limits), Ok(None));
    assert_eq!(parse(b"set k 1 2 5", &limits), Ok(None));
    let (r, n) = ok(b"set k 1 2 5 noreply\r\nhello\r\nrest");
    assert_eq!(n, 28);
    assert_eq!(
        r,
        Request::Store {
            kind: StoreKind::Set,
            key: b"k"[..].into(),
            flags: 1,
            exptime: 2,
            cas_unique: 0,
            value: b"hello".to_vec().into(),
            noreply: true
        }
    );
    let (r, _) = ok(b"cas k 0 0 1 99\r\nx\r\n");
    assert!(matches!(
        r,
        Request::Store {
            kind: StoreKind::Cas,
            cas_unique: 99,
            ..
        }
    ));
}

#[test]
fn storage_errors_keep_the_stream_in_sync() {
    let e = err(b"set k 0 0 3\r\nabcd\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad data chunk");
    assert_eq!(e.consumed, 18);
    let e = err(b"set k 0 0 2000000\r\n");
    assert_eq!(e.reply_line(), "SERVER_ERROR object too large for cache");
    assert_eq!((e.consumed, e.swallow, e.close), (19, 2_000_002, false));
    let e = err(b"set k 0 0 2000000 noreply\r\n");
    assert!(e.silent);
    assert_eq!(
        e.forget.as_deref(),
        Some(&b"k"[..]),
        "a refused set removes the old value"
    );
    let e = err(b"add k 0 0 2000000\r\n");
    assert_eq!(
        (e.kind, e.forget),
        (ErrorKind::TooLarge, None),
        "only set does"
    );
    let e = err(b"set k x 0 1\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    assert_eq!(
        (e.swallow, e.silent),
        (3, false),
        "the data block is skipped"
    );
    let e = err(b"set k x 0 1 noreply\r\n");
    assert_eq!(
        (e.swallow, e.silent),
        (3, true),
        "noreply: no answer, block skipped"
    );
    let e = err(b"set k 0 0 -1\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    // memcached reads at most i32::MAX - 2 bytes: longer is a malformed command, with no block
    // to skip, not an item too large.
    for len in ["2147483646", "2147483647", "99999999999"] {
        let e = err(format!("set k 0 0 {len}\r\n").as_bytes());
        assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
        assert_eq!(e.swallow, 0);
    }
    let e = err(b"set k 0 0 2147483645\r\n");
    assert_eq!((e.kind, e.swallow), (ErrorKind::TooLarge, 2147483647));
    // A cas without its unique is a malformed cas: its block is skipped, not read as a command.
    let e = err(b"cas k 0 0 1\r\nx\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    assert_eq!((e.consumed, e.swallow, e.silent), (13, 3, false));
    let e = err(b"cas k 0 0 1 noreply\r\nx\r\n");
    assert_eq!((e.consumed, e.swallow, e.silent), (21, 3, true));
    assert_eq!(err(b"cas k 0 0 1 2 noreply x\r\n").reply_line(), "ERROR");
    let e = err(b"set k 0 0 1 noreply\r\nxyz\r\n");
    assert_eq!(
        (e.reply_line().as_str(), e.silent),
        ("CLIENT_ERROR bad data chunk", true)
    );
    let long = format!("set {} 0 0 1\r\na\r\n", "k".repeat(251));
    let e = err(long.as_bytes());
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    assert_eq!(e.swallow, 3, "the data block is skipped");
    assert_eq!(err(b"set k 0 0\r\n").reply_line(), "ERROR");
    assert_eq!(
        err(b"set k 4294967296 0 1\r\n").reply_line(),
        "CLIENT_ERROR bad command line format"
    );
}

#[test]
fn other_commands() {
    assert_eq!(
        ok(b"delete k 0 noreply\r\n").0,
        Request::Delete {
            key: b"k"[..].into(),
            noreply: true
        }
    );
    assert_eq!(
        err(b"delete k 5\r\n").reply_line(),
        "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"
    );
    // noreply silences even the legacy hold time's refusal.
    assert!(err(b"delete k 10 noreply\r\n").silent);
    assert!(
        ok(b"delete k noreply\r\n").0
            == Request::Delete {
                key: b"k"[..].into(),
                noreply: true
            }
    );
    assert_eq!(err(b"delete k 0 noreply x\r\n").reply_line(), "ERROR");
    assert!(
        err(b"incr k noreply\r\n").silent,
        "delta 'noreply' is refused silently"
    );
    assert!(err(b"touch k x noreply\r\n").silent);
    assert!(!err(b"touch k x\r\n").silent);
    assert_eq!(
        ok(b"decr k 18446744073709551615\r\n").0,
        Request::Arith {
            incr: false,
            key: b"k"[..].into(),
            delta: u64::MAX,
            create: None,
            noreply: false
        }
    );
    assert_eq!(
        err(b"incr k -1\r\n").reply_line(),
        "CLIENT_ERROR invalid numeric delta argument"
    );
    assert_eq!(
        err(b"incr k 18446744073709551616\r\n").reply_line(),
        "CLIENT_ERROR invalid numeric delta argument"
    );
    assert_eq!(
        ok(b"touch k 10 noreply\r\n").0,
        Request::Touch {
            key: b"k"[..].into(),
            exptime: 10,
            noreply: true
        }
    );
    assert_eq!(
        ok(b"flush_all\r\n").0,
        Request::FlushAll {
            delay: 0,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"flush_all 5 noreply\r\n").0,
        Request::FlushAll {
            delay: 5,
            noreply: true
        }
    );
    assert_eq!(
        err(b"flush_all x\r\n").reply_line(),
        "CLIENT_ERROR invalid exptime argument"
    );
    assert!(err(b"flush_all x noreply\r\n").silent);
    assert_eq!(err(b"flush_all 1 2 3\r\n").reply_line(), "ERROR");
    assert_eq!(
        ok(b"flush_all -1\r\n").0,
        Request::FlushAll {
            delay: 0,
            noreply: false
        }
    );
    assert_eq!(ok(b"version\r\n").0, Request::Version);
    assert_eq!(
        ok(b"verbosity 1\r\n").0,
        Request::Verbosity {
            level: 1,
            noreply: false
        }
    );
    assert_eq!(
        ok(b"verbosity 2 noreply\r\n").0,
        Request::Verbosity {
            level: 2,
            noreply: true
        }
    );
    assert_eq!(
        err(b"verbosity x\r\n").reply_line(),
        "CLIENT_ERROR bad command line format"
    );
    assert!(err(b"verbosity noreply\r\n").silent);
    assert_eq!(err(b"verbosity\r\n").reply_line(), "ERROR");
    assert_eq!(
        ok(b"stats slabs\r\n").0,
        Request::Stats {
            args: vec!["slabs".into()]
        }
    );
    assert_eq!(ok(b"quit\n").0, Request::Quit);
    // memcached 1.6.45: a line shorter than two bytes is malformed (metaget.t's "error from
    // blank command"), a longer one without a command word an unknown command.
    for short in [&b"\r\n"[..], b"\n", b" \n", b" \r\n", b"x\r\n"] {
        let e = err(short);
        assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
        assert_eq!((e.consumed, e.swallow, e.close), (short.len(), 0, false));
    }
    assert_eq!(err(b"  \r\n").reply_line(), "ERROR");
    assert_eq!(ok(b"mn\n").0, ok(b"mn\r\n").0);
    assert_eq!(err(b"bogus\r\n").reply_line(), "ERROR");
}

#[test]
fn admin_lines_memcached_knows() {
    let mode = |line: &[u8]| match ok(line).0 {
        Request::Shutdown { mode } => mode,
        other => panic!("{other:?}"),
    };
    assert_eq!(mode(b"shutdown\r\n"), ShutdownMode::Now);
    assert_eq!(mode(b"shutdown graceful\r\n"), ShutdownMode::Graceful);
    assert_eq!(mode(b"shutdown x\r\n"), ShutdownMode::Invalid);
    assert_eq!(
        ok(b"cache_memlimit 100 noreply\r\n").0,
        Request::CacheMemlimit {
            megabytes: 100,
            noreply: true
        }
    );
    for bad in [
        &b"cache_memlimit\r\n"[..],
        b"cache_memlimit x\r\n",
        b"cache_memlimit 1 2 3\r\n",
    ] {
        assert_eq!(err(bad).reply_line(), "ERROR");
    }
    let crawler = |line: &[u8]| match ok(line).0 {
        Request::LruCrawler(c) => c,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        crawler(b"lru_crawler metadump all\r\n"),
        Crawler::Metadump { dump: true }
    );
    assert_eq!(
        crawler(b"lru_crawler metadump hash\r\n"),
        Crawler::Metadump { dump: true }
    );
    assert_eq!(
        crawler(b"lru_crawler metadump 2,1\r\n"),
        Crawler::Metadump { dump: true }
    );
    assert_eq!(
        crawler(b"lru_crawler metadump 2\r\n"),
        Crawler::Metadump { dump: false }
    );
    assert_eq!(crawler(b"lru_crawler crawl all\r\n"), Crawler::Crawl);
    assert_eq!(crawler(b"lru_crawler tocrawl 5\r\n"), Crawler::Tune);
    for bad in [
        &b"lru_crawler metadump 0\r\n"[..],
        b"lru_crawler metadump 64\r\n",
        b"lru_crawler metadump x\r\n",
    ] {
        assert_eq!(err(bad).reply_line(), "BADCLASS invalid class id");
    }
    for bad in [
        &b"lru_crawler\r\n"[..],
        b"lru_crawler metadump\r\n",
        b"lru_crawler metadump all x\r\n",
        b"lru_crawler bogus\r\n",
    ] {
        assert_eq!(err(bad).reply_line(), "ERROR");
    }
}

#[test]
fn long_lines_and_http_close_without_a_reply() {
    let limits = Limits::default();
    let e = parse(&[b'a'; 3000], &limits).expect_err("too long");
    assert!(e.close && e.silent);
    // A whole line over the limit too: memcached does not answer and carry on.
    let line = [&[b'a'; 3000][..], b"\r\nversion\r\n"].concat();
    let e = parse(&line, &limits).expect_err("too long");
    assert!(e.close && e.silent);
    let e = err(b"GET / HTTP/1.0\r\n");
    assert!(e.close && e.silent);
    let e = err(b"POST /x HTTP/1.1\r\n");
    assert!(e.close && e.silent);
    // A long multi-get line is fine while it is within the get limit.
    assert_eq!(
        parse(&[b"get ".as_slice(), &[b'a'; 3000]].concat(), &limits),
        Ok(None)
    );
}

#[test]
fn meta_requests() {
    let (r, _) = ok(b"mg foo v t c f Oab q\r\n");
    let Request::Meta(m) = r else { panic!("meta") };
    assert_eq!(m.cmd, MetaCmd::Get);
    assert_eq!(*m.key, *b"foo");
    assert!(m.flags.return_value && m.flags.return_ttl && m.flags.quiet);
    assert_eq!(m.flags.opaque.as_deref(), Some(&b"ab"[..]));

    let (r, n) = ok(b"ms foo 2 T10 F5 MA I\r\nhi\r\n");
    assert_eq!(n, 26);
    let Request::Meta(m) = r else { panic!("meta") };
    assert_eq!(m.value.as_deref(), Some(&b"hi"[..]));
    assert_eq!(m.flags.new_ttl, Some(10));
    assert_eq!(m.flags.client_flags, Some(5));
    assert_eq!(m.flags.mode, Some(MetaMode::Append));

    let (r, _) = ok(b"mg Zm9v b k v\r\n");
    let Request::Meta(m) = r else { panic!("meta") };
    assert_eq!(*m.key, *b"foo");
    assert_eq!(m.wire_key(), b"Zm9v");

    let (r, _) = ok(b"mn\r\n");
    assert!(matches!(
        r,
        Request::Meta(MetaRequest {
            cmd: MetaCmd::Noop,
            ..
        })
    ));
    for blank in [
        &b"mg\r\n"[..],
        b"mg \r\n",
        b"ms\r\n",
        b"md\r\n",
        b"ma\r\n",
        b"me\r\n",
    ] {
        assert_eq!(
            err(blank).reply_line(),
            "CLIENT_ERROR bad command line format"
        );
    }
    assert_eq!(
        err(b"mg k v v\r\n").reply_line(),
        "CLIENT_ERROR duplicate flag"
    );
    assert_eq!(err(b"mg k !\r\n").reply_line(), "CLIENT_ERROR invalid flag");
    assert_eq!(
        err(b"mg k Tx\r\n").reply_line(),
        "CLIENT_ERROR bad token in command line format"
    );
    assert_eq!(
        err(b"mg !!! b\r\n").reply_line(),
        "CLIENT_ERROR error decoding key"
    );
    let e = err(b"ms k 2 !\r\nhi\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR invalid flag");
    assert_eq!((e.consumed, e.swallow), (10, 4), "the block is skipped");
    assert_eq!(
        err(b"ms k x\r\n").reply_line(),
        "CLIENT_ERROR bad command line format"
    );
    assert_eq!(
        err(b"ms k 1 MX\r\nx\r\n").reply_line(),
        "CLIENT_ERROR invalid mode for ms M token"
    );
    assert_eq!(
        err(b"ma k MX\r\n").reply_line(),
        "CLIENT_ERROR invalid mode for ma M token"
    );
}

#[test]
fn meta_explicit_cas_leaves_the_top_half_to_the_server() {
    let (r, _) = ok(b"ms k 1 E9223372036854775807\r\nx\r\n");
    let Request::Meta(m) = r else { panic!("meta") };
    assert_eq!(m.flags.explicit_cas, Some(crate::MAX_EXPLICIT_CAS));
    let e = err(b"ms k 1 E9223372036854775808\r\nx\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR E cas over 2^63 - 1");
    assert_eq!(e.swallow, 3, "the block is skipped");
}

/// Found by `cargo fuzz run parse` (see fuzz/README.md): an `ms` data length near u64::MAX was
/// refused as too large with `swallow = len + 2`, which overflowed (and wrapped to 1 without
/// overflow checks, so the "skipped" block was parsed as commands).
#[test]
fn meta_set_length_beyond_32_bits() {
    let e = err(b"ms a 18446744073709551615\nab");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    assert_eq!((e.consumed, e.swallow, e.close), (26, 0, false));
    // The largest length memcached reads (i32::MAX - 2) is still refused as too large and
    // skipped; one more is malformed.
    let e = err(b"ms a 2147483645\r\n");
    assert_eq!(e.kind, ErrorKind::TooLarge);
    assert_eq!((e.consumed, e.swallow), (17, 2_147_483_647));
    let e = err(b"ms a 2147483646\r\n");
    assert_eq!(
        (e.reply_line().as_str(), e.swallow),
        ("CLIENT_ERROR bad command line format", 0)
    );
    let e = err(b"ms a 5000000\r\n");
    assert_eq!(
        e.forget.as_deref(),
        Some(&b"a"[..]),
        "a refused ms removes the old value"
    );
    assert_eq!(err(b"ms a 5000000 MA\r\n").forget, None, "not an append");
}

#[test]
fn encoders() {
    let mut out = Vec::new();
    encode::value(&mut out, b"k", 7, b"v", Some(12));
    encode::MetaLine::value(&mut out, 2)
        .num(b'c', 3)
        .flag(b'k', b"k")
        .end();
    encode::MetaLine::new(&mut out, b"HD")
        .signed(b't', -1)
        .end();
    assert_eq!(out, b"VALUE k 7 1 12\r\nv\r\nVA 2 c3 kk\r\nHD t-1\r\n");
}

proptest! {
    /// No input panics, and whatever is consumed never exceeds the buffer.
    #[test]
    fn parser_never_panics(input in proptest::collection::vec(any::<u8>(), 0..300)) {
        match parse(&input, &Limits::default()) {
            Ok(Some((_, n))) => prop_assert!(n <= input.len() && n > 0),
            Ok(None) => {}
            Err(e) => prop_assert!(e.consumed <= input.len()),
        }
    }

    /// Structured storage requests survive a split at any byte: a prefix is never complete.
    #[test]
    fn prefixes_are_incomplete(key in "[a-z]{1,20}", value in proptest::collection::vec(any::<u8>(), 0..64), cut in 0usize..200) {
        let mut wire = format!("set {key} 3 0 {}\r\n", value.len()).into_bytes();
        wire.extend_from_slice(&value);
        wire.extend_from_slice(b"\r\n");
        let cut = cut.min(wire.len() - 1);
        prop_assert_eq!(parse(&wire[..cut], &Limits::default()), Ok(None));
        let (req, n) = parse(&wire, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, wire.len());
        let is_expected = matches!(req, Request::Store { value: v, .. } if v == value);
        prop_assert!(is_expected);
    }
}

/// memcached's tokenizer splits on spaces only: every other byte but NUL is a key byte, so
/// memaslap's keys (eight 0x10 bytes, then letters), tabs, DEL and UTF-8 are keys.
#[test]
fn keys_hold_any_byte_but_space_and_nul() {
    for key in [
        &b"\x10\x10\x10\x10\x10\x10\x10\x10abcdefgh"[..],
        b"a\tb",
        b"a\rb",
        b"\x01",
        b"a\x7fb",
        b"\xc3\xa9\xff",
    ] {
        let line = [b"get ", key, b"\r\n"].concat();
        assert!(
            matches!(ok(&line).0, Request::Get { ref keys, .. } if keys.iter().eq([key])),
            "get {key:?}"
        );
        let set = [b"set ", key, b" 0 0 1\r\nx\r\n"].concat();
        assert!(
            matches!(ok(&set).0, Request::Store { key: ref k, .. } if **k == *key),
            "set {key:?}"
        );
        let mg = [b"mg ", key, b" v\r\n"].concat();
        assert!(
            matches!(ok(&mg).0, Request::Meta(ref m) if m.key == key),
            "mg {key:?}"
        );
    }
    // Keys no text line can carry (a newline) or that memcached cuts (a NUL) are not keys.
    for bad in [&b"a b"[..], b"a\nb", b"a\0b", b""] {
        assert!(!key_is_valid(bad, &Limits::default()), "{bad:?}");
    }
    // A NUL ends memcached's line; cairn refuses the key and skips the block.
    let e = err(b"set a\0b 0 0 1\r\nx\r\n");
    assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
    assert_eq!(e.swallow, 3);
    assert_eq!(
        err(b"get a\0b\r\n").reply_line(),
        "CLIENT_ERROR bad command line format"
    );
}

/// Numbers on a command line are read as memcached's safe_strto* read them: an optional `+`
/// (or `-` for times and lengths), then digits, leading zeros allowed.
#[test]
fn numbers_take_a_plus_sign_and_leading_zeros() {
    assert!(matches!(
        ok(b"set k +5 +0 +1\r\nx\r\n").0,
        Request::Store { flags: 5, exptime: 0, ref value, .. } if **value == *b"x"
    ));
    assert!(matches!(
        ok(b"incr k +00000000000000000000000007\r\n").0,
        Request::Arith { delta: 7, .. }
    ));
    assert!(matches!(
        ok(b"touch k -000000000000000000000010\r\n").0,
        Request::Touch { exptime: -10, .. }
    ));
    for bad in [
        &b"incr k ++1\r\n"[..],
        b"incr k +\r\n",
        b"touch k -+1\r\n",
        b"incr k 1+\r\n",
    ] {
        assert!(
            err(bad).reply_line().starts_with("CLIENT_ERROR"),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
}

/// ARCUS's `incr|decr <key> <delta> <flags> <exptime> <initial> [noreply]`.
#[test]
fn arcus_incr_and_decr_with_an_initial_value() {
    assert_eq!(
        ok(b"incr k 1 7 -1 5\r\n").0,
        Request::Arith {
            incr: true,
            key: b"k"[..].into(),
            delta: 1,
            create: Some(ArithCreate {
                flags: 7,
                exptime: -1,
                initial: 5
            }),
            noreply: false
        }
    );
    assert!(matches!(
        ok(b"decr k 1 0 0 18446744073709551615 noreply\r\n").0,
        Request::Arith {
            incr: false,
            create: Some(ArithCreate {
                initial: u64::MAX,
                ..
            }),
            noreply: true,
            ..
        }
    ));
    assert!(matches!(
        ok(b"incr k 1 0 0 5 other\r\n").0,
        Request::Arith {
            create: Some(_),
            noreply: false,
            ..
        }
    ));
    for four_or_seven_words in [&b"incr k 1 0 0\r\n"[..], b"incr k 1 0 0 5 noreply x\r\n"] {
        assert_eq!(err(four_or_seven_words).reply_line(), "ERROR");
    }
    for bad in [
        &b"incr k 1 4294967296 0 5\r\n"[..],
        b"incr k 1 0 2147483648 5\r\n",
        b"incr k 1 0 0 -1\r\n",
        b"incr k 1 0 0 18446744073709551616\r\n",
    ] {
        let e = err(bad);
        assert_eq!(e.reply_line(), "CLIENT_ERROR bad command line format");
        assert_eq!(e.consumed, bad.len());
    }
    assert!(err(b"incr k 1 x 0 5 noreply\r\n").silent);
}

/// ARCUS's collection and attribute commands: one request each, with the bytes of its data
/// block to skip after the line.
#[test]
fn arcus_collection_commands_say_what_to_skip() {
    let not_supported = |line: &[u8]| match ok(line) {
        (
            Request::NotSupported {
                skip,
                pipe,
                noreply,
            },
            n,
        ) => {
            assert_eq!(n, line.len(), "only the line is consumed");
            (skip, pipe, noreply)
        }
        (other, _) => panic!("{other:?}"),
    };
    assert_eq!(not_supported(b"lop insert k 0 5\r\n"), (7, false, false));
    assert_eq!(
        not_supported(b"lop insert k 0 5 pipe\r\n"),
        (7, true, false)
    );
    assert_eq!(
        not_supported(b"sop insert k 0 create 0 0 1 noreply\r\n"),
        (2, false, true)
    );
    assert_eq!(not_supported(b"sop exist k 3 pipe\r\n"), (5, true, false));
    assert_eq!(not_supported(b"mop update k f 10\r\n"), (12, false, false));
    assert_eq!(
        not_supported(b"mop delete k 3 2 drop\r\n"),
        (5, false, false)
    );
    assert_eq!(not_supported(b"mop get k 0 0\r\n"), (0, false, false));
    assert_eq!(not_supported(b"bop insert k 1 3\r\n"), (5, false, false));
    assert_eq!(
        not_supported(b"bop insert k 1 0x01 4\r\n"),
        (6, false, false)
    );
    assert_eq!(not_supported(b"bop upsert k 0x01 4\r\n"), (6, false, false));
    assert_eq!(
        not_supported(b"bop update k 1 -1 pipe\r\n"),
        (0, true, false)
    );
    assert_eq!(
        not_supported(b"bop update k 1 0 | 0x01 8\r\n"),
        (10, false, false)
    );
    assert_eq!(
        not_supported(b"bop smget 11 2 0..9 5 unique\r\n"),
        (13, false, false)
    );
    assert_eq!(not_supported(b"bop get k 0..9\r\n"), (0, false, false));
    assert_eq!(
        not_supported(b"setattr k maxcount=10\r\n"),
        (0, false, false)
    );
    assert_eq!(
        not_supported(b"flush_prefix p 0 noreply\r\n"),
        (0, false, true)
    );
    for unreadable in [
        &b"lop insert k 0\r\n"[..],
        b"lop insert k 0 x\r\n",
        b"sop insert k 2147483646\r\n",
        b"bop update k 1\r\n",
        b"bop mget x 2 0..1 1\r\n",
    ] {
        assert_eq!(
            err(unreadable).reply_line(),
            "CLIENT_ERROR bad command line format",
            "{unreadable:?}"
        );
    }
    assert!(err(b"lop insert k 0 x noreply\r\n").silent);
}
