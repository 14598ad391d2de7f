//! `--enable-debug-commands`, the test aid behind which cairn answers the debug commands of
//! memcached's debug build that memcached's own test suite sends: `debugtime N` moves the
//! server's clock N seconds ahead, so items expire without a test waiting. Off (the default),
//! the command is unknown, as in memcached's release build, and the clock stays the wall's.

mod common;

use common::{golden, Conn, Server};

/// The server's clock as `stats` reports it (`STAT time`).
fn server_time(c: &mut Conn) -> u64 {
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix("STAT time "))
        .expect("STAT time")
        .parse()
        .unwrap()
}

/// Breaking it: answering `debugtime` without moving the clock leaves `k` readable and `time`
/// where it was; answering it without the flag fails the second test.
#[test]
fn debugtime_moves_the_clock_ahead_with_the_flag() {
    let server = Server::start(&["--enable-debug-commands"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 0 2 1\r\nx\r\n", "STORED\r\n"),
            ("set forever 0 0 1\r\ny\r\n", "STORED\r\n"),
        ],
    );
    let before = server_time(&mut c);
    golden(
        &mut c,
        &[
            ("debugtime 1000\r\n", "OK\r\n"),
            // Two seconds to live, a thousand later: gone; no TTL: still there.
            ("get k\r\n", "END\r\n"),
            ("mg k v\r\n", "EN\r\n"),
            ("get forever\r\n", "VALUE forever 0 1\r\ny\r\nEND\r\n"),
            // memcached's pause and resume, and a jump back, are refused.
            (
                "debugtime p\r\n",
                "CLIENT_ERROR debugtime takes the seconds to move the clock ahead (0 or more)\r\n",
            ),
            (
                "debugtime -5\r\n",
                "CLIENT_ERROR debugtime takes the seconds to move the clock ahead (0 or more)\r\n",
            ),
            ("debugtime\r\n", "ERROR\r\n"),
        ],
    );
    assert!(server_time(&mut c) >= before + 1000);
}

#[test]
fn debug_commands_are_unknown_by_default() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set k 0 100 1\r\nx\r\n", "STORED\r\n"),
            ("debugtime 1000\r\n", "ERROR\r\n"),
            ("debugtime p\r\n", "ERROR\r\n"),
            // A hundred seconds to live: the clock did not jump past them.
            ("get k\r\n", "VALUE k 0 1\r\nx\r\nEND\r\n"),
        ],
    );
}
