//! Binary packets in, exact outcomes out; random bytes never panic the parser.

use super::*;
use crate::{Limits, StoreKind};
use proptest::prelude::*;

/// A request packet as a client builds it.
fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let mut out = Vec::new();
    Header {
        magic: REQUEST_MAGIC,
        opcode,
        key_len: key.len() as u16,
        extras_len: extras.len() as u8,
        data_type: 0,
        vbucket_or_status: 0,
        body_len: (extras.len() + key.len() + value.len()) as u32,
        opaque,
        cas,
    }
    .write(&mut out);
    out.extend_from_slice(extras);
    out.extend_from_slice(key);
    out.extend_from_slice(value);
    out
}

fn ok(input: &[u8]) -> (BinRequest<'_>, usize) {
    parse(input, &Limits::default())
        .expect("parses")
        .expect("complete")
}

fn err(input: &[u8]) -> BinError<'_> {
    parse(input, &Limits::default()).expect_err("is an error")
}

#[test]
fn header_round_trip() {
    let p = packet(opcode::GETK, &[], b"k", &[], 0xdead_beef, 42);
    let h = Header::read(p[..HEADER_LEN].try_into().unwrap());
    assert_eq!((h.opcode, h.key_len, h.body_len), (opcode::GETK, 1, 1));
    assert_eq!((h.opaque, h.cas), (0xdead_beef, 42));
    let mut again = Vec::new();
    h.write(&mut again);
    assert_eq!(again, p[..HEADER_LEN]);
}

#[test]
fn each_opcode_parses() {
    let set = packet(opcode::SETQ, &[0, 0, 0, 7, 0, 0, 0, 9], b"k", b"val", 1, 5);
    let (r, n) = ok(&set);
    assert_eq!(n, set.len());
    assert_eq!(r.header.cas, 5);
    assert_eq!(
        r.command,
        Command::Store {
            kind: StoreKind::Set,
            key: b"k",
            flags: 7,
            exptime: 9,
            value: b"val",
            quiet: true
        }
    );
    let app = packet(opcode::PREPEND, &[], b"k", b"<", 0, 0);
    assert!(matches!(
        ok(&app).0.command,
        Command::Store {
            kind: StoreKind::Prepend,
            value: b"<",
            quiet: false,
            ..
        }
    ));
    let mut incr = Vec::new();
    incr.extend_from_slice(&3u64.to_be_bytes());
    incr.extend_from_slice(&10u64.to_be_bytes());
    incr.extend_from_slice(&NO_CREATE.to_be_bytes());
    assert_eq!(
        ok(&packet(opcode::DECREMENTQ, &incr, b"n", &[], 0, 0))
            .0
            .command,
        Command::Arith {
            incr: false,
            key: b"n",
            delta: 3,
            initial: 10,
            exptime: NO_CREATE,
            quiet: true
        }
    );
    assert_eq!(
        ok(&packet(opcode::GETKQ, &[], b"k", &[], 0, 0)).0.command,
        Command::Get {
            key: b"k",
            quiet: true,
            with_key: true
        }
    );
    assert_eq!(
        ok(&packet(
            opcode::GATK,
            &100u32.to_be_bytes(),
            b"k",
            &[],
            0,
            0
        ))
        .0
        .command,
        Command::Gat {
            key: b"k",
            exptime: 100,
            quiet: false,
            with_key: true
        }
    );
    assert_eq!(
        ok(&packet(opcode::TOUCH, &5u32.to_be_bytes(), b"k", &[], 0, 0))
            .0
            .command,
        Command::Touch {
            key: b"k",
            exptime: 5
        }
    );
    assert_eq!(
        ok(&packet(opcode::FLUSHQ, &9u32.to_be_bytes(), &[], &[], 0, 0))
            .0
            .command,
        Command::Flush {
            delay: 9,
            quiet: true
        }
    );
    assert_eq!(
        ok(&packet(opcode::FLUSH, &[], &[], &[], 0, 0)).0.command,
        Command::Flush {
            delay: 0,
            quiet: false
        }
    );
    for (code, command) in [
        (opcode::NOOP, Command::Noop),
        (opcode::VERSION, Command::Version),
        (opcode::QUITQ, Command::Quit { quiet: true }),
        (opcode::SASL_LIST_MECHS, Command::Sasl),
        (0x25, Command::Unknown),
        (0xff, Command::Unknown),
    ] {
        assert_eq!(ok(&packet(code, &[], &[], &[], 0, 0)).0.command, command);
    }
    assert_eq!(
        ok(&packet(opcode::STAT, &[], b"settings", &[], 0, 0))
            .0
            .command,
        Command::Stat { group: b"settings" }
    );
    assert_eq!(
        ok(&packet(
            opcode::VERBOSITY,
            &1u32.to_be_bytes(),
            &[],
            &[],
            0,
            0
        ))
        .0
        .command,
        Command::Verbosity { level: 1 }
    );
}

#[test]
fn pipelined_packets_parse_one_at_a_time_and_prefixes_wait() {
    let mut two = packet(opcode::GETKQ, &[], b"a", &[], 1, 0);
    let first = two.len();
    two.extend(packet(opcode::NOOP, &[], &[], &[], 2, 0));
    assert_eq!(ok(&two).1, first);
    assert_eq!(ok(&two[first..]).0.command, Command::Noop);
    for cut in 0..first {
        assert_eq!(
            parse(&two[..cut], &Limits::default()),
            Ok(None),
            "cut at {cut}"
        );
    }
}

#[test]
fn bad_packets_close_with_memcached_status() {
    // A text line on a binary connection: refused at its first byte.
    let e = err(b"get a\r\n");
    assert!(e.close && e.status == Status::InvalidArguments);
    assert!(err(b"\x00").close);
    // key + extras longer than the body.
    let mut p = packet(opcode::GET, &[], b"key", &[], 0, 0);
    p[11] = 1;
    assert_eq!(
        (err(&p).status, err(&p).close),
        (Status::UnknownCommand, true)
    );
    // A key over 250 bytes.
    let long = packet(opcode::GET, &[], &[b'k'; 251], &[], 0, 0);
    assert_eq!(
        (err(&long).status, err(&long).close),
        (Status::InvalidArguments, true)
    );
    // A known opcode with the wrong lengths (a get with extras, a set without).
    for p in [
        packet(opcode::GET, &[0; 4], b"k", &[], 7, 0),
        packet(opcode::SET, &[], b"k", b"v", 7, 0),
        packet(opcode::NOOP, &[], b"k", &[], 7, 0),
        packet(opcode::INCREMENT, &[0; 8], b"k", &[], 7, 0),
    ] {
        let e = err(&p);
        assert_eq!(
            (e.status, e.close, e.opaque),
            (Status::InvalidArguments, true, 7)
        );
    }
    // A body beyond the item limit + key, on an opcode that is no store: not waited for.
    let mut huge = packet(0x42, &[], &[], &[], 0, 0);
    huge[8..12].copy_from_slice(&(2u32 << 20).to_be_bytes());
    assert!(err(&huge).close);
}

#[test]
fn too_large_values_are_skipped_and_a_set_forgets_its_key() {
    let limits = Limits {
        max_value_len: 4,
        ..Limits::default()
    };
    let p = packet(opcode::SET, &[0; 8], b"k", b"12345", 3, 0);
    let e = parse(&p, &limits).unwrap_err();
    assert_eq!((e.status, e.close), (Status::TooLarge, false));
    assert_eq!((e.consumed, e.swallow), (HEADER_LEN + 9, 5));
    assert_eq!(e.forget, Some(&b"k"[..]));
    // Refused from the header and key alone: the value need not be here yet.
    assert_eq!(parse(&p[..HEADER_LEN + 9], &limits).unwrap_err().swallow, 5);
    let p = packet(opcode::APPENDQ, &[], b"k", b"12345", 3, 0);
    assert_eq!(parse(&p, &limits).unwrap_err().forget, None);
}

#[test]
fn keys_follow_the_text_rule() {
    let p = packet(opcode::SET, &[0; 8], b"a b", b"v", 0, 0);
    let e = err(&p);
    assert_eq!((e.status, e.close), (Status::InvalidArguments, false));
    assert_eq!(e.consumed, HEADER_LEN + 8 + 3 + 1);
}

#[test]
fn responses_encode() {
    let mut out = Vec::new();
    let reply = Reply {
        opcode: opcode::GETK,
        status: Status::Success,
        opaque: 9,
        cas: 77,
    };
    response::value(&mut out, &reply, 0x0102_0304, b"k", b"v");
    assert_eq!(
        out,
        [
            &[0x81, 0x0c, 0, 1, 4, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 9][..],
            &77u64.to_be_bytes(),
            &[1, 2, 3, 4, b'k', b'v'],
        ]
        .concat()
    );
    out.clear();
    response::error(
        &mut out,
        opcode::GET,
        1,
        Status::KeyNotFound,
        Status::KeyNotFound.text(),
    );
    assert_eq!(&out[6..8], &[0, 1]);
    assert_eq!(&out[HEADER_LEN..], b"Not found");
}

proptest! {
    /// Random bytes after the magic (or any bytes at all): the parser never panics, never
    /// claims more bytes than it has, and an error that does not close steps forward.
    #[test]
    fn parser_never_panics(magic in any::<bool>(), input in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut input = input;
        if magic && !input.is_empty() {
            input[0] = REQUEST_MAGIC;
            // Small lengths, so that whole packets come up often.
            if input.len() > 12 {
                input[2] = 0;
                input[8] = 0;
                input[9] = 0;
                input[10] = 0;
            }
        }
        let limits = Limits::default();
        match parse(&input, &limits) {
            Ok(Some((r, n))) => {
                prop_assert!(n >= HEADER_LEN && n <= input.len());
                prop_assert_eq!(n, r.header.packet_len());
            }
            Ok(None) => prop_assert!(input.len() < HEADER_LEN || input[0] == REQUEST_MAGIC),
            Err(e) => prop_assert!(e.close || (e.consumed > 0 && e.consumed <= input.len())),
        }
    }
}
