//! Test harness: the real `cairn` binary on free loopback ports (readiness: its `cairn grpc
//! listening on` and `cairn listening on` lines, never a sleep), and the `cairnctl` binary
//! under test run against it.
//!
//! The server binary is the workspace's `target/debug/cairn` (`cargo test --workspace` builds
//! it; alone, `cargo build -p cairn-server` first), or `$CAIRN_BIN`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The cairn binary the tests run.
pub fn cairn_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CAIRN_BIN") {
        return p.into();
    }
    // This test runs from target/debug/deps/: the server is target/debug/cairn.
    let exe = std::env::current_exe().expect("the test's path");
    let debug = exe.parent().and_then(Path::parent).expect("target/debug");
    let cairn = debug.join("cairn");
    assert!(
        cairn.exists(),
        "{} not found: build it first (cargo build -p cairn-server --bin cairn) or set CAIRN_BIN",
        cairn.display()
    );
    cairn
}

/// A free loopback port (bound, then released for the server that takes it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running server, killed (SIGKILL) on drop.
pub struct Server {
    pub child: Child,
    /// memcached's address.
    pub addr: SocketAddr,
    /// The gRPC API's.
    pub grpc: SocketAddr,
    pub dir: PathBuf,
    /// The arguments it was started with (for a restart on the same folder and ports).
    args: Vec<String>,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// `cairn -p 0 --grpc-listen 127.0.0.1:0 --data-dir <fresh> <args>`.
    pub fn start(args: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let mut s = Server::start_in(tmp.path(), args);
        s._tmp = Some(tmp);
        s
    }

    /// The server on `dir`; ports are free ones unless `args` name `-p` or `--grpc-listen`.
    pub fn start_in(dir: &Path, args: &[&str]) -> Server {
        let mut all: Vec<String> = Vec::new();
        if !args.contains(&"-p") {
            all.extend(["-p".into(), "0".into()]);
        }
        if !args.contains(&"--grpc-listen") {
            all.extend(["--grpc-listen".into(), "127.0.0.1:0".into()]);
        }
        if !args.contains(&"--log-segment-mb") {
            all.extend(["--log-segment-mb".into(), "2".into()]);
        }
        all.extend(args.iter().map(|a| a.to_string()));
        Server::spawn(dir, all)
    }

    fn spawn(dir: &Path, args: Vec<String>) -> Server {
        let mut child = Command::new(cairn_binary())
            .arg("--data-dir")
            .arg(dir)
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn cairn");
        // Drain the log so the server never blocks on a full pipe; keep its end for a failure.
        let mut stderr = child.stderr.take().expect("stderr");
        let log = std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                tail.extend_from_slice(&buf[..n]);
                let over = tail.len().saturating_sub(16 * 1024);
                tail.drain(..over);
            }
            String::from_utf8_lossy(&tail).into_owned()
        });
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut grpc = None;
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.wait();
                panic!(
                    "cairn exited before it was ready; its log:\n{}",
                    log.join().unwrap_or_default()
                );
            };
            if let Some(a) = line.strip_prefix("cairn grpc listening on ") {
                grpc = Some(a.parse().expect("address"));
            }
            if let Some(a) = line.strip_prefix("cairn listening on ") {
                break a.parse().expect("address");
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Server {
            child,
            addr,
            grpc: grpc.expect("the gRPC API is on"),
            dir: dir.to_path_buf(),
            args,
            _tmp: None,
        }
    }

    /// The flags that reach this server (for cairnctl).
    pub fn endpoints(&self) -> [String; 4] {
        [
            "--endpoint".into(),
            self.grpc.to_string(),
            "--memcached".into(),
            self.addr.to_string(),
        ]
    }

    /// kill -9, then the same binary on the same folder and the same ports.
    pub fn kill9_and_restart(mut self) -> Server {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut args = self.args.clone();
        for (flag, value) in [
            ("-p", self.addr.port().to_string()),
            ("--grpc-listen", self.grpc.to_string()),
        ] {
            match args.iter().position(|a| a == flag) {
                Some(i) => args[i + 1] = value,
                None => args.extend([flag.to_string(), value]),
            }
        }
        let tmp = self._tmp.take();
        let mut s = Server::spawn(&self.dir, args);
        s._tmp = tmp;
        s
    }

    /// One memcached request and its reply up to `end`.
    pub fn request(&self, request: &str, end: &str) -> String {
        let mut c = TcpStream::connect(self.addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        c.write_all(request.as_bytes()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while !got.ends_with(end.as_bytes()) {
            let n = c.read(&mut buf).expect("read");
            assert!(n > 0, "closed; got {:?}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..n]);
        }
        String::from_utf8(got).unwrap()
    }

    /// A `stats GROUP` figure.
    pub fn stat(&self, group: &str, name: &str) -> String {
        let text = self.request(&format!("stats {group}\r\n"), "END\r\n");
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .to_string()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The cairnctl binary under test.
pub fn cairnctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cairnctl"))
}

/// Runs cairnctl with these arguments to the end.
pub fn run(args: &[&str]) -> Output {
    cairnctl().args(args).output().expect("run cairnctl")
}

/// Runs cairnctl against `server`: (exit code, stdout, stderr).
pub fn ctl(server: &Server, args: &[&str]) -> (i32, String, String) {
    let mut all: Vec<String> = server.endpoints().to_vec();
    all.extend(args.iter().map(|a| a.to_string()));
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    let out = run(&all);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// cairnctl's stdout, asserting it exited 0.
pub fn ok(server: &Server, args: &[&str]) -> String {
    let (code, out, err) = ctl(server, args);
    assert_eq!(code, 0, "cairnctl {args:?} failed: {err}");
    out
}

/// A cairnctl process whose stdout lines are read as they come (a watch), killed on drop.
pub struct Streaming {
    pub child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

impl Streaming {
    pub fn start(args: &[String]) -> Streaming {
        Streaming::spawn(args, Stdio::inherit())
    }

    /// [`Streaming::start`] with cairnctl's stderr (its notes) written to `log`.
    pub fn start_logging(args: &[String], log: &Path) -> Streaming {
        Streaming::spawn(args, std::fs::File::create(log).expect("log file").into())
    }

    fn spawn(args: &[String], stderr: Stdio) -> Streaming {
        let mut child = cairnctl()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn cairnctl");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Streaming {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `f` (panics after `limit`); returns it.
    pub fn until(&mut self, limit: Duration, mut f: impl FnMut(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "no such line within {limit:?}; the last lines: {:?}",
                    &self.seen[self.seen.len().saturating_sub(5)..]
                ),
            }
        }
    }

    /// The next `n` lines.
    pub fn take(&mut self, n: usize, limit: Duration) -> Vec<String> {
        let start = self.seen.len();
        for _ in 0..n {
            self.until(limit, |_| true);
        }
        self.seen[start..].to_vec()
    }
}

impl Drop for Streaming {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
