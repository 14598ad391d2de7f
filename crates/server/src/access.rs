//! Who may talk to the memcached port: memcached's ASCII authentication (`-Y AUTHFILE`) and TLS
//! (`-Z` with `ssl_chain_cert` and `ssl_key`), both memcached's way.
//!
//! ```text
//!   accept ──(-Z)── TLS handshake (rustls) ──> Stream::Right(TLS) ─┐
//!          └─────────────────────────────────> Stream::Left(TCP) ──┴─> connection::serve
//!   connection::serve (-Y): until `set <any> <flags> <exptime> <n>` carries `user pass` that
//!   the file holds, every request gets `CLIENT_ERROR unauthenticated` ([`AuthFile::check`])
//! ```
//!
//! The auth file holds `user:pass` lines (the password is everything after the first `:`);
//! blank lines are skipped. A file that cannot be read or a line without `:` refuses the start.

use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio_rustls::rustls;
use tokio_rustls::TlsAcceptor;

/// A client connection: plain TCP, or TLS over TCP. Both read and write like a socket.
pub type Stream =
    tokio_util::either::Either<TcpStream, Box<tokio_rustls::server::TlsStream<TcpStream>>>;

/// The TCP socket under a stream (for its addresses).
pub fn tcp(stream: &Stream) -> &TcpStream {
    match stream {
        Stream::Left(tcp) => tcp,
        Stream::Right(tls) => tls.get_ref().0,
    }
}

/// How long a client has to complete the TLS handshake before its connection is dropped.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Turns an accepted socket into the connection's stream: the TLS handshake under `-Z`. None
/// when the handshake fails or times out (counted in `tls_handshake_failures`).
pub async fn handshake(
    tls: Option<&TlsAcceptor>,
    counters: &crate::stats::Counters,
    tcp: TcpStream,
) -> Option<Stream> {
    let _ = tcp.set_nodelay(true);
    let Some(acceptor) = tls else {
        return Some(Stream::Left(tcp));
    };
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(Stream::Right(Box::new(tls))),
        Ok(Err(e)) => {
            crate::stats::bump(&counters.tls_handshake_failures);
            tracing::debug!("TLS handshake failed: {e}");
            None
        }
        Err(_) => {
            crate::stats::bump(&counters.tls_handshake_failures);
            tracing::debug!("TLS handshake timed out");
            None
        }
    }
}

/// The users of `-Y AUTHFILE`.
#[derive(Debug)]
pub struct AuthFile {
    /// (user, password) pairs, in file order.
    users: Vec<(Vec<u8>, Vec<u8>)>,
}

impl AuthFile {
    /// Reads `user:pass` lines.
    pub fn load(path: &Path) -> Result<AuthFile, String> {
        let text = std::fs::read(path)
            .map_err(|e| format!("cannot read auth file {}: {e}", path.display()))?;
        let mut users = Vec::new();
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let Some(colon) = line.iter().position(|&b| b == b':') else {
                return Err(format!(
                    "auth file {} line {}: expected user:pass",
                    path.display(),
                    n + 1
                ));
            };
            users.push((line[..colon].to_vec(), line[colon + 1..].to_vec()));
        }
        if users.is_empty() {
            return Err(format!("auth file {} holds no user", path.display()));
        }
        Ok(AuthFile { users })
    }

    /// Whether the data of the authenticating `set`, `user pass`, names a user of the file
    /// with that password.
    pub fn check(&self, data: &[u8]) -> bool {
        let Some(space) = data.iter().position(|&b| b == b' ') else {
            return false;
        };
        let (user, pass) = (&data[..space], &data[space + 1..]);
        // Every entry is compared in full, so the time taken does not tell which matched.
        self.users.iter().fold(false, |found, (u, p)| {
            found | (same(u, user) & same(p, pass))
        })
    }
}

/// Byte equality that reads the whole of both inputs.
fn same(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for (i, &x) in a.iter().enumerate() {
        diff |= usize::from(x ^ b.get(i).copied().unwrap_or(!x));
    }
    diff == 0
}

/// The TLS acceptor for `-Z`: the certificate chain and private key, PEM files.
pub fn tls_acceptor(chain: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(chain)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("ssl_chain_cert {}: {e}", chain.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "ssl_chain_cert {}: no certificate",
            chain.display()
        ));
    }
    let key =
        PrivateKeyDer::from_pem_file(key).map_err(|e| format!("ssl_key {}: {e}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|e| format!("ssl_chain_cert / ssl_key: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_file_lines_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth");
        std::fs::write(&path, "alice:s3cret\r\n\nbob:pa:ss\n").unwrap();
        let auth = AuthFile::load(&path).unwrap();
        assert!(auth.check(b"alice s3cret"));
        assert!(auth.check(b"bob pa:ss"));
        for wrong in [
            &b"alice s3cre"[..],
            b"alice s3cret2",
            b"alice",
            b"",
            b"carol s3cret",
            b"bob pa",
        ] {
            assert!(!auth.check(wrong), "{:?}", String::from_utf8_lossy(wrong));
        }
        std::fs::write(&path, "alice\n").unwrap();
        assert!(AuthFile::load(&path).unwrap_err().contains("line 1"));
        std::fs::write(&path, "\n").unwrap();
        assert!(AuthFile::load(&path).is_err());
        assert!(AuthFile::load(&dir.path().join("none")).is_err());
    }

    #[test]
    fn bad_tls_files_are_refused_naming_them() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = tls_acceptor(&empty, &empty).err().unwrap();
        assert!(err.contains("ssl_chain_cert"), "{err}");
        let err = tls_acceptor(&dir.path().join("none"), &empty)
            .err()
            .unwrap();
        assert!(err.contains("ssl_chain_cert"), "{err}");
    }
}
