//! memcached's administration and inspection lines, as its tools use them: stats settings,
//! stats sizes, stats conns, stats items/slabs, lru_crawler metadump, cache_memlimit, shutdown.

mod common;

use std::time::{SystemTime, UNIX_EPOCH};

use common::{golden, Server};

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The value of `STAT <name> <value>` in a stats reply.
fn stat<'a>(reply: &'a str, name: &str) -> &'a str {
    reply
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {reply}"))
}

/// One line per item as memcached writes it (bare `\n`), keys URI-encoded, absolute times.
#[test]
fn metadump_lists_every_item_as_memcached_does() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let before = unix_now();
    golden(
        &mut c,
        &[
            ("set a%20b 5 2000000000 3\r\nabc\r\n", "STORED\r\n"),
            ("set k2 0 0 1\r\nx\r\n", "STORED\r\n"),
            ("get k2\r\n", "VALUE k2 0 1\r\nx\r\nEND\r\n"),
        ],
    );
    let after = unix_now();
    let dump = String::from_utf8(c.exchange(b"lru_crawler metadump all\r\n")).unwrap();
    assert!(dump.ends_with("\nEND\r\n"), "{dump:?}");
    let mut lines: Vec<&str> = dump
        .trim_end_matches("END\r\n")
        .split_terminator('\n')
        .collect();
    lines.sort();
    assert_eq!(lines.len(), 2, "{dump:?}");
    // key, exp, la, cas, fetch, cls, size: la is the item's last access (the get for k2).
    let fields: Vec<Vec<&str>> = lines.iter().map(|l| l.split(' ').collect()).collect();
    for (f, key, exp, fetch, size) in [
        (
            &fields[0],
            "key=a%2520b",
            "exp=2000000000",
            "fetch=no",
            "size=29",
        ),
        (&fields[1], "key=k2", "exp=-1", "fetch=yes", "size=16"),
    ] {
        assert_eq!(
            (f[0], f[1], f[4], f[5], f[6]),
            (key, exp, fetch, "cls=1", size)
        );
        let la: u64 = f[2].strip_prefix("la=").unwrap().parse().unwrap();
        assert!(
            (before..=after).contains(&la),
            "{la} not in {before}..={after}"
        );
        assert!(f[3].starts_with("cas="));
    }
    golden(
        &mut c,
        &[
            ("lru_crawler metadump 2\r\n", "END\r\n"),
            (
                "lru_crawler metadump 0\r\n",
                "BADCLASS invalid class id\r\n",
            ),
            ("lru_crawler crawl all\r\n", "OK\r\n"),
            ("lru_crawler metadump\r\n", "ERROR\r\n"),
        ],
    );
}

/// A dump bigger than the output buffer streams out shard by shard, every item once.
#[test]
fn a_large_metadump_streams_every_item_once() {
    let server = Server::start(&["--persistence", "off"]);
    let mut c = server.connect();
    let mut sets = String::new();
    for i in 0..20_000 {
        sets.push_str(&format!("set key:{i} 0 0 1 noreply\r\nv\r\n"));
    }
    c.exchange(sets.as_bytes());
    let dump = String::from_utf8(c.exchange(b"lru_crawler metadump all\r\n")).unwrap();
    let mut keys: Vec<&str> = dump
        .split_terminator('\n')
        .filter_map(|l| l.strip_prefix("key=")?.split(' ').next())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 20_000);
    assert!(dump.ends_with("END\r\n"));
}

#[test]
fn stats_settings_sizes_items_and_slabs() {
    let server = Server::start(&["-c", "77", "-F"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set a%20b 5 2000000000 3\r\nabc\r\n", "STORED\r\n"),
            ("set k2 0 0 1\r\nx\r\n", "STORED\r\n"),
            (
                &format!("set big 0 0 100\r\n{}\r\n", "b".repeat(100)),
                "STORED\r\n",
            ),
        ],
    );
    let settings = String::from_utf8(c.exchange(b"stats settings\r\n")).unwrap();
    for (name, value) in [
        ("maxbytes", "67108864"),
        ("maxconns", "77"),
        ("udpport", "0"),
        ("inter", "127.0.0.1"),
        ("evictions", "on"),
        ("cas_enabled", "yes"),
        ("flush_enabled", "no"),
        ("shutdown_command", "no"),
        ("item_size_max", "1048576"),
        ("ssl_chain_cert", "(null)"),
        ("ssl_key", "(null)"),
    ] {
        assert_eq!(stat(&settings, name), value, "{name}");
    }
    // memcached ignores what follows `stats reset`.
    golden(&mut c, &[("stats reset now\r\n", "RESET\r\n")]);
    // 16 and 29 bytes round up to 32, 116 to 128 (memcached's 32-byte buckets).
    golden(
        &mut c,
        &[("stats sizes\r\n", "STAT 32 2\r\nSTAT 128 1\r\nEND\r\n")],
    );
    let items = String::from_utf8(c.exchange(b"stats items\r\n")).unwrap();
    assert_eq!(stat(&items, "items:1:number"), "3");
    assert_eq!(stat(&items, "items:1:mem_requested"), "161");
    let slabs = String::from_utf8(c.exchange(b"stats slabs\r\n")).unwrap();
    assert_eq!(stat(&slabs, "1:chunk_size"), "53", "the average item");
    assert_eq!(stat(&slabs, "1:used_chunks"), "3");
    assert!(stat(&slabs, "1:total_pages").parse::<u64>().unwrap() >= 1);
}

/// `stats conns` lists the listening socket and every client, with memcached's fields.
#[test]
fn stats_conns_lists_every_connection() {
    let server = Server::start(&[]);
    let mut c = server.connect();
    let mut idle = server.connect();
    // Once a connection was answered it is registered, and waits for its client.
    let version = format!("VERSION {}\r\n", cairn_server::VERSION);
    golden(&mut idle, &[("version\r\n", &version)]);
    golden(&mut c, &[("version\r\n", &version)]);
    let idle_port = idle.stream.local_addr().unwrap().port();
    let mine = c.stream.local_addr().unwrap().port();
    let conns = String::from_utf8(c.exchange(b"stats conns\r\n")).unwrap();
    let fd_of = |port: u16| -> String {
        conns
            .lines()
            .find(|l| l.ends_with(&format!(":addr tcp:127.0.0.1:{port}")))
            .and_then(|l| l.strip_prefix("STAT "))
            .and_then(|l| l.split(':').next())
            .unwrap_or_else(|| panic!("no connection from port {port} in {conns}"))
            .to_string()
    };
    let listen = format!("tcp:{}", server.addr);
    assert!(
        conns.contains(&format!(":addr {listen}\r\n")) && conns.contains(":state conn_listening"),
        "{conns}"
    );
    let (idle_fd, my_fd) = (fd_of(idle_port), fd_of(mine));
    assert_eq!(stat(&conns, &format!("{idle_fd}:state")), "conn_waiting");
    assert_eq!(stat(&conns, &format!("{my_fd}:state")), "conn_parse_cmd");
    assert_eq!(stat(&conns, &format!("{my_fd}:listen_addr")), listen);
    assert!(stat(&conns, &format!("{idle_fd}:secs_since_last_cmd"))
        .parse::<u32>()
        .is_ok());
    drop(idle);
}

/// `cache_memlimit N` changes the memory limit while serving; a smaller one evicts at once.
#[test]
fn cache_memlimit_resizes_while_serving() {
    let server = Server::start(&["-m", "64", "--persistence", "off"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            (
                "cache_memlimit 4\r\n",
                "MEMLIMIT_TOO_SMALL cannot set maxbytes to less than 8m\r\n",
            ),
            (
                "cache_memlimit 1000000001\r\n",
                "MEMLIMIT_ADJUST_FAILED input value is megabytes not bytes\r\n",
            ),
            // 16 shards of two 1 MiB segments at the least.
            (
                "cache_memlimit 16\r\n",
                "MEMLIMIT_ADJUST_FAILED out of bounds or unable to adjust\r\n",
            ),
            ("cache_memlimit x\r\n", "ERROR\r\n"),
        ],
    );
    let value = "v".repeat(1000);
    let mut sets = String::new();
    for i in 0..50_000 {
        sets.push_str(&format!("set key:{i} 0 0 1000 noreply\r\n{value}\r\n"));
    }
    c.exchange(sets.as_bytes());
    let used = |c: &mut common::Conn| -> u64 {
        let s = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
        stat(&s, "memory_used_bytes").parse().unwrap()
    };
    assert!(used(&mut c) > 48 << 20);
    golden(
        &mut c,
        &[
            ("cache_memlimit 32\r\n", "OK\r\n"),
            ("cache_memlimit 40 noreply\r\n", ""),
            ("cache_memlimit 32\r\n", "OK\r\n"),
        ],
    );
    assert!(used(&mut c) <= 32 << 20);
    let settings = String::from_utf8(c.exchange(b"stats settings\r\n")).unwrap();
    assert_eq!(stat(&settings, "maxbytes"), (32u64 << 20).to_string());
    let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    assert_eq!(stat(&stats, "limit_maxbytes"), (32u64 << 20).to_string());
    golden(
        &mut c,
        &[(
            "get key:49999\r\n",
            &format!("VALUE key:49999 0 1000\r\n{value}\r\nEND\r\n"),
        )],
    );
    // An admin write: refused unless admin lines are enabled.
    let locked = Server::start(&["--enable-admin", "false"]);
    golden(
        &mut locked.connect(),
        &[(
            "cache_memlimit 100\r\n",
            "CLIENT_ERROR admin commands are disabled (start cairn with --enable-admin)\r\n",
        )],
    );
}

/// `shutdown` stops the server as SIGTERM does (exit 0), only with -A; the connection closes
/// without a reply.
#[test]
fn shutdown_needs_dash_a() {
    let server = Server::start(&[]);
    golden(
        &mut server.connect(),
        &[("shutdown\r\n", "ERROR: shutdown not enabled\r\n")],
    );
    let mut server = Server::start(&["-A"]);
    let mut c = server.connect();
    golden(
        &mut c,
        &[("shutdown x\r\n", "CLIENT_ERROR invalid shutdown mode\r\n")],
    );
    c.send(b"set k 0 0 1\r\nx\r\nshutdown graceful\r\n");
    assert_eq!(c.read_to_close(), b"STORED\r\n");
    let status = server.child.wait().expect("wait");
    assert!(status.success(), "{status}");
}
