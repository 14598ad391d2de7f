//! How keys and values are written on the command line and shown in the output: as text
//! (the default), or as hex or base64 for bytes that are not text (`--hex`, `--base64`).
//!
//! ```text
//!   argument ──decode──> bytes ──gRPC──> cairn ──> bytes ──show──> output
//!   text:   UTF-8 as typed            shown as is when it is printable UTF-8, else
//!                                     escaped (\n, \t, \xNN): one line per item
//!   hex:    "6b6579" <-> b"key"       both ways
//!   base64: "a2V5"   <-> b"key"       both ways (standard alphabet, padded)
//! ```
//!
//! Non-goals: a value printed alone (`get` in text mode) is written raw, not through here.

use base64::Engine as _;

use crate::error::{CtlError, Result};

/// How bytes are written in arguments and output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    #[default]
    Text,
    Hex,
    Base64,
}

impl Encoding {
    /// An argument's bytes.
    pub fn decode(self, what: &str, arg: &str) -> Result<Vec<u8>> {
        match self {
            Encoding::Text => Ok(arg.as_bytes().to_vec()),
            Encoding::Hex => decode_hex(arg)
                .ok_or_else(|| CtlError::Usage(format!("{what} {arg:?} is not hex (--hex)"))),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(arg)
                .map_err(|e| CtlError::Usage(format!("{what} {arg:?} is not base64 ({e})"))),
        }
    }

    /// Bytes as one line of output (never a newline inside).
    pub fn show(self, bytes: &[u8]) -> String {
        match self {
            Encoding::Text => show_text(bytes),
            Encoding::Hex => bytes.iter().map(|b| format!("{b:02x}")).collect(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.as_bytes();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    s.chunks(2)
        .map(|pair| {
            let digit = |c: u8| (c as char).to_digit(16);
            Some((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

/// Printable UTF-8 as it is; anything else (control bytes, invalid UTF-8) escaped as Rust
/// escapes bytes, so the output stays one line and shows every byte.
fn show_text(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(s) if !s.chars().any(|c| c.is_control() || c == '\\') => s.to_string(),
        _ => bytes.escape_ascii().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_encoding_round_trips_and_text_stays_on_one_line() {
        for e in [Encoding::Hex, Encoding::Base64] {
            let bytes = b"\x00key\n\xff";
            assert_eq!(e.decode("key", &e.show(bytes)).unwrap(), bytes);
        }
        assert_eq!(Encoding::Hex.show(b"key"), "6b6579");
        assert_eq!(Encoding::Base64.show(b"key"), "a2V5");
        assert_eq!(Encoding::Text.show("clé".as_bytes()), "clé");
        assert_eq!(Encoding::Text.show(b"a\nb\xff"), "a\\nb\\xff");
        assert_eq!(Encoding::Text.show(b"a\\n"), "a\\\\n");
        assert!(Encoding::Hex.decode("key", "6b6").is_err());
        assert!(Encoding::Hex.decode("key", "zz").is_err());
        assert!(Encoding::Base64.decode("key", "***").is_err());
    }
}
