//! Administration lines beyond memcached's protocol, ARCUS-compatible:
//!
//! ```text
//!   checkpoint                               take a checkpoint now; OK when it is durable
//!   config async_logging [on|off]            switch between async and sync acknowledgement
//!   config chkpt_interval_pct_snapshot [N]   ARCUS checkpoint trigger: log >= N% of snapshot
//!   config chkpt_interval_min_logsize [N]    ...and log >= N MiB
//!   failover force                           in a replication group with no complete member
//!                                            alive: this member becomes the primary with
//!                                            what it holds; the answer says what is lost
//! ```
//!
//! With a value, `config KEY V` sets the key and answers `OK`; a bad value changes nothing and
//! gets `CLIENT_ERROR <why>` (the range comes from [`ChkptSetting::check`], the very check the
//! config file and the flags go through). Without a value it reports the current one, shaped
//! like ARCUS's answer to `config verbosity` with no argument: one line `KEY VALUE`, then `END`.
//! The value is written as the setting line takes it (`on`/`off`, a number of % or of MiB):
//!
//! Reading a setting is open to every client; changing one, triggering a checkpoint and
//! `verbosity` need `--enable-admin` ([`refusal`]), so that no client can turn SYNC off for
//! everyone.
//!
//! ```text
//!   config async_logging\r\n                 ->  async_logging off\r\nEND\r\n
//!   config chkpt_interval_min_logsize\r\n    ->  chkpt_interval_min_logsize 256\r\nEND\r\n
//! ```

use std::sync::Arc;

use cairn_persist::{Mode, PersistError, Persistence};

use crate::config::{ChkptSetting, ConfigError};
use crate::Ctx;

const USAGE: &str = "CLIENT_ERROR usage: config async_logging [on|off] | config chkpt_interval_pct_snapshot [N] | config chkpt_interval_min_logsize [N]";

fn line(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// The answer to `config KEY` with no value: `KEY VALUE`, then `END`.
fn current(out: &mut Vec<u8>, key: &str, value: &str) {
    line(out, &format!("{key} {value}"));
    line(out, "END");
}

/// The reply to an admin write when the server was started without `--enable-admin`.
pub const DISABLED: &[u8] =
    b"CLIENT_ERROR admin commands are disabled (start cairn with --enable-admin)\r\n";

/// `Some(DISABLED)` unless admin writes are enabled.
pub fn refusal(ctx: &Ctx) -> Option<&'static [u8]> {
    (!ctx.config.enable_admin).then_some(DISABLED)
}

/// Runs one admin line (`words[0]` is `checkpoint` or `config`).
pub async fn run(ctx: &Arc<Ctx>, words: &[String], out: &mut Vec<u8>) {
    // Writes: `checkpoint` and `config KEY VALUE`. Reads (`config KEY`) are open to all.
    let writes = words
        .first()
        .is_some_and(|w| w == "checkpoint" || w == "failover")
        || (words.first().is_some_and(|w| w == "config") && words.len() >= 3);
    if writes {
        if let Some(reply) = refusal(ctx) {
            out.extend_from_slice(reply);
            return;
        }
    }
    let Some(p) = ctx.persist().cloned() else {
        line(out, "SERVER_ERROR persistence is off");
        return;
    };
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["checkpoint"] => {
            let result = tokio::task::spawn_blocking(move || p.checkpoint()).await;
            match result {
                Ok(Ok(_)) => line(out, "OK"),
                Ok(Err(PersistError::Busy)) => {
                    line(out, "SERVER_ERROR a checkpoint is already running")
                }
                Ok(Err(e)) => line(out, &format!("SERVER_ERROR checkpoint failed: {e}")),
                Err(e) => line(out, &format!("SERVER_ERROR checkpoint failed: {e}")),
            }
        }
        ["config", "async_logging"] => {
            let on = p.mode() == Mode::Async;
            current(out, "async_logging", if on { "on" } else { "off" });
        }
        ["config", "async_logging", v] => {
            let mode = match *v {
                "on" => Mode::Async,
                "off" => Mode::Sync,
                _ => return line(out, "CLIENT_ERROR async_logging must be on or off"),
            };
            match p.set_mode(mode) {
                Ok(()) => line(out, "OK"),
                Err(e) => line(out, &format!("SERVER_ERROR {e}")),
            }
        }
        ["config", key] => match ChkptSetting::from_key(key) {
            Some(s) => {
                let v = match s {
                    ChkptSetting::PctSnapshot => p.chkpt_interval_pct_snapshot(),
                    ChkptSetting::MinLogsize => p.chkpt_interval_min_logsize_mb(),
                };
                current(out, s.key(), &v.to_string());
            }
            None => line(out, USAGE),
        },
        ["config", key, v] => match ChkptSetting::from_key(key) {
            Some(s) => set_chkpt(&p, s, v, out),
            None => line(out, USAGE),
        },
        ["config", ..] => line(out, USAGE),
        ["failover", "force"] => match &ctx.replication {
            Some(r) => match r.force().await {
                Ok(what) => line(out, &format!("OK {what}")),
                Err(why) => line(out, &format!("SERVER_ERROR {why}")),
            },
            None => line(out, "SERVER_ERROR this node is not in a replication group"),
        },
        ["failover", ..] => line(out, "CLIENT_ERROR usage: failover force"),
        _ => line(out, "ERROR"),
    }
}

/// `config chkpt_interval_* N`: takes effect at the next check of the checkpoint rule.
fn set_chkpt(p: &Persistence, s: ChkptSetting, v: &str, out: &mut Vec<u8>) {
    let Ok(n) = v.parse::<u64>() else {
        return line(out, "CLIENT_ERROR bad value");
    };
    match s.check(n) {
        Ok(n) => {
            match s {
                ChkptSetting::PctSnapshot => p.set_chkpt_interval_pct_snapshot(n),
                ChkptSetting::MinLogsize => p.set_chkpt_interval_min_logsize_mb(n),
            }
            line(out, "OK");
        }
        Err(ConfigError::Invalid { key, why }) => line(out, &format!("CLIENT_ERROR {key} {why}")),
        Err(e) => line(out, &format!("CLIENT_ERROR {e}")),
    }
}
