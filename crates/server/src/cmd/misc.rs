//! version.

/// `VERSION <v>`.
pub fn version(out: &mut Vec<u8>) {
    out.extend_from_slice(b"VERSION ");
    out.extend_from_slice(crate::VERSION.as_bytes());
    out.extend_from_slice(b"\r\n");
}
