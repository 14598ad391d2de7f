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

/// Whether a tool nobody here wrote is installed. Where it is not, the test is skipped with a
/// note, except under CI, where .ci/run installs it and its absence is a failure.
fn installed(found: bool, tool: &str, package: &str) -> bool {
    if !found {
        assert!(std::env::var_os("CI").is_none(), "{tool} missing under CI");
        eprintln!("{tool} not installed: skipped (apt-get install {package})");
    }
    found
}

/// Runs every test of Debian's memccapable in ASCII mode.
#[test]
fn memccapable_ascii_suite() {
    let found = Command::new("memccapable").arg("--help").output().is_ok();
    if !installed(found, "memccapable", "libmemcached-tools") {
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

/// Debian's memcached-tool (in the memcached package), against cairn: `display`, `stats`,
/// `settings`, `dump` and `keys`.
#[test]
fn memcached_tool_reads_cairn() {
    const TOOL: &str = "/usr/share/memcached/scripts/memcached-tool";
    if !installed(
        std::path::Path::new(TOOL).exists(),
        "memcached-tool",
        "memcached",
    ) {
        return;
    }
    let server = Server::start(&[]);
    let mut c = server.connect();
    common::golden(
        &mut c,
        &[
            ("set plain 5 0 3\r\nabc\r\n", "STORED\r\n"),
            ("set timed 0 2000000000 2\r\nxy\r\n", "STORED\r\n"),
            ("set odd%20key 7 0 1\r\nz\r\n", "STORED\r\n"),
        ],
    );
    let run = |mode: &str| -> String {
        let out = Command::new("perl")
            .args([TOOL, &server.addr.to_string(), mode])
            .output()
            .expect("run memcached-tool");
        assert!(out.status.success(), "{mode}: {out:?}");
        String::from_utf8(out.stdout).expect("utf-8")
    };
    let display = run("display");
    assert!(
        display.contains("Item_Size  Max_age   Pages   Count"),
        "{display}"
    );
    let row: Vec<&str> = display
        .lines()
        .find(|l| l.trim_start().starts_with("1 "))
        .unwrap_or_else(|| panic!("no class 1 row: {display}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[4], "3", "Count: {display}");
    let stats = run("stats");
    assert!(
        stats
            .lines()
            .any(|l| l.split_whitespace().eq(["curr_items", "3"])),
        "{stats}"
    );
    let settings = run("settings");
    assert!(
        settings
            .lines()
            .any(|l| l.split_whitespace().eq(["item_size_max", "1048576"])),
        "{settings}"
    );
    // dump: an `add` line per item with its flags and expiry, then the value.
    let dump = run("dump");
    for item in [
        "add plain 5 0 3\r\nabc\r\n",
        "add timed 0 2000000000 2\r\nxy\r\n",
        "add odd%20key 7 0 1\r\nz\r\n",
    ] {
        assert!(dump.contains(item), "{item:?} not in {dump:?}");
    }
    assert_eq!(dump.matches("add ").count(), 3, "{dump:?}");
    let keys = run("keys");
    assert!(keys.contains("key=odd%2520key exp=-1 "), "{keys}");
}
