//! What the connection threads (one single-threaded runtime per `-t` thread, connections dealt
//! round robin) could break: the connection limit across threads, a graceful stop while
//! connections are busy, and fairness between connections that share a thread.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{golden, Server};

fn version(c: &mut common::Conn) {
    golden(
        c,
        &[(
            "version\r\n",
            &format!("VERSION {}\r\n", cairn_server::VERSION),
        )],
    );
}

/// `-c` counts connections over all threads; a closed one frees its place whichever thread
/// served it.
#[test]
fn the_connection_limit_holds_across_threads() {
    let server = Server::start(&["-t", "2", "-c", "4"]);
    let mut open: Vec<_> = (0..4).map(|_| server.connect()).collect();
    for c in &mut open {
        version(c);
    }
    assert_eq!(
        server.connect().read_to_close(),
        b"SERVER_ERROR Too many open connections\r\n"
    );
    // Close connections served by both threads (they were dealt round robin).
    open.truncate(2);
    // The places come back once the server saw the close: poll, never a fixed sleep.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut accepted = 0;
    while accepted < 2 {
        assert!(
            Instant::now() < deadline,
            "closed connections never freed their places"
        );
        let mut s = TcpStream::connect(server.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"version\r\n").unwrap();
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf).unwrap();
        if buf[..n].starts_with(b"VERSION") {
            accepted += 1;
            std::mem::forget(s); // keep it open: it holds a place
        } else {
            assert_eq!(&buf[..n], b"SERVER_ERROR Too many open connections\r\n");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    assert_eq!(
        server.connect().read_to_close(),
        b"SERVER_ERROR Too many open connections\r\n"
    );
    let stats = String::from_utf8(open[0].exchange(b"stats\r\n")).unwrap();
    assert!(stats.contains("STAT curr_connections 4\r\n"), "{stats}");
}

/// Connections busy with pipelined requests on every thread: SIGTERM closes them after the
/// batch in hand (nothing but whole replies before that), and the process exits 0.
#[test]
fn sigterm_with_busy_connections_on_every_thread_exits_cleanly() {
    let mut server = Server::start(&["-t", "2"]);
    golden(
        &mut server.connect(),
        &[("set k 0 0 5\r\nhello\r\n", "STORED\r\n")],
    );
    let batch = b"get k\r\n".repeat(500);
    let reply = b"VALUE k 0 5\r\nhello\r\nEND\r\n";
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let batch = batch.clone();
            let started = started_tx.clone();
            std::thread::spawn(move || {
                let mut writer = s.try_clone().unwrap();
                // Keep sending until the server closes the connection.
                let sender = std::thread::spawn(move || while writer.write_all(&batch).is_ok() {});
                let mut got = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                let mut told = false;
                loop {
                    match s.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                    if !told && got.len() >= reply.len() {
                        told = true;
                        let _ = started.send(());
                    }
                }
                let _ = sender.join();
                got
            })
        })
        .collect();
    for _ in 0..4 {
        started_rx.recv().unwrap();
    }
    let pid = server.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    for c in clients {
        let got = c.join().unwrap();
        assert!(!got.is_empty());
        // Whole replies; the close may reset the connection (the client was still sending),
        // which can drop the tail of what the kernel held, so the last one may be cut short.
        let mut replies = got.chunks(reply.len()).peekable();
        while let Some(r) = replies.next() {
            if replies.peek().is_some() {
                assert_eq!(r, reply);
            } else {
                assert!(reply.starts_with(r), "{:?}", String::from_utf8_lossy(r));
            }
        }
    }
}

/// One thread, two connections: one floods it with pipelined gets as fast as it can while
/// reading every reply; the other, a plain request-reply client, is still answered, request
/// after request (the read timeout turns starvation into a failure instead of a hang).
#[test]
fn a_flooding_pipeline_does_not_starve_a_light_client() {
    let server = Server::start(&["-t", "1"]);
    golden(
        &mut server.connect(),
        &[("set k 0 0 5\r\nhello\r\n", "STORED\r\n")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = TcpStream::connect(server.addr).unwrap();
    let mut heavy_reader = heavy.try_clone().unwrap();
    let flood = {
        let stop = Arc::clone(&stop);
        let mut heavy = heavy;
        std::thread::spawn(move || {
            let batch = b"get k\r\n".repeat(2000);
            while !stop.load(Ordering::Relaxed) {
                if heavy.write_all(&batch).is_err() {
                    break;
                }
            }
            let _ = heavy.shutdown(std::net::Shutdown::Write);
        })
    };
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0usize;
        while let Ok(n) = heavy_reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    // Wait until the flood is being answered, then talk beside it.
    let mut light = server.connect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !String::from_utf8(light.exchange(b"stats\r\n"))
        .unwrap()
        .lines()
        .any(|l| {
            l.strip_prefix("STAT cmd_get ")
                .is_some_and(|n| n.parse::<u64>().unwrap() > 10_000)
        })
    {
        assert!(Instant::now() < deadline, "the flood never got going");
    }
    for i in 0..200 {
        golden(
            &mut light,
            &[(
                &format!("set light{i} 0 0 1\r\nx\r\nget light{i}\r\n"),
                &format!("STORED\r\nVALUE light{i} 0 1\r\nx\r\nEND\r\n"),
            )],
        );
    }
    stop.store(true, Ordering::Relaxed);
    flood.join().unwrap();
    assert!(drain.join().unwrap() > 0);
}
