//! memcached's binary protocol against the real server: hand-built packets in, every field
//! of every response checked (status, opaque, CAS, extras, key, value). A connection whose
//! first byte is 0x80 speaks binary; the text protocol is unchanged beside it.
//!
//! Breaking it: answering a quiet command's success, forgetting the key in a GetK miss,
//! dropping the header CAS compare, or letting a bad packet through without closing, each
//! fails one of these tests.

mod common;

use std::io::{Read, Write};

use cairn_testkit::Rng;
use common::{Conn, Server};

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCR: u8 = 0x05;
const DECR: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const DELETEQ: u8 = 0x14;
const INCRQ: u8 = 0x15;
const QUITQ: u8 = 0x17;
const VERBOSITY: u8 = 0x1b;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST: u8 = 0x20;
const GATK: u8 = 0x23;

const SUCCESS: u16 = 0x0000;
const NOT_FOUND: u16 = 0x0001;
const EXISTS: u16 = 0x0002;
const TOO_LARGE: u16 = 0x0003;
const INVALID: u16 = 0x0004;
const NOT_STORED: u16 = 0x0005;
const NON_NUMERIC: u16 = 0x0006;
const UNKNOWN: u16 = 0x0081;

/// A request packet, byte by byte as memcached's protocol_binary.h lays it out.
fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
    let body = (extras.len() + key.len() + value.len()) as u32;
    let mut p = vec![0x80, opcode];
    p.extend_from_slice(&(key.len() as u16).to_be_bytes());
    p.push(extras.len() as u8);
    p.extend_from_slice(&[0, 0, 0]); // data type, vbucket
    p.extend_from_slice(&body.to_be_bytes());
    p.extend_from_slice(&opaque.to_be_bytes());
    p.extend_from_slice(&cas.to_be_bytes());
    p.extend_from_slice(extras);
    p.extend_from_slice(key);
    p.extend_from_slice(value);
    p
}

fn set_extras(flags: u32, exptime: u32) -> Vec<u8> {
    [flags.to_be_bytes(), exptime.to_be_bytes()].concat()
}

fn arith_extras(delta: u64, initial: u64, exptime: u32) -> Vec<u8> {
    [
        &delta.to_be_bytes()[..],
        &initial.to_be_bytes(),
        &exptime.to_be_bytes(),
    ]
    .concat()
}

/// One response, fields split.
#[derive(Debug, Default)]
struct Resp {
    opcode: u8,
    status: u16,
    opaque: u32,
    cas: u64,
    extras: Vec<u8>,
    key: Vec<u8>,
    value: Vec<u8>,
}

fn read_resp(c: &mut Conn) -> Resp {
    let mut h = [0u8; 24];
    c.stream.read_exact(&mut h).expect("a response header");
    assert_eq!(h[0], 0x81, "response magic");
    let key_len = u16::from_be_bytes([h[2], h[3]]) as usize;
    let ext = h[4] as usize;
    let body = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let mut b = vec![0u8; body];
    c.stream.read_exact(&mut b).expect("a response body");
    Resp {
        opcode: h[1],
        status: u16::from_be_bytes([h[6], h[7]]),
        opaque: u32::from_be_bytes([h[12], h[13], h[14], h[15]]),
        cas: u64::from_be_bytes(h[16..24].try_into().unwrap()),
        extras: b[..ext].to_vec(),
        key: b[ext..ext + key_len].to_vec(),
        value: b[ext + key_len..].to_vec(),
    }
}

fn call(c: &mut Conn, p: &[u8]) -> Resp {
    c.send(p);
    read_resp(c)
}

fn expect(r: &Resp, opcode: u8, status: u16, opaque: u32) {
    assert_eq!(
        (r.opcode, r.status, r.opaque),
        (opcode, status, opaque),
        "response {r:?}"
    );
}

/// A set that must succeed; returns its CAS.
fn set(c: &mut Conn, key: &[u8], value: &[u8], flags: u32) -> u64 {
    let r = call(c, &packet(SET, &set_extras(flags, 0), key, value, 1, 0));
    expect(&r, SET, SUCCESS, 1);
    assert!(r.cas != 0 && r.value.is_empty());
    r.cas
}

#[test]
fn each_opcode() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let cas = set(&mut c, b"k", b"hello", 0xdead_beef);

    let r = call(&mut c, &packet(GET, &[], b"k", &[], 7, 0));
    expect(&r, GET, SUCCESS, 7);
    assert_eq!(
        (r.extras, r.key, r.value, r.cas),
        (
            0xdead_beef_u32.to_be_bytes().to_vec(),
            vec![],
            b"hello".to_vec(),
            cas
        )
    );
    let r = call(&mut c, &packet(GETK, &[], b"k", &[], 8, 0));
    assert_eq!((r.key, r.value), (b"k".to_vec(), b"hello".to_vec()));
    let r = call(&mut c, &packet(GET, &[], b"nope", &[], 9, 0));
    expect(&r, GET, NOT_FOUND, 9);
    assert_eq!(r.value, b"Not found");
    // A GetK miss carries the key and no text (memcached's write_bin_miss_response).
    let r = call(&mut c, &packet(GETK, &[], b"nope", &[], 9, 0));
    expect(&r, GETK, NOT_FOUND, 9);
    assert_eq!((r.key, r.value), (b"nope".to_vec(), vec![]));

    expect(
        &call(&mut c, &packet(ADD, &set_extras(0, 0), b"k", b"x", 2, 0)),
        ADD,
        EXISTS,
        2,
    );
    expect(
        &call(&mut c, &packet(ADD, &set_extras(0, 0), b"a", b"x", 2, 0)),
        ADD,
        SUCCESS,
        2,
    );
    expect(
        &call(
            &mut c,
            &packet(REPLACE, &set_extras(0, 0), b"none", b"x", 3, 0),
        ),
        REPLACE,
        NOT_FOUND,
        3,
    );
    expect(
        &call(
            &mut c,
            &packet(REPLACE, &set_extras(0, 0), b"a", b"y", 3, 0),
        ),
        REPLACE,
        SUCCESS,
        3,
    );
    expect(
        &call(&mut c, &packet(APPEND, &[], b"k", b">", 4, 0)),
        APPEND,
        SUCCESS,
        4,
    );
    expect(
        &call(&mut c, &packet(PREPEND, &[], b"k", b"<", 4, 0)),
        PREPEND,
        SUCCESS,
        4,
    );
    expect(
        &call(&mut c, &packet(APPEND, &[], b"none", b">", 4, 0)),
        APPEND,
        NOT_STORED,
        4,
    );
    let r = call(&mut c, &packet(GET, &[], b"k", &[], 5, 0));
    assert_eq!(r.value, b"<hello>");
    assert_eq!(
        r.extras,
        0xdead_beef_u32.to_be_bytes(),
        "append keeps the flags"
    );

    // Incr/decr: 8-byte result; 0xffffffff = do not create; otherwise create from `initial`.
    let r = call(
        &mut c,
        &packet(INCR, &arith_extras(1, 0, 0xffff_ffff), b"n", &[], 6, 0),
    );
    expect(&r, INCR, NOT_FOUND, 6);
    let r = call(
        &mut c,
        &packet(INCR, &arith_extras(5, 40, 0), b"n", &[], 6, 0),
    );
    expect(&r, INCR, SUCCESS, 6);
    assert_eq!(r.value, 40u64.to_be_bytes(), "created holding `initial`");
    let r = call(
        &mut c,
        &packet(INCR, &arith_extras(5, 40, 0), b"n", &[], 6, 0),
    );
    assert_eq!(r.value, 45u64.to_be_bytes());
    let r = call(
        &mut c,
        &packet(DECR, &arith_extras(50, 0, 0), b"n", &[], 6, 0),
    );
    expect(&r, DECR, SUCCESS, 6);
    assert_eq!(r.value, 0u64.to_be_bytes(), "decr stops at 0");
    assert_ne!(r.cas, 0);
    let r = call(
        &mut c,
        &packet(INCR, &arith_extras(1, 0, 0), b"k", &[], 6, 0),
    );
    expect(&r, INCR, NON_NUMERIC, 6);
    assert_eq!(r.value, b"Non-numeric server-side value for incr or decr");
    let r = call(&mut c, &packet(GET, &[], b"n", &[], 6, 0));
    assert_eq!((r.value, r.extras), (b"0".to_vec(), vec![0; 4]));

    // Touch answers the flags, GAT the value too, GATK the key as well.
    let r = call(
        &mut c,
        &packet(TOUCH, &100u32.to_be_bytes(), b"k", &[], 10, 0),
    );
    expect(&r, TOUCH, SUCCESS, 10);
    assert_eq!(
        (r.extras, r.value),
        (0xdead_beef_u32.to_be_bytes().to_vec(), vec![])
    );
    expect(
        &call(
            &mut c,
            &packet(TOUCH, &100u32.to_be_bytes(), b"none", &[], 10, 0),
        ),
        TOUCH,
        NOT_FOUND,
        10,
    );
    let r = call(
        &mut c,
        &packet(GAT, &100u32.to_be_bytes(), b"k", &[], 11, 0),
    );
    expect(&r, GAT, SUCCESS, 11);
    assert_eq!(r.value, b"<hello>");
    let r = call(
        &mut c,
        &packet(GATK, &100u32.to_be_bytes(), b"k", &[], 11, 0),
    );
    assert_eq!((r.key, r.value), (b"k".to_vec(), b"<hello>".to_vec()));
    expect(
        &call(
            &mut c,
            &packet(GAT, &100u32.to_be_bytes(), b"none", &[], 11, 0),
        ),
        GAT,
        NOT_FOUND,
        11,
    );

    expect(
        &call(&mut c, &packet(DELETE, &[], b"a", &[], 12, 0)),
        DELETE,
        SUCCESS,
        12,
    );
    expect(
        &call(&mut c, &packet(DELETE, &[], b"a", &[], 12, 0)),
        DELETE,
        NOT_FOUND,
        12,
    );

    let r = call(&mut c, &packet(VERSION, &[], &[], &[], 13, 0));
    expect(&r, VERSION, SUCCESS, 13);
    assert!(r.value.starts_with(b"1.6."), "{:?}", r.value);
    expect(
        &call(&mut c, &packet(NOOP, &[], &[], &[], 14, 0)),
        NOOP,
        SUCCESS,
        14,
    );
    expect(
        &call(
            &mut c,
            &packet(VERBOSITY, &1u32.to_be_bytes(), &[], &[], 15, 0),
        ),
        VERBOSITY,
        SUCCESS,
        15,
    );
    // No SASL without -Y: unknown command, as memcached without SASL.
    expect(
        &call(&mut c, &packet(SASL_LIST, &[], &[], &[], 16, 0)),
        SASL_LIST,
        UNKNOWN,
        16,
    );

    // Stat: one packet a figure, the name as key, then an empty one.
    c.send(&packet(STAT, &[], &[], &[], 17, 0));
    let mut names = Vec::new();
    loop {
        let r = read_resp(&mut c);
        expect(&r, STAT, SUCCESS, 17);
        if r.key.is_empty() {
            assert!(r.value.is_empty());
            break;
        }
        names.push(String::from_utf8(r.key).unwrap());
    }
    assert!(names.iter().any(|n| n == "curr_items"), "{names:?}");
    expect(
        &call(&mut c, &packet(STAT, &[], b"nosuchgroup", &[], 18, 0)),
        STAT,
        NOT_FOUND,
        18,
    );

    // Flush: everything goes.
    expect(
        &call(&mut c, &packet(FLUSH, &[], &[], &[], 19, 0)),
        FLUSH,
        SUCCESS,
        19,
    );
    expect(
        &call(&mut c, &packet(GET, &[], b"k", &[], 20, 0)),
        GET,
        NOT_FOUND,
        20,
    );

    // Quit: answered, then closed.
    let r = call(&mut c, &packet(QUIT, &[], &[], &[], 21, 0));
    expect(&r, QUIT, SUCCESS, 21);
    assert!(c.read_to_close().is_empty());
}

/// Verbosity is open to every client on both protocols (it changes only the log), as in
/// memcached; only the admin lines stay guarded.
#[test]
fn verbosity_needs_no_admin() {
    let server = Server::start(&["--enable-admin", "false"]);
    let mut c = server.connect();
    let r = call(
        &mut c,
        &packet(VERBOSITY, &1u32.to_be_bytes(), &[], &[], 3, 0),
    );
    expect(&r, VERBOSITY, SUCCESS, 3);
}

/// Under `-F` a binary Flush is refused with memcached's answer, 0x0020 (an auth error), and
/// the item stays.
#[test]
fn flush_under_dash_f_is_refused() {
    let server = Server::start(&["-F"]);
    let mut c = server.connect();
    set(&mut c, b"k", b"v", 0);
    let r = call(&mut c, &packet(FLUSH, &[], &[], &[], 4, 0));
    expect(&r, FLUSH, 0x0020, 4);
    let r = call(&mut c, &packet(GETK, &[], b"k", &[], 5, 0));
    expect(&r, GETK, SUCCESS, 5);
}

#[test]
fn cas_in_the_header() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let cas = set(&mut c, b"k", b"v1", 0);
    let stale = cas + 1000;
    let r = call(
        &mut c,
        &packet(SET, &set_extras(0, 0), b"k", b"v2", 1, stale),
    );
    expect(&r, SET, EXISTS, 1);
    let r = call(&mut c, &packet(SET, &set_extras(0, 0), b"k", b"v2", 1, cas));
    expect(&r, SET, SUCCESS, 1);
    let new_cas = r.cas;
    assert_ne!(new_cas, cas);
    // A CAS on a missing key: not found. On append: must match.
    expect(
        &call(&mut c, &packet(SET, &set_extras(0, 0), b"none", b"x", 2, 5)),
        SET,
        NOT_FOUND,
        2,
    );
    expect(
        &call(&mut c, &packet(APPEND, &[], b"k", b"!", 3, stale)),
        APPEND,
        EXISTS,
        3,
    );
    expect(
        &call(&mut c, &packet(APPEND, &[], b"k", b"!", 3, new_cas)),
        APPEND,
        SUCCESS,
        3,
    );
    let r = call(&mut c, &packet(GET, &[], b"k", &[], 4, 0));
    assert_eq!(r.value, b"v2!");
    // Delete and incr with a stale CAS keep the item.
    expect(
        &call(&mut c, &packet(DELETE, &[], b"k", &[], 5, stale)),
        DELETE,
        EXISTS,
        5,
    );
    expect(
        &call(&mut c, &packet(DELETE, &[], b"k", &[], 5, r.cas)),
        DELETE,
        SUCCESS,
        5,
    );
    let n = set(&mut c, b"n", b"1", 0);
    expect(
        &call(
            &mut c,
            &packet(INCR, &arith_extras(1, 0, 0), b"n", &[], 6, n + 7),
        ),
        INCR,
        EXISTS,
        6,
    );
    expect(
        &call(
            &mut c,
            &packet(INCR, &arith_extras(1, 0, 0), b"n", &[], 6, n),
        ),
        INCR,
        SUCCESS,
        6,
    );
}

#[test]
fn quiet_variants_answer_only_errors_and_getkq_noop_pipelines() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    // One write: quiet successes say nothing; a quiet error still answers; a quiet get
    // answers hits only; the noop ends the batch.
    let mut batch = Vec::new();
    batch.extend(packet(SETQ, &set_extras(1, 0), b"a", b"A", 1, 0));
    batch.extend(packet(SETQ, &set_extras(2, 0), b"b", b"B", 2, 0));
    batch.extend(packet(ADDQ, &set_extras(0, 0), b"a", b"x", 3, 0)); // exists: answered
    batch.extend(packet(DELETEQ, &[], b"b", &[], 4, 0));
    batch.extend(packet(DELETEQ, &[], b"b", &[], 5, 0)); // not found: answered
    batch.extend(packet(INCRQ, &arith_extras(1, 7, 0), b"n", &[], 6, 0));
    batch.extend(packet(GETQ, &[], b"missing", &[], 7, 0));
    batch.extend(packet(GATQ, &100u32.to_be_bytes(), b"missing", &[], 8, 0));
    for (i, key) in [&b"a"[..], b"b", b"n", b"zz"].iter().enumerate() {
        batch.extend(packet(GETKQ, &[], key, &[], 100 + i as u32, 0));
    }
    batch.extend(packet(NOOP, &[], &[], &[], 999, 0));
    c.send(&batch);
    let r = read_resp(&mut c);
    expect(&r, ADDQ, EXISTS, 3);
    let r = read_resp(&mut c);
    expect(&r, DELETEQ, NOT_FOUND, 5);
    let r = read_resp(&mut c);
    expect(&r, GETKQ, SUCCESS, 100);
    assert_eq!(
        (r.key, r.value, r.extras),
        (b"a".to_vec(), b"A".to_vec(), 1u32.to_be_bytes().to_vec())
    );
    let r = read_resp(&mut c);
    expect(&r, GETKQ, SUCCESS, 102);
    assert_eq!((r.key, r.value), (b"n".to_vec(), b"7".to_vec()));
    let r = read_resp(&mut c);
    expect(&r, NOOP, SUCCESS, 999);
    // QuitQ closes without a word.
    c.send(&packet(QUITQ, &[], &[], &[], 1, 0));
    assert!(c.read_to_close().is_empty());
}

#[test]
fn errors_keep_the_stream_in_step_or_close_it() {
    let server = Server::start(&["-I", "1k"]);
    let mut c = server.connect();
    set(&mut c, b"k", b"old", 0);
    // An unknown opcode, with a body: answered, its body stepped over.
    let r = call(&mut c, &packet(0x50, &[], b"key", b"body", 1, 0));
    expect(&r, 0x50, UNKNOWN, 1);
    assert_eq!(r.value, b"Unknown command");
    // Over the item limit: 0x0003, the value skipped, the old value gone (as memcached).
    let r = call(
        &mut c,
        &packet(SET, &set_extras(0, 0), b"k", &[b'x'; 2048], 2, 0),
    );
    expect(&r, SET, TOO_LARGE, 2);
    assert_eq!(r.value, b"Too large.");
    expect(
        &call(&mut c, &packet(GET, &[], b"k", &[], 3, 0)),
        GET,
        NOT_FOUND,
        3,
    );
    // A key with a space breaks cairn's key rule: refused, the connection goes on.
    expect(
        &call(&mut c, &packet(SET, &set_extras(0, 0), b"a b", b"v", 4, 0)),
        SET,
        INVALID,
        4,
    );
    expect(
        &call(&mut c, &packet(NOOP, &[], &[], &[], 5, 0)),
        NOOP,
        SUCCESS,
        5,
    );

    // Closing errors: each answered, then the connection closes.
    let mut long_key = packet(GET, &[], &[b'k'; 251], &[], 6, 0);
    let mut bad_shape = packet(GET, &[0; 4], b"k", &[], 7, 0);
    let mut key_over_body = packet(GET, &[], b"key", &[], 8, 0);
    key_over_body[11] = 1;
    let mut huge_body = packet(0x50, &[], &[], &[], 9, 0);
    huge_body[8..12].copy_from_slice(&(64u32 << 20).to_be_bytes());
    for (p, status) in [
        (&mut long_key, INVALID),
        (&mut bad_shape, INVALID),
        (&mut key_over_body, UNKNOWN),
        (&mut huge_body, INVALID),
    ] {
        let mut c = server.connect();
        let r = call(&mut c, p);
        assert_eq!(r.status, status, "{r:?}");
        assert!(c.read_to_close().is_empty(), "closed after the error");
    }
    // Wrong magic mid-stream: a text line on a binary connection.
    let mut c = server.connect();
    expect(
        &call(&mut c, &packet(NOOP, &[], &[], &[], 1, 0)),
        NOOP,
        SUCCESS,
        1,
    );
    let r = call(&mut c, b"get k\r\n");
    assert_eq!(r.status, INVALID);
    assert!(String::from_utf8_lossy(&r.value).contains("magic"), "{r:?}");
    assert!(c.read_to_close().is_empty());
    // The text protocol still works beside it.
    let mut t = server.connect();
    t.send(b"set t 0 0 1\r\nx\r\n");
    assert_eq!(t.read_until(b"\r\n"), b"STORED\r\n");
}

#[test]
fn writes_are_durable_before_the_reply() {
    // Sync persistence (the harness's default): a set answered over binary survives kill -9.
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    set(&mut c, b"durable", b"yes", 3);
    server.kill9();
    let server = Server::start_in(dir.path(), &[]);
    let mut c = server.connect();
    let r = call(&mut c, &packet(GET, &[], b"durable", &[], 1, 0));
    expect(&r, GET, SUCCESS, 1);
    assert_eq!(r.value, b"yes");
}

#[test]
fn random_bytes_never_break_the_server() {
    let server = Server::start(&[]);
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    for round in 0..200 {
        let mut c = server.connect();
        let len = rng.below(200) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        // Mostly well-started packets with small lengths, so that the parser goes deep.
        if !bytes.is_empty() && rng.below(4) != 0 {
            bytes[0] = 0x80;
            if bytes.len() >= 12 {
                bytes[1] = rng.below(0x30) as u8;
                bytes[2] = 0;
                bytes[8..11].fill(0);
            }
        }
        c.send(&bytes);
        // Then a noop and the end of input: whatever the garbage did (answered, closed, or
        // left a packet waiting for its body), the server reads to the end and closes.
        let _ = c.stream.write_all(&packet(NOOP, &[], &[], &[], 1, 0));
        let _ = c.stream.shutdown(std::net::Shutdown::Write);
        let _ = c.read_to_close();
        if round % 50 == 49 {
            let mut fresh = server.connect();
            let r = call(&mut fresh, &packet(NOOP, &[], &[], &[], 7, 0));
            expect(&r, NOOP, SUCCESS, 7);
        }
    }
    let mut fresh = server.connect();
    expect(
        &call(&mut fresh, &packet(VERSION, &[], &[], &[], 8, 0)),
        VERSION,
        SUCCESS,
        8,
    );
}
