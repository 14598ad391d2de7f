//! Checkpoints: when one is due (the ARCUS rule), and taking one: a fuzzy snapshot of the
//! store, made current by the manifest once the log is durable past it (see the crate doc).
//!
//! ```text
//!   L0 = appended ─> copy shard by shard ─> snapshot-L0.snap.tmp ─> trailer + fdatasync
//!   ─> flash pins ─> L1 = appended, log durable to L1 ─> rename ─> fsync dir ─> MANIFEST
//!   ─> drop log segments before the previous snapshot, and older snapshots
//! ```
//!
//! Non-goals: the snapshot file format (`crate::snapshot`), loading one (`crate::open`).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

use cairn_store::Mutation;

use crate::data_folder::{list_snapshots, remove_temp_files};
use crate::error::PersistError;
use crate::manifest::{write_manifest, Manifest};
use crate::persistence::Persistence;
use crate::pins::{pins_file_name, write_pins};
use crate::stats::CheckpointStatus;
use crate::{record, snapshot};
use cairn_store::now_unix;

impl Persistence {
    /// The ARCUS rule: log >= min size AND log >= snapshot size x pct / 100.
    pub fn checkpoint_due(&self) -> bool {
        let log_bytes = self.log_bytes_since_checkpoint(self.log.stats().bytes_written);
        let snap = self.checkpoints.lock().snapshot_bytes;
        // Flash eviction waits for a checkpoint that no longer names the old segments.
        let flash_stuck = self
            .config
            .flash
            .as_ref()
            .is_some_and(|f| f.needs_checkpoint());
        flash_stuck
            || log_bytes >= self.chkpt_interval_min_logsize_mb() << 20
                && log_bytes as u128 * 100
                    >= snap as u128 * self.chkpt_interval_pct_snapshot() as u128
    }

    /// Takes a checkpoint now (blocking; runs while the server keeps serving).
    pub fn checkpoint(&self) -> Result<(u64, u64), PersistError> {
        let Some(_running) = self.checkpoint_running.try_lock() else {
            return Err(PersistError::Busy);
        };
        let started = Instant::now();
        let start_unix = now_unix() as u64;
        let result = self.checkpoint_inner();
        if let Some(f) = &self.config.flash {
            if result.is_ok() {
                f.checkpoint_commit();
            } else {
                f.checkpoint_abort();
            }
        }
        let mut st = self.checkpoints.lock();
        st.last_checkpoint_start_unix = start_unix;
        st.last_checkpoint_duration_ms = started.elapsed().as_millis() as u64;
        match &result {
            Ok((items, bytes)) => {
                st.checkpoints_done += 1;
                st.checkpoints_failed_in_a_row = 0;
                st.last_checkpoint_status = CheckpointStatus::Succeeded;
                st.last_checkpoint_items = *items;
                st.snapshot_bytes = *bytes;
                tracing::info!(
                    "checkpoint done: {items} items, {bytes} bytes in {} ms",
                    st.last_checkpoint_duration_ms
                );
            }
            Err(e) => {
                st.checkpoints_failed += 1;
                st.checkpoints_failed_in_a_row += 1;
                st.last_checkpoint_status = CheckpointStatus::Failed(e.to_string());
                tracing::error!("checkpoint failed: {e}");
                remove_temp_files(self.config.fs.as_ref(), &self.config.data_path);
            }
        }
        result
    }

    fn checkpoint_inner(&self) -> Result<(u64, u64), PersistError> {
        let fs = self.config.fs.as_ref();
        let dir = &self.config.data_path;
        let bytes_at_start = self.log_bytes_written(self.log.stats().bytes_written);
        // L0: every mutation with a record <= L0 is in memory already (see the module doc).
        // A pending `flush_all <delay>` is restated by a record after L0, since recovery from
        // this snapshot replays only records after L0 and the snapshot holds no schedule.
        let (l0, restated) = self.store.with_scheduled_flush(|scheduled| {
            let l0 = self.log.appended_lsn();
            let restated = match scheduled {
                Some(at) => {
                    let mut buf = Vec::new();
                    record::encode(&mut buf, &Mutation::FlushScheduled { at });
                    self.sink.append_bookkeeping(&buf)
                }
                None => Ok(l0),
            };
            (l0, restated)
        });
        let restated = restated?;
        let tmp = dir.join(format!("{}.tmp", snapshot::file_name(l0)));
        let _ = fs.remove(&tmp);
        let mut writer =
            snapshot::Writer::create(fs, &tmp, l0, self.config.checkpoint_rate_mb_s << 20)?;
        let now = now_unix();
        let mut buf = Vec::new();
        let flash = self.config.flash.as_deref();
        if let Some(f) = flash {
            f.checkpoint_begin();
        }
        let shard_count = self.store.shard_count() as u32;
        for shard in 0..self.store.shard_count() {
            buf.clear();
            let items = std::cell::Cell::new(0u64);
            let buf_cell = std::cell::RefCell::new(&mut buf);
            // RAM items and flash entries under one hold of the shard lock, so an item moving
            // to flash meanwhile is copied exactly once.
            self.store.visit_shard_with_flash(
                shard,
                now,
                |key, value, meta| {
                    snapshot::encode_item(
                        &mut buf_cell.borrow_mut(),
                        &snapshot::SnapItem {
                            key,
                            value,
                            flags: meta.flags,
                            exptime: meta.exptime,
                            cas: meta.cas,
                            stale: meta.stale,
                            mod_revision: meta.mod_revision,
                        },
                    );
                    items.set(items.get() + 1);
                },
                |loc| {
                    let Some(f) = flash else { return };
                    // None: every item of its segment is stored by a record after L0, which
                    // recovery from this snapshot replays (see `Flash::checkpoint_entry`).
                    let Some(seq) = f.checkpoint_entry(loc, l0) else {
                        return;
                    };
                    snapshot::encode_flash(
                        &mut buf_cell.borrow_mut(),
                        &snapshot::SnapFlash {
                            shard: shard as u32,
                            shard_count,
                            loc: loc.0,
                            seq,
                        },
                    );
                    items.set(items.get() + 1);
                },
            );
            writer.add_encoded(&buf, items.get())?;
        }
        // Read after the last item was copied: covers every unique handed out so far,
        // including those of items deleted before the copy reached them.
        let (items, bytes) = writer.finish(self.store.cas_floor())?;
        // The flash segments the snapshot names are on the device and synced, and listed
        // beside it, before the snapshot can become current.
        if let Some(f) = flash {
            let pins = f
                .checkpoint_sync()
                .map_err(|e| PersistError::io(Path::new("flash"), e))?;
            write_pins(fs, dir, l0, &pins)?;
        }
        // The copy is fuzzy: it holds every mutation up to L0 and some after it, up to L1,
        // the last LSN appended once the copy ended (a mutation's record is appended under
        // its shard lock, the lock the copy of that shard holds). Records up to L1 must be
        // durable before the snapshot becomes current: otherwise a power cut could leave a
        // log that ends between L0 and L1, and recovery would serve the snapshot's later
        // writes on top of an earlier log end (found by the power-cut loop in async mode),
        // or a log that restarts numbering below L0, behind the snapshot. So must the
        // restated schedule.
        let l1 = self.log.appended_lsn();
        self.log.wait_durable(l1.max(restated))?;
        let path = dir.join(snapshot::file_name(l0));
        fs.rename(&tmp, &path)
            .map_err(|e| PersistError::io(&path, e))?;
        fs.sync_dir(dir).map_err(|e| PersistError::io(dir, e))?;
        // The snapshot is durable: only now does the manifest point at it.
        write_manifest(
            fs,
            dir,
            Manifest {
                snapshot_lsn: l0,
                // At least the floor the last start wrote: the counter only grows.
                cas_floor: self.store.cas_floor(),
            },
        )?;
        self.log_bytes_at_checkpoint
            .store(bytes_at_start, Ordering::Relaxed);
        let previous = self.checkpoints.lock().snapshot_lsn;
        self.checkpoints.lock().snapshot_lsn = l0;
        // Keep the previous snapshot (a fallback) and the log back to it; drop what is older.
        {
            let _no_history_reads = self.history.write();
            self.log.truncate_before(previous + 1)?;
        }
        for old in list_snapshots(fs, dir)? {
            if old < previous {
                let p = dir.join(snapshot::file_name(old));
                fs.remove(&p).map_err(|e| PersistError::io(&p, e))?;
                let _ = fs.remove(&dir.join(pins_file_name(old)));
            }
        }
        fs.sync_dir(dir).map_err(|e| PersistError::io(dir, e))?;
        Ok((items, bytes))
    }
}
