//! ARCUS's commands cairn does not implement (collections `lop`/`sop`/`mop`/`bop`, item
//! attributes `getattr`/`setattr`, `flush_prefix`): each is answered `NOT_SUPPORTED`, the
//! line arcus-memcached itself answers a command its engine lacks, and which ARCUS's Java
//! client takes as a failed operation without dropping the connection (cairn-proto's
//! `arcus` module says why no `ERROR` line can be used). The connection has already skipped
//! the command's data block.
//!
//! ARCUS's command pipelining: commands that end in `pipe` are answered together, at the
//! pipeline's last command (the first one after them that does not end in `pipe`), as
//! arcus-memcached's `pipe_response_save`/`pipe_response_done` do:
//!
//! ```text
//!   lop insert k -1 1 pipe\r\nx\r\n   ─> (held: 1)
//!   lop insert k -1 1 pipe\r\nx\r\n   ─> (held: 2)
//!   lop insert k -1 1\r\nx\r\n        ─> RESPONSE 3\r\n NOT_SUPPORTED\r\n x3  END\r\n
//!   the 500th held reply (ARCUS's PIPE_CMD_MAX_COUNT) ─> RESPONSE 500 ... PIPE_ERROR command
//!     overflow\r\n at once; the rest of that pipeline, its last command included, is
//!     skipped without a reply
//! ```
//!
//! A `noreply` command inside a pipeline is held like a `pipe` one (ARCUS counts it too).
//! Other commands sent in the middle of a pipeline are answered at once and do not end it
//! (ARCUS would fold their replies into the pipeline's; its clients never send them there).

/// The reply to one command.
pub const NOT_SUPPORTED: &[u8] = b"NOT_SUPPORTED\r\n";

/// Most replies one pipeline holds (arcus-memcached's `PIPE_CMD_MAX_COUNT`).
pub const PIPE_MAX: u32 = 500;

/// A connection's ARCUS pipeline: at most a count, whatever the client sends.
#[derive(Debug, Default)]
pub struct Pipeline {
    /// Replies held for the pipeline under way (0: none under way).
    held: u32,
    /// The pipeline passed [`PIPE_MAX`] and was answered: its remaining commands, through
    /// its last one, get no reply.
    overflowed: bool,
}

impl Pipeline {
    /// Answers one command that ended in `pipe`, in `noreply`, or neither.
    pub fn answer(&mut self, pipe: bool, noreply: bool, out: &mut Vec<u8>) {
        let more_follow = pipe || noreply;
        if self.overflowed {
            if !more_follow {
                self.overflowed = false;
            }
            return;
        }
        if pipe || (noreply && self.held > 0) {
            self.held += 1;
            if self.held == PIPE_MAX {
                self.respond(out, b"PIPE_ERROR command overflow\r\n");
                self.overflowed = true;
            }
            return;
        }
        if self.held == 0 {
            if !noreply {
                out.extend_from_slice(NOT_SUPPORTED);
            }
            return;
        }
        self.held += 1;
        self.respond(out, b"END\r\n");
    }

    /// `RESPONSE <n>`, the held replies, then `tail`; the pipeline is over.
    fn respond(&mut self, out: &mut Vec<u8>, tail: &[u8]) {
        out.extend_from_slice(b"RESPONSE ");
        cairn_proto::encode::decimal(out, u64::from(self.held));
        out.extend_from_slice(b"\r\n");
        for _ in 0..self.held {
            out.extend_from_slice(NOT_SUPPORTED);
        }
        out.extend_from_slice(tail);
        self.held = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p: &mut Pipeline, pipe: bool, noreply: bool) -> String {
        let mut out = Vec::new();
        p.answer(pipe, noreply, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_pipeline_is_answered_at_its_last_command() {
        let mut p = Pipeline::default();
        assert_eq!(run(&mut p, false, false), "NOT_SUPPORTED\r\n");
        assert_eq!(run(&mut p, false, true), "");
        assert_eq!(run(&mut p, true, false), "");
        assert_eq!(
            run(&mut p, false, true),
            "",
            "noreply inside a pipeline is held"
        );
        assert_eq!(
            run(&mut p, false, false),
            "RESPONSE 3\r\nNOT_SUPPORTED\r\nNOT_SUPPORTED\r\nNOT_SUPPORTED\r\nEND\r\n"
        );
        assert_eq!(run(&mut p, false, false), "NOT_SUPPORTED\r\n");
    }

    #[test]
    fn an_overflowing_pipeline_is_answered_at_500_and_the_rest_skipped() {
        let mut p = Pipeline::default();
        for _ in 0..PIPE_MAX - 1 {
            assert_eq!(run(&mut p, true, false), "");
        }
        let reply = run(&mut p, true, false);
        assert!(reply.starts_with("RESPONSE 500\r\nNOT_SUPPORTED\r\n"));
        assert!(reply.ends_with("NOT_SUPPORTED\r\nPIPE_ERROR command overflow\r\n"));
        assert_eq!(reply.matches("NOT_SUPPORTED").count(), 500);
        assert_eq!(run(&mut p, true, false), "");
        assert_eq!(run(&mut p, false, false), "", "the pipeline's last command");
        assert_eq!(run(&mut p, false, false), "NOT_SUPPORTED\r\n");
    }
}
