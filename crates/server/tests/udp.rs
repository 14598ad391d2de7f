//! memcached's UDP protocol (`-U`) over a real UDP socket: the 8-byte frame header echoed,
//! replies cut into numbered datagrams of at most 1400 bytes, writes made through the same
//! path as TCP's (durable before the reply: they survive a kill -9), and every bad datagram
//! (too short, multi-datagram, too large, cut off, random bytes) dropped and counted
//! in `stats` and on the metrics endpoint while the server goes on answering.
//!
//! Breaking it: numbering every datagram 0 fails the large-value test; sending the replies
//! before the datagram's writes are acknowledged loses the last one at the kill -9; dropping
//! a bad datagram without its count fails the counter checks; a panic on a short datagram
//! fails the bad-datagram and random tests.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use cairn_testkit::Rng;
use common::{Conn, Server};

/// A port no one listens on now (the server is given it; the race is harmless in tests).
fn free_port(udp: bool) -> u16 {
    if udp {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    }
}

/// A server with UDP on, one worker thread (so one UDP loop: datagrams are answered in the
/// order they were sent), and a metrics endpoint.
fn start(env: &[(&str, &str)]) -> (Server, SocketAddr) {
    let udp = free_port(true).to_string();
    let metrics = format!("127.0.0.1:{}", free_port(false));
    let server = Server::start_with_env(env, &["-U", &udp, "-t", "1", "--metrics-addr", &metrics]);
    let udp_addr = server.udp_addr.expect("the udp listening line");
    assert_eq!(udp_addr.port().to_string(), udp);
    (server, metrics.parse().unwrap())
}

/// A client socket sending to the server's UDP port.
fn client(server: &Server) -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.connect(server.udp_addr.unwrap()).unwrap();
    // A safety net against a lost reply, not a wait for anything.
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn frame(request_id: u16, sequence: u16, total: u16, payload: &[u8]) -> Vec<u8> {
    let mut d = Vec::new();
    for field in [request_id, sequence, total, 0] {
        d.extend_from_slice(&field.to_be_bytes());
    }
    d.extend_from_slice(payload);
    d
}

/// Sends `payload` as request `id` and returns its reply message's datagrams, in sequence
/// order (checking that each echoes `id`, has reserved 0, the same total, and at most 1400
/// bytes).
fn request(s: &UdpSocket, id: u16, payload: &[u8]) -> Vec<Vec<u8>> {
    s.send(&frame(id, 0, 1, payload)).unwrap();
    receive(s, id)
}

/// The next reply message of request `id`, datagram by datagram.
fn receive(s: &UdpSocket, id: u16) -> Vec<Vec<u8>> {
    let mut got: BTreeMap<u16, Vec<u8>> = BTreeMap::new();
    let mut total = None;
    let mut buf = [0u8; 2048];
    while total.is_none_or(|t| got.len() < usize::from(t)) {
        let n = s.recv(&mut buf).expect("a reply datagram");
        assert!(n <= 1400, "a datagram of {n} bytes");
        let field = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
        assert_eq!((field(0), field(6)), (id, 0), "request id and reserved");
        assert!(total.is_none_or(|t| t == field(4)), "the total changed");
        total = Some(field(4));
        assert!(field(2) < field(4), "sequence {} of {}", field(2), field(4));
        assert!(
            got.insert(field(2), buf[..n].to_vec()).is_none(),
            "seq twice"
        );
    }
    got.into_values().collect()
}

/// The reply message put back together.
fn joined(datagrams: &[Vec<u8>]) -> String {
    let bytes: Vec<u8> = datagrams.iter().flat_map(|d| d[8..].to_vec()).collect();
    String::from_utf8(bytes).unwrap()
}

fn ask(s: &UdpSocket, id: u16, payload: &str) -> String {
    joined(&request(s, id, payload.as_bytes()))
}

fn stats(c: &mut Conn) -> BTreeMap<String, u64> {
    c.send(b"stats\r\n");
    let text = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("STAT "))
        .filter_map(|l| l.split_once(' '))
        .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
        .collect()
}

fn scrape(addr: SocketAddr) -> String {
    let mut http = TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nhost: cairn\r\nconnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    body
}

fn metric(body: &str, name: &str) -> u64 {
    body.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in the scrape"))
        .parse()
        .unwrap()
}

/// Text commands over UDP get memcached's replies, in the store TCP sees, and a write
/// answered over UDP is durable (it survives a kill -9).
#[test]
fn commands_are_answered_over_udp_as_over_tcp() {
    let tmp = tempfile::tempdir().unwrap();
    let udp = free_port(true).to_string();
    let server = Server::start_in(tmp.path(), &["-U", &udp, "-t", "1"]);
    let u = client(&server);
    let mut tcp = server.connect();
    assert_eq!(ask(&u, 161, "set foo 0 0 6\r\nfooval\r\n"), "STORED\r\n");
    // The request id comes back as sent, whatever it is.
    for id in [161, 161, 162, 0, u16::MAX] {
        let reply = request(&u, id, b"get foo\r\n");
        assert_eq!(reply.len(), 1);
        assert_eq!(&reply[0][..2], &id.to_be_bytes());
        assert_eq!(joined(&reply), "VALUE foo 0 6\r\nfooval\r\nEND\r\n");
    }
    assert_eq!(
        tcp.exchange(b"get foo\r\n"),
        b"VALUE foo 0 6\r\nfooval\r\nEND\r\n"
    );
    tcp.send(b"set n 0 0 1\r\n1\r\n");
    assert_eq!(tcp.read_until(b"\r\n"), b"STORED\r\n");
    assert_eq!(ask(&u, 45, "incr n 1\r\n"), "2\r\n");
    assert_eq!(ask(&u, 45, "decr n 2\r\n"), "0\r\n");
    assert_eq!(ask(&u, 45, "delete n\r\n"), "DELETED\r\n");
    assert_eq!(ask(&u, 45, "get n\r\n"), "END\r\n");
    assert_eq!(ask(&u, 46, "bogus\r\n"), "ERROR\r\n");
    assert_eq!(ask(&u, 46, "mg foo v\r\n"), "VA 6\r\nfooval\r\n");
    // Each command's answer is a message of its own, numbered from 0 (as memcached's);
    // `noreply` sends none.
    u.send(&frame(
        7,
        0,
        1,
        b"set k 0 0 1 noreply\r\nv\r\nget k\r\nversion\r\n",
    ))
    .unwrap();
    assert_eq!(joined(&receive(&u, 7)), "VALUE k 0 1\r\nv\r\nEND\r\n");
    assert!(joined(&receive(&u, 7)).starts_with("VERSION "));
    // The writes answered over UDP were acknowledged (sync mode: on disk) first.
    server.kill9();
    let again = Server::start_in(tmp.path(), &[]);
    let mut tcp = again.connect();
    assert_eq!(
        tcp.exchange(b"get foo k\r\n"),
        b"VALUE foo 0 6\r\nfooval\r\nVALUE k 0 1\r\nv\r\nEND\r\n"
    );
}

/// A 20000-byte value comes back as 15 datagrams (1392 bytes of reply each, the last
/// shorter), all numbered under one total; a multi-key get is one message.
#[test]
fn a_large_value_comes_back_in_numbered_datagrams() {
    let (server, _) = start(&[]);
    let u = client(&server);
    let mut tcp = server.connect();
    let value: String = (0..20_000)
        .map(|i| (b'C' + (i % 24) as u8) as char)
        .collect();
    tcp.send(format!("set big 0 0 20000\r\n{value}\r\n").as_bytes());
    assert_eq!(tcp.read_until(b"\r\n"), b"STORED\r\n");
    let reply = request(&u, 53, b"get big\r\n");
    let expected = format!("VALUE big 0 20000\r\n{value}\r\nEND\r\n");
    assert_eq!(reply.len(), expected.len().div_ceil(1392));
    assert!(reply[..reply.len() - 1].iter().all(|d| d.len() == 1400));
    assert_eq!(joined(&reply), expected);
    let both = joined(&request(&u, 54, b"get big big\r\n"));
    assert_eq!(
        both,
        format!("VALUE big 0 20000\r\n{value}\r\nVALUE big 0 20000\r\n{value}\r\nEND\r\n")
    );
    // A set of 4 KiB over UDP, as memcached's udp.t sends.
    let v = "abcd".repeat(1024);
    assert_eq!(
        ask(&u, 45, &format!("set bval 0 0 4096\r\n{v}\r\n")),
        "STORED\r\n"
    );
    assert_eq!(
        tcp.exchange(b"get bval\r\n"),
        format!("VALUE bval 0 4096\r\n{v}\r\nEND\r\n").as_bytes()
    );
}

/// Each kind of bad datagram is dropped unanswered and counted (`stats`, and the metrics
/// endpoint's `cairn_udp_*_total`); the server answers the next request.
#[test]
fn bad_datagrams_are_dropped_and_counted() {
    let (server, metrics) = start(&[("CAIRN_TEST_UDP_REQUEST_MAX", "2000")]);
    let u = client(&server);
    let mut tcp = server.connect();
    let before = stats(&mut tcp);
    assert_eq!(before["udp_received"], 0);
    let bad: [(Vec<u8>, &str); 8] = [
        (vec![0, 1, 0], "udp_malformed"),
        (frame(1, 0, 1, b""), "udp_malformed"),
        (frame(1, 0, 2, b"get foo\r\n"), "udp_malformed"),
        (frame(1, 1, 0, b"get foo\r\n"), "udp_malformed"),
        (frame(1, 0, 1, b"get foo"), "udp_malformed"),
        (frame(1, 0, 1, b"set foo 0 0 10\r\nabc"), "udp_malformed"),
        // A binary request cut short (16 of its 24 header bytes).
        (
            frame(
                1,
                0,
                1,
                &[0x80, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0],
            ),
            "udp_malformed",
        ),
        (
            frame(
                1,
                0,
                1,
                format!("set x 0 0 2500\r\n{}\r\n", "x".repeat(2500)).as_bytes(),
            ),
            "udp_too_large",
        ),
    ];
    for (datagram, _) in &bad {
        u.send(datagram).unwrap();
    }
    // One loop answers in order: once this is answered, every datagram before it was seen.
    assert_eq!(ask(&u, 9, "get foo\r\n"), "END\r\n");
    // The server counts a datagram sent once send_to returned, which may be after the client
    // read it: read the figures once that count is in.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let after = loop {
        let s = stats(&mut tcp);
        if s["udp_sent"] >= 1 || std::time::Instant::now() > deadline {
            break s;
        }
        std::thread::yield_now();
    };
    for name in ["udp_malformed", "udp_too_large"] {
        let expected = bad.iter().filter(|(_, n)| *n == name).count() as u64;
        assert_eq!(after[name], expected, "{name}");
    }
    assert_eq!(after["udp_received"], bad.len() as u64 + 1);
    assert_eq!(after["udp_sent"], 1);
    // Nothing was stored by the cut-off or too-large sets.
    assert_eq!(tcp.exchange(b"get foo x\r\n"), b"END\r\n");
    let body = scrape(metrics);
    for name in ["udp_received", "udp_sent", "udp_malformed", "udp_too_large"] {
        assert_eq!(
            metric(&body, &format!("cairn_{name}_total")),
            after[name],
            "{name}"
        );
    }
    assert!(body.contains("# HELP cairn_udp_malformed "), "{body}");
}

/// Thousands of random, truncated and mangled datagrams: none stops the server; those that
/// are bad by their frame are each counted; it answers over UDP and TCP afterwards.
#[test]
fn random_and_truncated_datagrams_never_stop_the_server() {
    let (server, _) = start(&[]);
    let u = client(&server);
    let mut tcp = server.connect();
    let mut rng = Rng::new(Rng::seed());
    let set = b"set k 0 0 10\r\n0123456789\r\n";
    let (mut sent, mut malformed, mut unknown) = (0u64, 0u64, 0u64);
    for round in 0..40u16 {
        for _ in 0..50 {
            let kind = rng.below(5);
            let datagram = match kind {
                // Shorter than a header and a byte.
                0 => (0..rng.below(9)).map(|_| rng.next_u64() as u8).collect(),
                // A total other than 1.
                1 => {
                    let total = 2 + rng.below(u64::from(u16::MAX) - 1) as u16;
                    frame(rng.next_u64() as u16, 0, total, b"get k\r\n")
                }
                // A valid set cut short.
                2 => frame(
                    3,
                    0,
                    1,
                    &set[..1 + rng.below(set.len() as u64 - 1) as usize],
                ),
                // Binary: answered somehow, or cut off.
                3 => {
                    let mut p = vec![0x80];
                    p.extend((0..rng.below(64)).map(|_| rng.next_u64() as u8));
                    frame(4, 0, 1, &p)
                }
                // Random bytes after a valid header: answered somehow, or cut off.
                _ => {
                    let mut p: Vec<u8> = (0..1 + rng.below(1400))
                        .map(|_| rng.next_u64() as u8)
                        .collect();
                    if p[0] == 0x80 {
                        p[0] = b'g';
                    }
                    frame(5, 0, 1, &p)
                }
            };
            match kind {
                0..=2 => malformed += 1,
                _ => unknown += 1,
            }
            u.send(&datagram).unwrap();
            sent += 1;
        }
        // A request of its own id after each batch: the batch was handled (one loop), and the
        // kernel's buffers never overflow. Replies to the random ones (ids 5) are skipped.
        u.send(&frame(1000 + round, 0, 1, b"version\r\n")).unwrap();
        sent += 1;
        let mut buf = [0u8; 2048];
        loop {
            let n = u.recv(&mut buf).expect("the version reply");
            if u16::from_be_bytes([buf[0], buf[1]]) == 1000 + round {
                assert!(buf[8..n].starts_with(b"VERSION "));
                break;
            }
        }
    }
    let s = stats(&mut tcp);
    assert_eq!(s["udp_received"], sent);
    assert!(
        (malformed..=malformed + unknown).contains(&s["udp_malformed"]),
        "{} malformed, {malformed} sent bad by their frame, {unknown} random",
        s["udp_malformed"]
    );
    assert_eq!(tcp.exchange(b"get k\r\n"), b"END\r\n");
    let u2 = client(&server);
    assert_eq!(ask(&u2, 1, "set k 0 0 1\r\nv\r\n"), "STORED\r\n");
    assert_eq!(ask(&u2, 2, "get k\r\n"), "VALUE k 0 1\r\nv\r\nEND\r\n");
}

/// Without -U, and with -U 0, no UDP socket is opened.
#[test]
fn udp_is_off_by_default() {
    let server = Server::start(&[]);
    assert_eq!(server.udp_addr, None);
    let server = Server::start(&["-U", "0"]);
    assert_eq!(server.udp_addr, None);
}
