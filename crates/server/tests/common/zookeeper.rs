//! Debian's ZooKeeper (the `zookeeper` package) run by a test on a loopback port.
//!
//! ```text
//!   sh (stdin: a pipe held by the test) ── java ... ZooKeeperServerMain zoo.cfg &
//!      prints java's PID; when the pipe closes (the test ended, or even panicked or was
//!      killed) it kills java by that PID and waits for it
//! ```
//!
//! Ready means it answers `ruok` with `imok`. Its ticks are 100 ms, so sessions may be as
//! short as 200 ms (tests use about a second) and expire within a tick of their timeout.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// Where Debian puts the server's jar (its manifest names the jars it needs).
pub const ZOOKEEPER_JAR: &str = "/usr/share/java/zookeeper.jar";

/// Whether Debian's ZooKeeper is installed. Absent: the test is skipped with a note, except
/// under CI, where .ci/run installs it and its absence is a failure.
pub fn installed() -> bool {
    let found = std::path::Path::new(ZOOKEEPER_JAR).exists()
        && Command::new("java").arg("-version").output().is_ok();
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "ZooKeeper missing under CI"
        );
        eprintln!("ZooKeeper not installed: skipped (apt-get install zookeeper)");
    }
    found
}

/// A free loopback port (bound, then released for the server that takes it next).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running ZooKeeper server.
pub struct ZooKeeper {
    pub port: u16,
    dir: tempfile::TempDir,
    running: Option<Running>,
}

struct Running {
    wrapper: Child,
    /// Closing it makes the wrapper stop java.
    stdin: ChildStdin,
    java_pid: u32,
}

impl ZooKeeper {
    /// Starts a server on a free port with an empty data folder, and waits until it is ready.
    pub fn start() -> ZooKeeper {
        let mut zk = ZooKeeper {
            port: free_port(),
            dir: tempfile::tempdir().expect("temp dir"),
            running: None,
        };
        zk.launch();
        zk
    }

    /// `127.0.0.1:<port>`, for `--zookeeper`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn launch(&mut self) {
        assert!(self.running.is_none());
        std::fs::create_dir_all(self.data_dir()).unwrap();
        let cfg = self.dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "tickTime=100\ndataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\n\
                 maxSessionTimeout=60000\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=ruok\n",
                self.data_dir().display(),
                self.port
            ),
        )
        .unwrap();
        let java = format!(
            "java -Xms16m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
             -cp {ZOOKEEPER_JAR} org.apache.zookeeper.server.ZooKeeperServerMain {}",
            cfg.display()
        );
        let script = format!(
            "exec 3<&0; {java} </dev/null >{log} 2>&1 & pid=$!; echo $pid; \
             read _ <&3; kill $pid 2>/dev/null; wait $pid",
            log = self.dir.path().join("zookeeper.log").display()
        );
        let mut wrapper = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let stdin = wrapper.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(wrapper.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let java_pid = line.trim().parse().expect("java's pid");
        self.running = Some(Running {
            wrapper,
            stdin,
            java_pid,
        });
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if self.ruok() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "ZooKeeper did not start: {}",
                std::fs::read_to_string(self.dir.path().join("zookeeper.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the server answers `ruok` with `imok`.
    fn ruok(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        let mut answer = String::new();
        s.write_all(b"ruok").is_ok() && s.read_to_string(&mut answer).is_ok() && answer == "imok"
    }

    /// Stops the server by its PID (SIGKILL: a crash, nothing flushed) and waits until it is
    /// gone.
    pub fn kill(&mut self) {
        let Some(r) = self.running.take() else { return };
        let _ = Command::new("kill")
            .args(["-9", &r.java_pid.to_string()])
            .status();
        drop(r.stdin);
        let mut wrapper = r.wrapper;
        let _ = wrapper.wait();
    }

    /// Starts the server again on the same port; `wipe` first deletes its data, so every
    /// session and znode is gone (a lost ensemble).
    pub fn restart(&mut self, wipe: bool) {
        self.kill();
        if wipe {
            std::fs::remove_dir_all(self.data_dir()).unwrap();
        }
        self.launch();
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            // The wrapper kills java by its PID and waits for it.
            drop(r.stdin);
            let mut wrapper = r.wrapper;
            let _ = wrapper.wait();
        }
    }
}

/// A ZooKeeper client for the test's own reads (the `zookeeper-client` crate on a runtime of
/// its own).
pub struct Inspector {
    runtime: tokio::runtime::Runtime,
    client: zookeeper_client::Client,
}

impl Inspector {
    pub fn connect(address: &str) -> Inspector {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = runtime
            .block_on(
                zookeeper_client::Client::connector()
                    .with_session_timeout(Duration::from_secs(20))
                    .connect(address),
            )
            .expect("connect to ZooKeeper");
        Inspector { runtime, client }
    }

    /// The children of `path` (sorted), or None if it does not exist.
    pub fn children(&self, path: &str) -> Option<Vec<String>> {
        match self.runtime.block_on(self.client.list_children(path)) {
            Ok(mut c) => {
                c.sort();
                Some(c)
            }
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => panic!("list {path}: {e}"),
        }
    }

    /// The data of `path` and its ephemeral owner (0 for a persistent znode), if it exists.
    pub fn data(&self, path: &str) -> Option<(Vec<u8>, i64)> {
        match self.runtime.block_on(self.client.get_data(path)) {
            Ok((data, stat)) => Some((data, stat.ephemeral_owner)),
            Err(zookeeper_client::Error::NoNode) => None,
            Err(e) => panic!("get {path}: {e}"),
        }
    }

    /// Creates `path` (persistent), and its parents.
    pub fn mkdir(&self, path: &str) {
        let options = zookeeper_client::CreateMode::Persistent
            .with_acls(zookeeper_client::Acls::anyone_all());
        self.runtime
            .block_on(self.client.mkdir(path, &options))
            .unwrap();
    }

    /// Deletes `path` (which has no children), if it exists.
    pub fn delete(&self, path: &str) {
        match self.runtime.block_on(self.client.delete(path, None)) {
            Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => panic!("delete {path}: {e}"),
        }
    }

    /// Polls `f` every 20 ms until it holds, for at most `limit` (then panics with `what`).
    pub fn wait_for(&self, what: &str, limit: Duration, mut f: impl FnMut(&Inspector) -> bool) {
        let deadline = Instant::now() + limit;
        while !f(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
