//! The tier itself: its state, opening it on a device, starting and stopping its writer
//! thread, and the geometry that maps a segment's blocks to device blocks.
//!
//! ```text
//!   device:  [superblock][segment 0: header block, item blocks ...][segment 1] ...
//!             block 0     block 1 + seg * blocks_per_seg + block
//!
//!   Flash { device, reader (io_uring or pread), inner: Mutex<segment table>,
//!           writer thread (writer.rs), counters }
//! ```
//!
//! What the tier does is in its other modules: `admit` (items in), `get` (items out),
//! `writer` and `reclaim` (the writer thread), `checkpoint` and `recover` (what survives a
//! restart), `flash_tier` (what the store calls under its shard locks).
//!
//! Non-goals: no policy here, only the state and its lifecycle.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;

use cairn_store::{now_unix, Store};
use parking_lot::{Condvar, Mutex};

use crate::config::{check_geometry, FlashConfig};
use crate::counters::Counters;
use crate::device::{AlignedBuf, Device, FileDevice};
use crate::error::FlashError;
use crate::format::{Superblock, BLOCK};
use crate::reader::Reader;
use crate::segments::{Inner, Seg, SegState};

/// Reads in flight at most (connections beyond it wait for a slot, asynchronously).
const MAX_READS_IN_FLIGHT: usize = 1024;

/// The tier.
pub struct Flash {
    /// Settings as given.
    pub(crate) config: FlashConfig,
    /// The file or block device (or a fault-injecting one in tests).
    pub(crate) device: Arc<dyn Device>,
    /// The engine of lookup reads (io_uring rings, or a pread pool).
    pub(crate) reader: Reader,
    /// Bounds the device reads in flight (`MAX_READS_IN_FLIGHT`).
    pub(crate) read_slots: tokio::sync::Semaphore,
    /// Geometry, hash seed and seq base, as written in block 0.
    pub(crate) superblock: Superblock,
    /// Blocks per segment, header included.
    pub(crate) blocks_per_seg: u32,
    /// The segment table (segments.rs).
    pub(crate) inner: Mutex<Inner>,
    /// Wakes the writer thread.
    pub(crate) work: Condvar,
    /// Wakes those waiting for writes (checkpoints).
    pub(crate) written: Condvar,
    pub counters: Counters,
    /// The store the writer thread evicts from (set by [`Flash::start`]; weak: the store
    /// holds the tier).
    pub(crate) store: OnceLock<Weak<Store>>,
    /// The writer thread, joined by [`Flash::stop`].
    pub(crate) writer: Mutex<Option<JoinHandle<()>>>,
    /// Asks the writer thread to end.
    pub(crate) stop: AtomicBool,
    /// The device kept an earlier tier's superblock: checkpointed segments may be trusted.
    pub(crate) trust_existing: bool,
    /// Recovery is loading the store: admits wait for the writer rather than drop.
    pub(crate) recovering: AtomicBool,
    /// The writer thread is taking shard locks (flash eviction, dropping a failed segment):
    /// admits do not wait for it then.
    pub(crate) taking_shard_locks: AtomicBool,
    /// Why io_uring is not used, if it is not.
    pub uring_unavailable: Option<String>,
}

fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: writes at most 8 bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
    if n == 8 {
        u64::from_le_bytes(b)
    } else {
        use std::hash::{BuildHasher as _, Hasher as _};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(now_unix() as u64);
        h.finish()
    }
}

impl Flash {
    /// Opens the device on the real disk, checks it and formats it empty (every segment free,
    /// a new hash seed): what was on it is not trusted. Refuses with the path and the reason.
    pub fn open(config: FlashConfig) -> Result<Arc<Flash>, FlashError> {
        Flash::open_keeping(config, false)
    }

    /// [`Flash::open`], but with `keep` (persistence on) a device formatted earlier with the
    /// same geometry keeps its hash seed, and segments a checkpoint named may be trusted again
    /// (see [`Flash::recover_pins`]).
    pub fn open_keeping(config: FlashConfig, keep: bool) -> Result<Arc<Flash>, FlashError> {
        check_geometry(&config)?;
        let device = FileDevice::open(&config.path, config.size_bytes, config.direct_io)?;
        Flash::open_on(config, Arc::new(device), keep)
    }

    /// [`Flash::open_keeping`] on a given device (a fault-injecting one in tests).
    pub fn open_on(
        config: FlashConfig,
        device: Arc<dyn Device>,
        keep: bool,
    ) -> Result<Arc<Flash>, FlashError> {
        check_geometry(&config)?;
        let path = config.path.display().to_string();
        let segment_count =
            (device.size_bytes().min(config.size_bytes) - BLOCK as u64) / config.segment_bytes;
        let mut block = AlignedBuf::new(BLOCK);
        let old = if keep {
            device
                .read_at(0, &mut block)
                .ok()
                .and_then(|()| Superblock::decode(&block))
                .filter(|s| {
                    s.segment_bytes == config.segment_bytes && s.segment_count == segment_count
                })
        } else {
            None
        };
        if keep && old.is_none() {
            tracing::info!("flash {path}: no earlier tier of this geometry; starting empty");
        }
        // A new seq base at every start: seqs never repeat on a device (64 random bits), so
        // a segment rewritten since a checkpoint can never pass for the one it named.
        let superblock = Superblock {
            segment_bytes: config.segment_bytes,
            segment_count,
            hash_seed: old.map_or_else(random_u64, |s| s.hash_seed),
            seq_base: random_u64() >> 1,
        };
        superblock.encode(&mut block);
        device
            .write_at(0, &block)
            .and_then(|()| device.sync())
            .map_err(|e| FlashError::Io {
                path: path.clone(),
                source: e,
            })?;
        let (reader, why) = Reader::start(Arc::clone(&device), config.io_uring);
        let blocks_per_seg = (config.segment_bytes / BLOCK as u64) as u32;
        let segs = vec![
            Seg {
                state: SegState::Free,
                seq: 0,
                live: 0,
                max_exptime: 0,
                min_revision: 0,
                max_revision: 0,
                pinned: false,
                pin_next: false,
                reclaiming: false,
            };
            segment_count as usize
        ];
        let flash = Flash {
            read_slots: tokio::sync::Semaphore::new(MAX_READS_IN_FLIGHT),
            superblock,
            blocks_per_seg,
            inner: Mutex::new(Inner {
                free: (0..segment_count as u32).collect(),
                segs,
                sealed: VecDeque::new(),
                open: None,
                queued: VecDeque::new(),
                writing: false,
                to_drop: Vec::new(),
                next_seq: superblock.seq_base,
                spare: Vec::new(),
                stalled: false,
            }),
            work: Condvar::new(),
            written: Condvar::new(),
            counters: Counters::default(),
            store: OnceLock::new(),
            writer: Mutex::new(None),
            stop: AtomicBool::new(false),
            trust_existing: old.is_some(),
            recovering: AtomicBool::new(false),
            taking_shard_locks: AtomicBool::new(false),
            uring_unavailable: why,
            reader,
            device,
            config,
        };
        Ok(Arc::new(flash))
    }

    /// The hash seed the store must use (kept on the device).
    pub fn hash_seed(&self) -> u64 {
        self.superblock.hash_seed
    }

    /// "io_uring" or "pread".
    pub fn io_engine(&self) -> &'static str {
        self.reader.engine()
    }

    /// Segments on the device.
    pub fn segment_count(&self) -> u64 {
        self.superblock.segment_count
    }

    /// Starts the writer thread, which also runs flash eviction on `store`.
    pub fn start(self: &Arc<Flash>, store: &Arc<Store>) {
        if self.store.set(Arc::downgrade(store)).is_err() {
            return; // already started
        }
        let me = Arc::clone(self);
        let handle = std::thread::Builder::new()
            .name("flash-writer".into())
            .spawn(move || me.writer_loop())
            .expect("spawn the flash writer");
        *self.writer.lock() = Some(handle);
    }

    /// Releases the device's hold, as the end of the process would (see [`Device::unlock`]).
    #[cfg(test)]
    pub(crate) fn unlock_device(&self) {
        self.device.unlock();
    }

    /// Stops the writer thread after the write in hand (buffers not yet written are lost: a
    /// pure cache loses them anyway, and persistence has them in its snapshot or log).
    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        self.work.notify_all();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }

    pub(crate) fn seg_of(&self, block: u32) -> u32 {
        (block - 1) / self.blocks_per_seg
    }

    pub(crate) fn device_block(&self, seg: u32, block: u32) -> u32 {
        1 + seg * self.blocks_per_seg + block
    }

    pub(crate) fn seg_offset(&self, seg: u32) -> u64 {
        u64::from(self.device_block(seg, 0)) * BLOCK as u64
    }

    /// Figures computed from the segment table: (free segments, live items, segments holding
    /// data on the device or in buffers).
    pub fn usage(&self) -> (u64, u64, u64) {
        let inner = self.inner.lock();
        let live = inner.segs.iter().map(|s| u64::from(s.live)).sum();
        let used = inner
            .segs
            .iter()
            .filter(|s| {
                matches!(
                    s.state,
                    SegState::Open | SegState::Queued | SegState::Sealed
                )
            })
            .count() as u64;
        (inner.free.len() as u64, live, used)
    }

    /// Bytes of one segment.
    pub fn segment_bytes(&self) -> u64 {
        self.config.segment_bytes
    }
}
