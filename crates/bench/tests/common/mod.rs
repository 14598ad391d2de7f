//! The real cairn server for cairn-bench's end-to-end tests.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

/// `target/debug/cairn`, or None where the server is not built (a failure under CI, where
/// test-all.sh builds the whole workspace first).
pub fn cairn_binary() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cairn = root.join("target/debug/cairn");
    if cairn.exists() {
        return Some(cairn);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "target/debug/cairn missing under CI"
    );
    eprintln!("skipped: build the server first (cargo build -p cairn-server)");
    None
}

/// A cairn process with a fresh data folder, killed by the test that started it.
pub struct Cairn {
    pub child: Child,
    /// The memcached port.
    pub port: u16,
    /// Where the gRPC API listens, if it is on.
    pub grpc_addr: Option<String>,
    _dir: tempfile::TempDir,
}

impl Cairn {
    /// `cairn -p 0 --persistence off --data-dir <fresh> <args>` once it is ready (it printed
    /// "cairn listening on ADDR", after its gRPC address when gRPC is on); None where the
    /// server is not built.
    pub fn start(args: &[&str]) -> Option<Cairn> {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(cairn_binary()?)
            .args(["-p", "0", "--persistence", "off", "--data-dir"])
            .arg(dir.path())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut grpc_addr = None;
        let port = loop {
            let line = lines
                .next()
                .expect("cairn exited before it was ready")
                .unwrap();
            if let Some(a) = line.strip_prefix("cairn grpc listening on ") {
                grpc_addr = Some(a.to_string());
            }
            if let Some(a) = line.strip_prefix("cairn listening on ") {
                break a.rsplit(':').next().unwrap().parse().unwrap();
            }
        };
        // The server prints more after this line: keep reading its stdout (a closed pipe would
        // fail its next print).
        std::thread::spawn(move || lines.for_each(drop));
        Some(Cairn {
            child,
            port,
            grpc_addr,
            _dir: dir,
        })
    }
}
