//! memcached's UDP protocol (`-U PORT`, off by default as in memcached 1.5.6 and later): each
//! datagram is an 8-byte frame header and requests of the text or the binary protocol (its
//! first byte says which), answered through the same code a TCP connection's requests are
//! (`cmd::answer_next` for text, `cmd::binary::step` for binary, so writes take the one write
//! path, cairn-engine), each command's answer sent back as numbered datagrams of at most 1400
//! bytes.
//!
//! ```text
//!   client ── datagram: header (request id, seq, total = 1, reserved) + payload ──> socket.rs
//!     frame.rs: check the header ─> answer.rs: answer the payload's requests ─> messages
//!     frame.rs: each message cut into datagrams (request id, i, n, 0) + 1392 bytes ─> client
//!   dropped and counted (`stats`: udp_malformed, udp_too_large; never a panic): no payload,
//!   a multi-datagram request, a datagram over 64 KiB, an answer of more than 65535 datagrams
//! ```
//!
//! UDP replies go to whatever source address a datagram names, and a small request can ask
//! for a large reply: an open UDP port can be turned on third parties (the 2018 memcached
//! reflection attacks). It is therefore off unless `-U` names a port, and belongs on a
//! trusted network only (docs/CONFIGURATION.md).
//!
//! Modules: `frame` (the header, request checks, cutting replies), `answer` (a payload's
//! requests, one datagram a session), `socket` (the loops).
//!
//! Non-goals: multi-datagram requests (memcached drops them too), TLS and authentication
//! (UDP has no connection to hold them; `-Y` with `-U` refuses to start, as memcached).

pub mod answer;
pub mod frame;
mod socket;

pub use socket::serve;

/// Binds the UDP socket on `-l`'s address (a name resolved as the TCP listener's is) and
/// `-U`'s port, if `-U` is not 0.
pub async fn bind(config: &crate::Config) -> Option<std::io::Result<tokio::net::UdpSocket>> {
    if config.udp_port == 0 {
        return None;
    }
    Some(tokio::net::UdpSocket::bind((config.listen.as_str(), config.udp_port)).await)
}
