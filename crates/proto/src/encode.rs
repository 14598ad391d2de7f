//! Response encoders: each appends complete reply bytes to one output buffer, so a batch of
//! pipelined requests is answered with a single write.

/// Appends `line` and `\r\n`.
pub fn line(out: &mut Vec<u8>, line: &[u8]) {
    out.extend_from_slice(line);
    out.extend_from_slice(b"\r\n");
}

/// Appends the decimal form of `n`.
pub fn decimal(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends a signed decimal.
pub fn signed(out: &mut Vec<u8>, n: i64) {
    if n < 0 {
        out.push(b'-');
    }
    decimal(out, n.unsigned_abs());
}

/// `VALUE <key> <flags> <bytes> [<cas>]\r\n<data>\r\n`
pub fn value(out: &mut Vec<u8>, key: &[u8], flags: u32, data: &[u8], cas: Option<u64>) {
    out.extend_from_slice(b"VALUE ");
    out.extend_from_slice(key);
    out.push(b' ');
    decimal(out, u64::from(flags));
    out.push(b' ');
    decimal(out, data.len() as u64);
    if let Some(cas) = cas {
        out.push(b' ');
        decimal(out, cas);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// `STAT <name> <value>\r\n`
pub fn stat(out: &mut Vec<u8>, name: &str, value: impl std::fmt::Display) {
    use std::io::Write;
    // Writing to a Vec cannot fail.
    let _ = write!(out, "STAT {name} {value}\r\n");
}

/// Builds one meta reply line: a code (`HD`, `VA <len>`, `EN`, ...) then ` <flag><token>` pairs.
pub struct MetaLine<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> MetaLine<'a> {
    /// Starts a line with its code.
    pub fn new(out: &'a mut Vec<u8>, code: &[u8]) -> Self {
        out.extend_from_slice(code);
        MetaLine { out }
    }

    /// Starts `VA <len>`.
    pub fn value(out: &'a mut Vec<u8>, len: usize) -> Self {
        out.extend_from_slice(b"VA ");
        decimal(out, len as u64);
        MetaLine { out }
    }

    /// Appends ` <letter><token>`.
    pub fn flag(self, letter: u8, token: &[u8]) -> Self {
        self.out.push(b' ');
        self.out.push(letter);
        self.out.extend_from_slice(token);
        self
    }

    /// Appends ` <letter><n>`.
    pub fn num(self, letter: u8, n: u64) -> Self {
        self.out.push(b' ');
        self.out.push(letter);
        decimal(self.out, n);
        self
    }

    /// Appends ` <letter><n>` for a signed number.
    pub fn signed(self, letter: u8, n: i64) -> Self {
        self.out.push(b' ');
        self.out.push(letter);
        signed(self.out, n);
        self
    }

    /// Ends the line.
    pub fn end(self) {
        self.out.extend_from_slice(b"\r\n");
    }
}
