//! Administration lines beyond memcached's protocol, ARCUS-compatible:
//!
//! ```text
//!   checkpoint                               take a checkpoint now; OK when it is durable
//!   config async_logging on|off              switch between async and sync acknowledgement
//!   config chkpt_interval_pct_snapshot N     ARCUS checkpoint trigger: log >= N% of snapshot
//!   config chkpt_interval_min_logsize N      ...and log >= N MiB
//! ```

use std::sync::Arc;

use cairn_persist::{Mode, PersistError};

use crate::Ctx;

fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Runs one admin line (`words[0]` is `checkpoint` or `config`).
pub async fn run(ctx: &Arc<Ctx>, words: &[String], out: &mut Vec<u8>) {
    let Some(p) = ctx.persist.clone() else {
        line(out, "SERVER_ERROR persistence is off");
        return;
    };
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["checkpoint"] => {
            let result = tokio::task::spawn_blocking(move || p.checkpoint()).await;
            match result {
                Ok(Ok(_)) => line(out, "OK"),
                Ok(Err(PersistError::Busy)) => line(out, "SERVER_ERROR a checkpoint is already running"),
                Ok(Err(e)) => line(out, &format!("SERVER_ERROR checkpoint failed: {e}")),
                Err(e) => line(out, &format!("SERVER_ERROR checkpoint failed: {e}")),
            }
        }
        ["config", "async_logging", v @ ("on" | "off")] => {
            let mode = if *v == "on" { Mode::Async } else { Mode::Sync };
            match p.set_mode(mode) {
                Ok(()) => line(out, "OK"),
                Err(e) => line(out, &format!("SERVER_ERROR {e}")),
            }
        }
        ["config", key @ ("chkpt_interval_pct_snapshot" | "chkpt_interval_min_logsize"), v] => {
            match v.parse::<u64>() {
                Ok(n) if n > 0 => {
                    if *key == "chkpt_interval_pct_snapshot" {
                        p.set_chkpt_interval_pct_snapshot(n);
                    } else {
                        p.set_chkpt_interval_min_logsize_mb(n);
                    }
                    line(out, "OK");
                }
                _ => line(out, "CLIENT_ERROR bad value"),
            }
        }
        ["config", ..] => line(out, "CLIENT_ERROR usage: config async_logging on|off | config chkpt_interval_pct_snapshot N | config chkpt_interval_min_logsize N"),
        _ => line(out, "ERROR"),
    }
}
