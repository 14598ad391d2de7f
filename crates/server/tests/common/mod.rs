//! Test harness: runs the real `cairn` binary on 127.0.0.1:0 and talks to it over TCP.
//!
//! Readiness is the "cairn listening on ADDR" line the server prints once its socket is bound,
//! so no test sleeps waiting for a server.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server process, killed on drop.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    /// Where the gRPC API listens (None when a test turned it off).
    pub grpc_addr: Option<SocketAddr>,
    /// Where memcached's UDP protocol is answered (None unless a test gave `-U PORT`).
    pub udp_addr: Option<SocketAddr>,
    /// The data folder the server was started with (a fresh temporary one by default).
    pub dir: std::path::PathBuf,
    _tmp: Option<tempfile::TempDir>,
}

impl Server {
    /// Starts `cairn -p 0 --enable-admin --data-dir <fresh temp dir> <args>` and waits until it
    /// is ready. Tests drive admin lines, so admin is on unless `args` say `--enable-admin false`
    /// (the last of a repeated flag wins).
    pub fn start(args: &[&str]) -> Server {
        Server::start_fresh(&[], args, None)
    }

    /// [`Server::start`] with the server's log (stderr) readable from `child.stderr`.
    pub fn start_logging(args: &[&str]) -> Server {
        Server::start_fresh(&[], args, Some(Stdio::piped()))
    }

    /// [`Server::start`] with these environment variables set for the server process.
    pub fn start_with_env(env: &[(&str, &str)], args: &[&str]) -> Server {
        Server::start_fresh(env, args, None)
    }

    /// [`Server::start_with_env`] at a higher CPU priority than other work on the machine
    /// (nice -10, as root; elsewhere `nice` warns and runs it as usual): for tests that
    /// measure latency, so that builds sharing the cores do not measure themselves.
    pub fn start_favoured(env: &[(&str, &str)], args: &[&str]) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::spawn_with(&["nice", "-n", "-10"], &dir, env, args, None);
        s._tmp = Some(tmp);
        s
    }

    fn start_fresh(env: &[(&str, &str)], args: &[&str], stderr: Option<Stdio>) -> Server {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().to_path_buf();
        let mut s = Server::spawn(&dir, env, args, stderr);
        s._tmp = Some(tmp);
        s
    }

    /// Starts the server on an existing data folder (a restart). Log segments are 2 MiB unless
    /// `args` name their own `--log-segment-mb N`, as two arguments (needed for items over
    /// 1 MiB). The gRPC API listens on a free port unless `args` name `--grpc-listen`.
    pub fn start_in(dir: &std::path::Path, args: &[&str]) -> Server {
        Server::spawn(dir, &[], args, None)
    }

    /// [`Server::start_in`] with these environment variables set for the server process.
    pub fn start_in_with_env(dir: &std::path::Path, env: &[(&str, &str)], args: &[&str]) -> Server {
        Server::spawn(dir, env, args, None)
    }

    fn spawn(
        dir: &std::path::Path,
        env: &[(&str, &str)],
        args: &[&str],
        stderr: Option<Stdio>,
    ) -> Server {
        Server::spawn_with(&[], dir, env, args, stderr)
    }

    /// Spawns the server, run by `prefix` (a command that runs the one after it) if not empty.
    /// `stderr` None keeps the end of the server's log for the message of a start that fails.
    fn spawn_with(
        prefix: &[&str],
        dir: &std::path::Path,
        env: &[(&str, &str)],
        args: &[&str],
        stderr: Option<Stdio>,
    ) -> Server {
        let keep_log_tail = stderr.is_none();
        let segments: &[&str] = if args.contains(&"--log-segment-mb") {
            &[]
        } else {
            &["--log-segment-mb", "2"]
        };
        let grpc: &[&str] = if args.contains(&"--grpc-listen") {
            &[]
        } else {
            &["--grpc-listen", "127.0.0.1:0"]
        };
        let engine = io_engine(args);
        let binary = env!("CARGO_BIN_EXE_cairn");
        let mut command = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(binary);
                c
            }
            None => Command::new(binary),
        };
        let mut child = command
            .args(["-p", "0", "--enable-admin"])
            .args(segments)
            .args(grpc)
            .arg("--data-dir")
            .arg(dir)
            .args(engine)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr.unwrap_or_else(Stdio::piped))
            .spawn()
            .expect("spawn cairn");
        let log_tail = keep_log_tail.then(|| LogTail::drain(child.stderr.take().expect("stderr")));
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut grpc_addr = None;
        let mut udp_addr = None;
        let addr = loop {
            let Some(line) = lines.next() else {
                let log = log_tail.map_or_else(|| "(its log is the test's)".into(), LogTail::end);
                panic!("cairn exited before it was ready; the end of its log:\n{log}");
            };
            let line = line.expect("read stdout");
            if let Some(a) = line.strip_prefix("cairn grpc listening on ") {
                grpc_addr = Some(a.parse().expect("address"));
            }
            if let Some(a) = line.strip_prefix("cairn udp listening on ") {
                udp_addr = Some(a.parse().expect("address"));
            }
            if let Some(a) = line.strip_prefix("cairn listening on ") {
                break a.parse().expect("address");
            }
        };
        Server {
            child,
            addr,
            grpc_addr,
            udp_addr,
            dir: dir.to_path_buf(),
            _tmp: None,
        }
    }

    /// kill -9: no shutdown, no checkpoint, nothing flushed.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn connect(&self) -> Conn {
        Conn::new(self.addr)
    }
}

/// The last bytes a server wrote to stderr, read by a thread until the server exits (so that
/// the pipe never fills and blocks it).
struct LogTail {
    reader: std::thread::JoinHandle<Vec<u8>>,
}

impl LogTail {
    const KEEP: usize = 16 * 1024;

    fn drain(mut stderr: std::process::ChildStderr) -> LogTail {
        let reader = std::thread::spawn(move || {
            let mut tail = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = stderr.read(&mut buf) {
                tail.extend_from_slice(&buf[..n]);
                let over = tail.len().saturating_sub(LogTail::KEEP);
                tail.drain(..over);
            }
            tail
        });
        LogTail { reader }
    }

    /// Waits for the server's stderr to close (it has exited) and returns what it kept.
    fn end(self) -> String {
        let tail = self.reader.join().unwrap_or_default();
        String::from_utf8_lossy(&tail).into_owned()
    }
}

/// `--io-engine X` when the environment names `CAIRN_TEST_IO_ENGINE=X` (scripts/test-all.sh
/// runs the wire tests again on `tokio`; uring is the default on Linux), unless the test's
/// server uses TLS (tokio only). `uring` on a machine without io_uring is ignored, with a note
/// on stderr, except under CI (`CI` set), where it fails the test: the run asked for the
/// io_uring engine and would not have tested it.
fn io_engine(args: &[&str]) -> Vec<String> {
    let Ok(engine) = std::env::var("CAIRN_TEST_IO_ENGINE") else {
        return Vec::new();
    };
    if args.contains(&"-Z") || args.contains(&"--enable-ssl") {
        return Vec::new();
    }
    if engine == "uring" {
        if let Err(e) = cairn_server::uring::available() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CAIRN_TEST_IO_ENGINE=uring under CI, and io_uring is not available ({e})"
            );
            eprintln!("CAIRN_TEST_IO_ENGINE=uring ignored: io_uring is not available here ({e})");
            return Vec::new();
        }
    }
    vec!["--io-engine".to_string(), engine]
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server running in this test's process (real TCP socket, its own runtime), for tests that
/// reach into it: move its clock ahead, or give it a fault-injecting file system. Stopped when
/// dropped.
pub struct InProcess {
    pub addr: SocketAddr,
    pub ctx: std::sync::Arc<cairn_server::Ctx>,
    _runtime: tokio::runtime::Runtime,
    _stop: tokio::sync::watch::Sender<bool>,
}

impl InProcess {
    /// Serves `ctx` on 127.0.0.1 (an ephemeral port).
    pub fn serve(ctx: std::sync::Arc<cairn_server::Ctx>) -> InProcess {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        runtime.spawn(cairn_server::server::run(
            std::sync::Arc::clone(&ctx),
            listener,
            stopped,
        ));
        InProcess {
            addr,
            ctx,
            _runtime: runtime,
            _stop: stop,
        }
    }

    /// A pure cache (`--persistence off`) with the default settings.
    pub fn cache() -> InProcess {
        let config = cairn_server::Config {
            persistence: "off".into(),
            ..cairn_server::Config::default()
        };
        InProcess::serve(cairn_server::Ctx::open(config).expect("open"))
    }

    pub fn connect(&self) -> Conn {
        Conn::new(self.addr)
    }
}

/// A raw client connection.
pub struct Conn {
    pub stream: TcpStream,
}

impl Conn {
    pub fn new(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).expect("connect");
        // A safety net against a hung server, not a wait for anything.
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        Conn { stream }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    /// Reads until the buffer ends with `end`.
    pub fn read_until(&mut self, end: &[u8]) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 65536];
        while !got.ends_with(end) {
            let n = self.stream.read(&mut buf).expect("read");
            assert!(
                n > 0,
                "server closed; got so far: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        got
    }

    /// Sends `request` followed by a `mn` marker and returns every byte answered before `MN`.
    /// Extra or missing output therefore shows up in the comparison.
    pub fn exchange(&mut self, request: &[u8]) -> Vec<u8> {
        self.send(request);
        self.send(b"mn\r\n");
        let mut got = self.read_until(b"MN\r\n");
        got.truncate(got.len() - 4);
        got
    }

    /// Reads until the server closes the connection.
    pub fn read_to_close(&mut self) -> Vec<u8> {
        let mut got = Vec::new();
        let _ = self.stream.read_to_end(&mut got);
        got
    }
}

/// Runs a golden table on one connection: each request must get exactly its reply.
pub fn golden(conn: &mut Conn, table: &[(&str, &str)]) {
    for (i, (request, expected)) in table.iter().enumerate() {
        let got = conn.exchange(request.as_bytes());
        let got = String::from_utf8_lossy(&got);
        assert_eq!(
            ttl_one_tick_later_accepted(&got, expected),
            *expected,
            "row {i}: request {request:?}"
        );
    }
}

/// `got` with each remaining TTL flag (`t<N>`) of a meta reply's header that reads one second
/// less than `expected`'s flag at the same place raised to `expected`'s: the server's clock
/// may tick between the write that set the TTL and the read that reports it. Any other
/// difference is kept.
fn ttl_one_tick_later_accepted(got: &str, expected: &str) -> String {
    let ttl = |token: &str| token.strip_prefix('t').and_then(|n| n.parse::<i64>().ok());
    let mut got_lines: Vec<String> = got.split("\r\n").map(str::to_string).collect();
    for (g, e) in got_lines.iter_mut().zip(expected.split("\r\n")) {
        let (gt, et): (Vec<&str>, Vec<&str>) = (g.split(' ').collect(), e.split(' ').collect());
        // Only a meta reply's header line (VA, HD, ...) carries flags; data lines are kept.
        let meta_header = et[0].len() == 2 && et[0].bytes().all(|b| b.is_ascii_uppercase());
        if gt.len() != et.len() || !meta_header {
            continue;
        }
        let fixed: Vec<&str> = gt
            .iter()
            .zip(&et)
            .map(|(gw, ew)| match (ttl(gw), ttl(ew)) {
                (Some(gn), Some(en)) if en > 0 && gn == en - 1 => *ew,
                _ => *gw,
            })
            .collect();
        *g = fixed.join(" ");
    }
    got_lines.join("\r\n")
}

/// A `stats persistence` field (asked without `Conn::exchange`, whose `mn` is a durability
/// fence).
pub fn persistence_stat(c: &mut Conn, name: &str) -> String {
    c.send(b"stats persistence\r\n");
    let stats = String::from_utf8(c.read_until(b"END\r\n")).unwrap();
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no {name} in {stats}"))
        .to_string()
}

/// A `stats persistence` field that is a number.
pub fn persistence_number(c: &mut Conn, name: &str) -> u64 {
    persistence_stat(c, name).trim().parse().unwrap()
}
