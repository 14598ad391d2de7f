//! Clients nobody here wrote, against the real binary: the `memcache` crate, and Debian's
//! `memccapable` (libmemcached-tools). pymemcache runs from tests/python (see README).

mod common;

use std::process::Command;

use common::Server;

#[test]
fn memcache_crate_text_protocol() {
    let server = Server::start(&[]);
    let url = format!("memcache://{}?protocol=ascii&timeout=20", server.addr);
    let client = memcache::Client::connect(url).expect("connect");

    client.set("k", "hello", 0).unwrap();
    assert_eq!(client.get::<String>("k").unwrap().as_deref(), Some("hello"));
    assert!(
        client.add("k", "x", 0).is_err()
            || client.get::<String>("k").unwrap().as_deref() == Some("hello")
    );
    client.replace("k", "world", 0).unwrap();
    client.append("k", "!").unwrap();
    client.prepend("k", "<").unwrap();
    assert_eq!(
        client.get::<String>("k").unwrap().as_deref(),
        Some("<world!")
    );

    client.set("n", 10u64, 0).unwrap();
    assert_eq!(client.increment("n", 5).unwrap(), 15);
    assert_eq!(client.decrement("n", 20).unwrap(), 0);

    client.set("t", "v", 100).unwrap();
    assert!(client.touch("t", 200).unwrap());
    assert!(!client.touch("absent", 200).unwrap());

    // gets + cas.
    let got: std::collections::HashMap<String, (Vec<u8>, u32, Option<u64>)> =
        client.gets(&["k"]).unwrap();
    let cas = got["k"].2.expect("cas unique");
    assert!(client.cas("k", "new", 0, cas).unwrap());
    assert!(!client.cas("k", "newer", 0, cas).unwrap());
    assert_eq!(client.get::<String>("k").unwrap().as_deref(), Some("new"));

    // multi-get.
    for i in 0..50 {
        client.set(&format!("m{i}"), i as u64, 0).unwrap();
    }
    let keys: Vec<String> = (0..60).map(|i| format!("m{i}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let many: std::collections::HashMap<String, u64> = client.gets(&key_refs).unwrap();
    assert_eq!(many.len(), 50);
    assert_eq!(many["m7"], 7);

    assert!(client.delete("k").unwrap());
    assert!(!client.delete("k").unwrap());
    assert_eq!(client.get::<String>("k").unwrap(), None);
    client.flush().unwrap();
    assert_eq!(client.get::<u64>("m1").unwrap(), None);
}

/// Runs every test of Debian's memccapable in ASCII mode. Skipped (with a note) where the tool
/// is not installed, except under CI, where .ci/run installs it and its absence is a failure.
#[test]
fn memccapable_ascii_suite() {
    let found = Command::new("memccapable").arg("--help").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "memccapable missing under CI"
        );
        eprintln!("memccapable not installed: skipped (apt-get install libmemcached-tools)");
        return;
    }
    let server = Server::start(&[]);
    let out = Command::new("memccapable")
        .args([
            "-a",
            "-h",
            "127.0.0.1",
            "-p",
            &server.addr.port().to_string(),
        ])
        .output()
        .expect("run memccapable");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "memccapable failed:\n{text}");
    assert!(
        !text.contains("[FAIL]"),
        "memccapable reported a failure:\n{text}"
    );
}
