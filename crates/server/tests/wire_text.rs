//! Golden wire tests of the text protocol: exact bytes in, exact bytes out, per command family.

mod common;

use common::{golden, Server};

#[test]
fn storage_commands() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 5 0 3\r\nabc\r\n", "STORED\r\n"),
            ("get a\r\n", "VALUE a 5 3\r\nabc\r\nEND\r\n"),
            ("add a 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("add b 1 0 1\r\nx\r\n", "STORED\r\n"),
            ("replace c 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("replace b 2 0 2\r\nyy\r\n", "STORED\r\n"),
            ("append a 9 0 2\r\nde\r\n", "STORED\r\n"),
            ("prepend a 9 0 2\r\n01\r\n", "STORED\r\n"),
            (
                "get a b c\r\n",
                "VALUE a 5 7\r\n01abcde\r\nVALUE b 2 2\r\nyy\r\nEND\r\n",
            ),
            ("append zz 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
            ("set e 0 0 0\r\n\r\n", "STORED\r\n"),
            ("get e\r\n", "VALUE e 0 0\r\n\r\nEND\r\n"),
            ("set n 0 0 1 noreply\r\n1\r\n", ""),
            ("get n\r\n", "VALUE n 0 1\r\n1\r\nEND\r\n"),
            ("set f 4294967295 0 1\r\nx\r\n", "STORED\r\n"),
            ("get f\r\n", "VALUE f 4294967295 1\r\nx\r\nEND\r\n"),
            ("set g 0 -1 1\r\nx\r\n", "STORED\r\n"),
            ("get g\r\n", "END\r\n"),
        ],
    );
}

#[test]
fn cas_and_gets() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(&mut c, &[("set k 0 0 1\r\nx\r\n", "STORED\r\n")]);
    let got = String::from_utf8(c.exchange(b"gets k\r\n")).unwrap();
    let cas: u64 = got
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(4))
        .and_then(|w| w.parse().ok())
        .unwrap_or_else(|| panic!("no cas in {got:?}"));
    golden(
        &mut c,
        &[
            (&format!("cas k 0 0 1 {}\r\ny\r\n", cas + 1), "EXISTS\r\n"),
            (&format!("cas k 3 0 1 {cas}\r\ny\r\n"), "STORED\r\n"),
            (&format!("cas k 0 0 1 {cas}\r\nz\r\n"), "EXISTS\r\n"),
            ("cas nope 0 0 1 1\r\nz\r\n", "NOT_FOUND\r\n"),
            ("get k\r\n", "VALUE k 3 1\r\ny\r\nEND\r\n"),
        ],
    );
    let got = String::from_utf8(c.exchange(b"gets k\r\n")).unwrap();
    assert!(!got.contains(&format!(" {cas}\r\n")), "cas changed: {got}");
}

#[test]
fn delete_incr_decr_touch() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("delete k\r\n", "NOT_FOUND\r\n"),
            ("set k 0 0 2\r\n10\r\n", "STORED\r\n"),
            ("delete k 0\r\n", "DELETED\r\n"),
            ("get k\r\n", "END\r\n"),
            (
                "delete k 1\r\n",
                "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]\r\n",
            ),
            ("incr k 1\r\n", "NOT_FOUND\r\n"),
            ("set k 7 0 2\r\n10\r\n", "STORED\r\n"),
            ("incr k 5\r\n", "15\r\n"),
            ("decr k 100\r\n", "0\r\n"),
            ("set k 0 0 20\r\n18446744073709551615\r\n", "STORED\r\n"),
            ("incr k 2\r\n", "1\r\n"),
            (
                "incr k x\r\n",
                "CLIENT_ERROR invalid numeric delta argument\r\n",
            ),
            ("set s 0 0 3\r\nabc\r\n", "STORED\r\n"),
            (
                "incr s 1\r\n",
                "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            ("set d 5 0 3\r\n100\r\n", "STORED\r\n"),
            ("decr d 1\r\n", "99\r\n"),
            ("get d\r\n", "VALUE d 5 2\r\n99\r\nEND\r\n"),
            ("incr d 1 noreply\r\n", ""),
            ("touch d 100\r\n", "TOUCHED\r\n"),
            ("touch nope 100\r\n", "NOT_FOUND\r\n"),
            ("touch d -1\r\n", "TOUCHED\r\n"),
            ("get d\r\n", "END\r\n"),
            ("touch d x\r\n", "CLIENT_ERROR invalid exptime argument\r\n"),
        ],
    );
}

#[test]
fn gat_and_gats() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 1 0 1\r\nx\r\n", "STORED\r\n"),
            ("gat 100 k nope\r\n", "VALUE k 1 1\r\nx\r\nEND\r\n"),
            ("gat -1 k\r\n", "VALUE k 1 1\r\nx\r\nEND\r\n"),
            ("get k\r\n", "END\r\n"),
            ("gat 10\r\n", "END\r\n"),
        ],
    );
    golden(&mut c, &[("set k 1 0 1\r\nx\r\n", "STORED\r\n")]);
    let got = String::from_utf8(c.exchange(b"gats 0 k\r\n")).unwrap();
    assert!(
        got.starts_with("VALUE k 1 1 ") && got.ends_with("\r\nx\r\nEND\r\n"),
        "{got}"
    );
}

#[test]
fn errors_keep_the_connection_usable() {
    let server = Server::start(&["-I", "1k", "-m", "8"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("bogus\r\n", "ERROR\r\n"),
            // Shorter than any command: malformed (memcached 1.6.45).
            ("\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("get\r\n", "ERROR\r\n"),
            ("set k 0 0\r\n", "ERROR\r\n"),
            // A malformed storage command whose length could be read skips its data block.
            (
                "set k x 0 1\r\nx\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            // As in memcached: the block is len + 2 bytes; what is left of the line is a command
            // (here an empty line: malformed, as memcached 1.6.45 answers it).
            (
                "set k 0 0 1\r\nxyz\r\n",
                "CLIENT_ERROR bad data chunk\r\nCLIENT_ERROR bad command line format\r\n",
            ),
            (
                &format!("get {}\r\n", "k".repeat(251)),
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                &format!("set {} 0 0 1\r\nx\r\n", "k".repeat(251)),
                "CLIENT_ERROR bad command line format\r\n",
            ),
        ],
    );
    // The refused block is swallowed; the stream is in sync afterwards.
    let big = [
        b"set big 0 0 2000\r\n".to_vec(),
        vec![b'z'; 2000],
        b"\r\n".to_vec(),
    ]
    .concat();
    assert_eq!(
        String::from_utf8_lossy(&c.exchange(&big)),
        "SERVER_ERROR object too large for cache\r\n"
    );
    golden(
        &mut c,
        &[
            ("set k 0 0 1\r\nv\r\n", "STORED\r\n"),
            ("get k\r\n", "VALUE k 0 1\r\nv\r\nEND\r\n"),
        ],
    );
    // A set the store refuses as too large (key + value + header over -I) removes the old
    // value, as memcached does.
    let reply = c.exchange(
        &[
            b"set k 0 0 1023\r\n".to_vec(),
            vec![b'q'; 1023],
            b"\r\nget k\r\n".to_vec(),
        ]
        .concat(),
    );
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
}

/// memcached answers neither a line over its limit nor an HTTP request: it hangs up.
#[test]
fn long_lines_and_http_requests_close_without_a_reply() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    c.send(&vec![b'a'; 5000]);
    assert_eq!(c.read_to_close(), b"");
    let mut c = server.connect();
    c.send(&[&[b'a'; 3000][..], b"\r\nversion\r\n"].concat());
    assert_eq!(c.read_to_close(), b"", "a whole line over the limit too");
    let mut c = server.connect();
    c.send(b"GET / HTTP/1.0\r\n\r\n");
    assert_eq!(c.read_to_close(), b"");
    // The server itself is fine.
    golden(
        &mut server.connect(),
        &[(
            "version\r\n",
            &format!("VERSION {}\r\n", cairn_server::VERSION),
        )],
    );
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut batch = String::new();
    let mut expected = String::new();
    for i in 0..500 {
        batch.push_str(&format!(
            "set k{i} {i} 0 {}\r\nv{i}\r\n",
            format!("v{i}").len()
        ));
        expected.push_str("STORED\r\n");
    }
    for i in (0..500).rev() {
        batch.push_str(&format!("get k{i}\r\n"));
        expected.push_str(&format!(
            "VALUE k{i} {i} {}\r\nv{i}\r\nEND\r\n",
            format!("v{i}").len()
        ));
    }
    assert_eq!(
        String::from_utf8(c.exchange(batch.as_bytes())).unwrap(),
        expected
    );
}

#[test]
fn flush_all_and_misc() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("flush_all\r\n", "OK\r\n"),
            ("get a\r\n", "END\r\n"),
            ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("flush_all 0 noreply\r\n", ""),
            ("get a\r\n", "END\r\n"),
            ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("flush_all 1000\r\n", "OK\r\n"),
            ("get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
            ("flush_all -1\r\n", "OK\r\n"),
            ("verbosity 1\r\n", "OK\r\n"),
            ("verbosity\r\n", "ERROR\r\n"),
            ("stats nonsense\r\n", "ERROR\r\n"),
            ("stats reset\r\n", "RESET\r\n"),
        ],
    );
    c.send(b"quit\r\n");
    assert_eq!(c.read_to_close(), b"");
}

/// memcached's slab tuning gets memcached's answers (strtol-testing.t: `slabs automove
/// invalid`): the mover's settings are accepted, a reassignment has no page to move, and
/// malformed lines get memcached's errors. Breaking it: without the `slabs` command every
/// line here is `ERROR`.
#[test]
fn slabs_lines_are_answered_as_memcached() {
    let server = Server::start(&["--enable-admin", "false"]);
    golden(
        &mut server.connect(),
        &[
            ("slabs automove 1\r\n", "OK\r\n"),
            ("slabs automove 0 noreply\r\n", ""),
            ("slabs automove ratio 0.8\r\n", "OK\r\n"),
            ("slabs automove window 30\r\n", "OK\r\n"),
            (
                "slabs automove invalid\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "slabs automove window 1\r\n",
                "CLIENT_ERROR automove window too low or too high\r\n",
            ),
            ("slabs automove 3\r\n", "ERROR\r\n"),
            (
                "slabs reassign 1 1\r\n",
                "SAME src and dst class are identical\r\n",
            ),
            (
                "slabs reassign 0 2\r\n",
                "BADCLASS invalid src or dst class id\r\n",
            ),
            (
                "slabs reassign 1 64\r\n",
                "BADCLASS invalid src or dst class id\r\n",
            ),
            (
                "slabs reassign -1 2\r\n",
                "NOSPARE source class has no spare pages\r\n",
            ),
            (
                "slabs reassign x 2\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            ("slabs\r\n", "ERROR\r\n"),
        ],
    );
}

/// memcached 1.6.45 (metaget.t's "error from blank command"): a line shorter than the
/// shortest command is malformed, not unknown; the connection goes on.
#[test]
fn a_blank_line_is_a_bad_command_line() {
    let server = Server::start(&[]);
    golden(
        &mut server.connect(),
        &[
            (" \n", "CLIENT_ERROR bad command line format\r\n"),
            ("\r\n", "CLIENT_ERROR bad command line format\r\n"),
            ("  \r\n", "ERROR\r\n"),
            (
                "version\r\n",
                &format!("VERSION {}\r\n", cairn_server::VERSION),
            ),
        ],
    );
}

#[test]
fn stats_use_memcached_names() {
    let server = Server::start(&["-c", "50"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("get a b\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
        ],
    );
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    let get = |name: &str| -> String {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {stats}"))
            .to_string()
    };
    for name in [
        "pid",
        "uptime",
        "time",
        "version",
        "curr_connections",
        "total_connections",
        "rejected_connections",
        "cmd_touch",
        "get_expired",
        "delete_hits",
        "delete_misses",
        "incr_hits",
        "incr_misses",
        "cas_hits",
        "cas_misses",
        "cas_badval",
        "total_items",
        "evictions",
        "expired_unfetched",
        "bytes",
        "limit_maxbytes",
        "threads",
    ] {
        get(name);
    }
    assert_eq!(get("cmd_get"), "2");
    assert_eq!(get("get_hits"), "1");
    assert_eq!(get("get_misses"), "1");
    assert_eq!(get("cmd_set"), "1");
    assert_eq!(get("curr_items"), "1");
    assert_eq!(get("max_connections"), "50");
    assert!(stats.ends_with("END\r\n"));
    for group in ["settings", "items", "slabs"] {
        let s = String::from_utf8(c.exchange(format!("stats {group}\r\n").as_bytes())).unwrap();
        assert!(
            s.starts_with("STAT ") && s.ends_with("END\r\n"),
            "{group}: {s}"
        );
    }
}

#[test]
fn connections_beyond_the_limit_are_refused_politely() {
    let server = Server::start(&["-c", "2"]);
    let mut a = server.connect();
    let mut b = server.connect();
    golden(
        &mut a,
        &[(
            "version\r\n",
            &format!("VERSION {}\r\n", cairn_server::VERSION),
        )],
    );
    golden(
        &mut b,
        &[(
            "version\r\n",
            &format!("VERSION {}\r\n", cairn_server::VERSION),
        )],
    );
    let mut third = server.connect();
    assert_eq!(
        third.read_to_close(),
        b"SERVER_ERROR Too many open connections\r\n"
    );
    let stats = String::from_utf8(a.exchange(b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT rejected_connections 1\r\n"), "{stats}");
}

/// A `set` refused as too large removes the key's old value (memcached unlinks it, so a failed
/// set never leaves stale data behind); other commands leave it.
#[test]
fn an_oversized_set_removes_the_old_value() {
    let server = Server::start(&["-I", "1k", "-m", "8"]);
    let mut c = server.connect();
    let block = |cmd: &str| {
        [
            format!("{cmd} 0 0 2000\r\n").into_bytes(),
            vec![b'z'; 2000],
            b"\r\n".to_vec(),
        ]
        .concat()
    };
    golden(&mut c, &[("set k 0 0 3\r\nold\r\n", "STORED\r\n")]);
    for cmd in ["add k", "replace k", "append k", "prepend k"] {
        let reply = c.exchange(&[block(cmd), b"get k\r\n".to_vec()].concat());
        assert_eq!(
            String::from_utf8_lossy(&reply),
            "SERVER_ERROR object too large for cache\r\nVALUE k 0 3\r\nold\r\nEND\r\n",
            "{cmd}"
        );
    }
    let reply = c.exchange(&[block("set k"), b"get k\r\n".to_vec()].concat());
    assert_eq!(
        String::from_utf8_lossy(&reply),
        "SERVER_ERROR object too large for cache\r\nEND\r\n"
    );
    // Quietly too: noreply hides the error, not the removal.
    golden(&mut c, &[("set k 0 0 3\r\nold\r\n", "STORED\r\n")]);
    let quiet = [
        b"set k 0 0 2000 noreply\r\n".to_vec(),
        vec![b'z'; 2000],
        b"\r\nget k\r\n".to_vec(),
    ]
    .concat();
    assert_eq!(String::from_utf8_lossy(&c.exchange(&quiet)), "END\r\n");
}

/// A get or gets of tens of thousands of keys is answered, key by key, in one reply.
#[test]
fn a_get_of_fifty_thousand_keys_is_answered() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut sets = String::new();
    for i in (0..50_000).step_by(1000) {
        sets.push_str(&format!("set key:{i} {i} 0 1 noreply\r\nv\r\n"));
    }
    c.exchange(sets.as_bytes());
    let keys: Vec<String> = (0..50_000).map(|i| format!("key:{i}")).collect();
    for cmd in ["get", "gets"] {
        let reply = c.exchange(format!("{cmd} {}\r\n", keys.join(" ")).as_bytes());
        let text = String::from_utf8(reply).unwrap();
        let hits: Vec<&str> = text.lines().filter(|l| l.starts_with("VALUE ")).collect();
        assert_eq!(hits.len(), 50, "{cmd}");
        assert!(
            hits[49].starts_with("VALUE key:49000 49000 1"),
            "{cmd}: {}",
            hits[49]
        );
        assert!(text.ends_with("END\r\n"));
    }
}

/// memcached 1.6.4x: a `cas` without its unique is a malformed command whose data block is
/// skipped (1.6.18 answered ERROR and then read the data line as a command).
#[test]
fn a_cas_without_its_unique_skips_its_block() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 0 0 1\r\nx\r\n", "STORED\r\n"),
            (
                "cas k 0 0 1\r\ny\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            ("cas k 0 0 1 noreply\r\ny\r\n", ""),
            (
                "cas k 0 0 3 x\r\nget\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            ("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n"),
        ],
    );
}

/// A pipeline of `noreply` commands, malformed ones among them, stays in step: nothing is
/// answered but the final get.
#[test]
fn malformed_commands_never_desync_a_noreply_stream() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let stream = concat!(
        "set k 0 0 1 noreply\r\n1\r\n",
        "delete k 0 noreply\r\n",
        "set k 0 0 1 noreply\r\n2\r\n",
        "delete k 10 noreply\r\n",
        "delete k x noreply\r\n",
        "set k x 0 1 noreply\r\nX\r\n",
        "set k 0 x 1 noreply\r\nX\r\n",
        "cas k 0 0 1 noreply\r\nX\r\n",
        "cas k 0 0 1 x noreply\r\nX\r\n",
        "incr k noreply\r\n",
        "incr k x noreply\r\n",
        "touch k x noreply\r\n",
        "flush_all x noreply\r\n",
        "verbosity x noreply\r\n",
        "get k\r\n",
    );
    assert_eq!(
        String::from_utf8_lossy(&c.exchange(stream.as_bytes())),
        "VALUE k 0 1\r\n2\r\nEND\r\n"
    );
}

#[test]
fn flush_all_arguments_and_disable_flush_all() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            (
                "flush_all x\r\n",
                "CLIENT_ERROR invalid exptime argument\r\n",
            ),
            ("flush_all 1 2 3\r\n", "ERROR\r\n"),
            ("flush_all noreply\r\n", ""),
            ("flush_all 0\r\n", "OK\r\n"),
        ],
    );
    let server = Server::start(&["-F"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("flush_all\r\n", "CLIENT_ERROR flush_all not allowed\r\n"),
            ("flush_all 0 noreply\r\n", ""),
            ("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n"),
        ],
    );
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    assert!(
        stats.contains("STAT cmd_flush 2\r\n"),
        "counted as memcached counts them"
    );
}

/// memcached reads a data length up to i32::MAX - 2; more is a malformed command with no block
/// to skip, not an item too large.
#[test]
fn a_data_length_past_31_bits_is_malformed() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            (
                "set k 0 0 2147483647\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "set k 0 0 4294967296\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            ("set k 0 0 1\r\nx\r\n", "STORED\r\n"),
        ],
    );
}

/// `verbosity N` changes the log level of the running server: with 1 (debug), connection events
/// are logged; at the start level (info) they were not.
#[test]
fn verbosity_changes_the_log_level() {
    use std::io::BufRead;
    let mut server = common::Server::start_logging(&[]);
    let log = server.child.stderr.take().expect("stderr");
    let mut first = server.connect();
    golden(&mut first, &[("verbosity 1\r\n", "OK\r\n")]);
    let second = server.connect();
    let port = second.stream.local_addr().unwrap().port();
    let line = std::io::BufReader::new(log)
        .lines()
        .map(|l| l.expect("read log"))
        .find(|l| l.contains("connection opened"))
        .expect("a connection logged");
    assert!(
        line.contains(&format!(":{port}")),
        "the first connection logged is the one opened after `verbosity 1`: {line}"
    );
    golden(&mut first, &[("verbosity 0\r\n", "OK\r\n")]);
    let stats = String::from_utf8(first.exchange(b"stats settings\r\n")).unwrap();
    assert!(stats.contains("STAT verbosity 0\r\n"), "{stats}");
}

/// Keys hold any byte but a space and NUL, as in memcached 1.6 (its tokenizer splits on spaces
/// only): memaslap's keys start with eight 0x10 bytes. The replies are memcached 1.6.18's, byte
/// for byte, for the same requests.
#[test]
fn keys_with_control_bytes_work_as_in_memcached() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            (
                "set \x10\x10\x10\x10\x10\x10\x10\x10abcdefgh 0 0 1\r\nx\r\n",
                "STORED\r\n",
            ),
            (
                "get \x10\x10\x10\x10\x10\x10\x10\x10abcdefgh\r\n",
                "VALUE \x10\x10\x10\x10\x10\x10\x10\x10abcdefgh 0 1\r\nx\r\nEND\r\n",
            ),
            ("set a\tb 0 0 1\r\ny\r\n", "STORED\r\n"),
            ("get a\tb a\r\n", "VALUE a\tb 0 1\r\ny\r\nEND\r\n"),
            ("set \x01n 0 0 1\r\n5\r\n", "STORED\r\n"),
            ("incr \x01n 2\r\n", "7\r\n"),
            ("decr \x01n 1\r\n", "6\r\n"),
            ("touch \x01n 0\r\n", "TOUCHED\r\n"),
            ("append \x01n 0 0 1\r\n9\r\n", "STORED\r\n"),
            ("get \x01n\r\n", "VALUE \x01n 0 2\r\n69\r\nEND\r\n"),
            ("delete \x01n\r\n", "DELETED\r\n"),
            ("ms \x7fm 1\r\nx\r\n", "HD\r\n"),
            ("mg \x7fm v k\r\n", "VA 1 k\x7fm\r\nx\r\n"),
            ("md \x7fm\r\n", "HD\r\n"),
            ("mg \x7fm v\r\n", "EN\r\n"),
            // A NUL ends memcached's line (it answers ERROR, then reads the block as a
            // command); cairn refuses the key and skips the block.
            (
                "set a\0b 0 0 1\r\nx\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
        ],
    );
}

/// incr/decr read a value as memcached's `safe_strtoull` does: leading whitespace, a `+`, leading
/// zeros and trailing whitespace are fine. The replies are memcached 1.6.18's for the same
/// requests (cairn does not keep memcached's space padding after a shrinking decr, which
/// protocol.txt leaves open, so values are read back only where the length does not shrink).
#[test]
fn incr_reads_numbers_as_memcached_does() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set n 0 0 2\r\n 9\r\n", "STORED\r\n"),
            ("incr n 1\r\n", "10\r\n"),
            ("get n\r\n", "VALUE n 0 2\r\n10\r\nEND\r\n"),
            ("set n 0 0 2\r\n+5\r\n", "STORED\r\n"),
            ("incr n 1\r\n", "6\r\n"),
            (
                "set n 0 0 27\r\n000000000000000000000000005\r\n",
                "STORED\r\n",
            ),
            ("incr n 1\r\n", "6\r\n"),
            ("set n 0 0 3\r\n5 x\r\n", "STORED\r\n"),
            ("decr n 1\r\n", "4\r\n"),
            ("set n 0 0 2\r\n-0\r\n", "STORED\r\n"),
            ("ma n v\r\n", "VA 1\r\n1\r\n"),
            (
                "set n 0 0 2\r\n-5\r\nincr n 1\r\n",
                "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            (
                "set n 0 0 2\r\n  \r\nincr n 1\r\n",
                "STORED\r\nCLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            // Numbers on the line take a `+`, as memcached's strtoul reads them.
            ("set k +5 +0 +1\r\nx\r\n", "STORED\r\n"),
            ("set n 0 0 1\r\n2\r\n", "STORED\r\n"),
            ("incr n +1\r\n", "3\r\n"),
            ("touch k +10\r\n", "TOUCHED\r\n"),
            ("get k\r\n", "VALUE k 5 1\r\nx\r\nEND\r\n"),
        ],
    );
}
