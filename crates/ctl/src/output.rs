//! Where results go: text for people (lines, aligned tables) or JSON for programs (`-o json`:
//! one object per line, so a stream such as `watch` is JSON Lines), written to stdout and
//! flushed per line so a pipe or a test sees each one as it happens.
//!
//! ```text
//!   command ──line(text) / json(value) / table(rows)──> Out ──> stdout (flushed)
//!   a closed pipe (`cairnctl watch x | head -3`) ──> exit 0 at once, as `head` expects
//! ```
//!
//! Non-goals: choosing what to show (each command does).

use std::io::{self, Write};

use crate::error::{CtlError, Result};

/// `-o`: how results are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Lines and aligned tables.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// stdout, flushed after each line.
pub struct Out {
    pub format: Format,
    stdout: io::Stdout,
}

impl Out {
    pub fn new(format: Format) -> Out {
        Out {
            format,
            stdout: io::stdout(),
        }
    }

    pub fn json_mode(&self) -> bool {
        self.format == Format::Json
    }

    /// Writes raw bytes and a newline.
    pub fn bytes_line(&mut self, bytes: &[u8]) -> Result<()> {
        let mut lock = self.stdout.lock();
        let r = lock
            .write_all(bytes)
            .and_then(|_| lock.write_all(b"\n"))
            .and_then(|_| lock.flush());
        written(r)
    }

    pub fn line(&mut self, text: &str) -> Result<()> {
        self.bytes_line(text.as_bytes())
    }

    /// One JSON value on one line.
    pub fn json(&mut self, value: &serde_json::Value) -> Result<()> {
        self.line(&value.to_string())
    }

    /// Rows under a header, each column as wide as its widest cell (the last one unpadded).
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
        self.line(&table(header, rows))
    }
}

/// A broken pipe ends the process quietly; other failures are errors.
fn written(r: io::Result<()>) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            // Nothing more can be shown: end at once, as `head` expects of a producer.
            std::process::exit(0)
        }
        Err(e) => Err(CtlError::Output(e)),
    }
}

/// Rows under a header as aligned text (no trailing newline).
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(columns) {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let render = |cells: &mut dyn Iterator<Item = &str>| {
        let mut line = String::new();
        for (i, cell) in cells.enumerate() {
            if i + 1 < columns {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            } else {
                line.push_str(cell);
            }
        }
        line.trim_end().to_string()
    };
    let mut lines = vec![render(&mut header.iter().copied())];
    for row in rows {
        lines.push(render(&mut row.iter().map(String::as_str)));
    }
    lines.join("\n")
}

/// A `stats` value as JSON: a number when it reads as one, else a string.
pub fn json_number_or_text(v: &str) -> serde_json::Value {
    if let Ok(n) = v.parse::<u64>() {
        return n.into();
    }
    if let Ok(n) = v.parse::<i64>() {
        return n.into();
    }
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && v.contains('.') => f.into(),
        _ => v.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_every_column_but_the_last() {
        let t = table(
            &["NAME", "VALUE"],
            &[
                vec!["pid".into(), "12".into()],
                vec!["curr_items".into(), "3".into()],
            ],
        );
        assert_eq!(t, "NAME        VALUE\npid         12\ncurr_items  3");
        assert_eq!(json_number_or_text("12"), serde_json::json!(12));
        assert_eq!(json_number_or_text("0.250000"), serde_json::json!(0.25));
        assert_eq!(json_number_or_text("sync"), serde_json::json!("sync"));
        assert_eq!(
            json_number_or_text("1.6.21"),
            serde_json::json!("1.6.21"),
            "a version stays text"
        );
    }
}
