//! Binary requests: the incremental parser and what it yields, borrowing keys and values from
//! the input.
//!
//! ```text
//!   parse(buf) ─> < 24 bytes, or the body not all here ──────────> Ok(None): read more
//!             ├─> first byte not 0x80 ───────────────────────────> Err, close
//!             ├─> key + extras > body, key > 250, a known opcode
//!             │   with the wrong extras/key/body lengths,
//!             │   a body over the item limit + key + extras ──────> Err, close (memcached
//!             │                                                     closes on these too)
//!             ├─> a store whose value is over the item limit ────> Err(TooLarge): skip the
//!             │                                                     value as it arrives
//!             └─> Ok(Some((BinRequest, packet length)))
//! ```
//!
//! Every check is made on the header alone, before the body is waited for, so a bad length
//! never makes the server hold more than one item's worth of input.
//!
//! Non-goals: executing (the server does), the response bytes (response.rs).

use super::error::BinError;
use super::header::{opcode as op, Header, HEADER_LEN, REQUEST_MAGIC};
use super::response::Status;
use crate::limits::{key_is_valid, Limits, MAX_DATA_LEN};
use crate::request::StoreKind;

/// Most extras bytes any request carries (incr/decr: 20); the body bound adds them.
const MAX_EXTRAS: usize = 20;

/// What a binary request asks. The `quiet` variants answer only errors (GetQ/GetKQ/GatQ:
/// only hits).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command<'a> {
    /// Get, GetQ, GetK, GetKQ.
    Get {
        key: &'a [u8],
        quiet: bool,
        with_key: bool,
    },
    /// GAT, GATQ, GATK, GATKQ: a get that sets a new expiration time.
    Gat {
        key: &'a [u8],
        exptime: u32,
        quiet: bool,
        with_key: bool,
    },
    /// Touch: a new expiration time; answers the flags, not the value.
    Touch {
        key: &'a [u8],
        exptime: u32,
    },
    /// Set, Add, Replace (flags and expiration in the extras), Append, Prepend (none); each
    /// with its quiet variant. A CAS in the header makes Set/Add/Replace a compare-and-swap
    /// and Append/Prepend conditional on it.
    Store {
        kind: StoreKind,
        key: &'a [u8],
        flags: u32,
        exptime: u32,
        value: &'a [u8],
        quiet: bool,
    },
    Delete {
        key: &'a [u8],
        quiet: bool,
    },
    /// Increment/Decrement (+Q): a missing key is created holding `initial` unless
    /// `exptime` is 0xffffffff.
    Arith {
        incr: bool,
        key: &'a [u8],
        delta: u64,
        initial: u64,
        exptime: u32,
        quiet: bool,
    },
    Quit {
        quiet: bool,
    },
    Flush {
        delay: u32,
        quiet: bool,
    },
    Noop,
    Version,
    /// Stat: the group in the key (empty: the general figures).
    Stat {
        group: &'a [u8],
    },
    Verbosity {
        level: u32,
    },
    /// SASL list mechanisms, auth, step.
    Sasl,
    /// An opcode cairn does not implement.
    Unknown,
}

/// The expiration time that tells Increment/Decrement not to create a missing key.
pub const NO_CREATE: u32 = 0xffff_ffff;

/// One parsed request: its header (the opcode, opaque and CAS the response needs) and
/// command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BinRequest<'a> {
    pub header: Header,
    pub command: Command<'a>,
}

/// The lengths a known opcode's packet must have, as memcached checks them.
fn shape_ok(opcode: u8, ext: usize, key: usize, body: usize) -> bool {
    match opcode {
        op::VERSION | op::NOOP | op::QUIT | op::QUITQ | op::SASL_LIST_MECHS => body == 0,
        op::FLUSH | op::FLUSHQ => key == 0 && body == ext && (ext == 0 || ext == 4),
        op::SET | op::SETQ | op::ADD | op::ADDQ | op::REPLACE | op::REPLACEQ => {
            ext == 8 && key != 0
        }
        op::GET | op::GETQ | op::GETK | op::GETKQ | op::DELETE | op::DELETEQ => {
            ext == 0 && key != 0 && body == key
        }
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => {
            ext == 20 && key != 0 && body == key + ext
        }
        op::APPEND | op::APPENDQ | op::PREPEND | op::PREPENDQ => ext == 0 && key != 0,
        op::STAT => ext == 0 && body == key,
        op::SASL_AUTH | op::SASL_STEP => ext == 0 && key != 0,
        op::TOUCH | op::GAT | op::GATQ | op::GATK | op::GATKQ => {
            ext == 4 && key != 0 && body == key + ext
        }
        op::VERBOSITY => ext == 4 && key == 0 && body == 4,
        _ => true,
    }
}

/// The storage opcodes: their value may be refused as too large and skipped.
fn store_kind(opcode: u8) -> Option<(StoreKind, bool)> {
    Some(match opcode {
        op::SET => (StoreKind::Set, false),
        op::SETQ => (StoreKind::Set, true),
        op::ADD => (StoreKind::Add, false),
        op::ADDQ => (StoreKind::Add, true),
        op::REPLACE => (StoreKind::Replace, false),
        op::REPLACEQ => (StoreKind::Replace, true),
        op::APPEND => (StoreKind::Append, false),
        op::APPENDQ => (StoreKind::Append, true),
        op::PREPEND => (StoreKind::Prepend, false),
        op::PREPENDQ => (StoreKind::Prepend, true),
        _ => return None,
    })
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Parses one request from the start of `buf`: the request and its packet's length, `None`
/// when more bytes are needed, or the error to answer (see the module doc).
pub fn parse<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(BinRequest<'a>, usize)>, BinError<'a>> {
    let Some(&magic) = buf.first() else {
        return Ok(None);
    };
    if magic != REQUEST_MAGIC {
        // Checked on the first byte: a text line on a binary connection is refused at once
        // rather than waited on until 24 bytes arrive.
        let opcode = buf.get(1).copied().unwrap_or(0);
        return Err(
            BinError::new(opcode, 0, Status::InvalidArguments, buf.len())
                .saying("Invalid magic: a binary request starts with 0x80")
                .closing(),
        );
    }
    let Some(head) = buf.first_chunk::<HEADER_LEN>() else {
        return Ok(None);
    };
    let h = Header::read(head);
    let (ext, key_len, body) = (
        usize::from(h.extras_len),
        usize::from(h.key_len),
        h.body_len as usize,
    );
    let fail = |status| BinError::new(h.opcode, h.opaque, status, buf.len()).closing();
    if key_len + ext > body {
        return Err(fail(Status::UnknownCommand));
    }
    if key_len > limits.max_key_len {
        return Err(fail(Status::InvalidArguments).saying("Invalid arguments: key too long"));
    }
    if !shape_ok(h.opcode, ext, key_len, body) {
        return Err(fail(Status::InvalidArguments));
    }
    let store = store_kind(h.opcode);
    if store.is_some() {
        if body > MAX_DATA_LEN {
            return Err(fail(Status::InvalidArguments).saying("Invalid arguments: body too long"));
        }
        let value_len = body - key_len - ext;
        if value_len > limits.max_value_len {
            // As memcached: E2BIG, the value skipped, the connection kept; a set also
            // removes the key's old value.
            let head_len = HEADER_LEN + ext + key_len;
            if buf.len() < head_len {
                return Ok(None);
            }
            let key = &buf[HEADER_LEN + ext..head_len];
            let mut e = BinError::new(h.opcode, h.opaque, Status::TooLarge, head_len);
            e.swallow = value_len;
            e.forget = matches!(h.opcode, op::SET | op::SETQ).then_some(key);
            return Err(e);
        }
    } else if body > limits.max_key_len + MAX_EXTRAS + limits.max_value_len {
        return Err(fail(Status::InvalidArguments).saying("Invalid arguments: body too long"));
    }
    let packet = HEADER_LEN + body;
    if buf.len() < packet {
        return Ok(None);
    }
    let extras = &buf[HEADER_LEN..HEADER_LEN + ext];
    let key = &buf[HEADER_LEN + ext..HEADER_LEN + ext + key_len];
    let value = &buf[HEADER_LEN + ext + key_len..packet];
    let needs_key = !matches!(
        h.opcode,
        op::STAT | op::SASL_AUTH | op::SASL_STEP | op::VERSION | op::NOOP | op::QUIT
    ) && key_len > 0;
    if needs_key && !key_is_valid(key, limits) {
        // cairn's key rule, the text protocol's: no space, newline or NUL, so every key is
        // reachable from every protocol. The packet is whole: step over it.
        return Err(
            BinError::new(h.opcode, h.opaque, Status::InvalidArguments, packet)
                .saying("Invalid arguments: a key may not hold a space, newline or NUL"),
        );
    }
    let command = match h.opcode {
        op::GET | op::GETQ | op::GETK | op::GETKQ => Command::Get {
            key,
            quiet: matches!(h.opcode, op::GETQ | op::GETKQ),
            with_key: matches!(h.opcode, op::GETK | op::GETKQ),
        },
        op::GAT | op::GATQ | op::GATK | op::GATKQ => Command::Gat {
            key,
            exptime: be32(extras),
            quiet: matches!(h.opcode, op::GATQ | op::GATKQ),
            with_key: matches!(h.opcode, op::GATK | op::GATKQ),
        },
        op::TOUCH => Command::Touch {
            key,
            exptime: be32(extras),
        },
        op::DELETE | op::DELETEQ => Command::Delete {
            key,
            quiet: h.opcode == op::DELETEQ,
        },
        op::INCREMENT | op::INCREMENTQ | op::DECREMENT | op::DECREMENTQ => Command::Arith {
            incr: matches!(h.opcode, op::INCREMENT | op::INCREMENTQ),
            key,
            delta: be64(extras),
            initial: be64(&extras[8..]),
            exptime: be32(&extras[16..]),
            quiet: matches!(h.opcode, op::INCREMENTQ | op::DECREMENTQ),
        },
        op::QUIT | op::QUITQ => Command::Quit {
            quiet: h.opcode == op::QUITQ,
        },
        op::FLUSH | op::FLUSHQ => Command::Flush {
            delay: if ext == 4 { be32(extras) } else { 0 },
            quiet: h.opcode == op::FLUSHQ,
        },
        op::NOOP => Command::Noop,
        op::VERSION => Command::Version,
        op::STAT => Command::Stat { group: key },
        op::VERBOSITY => Command::Verbosity {
            level: be32(extras),
        },
        op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP => Command::Sasl,
        _ => match store {
            Some((kind, quiet)) => {
                let (flags, exptime) = if ext == 8 {
                    (be32(extras), be32(&extras[4..]))
                } else {
                    (0, 0)
                };
                Command::Store {
                    kind,
                    key,
                    flags,
                    exptime,
                    value,
                    quiet,
                }
            }
            None => Command::Unknown,
        },
    };
    Ok(Some((BinRequest { header: h, command }, packet)))
}
