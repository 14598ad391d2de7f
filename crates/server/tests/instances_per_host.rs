//! Several instances on one host, as memcached's and Redis's operators run them: started from
//! one working directory with nothing but `-p` different (no --data-dir, no --grpc-listen),
//! each derives its own gRPC port (-p + 38840) and data folder (cairn-data-PORT), serves
//! memcached's text protocol and gRPC, and keeps its own data across a kill -9 and a restart
//! (sync persistence, the default).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

use cairn_api::pb::{self, kv_client::KvClient};
use cairn_testkit::Rng;
use common::Conn;

/// The gRPC port's distance from the memcached port (docs/CONFIGURATION.md).
const OFFSET: u16 = 38840;

/// A `cairn -p PORT` started in a working directory, with its ready lines read.
struct Instance {
    child: Child,
    addr: SocketAddr,
    grpc: SocketAddr,
    /// Kept open: the server's stdout.
    _stdout: std::io::Lines<BufReader<ChildStdout>>,
    /// Its whole log (stderr), read until it exits.
    log: std::thread::JoinHandle<String>,
}

impl Instance {
    /// Starts `cairn -p PORT` in `cwd` (2 MiB log segments, to keep the preallocation small)
    /// and waits for its ready line; Err(log) if it exits first.
    fn start(cwd: &Path, port: u16) -> Result<Instance, String> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .current_dir(cwd)
            .args(["-p", &port.to_string(), "--log-segment-mb", "2"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cairn");
        let mut stderr = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut grpc = None;
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.wait();
                return Err(log.join().unwrap_or_default());
            };
            if let Some(a) = line.strip_prefix("cairn grpc listening on ") {
                grpc = Some(a.parse().unwrap());
            }
            if let Some(a) = line.strip_prefix("cairn listening on ") {
                break a.parse().unwrap();
            }
        };
        Ok(Instance {
            child,
            addr,
            grpc: grpc.expect("gRPC is on by default"),
            _stdout: lines,
            log,
        })
    }

    /// kill -9, and the log it wrote.
    fn kill9(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log.join().unwrap_or_default()
    }
}

/// A port below 26696 (its gRPC port must fit) that is free on loopback, with its gRPC port.
fn free_port(rng: &mut Rng) -> u16 {
    loop {
        let port = 12_000 + rng.below(14_000) as u16;
        let free = |p: u16| TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(port + OFFSET) {
            return port;
        }
    }
}

/// Starts an instance on a free port of the generator's, trying other ports when another
/// process took the one picked in between.
fn start_on_a_free_port(cwd: &Path, rng: &mut Rng) -> (u16, Instance) {
    let mut last = String::new();
    for _ in 0..5 {
        let port = free_port(rng);
        match Instance::start(cwd, port) {
            Ok(i) => return (port, i),
            Err(log) => last = log,
        }
    }
    panic!("no start in 5 tries; the last log:\n{last}");
}

fn grpc_set(rt: &tokio::runtime::Runtime, grpc: SocketAddr, key: &str, value: &str) {
    rt.block_on(async {
        let mut kv = KvClient::connect(format!("http://{grpc}")).await.unwrap();
        kv.set(pb::SetRequest {
            key: key.to_string().into(),
            value: value.to_string().into(),
            ..Default::default()
        })
        .await
        .expect("gRPC set");
    });
}

fn grpc_get(rt: &tokio::runtime::Runtime, grpc: SocketAddr, key: &str) -> Option<String> {
    rt.block_on(async {
        let mut kv = KvClient::connect(format!("http://{grpc}")).await.unwrap();
        let request = pb::GetRequest {
            key: key.to_string().into(),
        };
        match kv.get(request).await {
            Ok(got) => {
                let kv = got.into_inner().kv.expect("a found key's kv");
                Some(String::from_utf8(kv.value.to_vec()).unwrap())
            }
            Err(s) if s.code() == tonic::Code::NotFound => None,
            Err(s) => panic!("gRPC get {key}: {s}"),
        }
    })
}

fn mc_set(c: &mut Conn, key: &str, value: &str) {
    let line = format!("set {key} 0 0 {}\r\n{value}\r\n", value.len());
    assert_eq!(c.exchange(line.as_bytes()), b"STORED\r\n");
}

fn mc_get(c: &mut Conn, key: &str) -> String {
    let got = c.exchange(format!("get {key}\r\n").as_bytes());
    String::from_utf8(got).unwrap()
}

/// The log without its ANSI colour sequences (`ESC [ ... m`).
fn without_colours(log: &str) -> String {
    let mut out = String::new();
    let mut rest = log;
    while let Some(i) = rest.find('\x1b') {
        out.push_str(&rest[..i]);
        rest = rest[i..].split_once('m').map_or("", |(_, r)| r);
    }
    out + rest
}

fn hit(key: &str, value: &str) -> String {
    format!("VALUE {key} 0 {}\r\n{value}\r\nEND\r\n", value.len())
}

#[test]
fn two_instances_from_one_folder_differ_by_port_alone_and_keep_their_own_data() {
    let cwd = tempfile::tempdir().unwrap();
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let (pa, a) = start_on_a_free_port(cwd.path(), &mut rng);
    let (pb, b) = start_on_a_free_port(cwd.path(), &mut rng);
    assert_ne!(pa, pb);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for (port, i) in [(pa, &a), (pb, &b)] {
        assert_eq!(i.addr, SocketAddr::from(([127, 0, 0, 1], port)));
        assert_eq!(i.grpc, SocketAddr::from(([127, 0, 0, 1], port + OFFSET)));
    }
    // Each serves memcached and gRPC, with data of its own.
    for (name, i) in [("a", &a), ("b", &b)] {
        let mut c = Conn::new(i.addr);
        mc_set(&mut c, "k", &format!("mc-{name}"));
        mc_set(&mut c, &format!("only-{name}"), name);
        grpc_set(&rt, i.grpc, "g", &format!("grpc-{name}"));
        assert_eq!(mc_get(&mut c, "g"), hit("g", &format!("grpc-{name}")));
    }
    let logs = [a.kill9(), b.kill9()];
    for (port, log) in [pa, pb].iter().zip(&logs) {
        // The start log names the addresses and the folder in force.
        let log = without_colours(log);
        let line = log
            .lines()
            .find(|l| l.contains("addresses and folders"))
            .unwrap_or_else(|| panic!("no addresses line in:\n{log}"));
        for part in [
            format!("memcached=127.0.0.1:{port}"),
            format!("grpc=127.0.0.1:{}", port + OFFSET),
            "metrics=off".to_string(),
            format!("data_dir=cairn-data-{port}"),
            "flash=off".to_string(),
        ] {
            assert!(line.contains(&part), "no {part} in: {line}");
        }
    }
    let mut folders: Vec<String> = std::fs::read_dir(cwd.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    folders.sort();
    let mut want = vec![format!("cairn-data-{pa}"), format!("cairn-data-{pb}")];
    want.sort();
    assert_eq!(folders, want, "one folder an instance (seed {seed})");

    // Restarted the same way, each finds its own acknowledged writes, and not the other's.
    let a = Instance::start(cwd.path(), pa).expect("restart a");
    let b = Instance::start(cwd.path(), pb).expect("restart b");
    for (name, other, i) in [("a", "b", &a), ("b", "a", &b)] {
        let mut c = Conn::new(i.addr);
        assert_eq!(mc_get(&mut c, "k"), hit("k", &format!("mc-{name}")));
        assert_eq!(
            mc_get(&mut c, &format!("only-{name}")),
            hit(&format!("only-{name}"), name)
        );
        assert_eq!(mc_get(&mut c, &format!("only-{other}")), "END\r\n");
        assert_eq!(
            grpc_get(&rt, i.grpc, "g").as_deref(),
            Some(format!("grpc-{name}").as_str())
        );
        assert_eq!(grpc_get(&rt, i.grpc, &format!("only-{other}")), None);
    }
    a.kill9();
    b.kill9();
}
