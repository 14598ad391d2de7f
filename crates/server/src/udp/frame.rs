//! memcached's UDP frame: the 8-byte header before every datagram's payload, how a request
//! datagram is checked, and how a reply is cut into numbered datagrams.
//!
//! ```text
//!   bytes 0-1  request id        the client's; echoed in every datagram of the reply
//!         2-3  sequence number   0 .. total-1 within one reply message
//!         4-5  total datagrams   of the message (a request must say 1)
//!         6-7  reserved          0 (ignored in a request, as memcached does)
//!   each 16-bit field big-endian (high byte first)
//!
//!   reply message (one command's answer) ─ cut into DATA_MAX = 1392-byte chunks ─> datagrams
//!   of at most DATAGRAM_MAX = 1400 bytes: header (request id, i, n, 0) + chunk i of n
//! ```
//!
//! The sizes are memcached's (`memcached.h`: `UDP_MAX_PAYLOAD_SIZE` 1400 with the header,
//! `UDP_HEADER_SIZE` 8, `UDP_READ_BUFFER_SIZE` 65536).
//!
//! Non-goals: the socket (socket.rs) and what the payload means (answer.rs).

/// Bytes of the frame header.
pub const HEADER_LEN: usize = 8;

/// The largest datagram the server sends, header included (memcached's
/// `UDP_MAX_PAYLOAD_SIZE`): it fits an Ethernet frame's 1500 bytes with IP and UDP headers.
pub const DATAGRAM_MAX: usize = 1400;

/// Reply bytes per datagram.
pub const DATA_MAX: usize = DATAGRAM_MAX - HEADER_LEN;

/// The largest request datagram read, header included (memcached's `UDP_READ_BUFFER_SIZE`).
/// IPv4 and IPv6 carry at most 65507 and 65527 bytes of UDP payload, so over either (without
/// IPv6 jumbograms) every datagram fits.
pub const REQUEST_MAX: usize = 65536;

/// The largest request datagram read whole: [`REQUEST_MAX`] (a test may lower it, see
/// `crate::test_hooks::udp_request_max`, to send one that is longer).
pub fn request_max() -> usize {
    #[cfg(feature = "test-hooks")]
    if let Some(n) = crate::test_hooks::udp_request_max() {
        return n.clamp(HEADER_LEN + 1, REQUEST_MAX);
    }
    REQUEST_MAX
}

/// The most datagrams one reply message may take: the header counts them in 16 bits.
pub const MESSAGE_DATAGRAMS_MAX: usize = u16::MAX as usize;

/// The largest reply message: 65535 datagrams of [`DATA_MAX`] bytes (about 87 MiB).
pub const MESSAGE_MAX: usize = MESSAGE_DATAGRAMS_MAX * DATA_MAX;

/// The frame header of one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Chosen by the client, echoed in the reply, so that it can match replies to requests.
    pub request_id: u16,
    /// This datagram's place in its message, from 0.
    pub sequence: u16,
    /// Datagrams in the message.
    pub total: u16,
    /// 0; ignored in a request.
    pub reserved: u16,
}

impl Header {
    /// The header as sent, each field big-endian.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..2].copy_from_slice(&self.request_id.to_be_bytes());
        b[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        b[4..6].copy_from_slice(&self.total.to_be_bytes());
        b[6..8].copy_from_slice(&self.reserved.to_be_bytes());
        b
    }

    /// The header at the start of `b`.
    pub fn decode(b: &[u8; HEADER_LEN]) -> Header {
        let field = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        Header {
            request_id: field(0),
            sequence: field(2),
            total: field(4),
            reserved: field(6),
        }
    }
}

/// Why a request datagram is dropped unanswered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    /// No payload after the header (memcached reads a datagram only past 8 bytes).
    Short,
    /// Its header says the request spans several datagrams (total other than 1): memcached
    /// takes single-datagram requests only.
    MultiDatagram,
}

/// A request datagram's header and payload (at least one byte), or why it is dropped. Only
/// the total is checked, as memcached does: the sequence number and reserved bytes of a
/// request are not.
pub fn request(datagram: &[u8]) -> Result<(Header, &[u8]), Malformed> {
    let Some((head, payload)) = datagram.split_first_chunk::<HEADER_LEN>() else {
        return Err(Malformed::Short);
    };
    if payload.is_empty() {
        return Err(Malformed::Short);
    }
    let header = Header::decode(head);
    if header.total != 1 {
        return Err(Malformed::MultiDatagram);
    }
    Ok((header, payload))
}

/// One reply message to send: a command's whole answer, numbered under one request id.
#[derive(Debug)]
pub struct Message<'a> {
    request_id: u16,
    data: &'a [u8],
    total: u16,
}

impl<'a> Message<'a> {
    /// The message of `data` (not empty) for `request_id`; None when it needs more than
    /// [`MESSAGE_DATAGRAMS_MAX`] datagrams.
    pub fn new(request_id: u16, data: &'a [u8]) -> Option<Message<'a>> {
        debug_assert!(!data.is_empty(), "an empty answer is no message");
        let total = u16::try_from(data.len().div_ceil(DATA_MAX)).ok()?;
        Some(Message {
            request_id,
            data,
            total,
        })
    }

    /// How many datagrams the message takes.
    pub fn total(&self) -> u16 {
        self.total
    }

    /// Datagram `sequence` (below [`Message::total`]) into `buf`, replacing its bytes: the
    /// header, then the message's `sequence`-th chunk of [`DATA_MAX`] bytes.
    pub fn datagram(&self, sequence: u16, buf: &mut Vec<u8>) {
        assert!(
            sequence < self.total,
            "datagram {sequence} of {}",
            self.total
        );
        let start = usize::from(sequence) * DATA_MAX;
        let end = (start + DATA_MAX).min(self.data.len());
        let header = Header {
            request_id: self.request_id,
            sequence,
            total: self.total,
            reserved: 0,
        };
        buf.clear();
        buf.extend_from_slice(&header.encode());
        buf.extend_from_slice(&self.data[start..end]);
        debug_assert!(buf.len() <= DATAGRAM_MAX);
    }
}

const _: () = assert!(MESSAGE_MAX == 65535 * 1392);
// Every datagram IPv4 or IPv6 can carry is read whole.
const _: () = assert!(REQUEST_MAX >= 65527);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_four_big_endian_fields() {
        let h = Header {
            request_id: 0x0102,
            sequence: 0x0304,
            total: 0x0506,
            reserved: 0x0708,
        };
        assert_eq!(h.encode(), [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(Header::decode(&h.encode()), h);
    }

    /// Too short and multi-datagram requests are refused; sequence and reserved bytes are not
    /// looked at, as memcached does.
    #[test]
    fn requests_are_checked_as_memcached_does() {
        assert_eq!(request(b""), Err(Malformed::Short));
        assert_eq!(request(b"\0\x01\0\0\0\x01\0"), Err(Malformed::Short));
        assert_eq!(request(b"\0\x01\0\0\0\x01\0\0"), Err(Malformed::Short));
        assert_eq!(
            request(b"\0\x01\0\0\0\x02\0\0get a\r\n"),
            Err(Malformed::MultiDatagram)
        );
        assert_eq!(
            request(b"\0\x01\0\0\0\0\0\0get a\r\n"),
            Err(Malformed::MultiDatagram)
        );
        let (h, payload) = request(b"\xa0\x01\0\x07\0\x01\xff\xffget a\r\n").unwrap();
        assert_eq!((h.request_id, h.sequence, h.total), (0xa001, 7, 1));
        assert_eq!(payload, b"get a\r\n");
    }

    /// A message is cut into 1392-byte chunks, each with the header numbering it; the
    /// payloads put back in order are the message.
    #[test]
    fn a_reply_is_cut_into_numbered_datagrams_of_at_most_1400_bytes() {
        for (len, datagrams) in [(1, 1), (1392, 1), (1393, 2), (20_050, 15)] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let m = Message::new(53, &data).unwrap();
            assert_eq!(m.total(), datagrams, "{len} bytes");
            let mut joined = Vec::new();
            let mut buf = Vec::new();
            for seq in 0..m.total() {
                m.datagram(seq, &mut buf);
                assert!(buf.len() <= DATAGRAM_MAX);
                let h = Header::decode(buf[..8].try_into().unwrap());
                assert_eq!(
                    (h.request_id, h.sequence, h.total, h.reserved),
                    (53, seq, datagrams, 0)
                );
                if seq + 1 < m.total() {
                    assert_eq!(buf.len(), DATAGRAM_MAX);
                }
                joined.extend_from_slice(&buf[8..]);
            }
            assert_eq!(joined, data);
        }
    }

    #[test]
    fn a_message_of_more_than_65535_datagrams_is_refused() {
        let data = vec![b'x'; MESSAGE_MAX + 1];
        assert!(Message::new(1, &data).is_none());
        assert_eq!(
            Message::new(1, &data[..MESSAGE_MAX]).unwrap().total(),
            65535
        );
    }
}
