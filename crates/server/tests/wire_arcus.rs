//! Golden wire tests of what ARCUS's clients send beyond memcached's protocol: the
//! create-with-initial form of incr/decr, and the collection and attribute commands cairn
//! answers `NOT_SUPPORTED` (their data blocks skipped, ARCUS's pipelining kept), with the
//! connection still in step after each (arcus-memcached's docs/ascii-protocol, chapters 4-10).

mod common;

use common::{golden, Server};

#[test]
fn incr_and_decr_create_a_missing_key_with_the_initial_value() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            // Missing: created holding <initial> (the delta is not applied), with the flags.
            ("incr c 5 7 0 10\r\n", "10\r\n"),
            ("get c\r\n", "VALUE c 7 2\r\n10\r\nEND\r\n"),
            // Present: the plain incr, keeping the item's own flags.
            ("incr c 5 3 0 99\r\n", "15\r\n"),
            ("decr c 20 3 0 99\r\n", "0\r\n"),
            ("get c\r\n", "VALUE c 7 1\r\n0\r\nEND\r\n"),
            ("decr d 1 0 0 50 noreply\r\n", ""),
            ("get d\r\n", "VALUE d 0 2\r\n50\r\nEND\r\n"),
            ("incr d 1 0 0 50 noreply\r\n", ""),
            ("get d\r\n", "VALUE d 0 2\r\n51\r\nEND\r\n"),
            // The word after <initial> is noreply or ignored, as memcached's third one is.
            ("incr e 1 0 0 5 x\r\n", "5\r\n"),
            // A negative exptime: created already expired, as a set with one.
            ("incr x 1 0 -1 5\r\n", "5\r\n"),
            ("get x\r\n", "END\r\n"),
            (
                "incr m 1 0 100 18446744073709551615\r\n",
                "18446744073709551615\r\n",
            ),
            ("incr m 1 0 100 5\r\n", "0\r\n"),
            ("set s 0 0 3\r\nabc\r\n", "STORED\r\n"),
            (
                "incr s 1 0 0 5\r\n",
                "CLIENT_ERROR cannot increment or decrement non-numeric value\r\n",
            ),
            // arcus-memcached's process_arithmetic_command, check by check.
            (
                "incr g 1 x 0 5\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "incr g 1 0 x 5\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "incr g 1 0 0 -5\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "incr g x 0 0 5\r\n",
                "CLIENT_ERROR invalid numeric delta argument\r\n",
            ),
            ("incr g 1 x 0 5 noreply\r\n", ""),
            ("incr g 1 0 0\r\n", "ERROR\r\n"),
            ("incr g 1 0 0 5 noreply x\r\n", "ERROR\r\n"),
            ("get g\r\n", "END\r\n"),
            ("incr g 1\r\n", "NOT_FOUND\r\n"),
        ],
    );
}

#[test]
fn collection_commands_are_not_supported_and_their_data_blocks_skipped() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    const NS: &str = "NOT_SUPPORTED\r\n";
    golden(
        &mut c,
        &[
            ("lop create k 0 0 10\r\n", NS),
            ("lop insert k 0 5\r\nhello\r\n", NS),
            ("lop insert k -1 5 create 0 0 10\r\nhello\r\n", NS),
            ("lop get k 0..-1\r\n", NS),
            ("lop delete k 0..-1 drop\r\n", NS),
            ("sop create k 0 0 10\r\n", NS),
            ("sop insert k 3 create 0 0 10\r\nabc\r\n", NS),
            ("sop exist k 3\r\nabc\r\n", NS),
            ("sop delete k 3 drop\r\nabc\r\n", NS),
            ("sop get k 10\r\n", NS),
            ("mop create k 0 0 10\r\n", NS),
            ("mop insert k f 3\r\nabc\r\n", NS),
            ("mop upsert k f 3 create 0 0 10\r\nabc\r\n", NS),
            ("mop update k f 3\r\nabc\r\n", NS),
            ("mop delete k 3 2\r\nf g\r\n", NS),
            ("mop delete k 0 0\r\n", NS),
            ("mop get k 3 2 delete\r\nf g\r\n", NS),
            ("mop get k 0 0\r\n", NS),
            ("bop create k 0 0 10\r\n", NS),
            ("bop insert k 1 3\r\nabc\r\n", NS),
            ("bop insert k 1 0x01 3 create 0 0 10\r\nabc\r\n", NS),
            ("bop upsert k 0x0A 3\r\nabc\r\n", NS),
            ("bop insert k 0x0A 0x01 3 getrim\r\nabc\r\n", NS),
            ("bop update k 1 -1\r\n", NS),
            ("bop update k 1 0x02 -1\r\n", NS),
            ("bop update k 1 0x01 3\r\nabc\r\n", NS),
            ("bop update k 1 0 & 0x01 3\r\nabc\r\n", NS),
            ("bop delete k 0..10 5 drop\r\n", NS),
            ("bop get k 0..10 0 10\r\n", NS),
            ("bop count k 0..10\r\n", NS),
            ("bop incr k 1 5 0\r\n", NS),
            ("bop position k 1 asc\r\n", NS),
            ("bop gbp k asc 0..10\r\n", NS),
            ("bop pwg k 1 asc 5\r\n", NS),
            ("bop mget 5 2 0..10 10\r\nk1,k2\r\n", NS),
            ("bop smget 5 2 0..10 10 unique\r\nk1 k2\r\n", NS),
            ("getattr k\r\n", NS),
            ("getattr k count maxcount\r\n", NS),
            ("setattr k expiretime=10\r\n", NS),
            ("flush_prefix a\r\n", NS),
            ("lop\r\n", NS),
            // noreply: no reply, the block still skipped.
            ("lop insert k 0 1 noreply\r\nx\r\n", ""),
            ("bop update k 1 0 & 0x01 3 noreply\r\nabc\r\n", ""),
            // A data block that looks like commands is data.
            ("sop insert k 12\r\nget a\r\nget b\r\n", NS),
            // A length that cannot be read: ARCUS's own answer (the block cannot be found).
            (
                "lop insert k 0 x\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            (
                "sop insert k -1\r\n",
                "CLIENT_ERROR bad command line format\r\n",
            ),
            // ARCUS's pipelining: one RESPONSE at the pipeline's last command.
            (
                "lop insert k -1 1 pipe\r\na\r\nlop insert k -1 1 pipe\r\nb\r\n\
                 lop insert k -1 1\r\nc\r\n",
                "RESPONSE 3\r\nNOT_SUPPORTED\r\nNOT_SUPPORTED\r\nNOT_SUPPORTED\r\nEND\r\n",
            ),
            (
                "sop exist k 1 pipe\r\na\r\nsop exist k 1\r\nb\r\n",
                "RESPONSE 2\r\nNOT_SUPPORTED\r\nNOT_SUPPORTED\r\nEND\r\n",
            ),
            // And the connection is in step for plain commands.
            ("set a 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("get a\r\n", "VALUE a 0 1\r\nx\r\nEND\r\n"),
        ],
    );
}

#[test]
fn a_collection_block_larger_than_the_item_limit_is_skipped_as_it_arrives() {
    // The default -I 1m: a block of 3 MiB is never held, only skipped, sent in pieces.
    let server = Server::start(&[]);
    let mut c = server.connect();
    let len = 3 << 20;
    c.send(format!("sop insert big {len}\r\n").as_bytes());
    let piece = vec![b'g'; 64 << 10];
    let mut sent = 0;
    while sent < len {
        let n = piece.len().min(len - sent);
        c.send(&piece[..n]);
        sent += n;
    }
    c.send(b"\r\n");
    let got = c.exchange(b"get big\r\n");
    assert_eq!(String::from_utf8_lossy(&got), "NOT_SUPPORTED\r\nEND\r\n");
}
