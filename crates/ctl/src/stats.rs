//! `cairnctl stats [persistence|flash|replication|grpc]`: the server's `stats` lines over the
//! memcached port as an aligned table (`-o json`: one object, numbers as numbers).
//!
//! ```text
//!   stats replication\r\n ──> STAT role primary ... END ──> NAME          VALUE
//!                                                            role          primary
//! ```
//!
//! Non-goals: descriptions of each figure (`# HELP` on the Prometheus endpoint has them).

use serde_json::Map;

use crate::error::Result;
use crate::memcached::Memcached;
use crate::output::{json_number_or_text, Out};

/// The groups `cairnctl stats` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StatsGroup {
    Persistence,
    Flash,
    Replication,
    Grpc,
}

impl StatsGroup {
    /// The word after `stats` (the flash tier's figures are memcached's `stats extstore`).
    pub fn word(self) -> &'static str {
        match self {
            StatsGroup::Persistence => "persistence",
            StatsGroup::Flash => "extstore",
            StatsGroup::Replication => "replication",
            StatsGroup::Grpc => "grpc",
        }
    }
}

pub async fn run(memcached: &str, group: Option<StatsGroup>, out: &mut Out) -> Result<()> {
    let mut mc = Memcached::connect(memcached).await?;
    let stats = mc.stats(group.map(StatsGroup::word)).await?;
    if out.json_mode() {
        let object: Map<String, serde_json::Value> = stats
            .iter()
            .map(|(k, v)| (k.clone(), json_number_or_text(v)))
            .collect();
        return out.json(&object.into());
    }
    if stats.is_empty() {
        // `stats extstore` of a server without a flash tier, say.
        return out.line("(the server reports no figures in this group)");
    }
    let rows: Vec<Vec<String>> = stats.into_iter().map(|(k, v)| vec![k, v]).collect();
    out.table(&["NAME", "VALUE"], &rows)
}
