//! The few lines of memcached's text protocol cairnctl speaks: `stats [group]`, `version` and
//! admin lines (`checkpoint`), on one connection to `--memcached`.
//!
//! ```text
//!   stats persistence\r\n  ──>  STAT name value\r\n ... END\r\n   ──> [(name, value)]
//!   version\r\n            ──>  VERSION 1.6.x\r\n
//!   checkpoint\r\n         ──>  OK\r\n | CLIENT_ERROR ...\r\n | SERVER_ERROR ...\r\n
//! ```
//!
//! Non-goals: storage commands (cairnctl writes over gRPC), pipelining.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use crate::error::{CtlError, Port, Result};

/// How long a connection may take before the server counts as unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a `stats` or `version` answer may take.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// One connection to a memcached port.
pub struct Memcached {
    pub addr: String,
    stream: BufReader<TcpStream>,
}

impl Memcached {
    pub async fn connect(addr: &str) -> Result<Memcached> {
        let unreachable = |why: String| CtlError::Unreachable {
            port: Port::Memcached,
            addr: addr.to_string(),
            why,
        };
        let stream = match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(unreachable(e.to_string())),
            Err(_) => return Err(unreachable(format!("no answer within {CONNECT_TIMEOUT:?}"))),
        };
        let _ = stream.set_nodelay(true);
        Ok(Memcached {
            addr: addr.to_string(),
            stream: BufReader::new(stream),
        })
    }

    async fn send(&mut self, line: &str) -> Result<()> {
        let bytes = format!("{line}\r\n");
        self.stream
            .get_mut()
            .write_all(bytes.as_bytes())
            .await
            .map_err(|e| self.lost(e))
    }

    fn lost(&self, e: impl std::fmt::Display) -> CtlError {
        CtlError::Unreachable {
            port: Port::Memcached,
            addr: self.addr.clone(),
            why: format!("the connection failed: {e}"),
        }
    }

    /// One reply line, without its `\r\n`, waiting at most `limit` (None: as long as it takes).
    async fn read_line(&mut self, limit: Option<Duration>) -> Result<String> {
        let mut line = String::new();
        let read = self.stream.read_line(&mut line);
        let n = match limit {
            Some(d) => tokio::time::timeout(d, read)
                .await
                .map_err(|_| self.lost(format!("no reply within {d:?}")))?,
            None => read.await,
        }
        .map_err(|e| self.lost(e))?;
        if n == 0 {
            return Err(self.lost("closed by the server"));
        }
        Ok(line.trim_end_matches(['\r', '\n']).to_string())
    }

    /// Sends one line and returns the one line answered (an admin line, `version`), waiting
    /// at most `limit`.
    pub async fn call(&mut self, line: &str, limit: Option<Duration>) -> Result<String> {
        self.send(line).await?;
        self.read_line(limit).await
    }

    /// `stats [group]`: every `STAT name value` line up to `END`, in the server's order.
    pub async fn stats(&mut self, group: Option<&str>) -> Result<Vec<(String, String)>> {
        let cmd = match group {
            Some(g) => format!("stats {g}"),
            None => "stats".to_string(),
        };
        self.send(&cmd).await?;
        let mut out = Vec::new();
        loop {
            let line = self.read_line(Some(REPLY_TIMEOUT)).await?;
            if line == "END" {
                return Ok(out);
            }
            if let Some(stat) = line.strip_prefix("STAT ") {
                let (name, value) = stat.split_once(' ').unwrap_or((stat, ""));
                out.push((name.to_string(), value.to_string()));
            } else if refusal(&line) {
                return Err(CtlError::Refused {
                    addr: self.addr.clone(),
                    reply: format!("{cmd}: {line}"),
                });
            } else {
                return Err(CtlError::Protocol {
                    addr: self.addr.clone(),
                    reply: line,
                });
            }
        }
    }
}

/// Whether a reply line is one of memcached's errors.
pub fn refusal(line: &str) -> bool {
    line == "ERROR" || line.starts_with("CLIENT_ERROR") || line.starts_with("SERVER_ERROR")
}

/// A `stats` answer as a lookup table.
pub fn lookup(stats: &[(String, String)]) -> std::collections::BTreeMap<&str, &str> {
    stats
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}
