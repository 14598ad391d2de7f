//! cairn-persist: command logging, checkpoints and recovery, gluing cairn-store and cairn-wal.
//!
//! ```text
//!   Store mutation (under the shard lock) ──LogSink──> record::encode_head ──> Log::append_parts
//!        └─ the LSN is the mutation's revision, back to the writer as its ticket; the writer
//!           (through cairn-engine) awaits `acknowledged(ticket)` (the durable mark in sync
//!           mode, the written mark in async mode): durability.rs
//!
//!   checkpoint:  L0 = appended LSN ─> copy shard by shard ─> snapshot-L0.snap.tmp (throttled)
//!                ─> trailer + fdatasync ─> L1 = appended LSN, wait until the log is durable
//!                to L1 ─> rename ─> fsync dir ─> MANIFEST.tmp ─> fdatasync
//!                ─> rename MANIFEST ─> fsync dir ─> drop log segments older than the previous
//!                snapshot, and snapshots older than the previous one
//!
//!   recovery:    MANIFEST ─> newest valid snapshot (else the previous one, else the whole
//!                log) ─> open the log
//!                ─> replay records with LSN > snapshot LSN ─> raise the CAS floor past every
//!                unique on disk (+ 2^32 for uniques never durable)
//! ```
//!
//! Why a fuzzy snapshot plus replay gives the exact state: L0 is read before the first shard
//! is copied. A mutation whose record has LSN <= L0 was applied to memory before L0 was read
//! (the store changes and the LSN is assigned in one critical section), so its result or a later
//! one is in the snapshot. Every later mutation has a record with LSN > L0, and records hold
//! resulting states, so replaying them in order over the snapshot ends with each key's last
//! state, provided the log reaches every record whose mutation the copy holds: the copy may
//! hold mutations after L0 (up to L1, read once it ended), so the log is made durable up to
//! L1 before the snapshot is named. Expiry and eviction are logged too (small records, never waited for): replaying them
//! removes the key, so an evicted item does not come back after a restart; a deleted or
//! overwritten value never comes back, because its delete or overwrite is a later record.
//!
//! Revisions: every record's LSN is the revision of its mutation (`ItemMeta::mod_revision`),
//! so revisions increase along the log and are never reused after a restart. Observers of the
//! mutation seam ([`LogObserver`], the gRPC watch hub) get each mutation with its LSN, and
//! [`Persistence::safe_lsn`] / [`Persistence::on_advance`] tell them how far the log is safe,
//! so that they publish nothing a crash could take back.
//!
//! Modules: `persistence` holds [`Persistence`] and its accessors; `open` is recovery, step by
//! step, with `replay` for the log; `checkpoint` takes snapshots; `durability` is the one path
//! to an acknowledgement ([`Ticket`]s, room, safe marks), with `gate` the cluster layer's
//! condition on it; `sink` logs the store's mutations; `history` reads old records back.
//! Files: [`record`] (log records), [`snapshot`], `manifest`, `pins` (a snapshot's flash
//! segments), `data_folder` (what is in the folder). `mode`, `config`, `error` and `stats`
//! hold the types the others share; the wall clock is cairn-store's `now_unix`.

mod checkpoint;
mod config;
mod data_folder;
mod durability;
mod error;
mod gate;
mod history;
mod manifest;
mod mode;
mod open;
mod persistence;
mod pins;
pub mod record;
mod replay;
mod sink;
pub mod snapshot;
mod stats;

pub use cairn_wal::{random_id, writes_before_sleeping};
pub use config::{PersistConfig, DEFAULT_MAX_PENDING_BYTES};
pub use durability::Ticket;
pub use error::{PersistError, Unrecoverable};
pub use gate::ReplicationGate;
pub use history::HistoryError;
pub use mode::Mode;
pub use persistence::Persistence;
pub use sink::LogObserver;
pub use stats::{CheckpointStats, CheckpointStatus, PersistStats, RecoveryStats};

#[cfg(test)]
mod tests;
