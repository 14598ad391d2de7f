//! cairn-flash: the flash tier. Items evicted from RAM are packed into segments written whole
//! with O_DIRECT; the store keeps an 8-byte location per item (`cairn_store::FlashLoc`), and a
//! hit costs one aligned device read through io_uring.
//!
//! ```text
//!   RAM eviction ──admit (under a shard lock: a memcpy, never I/O)──> open segment buffer
//!                                                                       │ full: sealed
//!                                                                       v
//!                     bounded queue of sealed buffers (full: admit says no, the item is
//!                     evicted for good and counted) ──> writer thread: one pwrite per segment
//!                                                                       │
//!   writer thread, when free segments run low: flash eviction, segment FIFO ────┘
//!     dead segments first (no read), then all-expired, then the oldest: read it whole, each
//!     item still indexed is reinserted if it was read since written (bounded), else dropped
//!
//!   get ──Store::lookup──> FlashLoc ──Flash::fetch──> buffered segment: copy under the lock
//!                                                  └> device: one read of its blocks (io_uring
//!                                                     or pread pool) ─> checksum, key ─> item
//!        ──Store::flash_found: still indexed there? not expired? ─> serve (or promote)
//! ```
//!
//! What is trusted after a restart (with persistence on) is decided by the checkpoint, see
//! [`Flash::checkpoint_begin`]; the on-device bytes are in `format`.
//!
//! Non-goals: no RAM index of its own (the store's index is the only one), no compaction of
//! live data beyond reinsertion, no TRIM.

pub mod device;
pub mod format;
mod reader;

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use cairn_store::flash::{tag_of, KeyAt};
use cairn_store::{
    FlashFound, FlashLoc, FlashTier, Item, ItemMeta, Lookup, Promote, ReadOutcome, Reclaimed, Store,
};
use parking_lot::{Condvar, Mutex};

pub use device::{AlignedBuf, Device, FaultyDevice, FileDevice, OpenError};
use format::{SegmentHeader, Superblock, BLOCK};
pub use reader::{lend_thread_ring, ReadBuf, Reader, ThreadRing};

/// Settings of the tier.
#[derive(Clone, Debug)]
pub struct FlashConfig {
    /// A file (created and preallocated if absent) or a block device.
    pub path: PathBuf,
    /// Bytes of the device to use.
    pub size_bytes: u64,
    /// Bytes of one segment, the unit of writes and of flash eviction (a multiple of 4 KiB).
    pub segment_bytes: u64,
    /// Open with O_DIRECT (refused on file systems without it, such as tmpfs).
    pub direct_io: bool,
    /// Read through io_uring when the kernel allows it (else a pread thread pool).
    pub io_uring: bool,
    /// Sealed segments that may wait for the writer; past it evicted items are dropped.
    pub write_queue: usize,
    /// A test switch, not a setting: when the writer is behind, eviction waits for it (as
    /// recovery does) instead of dropping items, so that tests on a loaded machine can
    /// expect every item back. Production never waits for flash on the request path.
    pub wait_for_writer: bool,
}

impl FlashConfig {
    pub fn new(path: PathBuf, size_bytes: u64) -> FlashConfig {
        FlashConfig {
            path,
            size_bytes,
            segment_bytes: 1 << 20,
            direct_io: true,
            io_uring: true,
            write_queue: 4,
            wait_for_writer: false,
        }
    }
}

/// Fewest segments a device must hold: one being filled, the write queue, and a reserve
/// for flash eviction to work in.
pub const MIN_SEGMENTS: u64 = 8;
/// Free segments the writer keeps ready by flash eviction.
const FREE_RESERVE: usize = 2;
/// Reads in flight at most (connections beyond it wait for a slot, asynchronously).
const MAX_READS_IN_FLIGHT: usize = 1024;
/// Of a reclaimed segment, at most this fraction of its bytes is reinserted.
const REINSERT_FRACTION: u64 = 4;
/// Promotions allowed: one per this many items written to flash, plus a start allowance.
const PROMOTE_EVERY: u64 = 16;
const PROMOTE_ALLOWANCE: u64 = 1000;

/// Errors of the tier at start.
#[derive(Debug, thiserror::Error)]
pub enum FlashError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("flash path {path}: {source}")]
    Io { path: String, source: io::Error },
}

/// The state of one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SegState {
    /// Holds nothing indexed; may be opened.
    Free,
    /// The buffer items are being appended to.
    Open,
    /// Sealed, waiting for (or in) its write; read from its buffer meanwhile.
    Queued,
    /// On the device.
    Sealed,
    /// Emptied by flash eviction while a checkpoint still names it: free once it does not.
    Retired,
    /// Its write or a read failed: never used again.
    Failed,
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    state: SegState,
    /// Sequence number of its current contents (also in its header on the device).
    seq: u64,
    /// Index entries pointing into it.
    live: u32,
    /// Latest expiry of its items; u32::MAX if one never expires.
    max_exptime: u32,
    /// Smallest revision of the items written into it (0 if unknown: a segment kept from
    /// before a restart). See [`Flash::checkpoint_entry`].
    min_revision: u64,
    /// Largest revision of the items written into it (0 if unknown: a segment kept from
    /// before a restart whose pins file did not say). See [`Flash::items_past`].
    max_revision: u64,
    /// Named by the last completed checkpoint: its contents must stay as they are.
    pinned: bool,
    /// Named by the checkpoint in progress.
    pin_next: bool,
    /// Being emptied by flash eviction right now.
    reclaiming: bool,
}

/// The segment items are appended to.
struct Open {
    seg: u32,
    buf: AlignedBuf,
    /// Next block to fill (block 0 is the header).
    block: u32,
    /// Bytes used in `block`.
    off: usize,
    /// Tags of the items in `block`: no two items of a block share one (see
    /// `cairn_store::flash`), so an entry's place names one item.
    block_tags: Vec<u32>,
    items: u32,
}

struct Inner {
    segs: Vec<Seg>,
    free: VecDeque<u32>,
    /// Sealed segments in write order, oldest first (the flash eviction FIFO).
    sealed: VecDeque<u32>,
    open: Option<Open>,
    /// Sealed buffers in write order; the front is being written when `writing` is set.
    queued: VecDeque<(u32, Arc<AlignedBuf>)>,
    writing: bool,
    /// Segments whose index entries must be dropped (a failed read or write).
    to_drop: Vec<u32>,
    next_seq: u64,
    /// Buffers kept for the next open segment.
    spare: Vec<AlignedBuf>,
    /// Set when flash eviction found only segments a checkpoint still needs.
    stalled: bool,
}

macro_rules! counters {
    ($( $field:ident : $doc:literal ),* $(,)?) => {
        /// Counters of the tier.
        #[derive(Default)]
        pub struct Counters {
            $( #[doc = $doc] pub $field: AtomicU64, )*
        }

        /// (name, description, reader) of every counter.
        pub const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
            $( (stringify!($field), $doc, |c: &Counters| c.$field.load(Relaxed)), )*
        ];
    };
}

counters! {
    extstore_objects_written: "Items written to flash (evictions and reinsertions).",
    extstore_bytes_written: "Bytes written to the flash device (whole segments).",
    flash_item_bytes_admitted: "Key and value bytes of the items written to flash.",
    extstore_page_allocs: "Flash segments opened for writing.",
    extstore_page_evictions: "Flash segments reclaimed while some of their items were live.",
    extstore_page_reclaims: "Flash segments reclaimed with no live item (no read needed).",
    extstore_objects_evicted: "Items dropped from flash by flash eviction.",
    flash_objects_reinserted: "Hot items written again by flash eviction instead of dropped.",
    flash_writer_drops: "Items evicted from RAM and dropped because the flash writer was behind.",
    flash_too_large: "Items evicted from RAM and dropped because they exceed a flash segment.",
    get_extstore: "Reads from flash that found their item.",
    flash_device_reads: "Reads issued to the flash device for lookups.",
    flash_reads_own_ring: "Device reads a connection's thread submitted to its own io_uring (the io_uring engine's connection ring, or the tokio engine worker's flash ring) and reaped itself (no other thread involved).",
    flash_buffered_reads: "Flash lookups served from a segment not yet written.",
    miss_from_extstore: "Flash reads that did not hold the key (another key's hash tag).",
    badcrc_from_extstore: "Flash reads whose item failed its checksum (answered as a miss).",
    extstore_io_errors: "Flash reads or writes that failed (their segment is dropped).",
    flash_segments_failed: "Flash segments dropped after an I/O error.",
    flash_pinned_stalls: "Times flash eviction waited because a checkpoint still named every old segment.",
    flash_promotions_allowed: "Promotions to RAM the bound allowed.",
    flash_verify_reads: "Device reads under a shard lock to tell whose item a flash entry holds (a store or delete of a key sharing its hash tag, not read before).",
    flash_reads_not_done: "Flash reads that could not be done (reader stopped, ring busy, out of memory): a get answers a miss, a command that changes the item an error, and the item stays (an entry a store of another key with its tag could not check goes, as a damaged one does); no segment is dropped.",
}

/// The tier.
pub struct Flash {
    config: FlashConfig,
    device: Arc<dyn Device>,
    reader: Reader,
    read_slots: tokio::sync::Semaphore,
    superblock: Superblock,
    /// Blocks per segment, header included.
    blocks_per_seg: u32,
    inner: Mutex<Inner>,
    /// Wakes the writer thread.
    work: Condvar,
    /// Wakes those waiting for writes (checkpoints).
    written: Condvar,
    pub counters: Counters,
    store: OnceLock<Weak<Store>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    stop: AtomicBool,
    /// The device kept an earlier tier's superblock: checkpointed segments may be trusted.
    trust_existing: bool,
    /// Recovery is loading the store: admits wait for the writer rather than drop.
    recovering: AtomicBool,
    /// The writer thread is taking shard locks (flash eviction, dropping a failed segment):
    /// admits do not wait for it then.
    taking_shard_locks: AtomicBool,
    /// Why io_uring is not used, if it is not.
    pub uring_unavailable: Option<String>,
}

fn now_unix() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
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

/// Whether [`Flash::get`] moves a flash hit back to RAM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Promotion {
    /// When it was read from flash before, within the bound of [`Flash::may_promote`].
    IfHot,
    /// Always: a command is about to change the item under the shard lock.
    Always,
}

/// Threads reading the named segments' headers at recovery (see [`Flash::recover_pins`]).
const PIN_READERS: usize = 16;

/// An item [`Flash::items_past`] found.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct PastItem {
    /// The seq of the segment it is in.
    pub seq: u64,
    /// Its first device block, and how many it spans (as in its `FlashLoc`).
    pub block: u32,
    pub nblocks: u32,
    pub key: Vec<u8>,
}

/// A segment a checkpoint names, as its pins file records it (docs/FORMATS.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Pin {
    pub segment: u32,
    /// The seq its header carried.
    pub seq: u64,
    /// The largest revision of its items; 0 if unknown (see [`Flash::items_past`]).
    pub max_revision: u64,
}

/// Lookups a read retries when the item moved while it was being read.
const LOOKUP_TRIES: usize = 4;

/// What [`Flash::fetch`] found.
#[derive(Debug)]
pub enum Fetch {
    Item(Item),
    /// The location holds another key (a shared hash tag).
    Absent,
    /// The bytes failed their checksum: a miss.
    Damaged,
    /// The device failed the read: a miss; the segment is being dropped.
    Failed,
    /// The read was not done ([`reader::is_device_error`] is false): nothing is known of the
    /// item, and nothing changes.
    NotRead(io::Error),
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

    /// Stops the writer thread after the write in hand (buffers not yet written are lost: a
    /// pure cache loses them anyway, and persistence has them in its snapshot or log).
    /// Releases the device's hold, as the end of the process would (see [`Device::unlock`]).
    #[cfg(test)]
    pub(crate) fn unlock_device(&self) {
        self.device.unlock();
    }

    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
        self.work.notify_all();
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }

    fn seg_of(&self, block: u32) -> u32 {
        (block - 1) / self.blocks_per_seg
    }

    fn device_block(&self, seg: u32, block: u32) -> u32 {
        1 + seg * self.blocks_per_seg + block
    }

    fn seg_offset(&self, seg: u32) -> u64 {
        u64::from(self.device_block(seg, 0)) * BLOCK as u64
    }

    /// Appends an item to the open segment; None if it cannot be taken now.
    fn append(&self, hash: u64, key: &[u8], value: &[u8], meta: &ItemMeta) -> Option<FlashLoc> {
        let len = format::item_len(key.len(), value.len());
        let nblocks = if len <= BLOCK {
            1
        } else {
            format::blocks_for(len)
        };
        if nblocks + 1 > self.blocks_per_seg || nblocks > cairn_store::flash::MAX_ITEM_BLOCKS {
            self.counters.flash_too_large.fetch_add(1, Relaxed);
            return None;
        }
        let mut inner = self.inner.lock();
        // During recovery nothing is acknowledged-and-evictable: an item dropped because the
        // writer is slow would be an acknowledged write lost. So a full write queue makes
        // recovery wait for the writer, up to a bound; so does the test switch
        // `wait_for_writer`. Not while the writer takes shard locks (it may need this very
        // one), and not for a free segment: none means the device is full and flash eviction,
        // which takes shard locks, is behind (the item is evicted, as a full cache evicts).
        let patience = Instant::now()
            + if self.config.wait_for_writer {
                Duration::from_secs(60)
            } else {
                Duration::from_secs(5)
            };
        let may_wait = || {
            (self.recovering.load(Relaxed) || self.config.wait_for_writer)
                && !self.taking_shard_locks.load(Relaxed)
                && Instant::now() < patience
        };
        let mut tries = 0;
        while tries < 2 {
            if inner.open.is_none() && !self.open_segment(&mut inner) {
                break;
            }
            let o = inner.open.as_mut().expect("opened above");
            let (block, off) = if len <= BLOCK {
                if o.off + len > BLOCK || o.block_tags.contains(&tag_of(hash)) {
                    (o.block + 1, 0)
                } else {
                    (o.block, o.off)
                }
            } else if o.off > 0 {
                (o.block + 1, 0)
            } else {
                (o.block, 0)
            };
            if block + nblocks > self.blocks_per_seg {
                if !self.seal(&mut inner) {
                    if may_wait() {
                        self.written.wait_for(&mut inner, Duration::from_millis(50));
                        continue;
                    }
                    break;
                }
                tries += 1;
                continue;
            }
            let at = block as usize * BLOCK + off;
            format::encode_item(&mut o.buf[at..at + len], key, value, meta);
            if block != o.block {
                o.block_tags.clear();
            }
            if len <= BLOCK {
                o.block = block;
                o.off = off + len;
                o.block_tags.push(tag_of(hash));
            } else {
                o.block = block + nblocks;
                o.off = 0;
            }
            o.items += 1;
            let seg = o.seg;
            let s = &mut inner.segs[seg as usize];
            s.live += 1;
            let exp = if meta.exptime == 0 {
                u32::MAX
            } else {
                meta.exptime
            };
            s.max_exptime = s.max_exptime.max(exp);
            s.min_revision = s.min_revision.min(meta.mod_revision);
            s.max_revision = s.max_revision.max(meta.mod_revision);
            self.counters.extstore_objects_written.fetch_add(1, Relaxed);
            self.counters
                .flash_item_bytes_admitted
                .fetch_add((key.len() + value.len()) as u64, Relaxed);
            return Some(FlashLoc::new(hash, self.device_block(seg, block), nblocks));
        }
        self.counters.flash_writer_drops.fetch_add(1, Relaxed);
        None
    }

    /// Opens a free segment for appends; false if none is free (the writer is behind).
    fn open_segment(&self, inner: &mut Inner) -> bool {
        let Some(seg) = inner.free.pop_front() else {
            self.work.notify_one();
            return false;
        };
        if inner.free.len() < FREE_RESERVE {
            self.work.notify_one();
        }
        let seq = inner.next_seq;
        inner.next_seq += 1;
        let s = &mut inner.segs[seg as usize];
        debug_assert_eq!(s.live, 0, "a free segment has no live items");
        *s = Seg {
            state: SegState::Open,
            seq,
            live: 0,
            max_exptime: 0,
            min_revision: u64::MAX,
            max_revision: 0,
            pinned: s.pinned,
            pin_next: s.pin_next,
            reclaiming: false,
        };
        let buf = match inner.spare.pop() {
            Some(mut b) => {
                b.fill(0);
                b
            }
            None => AlignedBuf::new(self.config.segment_bytes as usize),
        };
        inner.open = Some(Open {
            seg,
            buf,
            block: 1,
            off: 0,
            block_tags: Vec::new(),
            items: 0,
        });
        self.counters.extstore_page_allocs.fetch_add(1, Relaxed);
        true
    }

    /// Seals the open segment into the write queue; false if the queue is full.
    fn seal(&self, inner: &mut Inner) -> bool {
        if inner.queued.len() >= self.config.write_queue {
            self.work.notify_one();
            return false;
        }
        let Some(mut o) = inner.open.take() else {
            return true;
        };
        let used_blocks = o.block + u32::from(o.off > 0);
        let seq = inner.segs[o.seg as usize].seq;
        SegmentHeader {
            segment: o.seg,
            seq,
            items: o.items,
            used_blocks,
        }
        .encode(&mut o.buf[..BLOCK]);
        inner.segs[o.seg as usize].state = SegState::Queued;
        inner.queued.push_back((o.seg, Arc::new(o.buf)));
        self.work.notify_one();
        true
    }

    /// Reads `key`'s item at `loc`: from a buffer not yet written, else with one device read.
    pub async fn fetch(&self, key: &[u8], loc: FlashLoc) -> Fetch {
        let seg = self.seg_of(loc.block());
        let len = loc.nblocks() as usize * BLOCK;
        let buffered = {
            let inner = self.inner.lock();
            self.buffered(&inner, loc).map(<[u8]>::to_vec)
        };
        let found = match buffered {
            Some(bytes) => {
                self.counters.flash_buffered_reads.fetch_add(1, Relaxed);
                self.decode(&bytes, loc, key)
            }
            None => {
                let _slot = self.read_slots.acquire().await;
                self.counters.flash_device_reads.fetch_add(1, Relaxed);
                let offset = u64::from(loc.block()) * BLOCK as u64;
                let own = &self.counters.flash_reads_own_ring;
                match self.reader.read(offset, len, own).await {
                    Ok(buf) => self.decode(&buf, loc, key),
                    Err(e) => {
                        if self.read_failed(seg, &e) {
                            Fetch::Failed
                        } else {
                            Fetch::NotRead(e)
                        }
                    }
                }
            }
        };
        let c = &self.counters;
        match &found {
            Fetch::Item(_) => c.get_extstore.fetch_add(1, Relaxed),
            Fetch::Absent => c.miss_from_extstore.fetch_add(1, Relaxed),
            Fetch::Damaged => c.badcrc_from_extstore.fetch_add(1, Relaxed),
            Fetch::Failed | Fetch::NotRead(_) => 0,
        };
        found
    }

    /// A read of `key` through RAM and flash, as `get` answers it: looks the key up, reads
    /// each flash location that may hold it (usually one read), and confirms under the shard
    /// lock that the copy read is still the key's current one (else looks up again). A damaged
    /// or unreadable copy is forgotten: a miss, never wrong bytes. A read that could not be
    /// done is a miss this once, and the copy stays. `promotion` says whether a hit found on
    /// flash moves back to RAM.
    pub async fn get(
        &self,
        store: &Store,
        key: &[u8],
        now: u32,
        promotion: Promotion,
    ) -> ReadOutcome {
        self.get_noting_others(store, key, now, promotion, &mut Vec::new())
            .await
            .unwrap_or(ReadOutcome::Miss)
    }

    /// Brings `key`'s item back to RAM if it is on flash, so that a command that reads and
    /// changes it (a store, delete, touch, compare) runs on it under the shard lock with RAM
    /// semantics. Flash entries that share the key's hash tag but were read and found to hold
    /// other keys are spared by the command that follows (else a store of the key would
    /// remove them, unable to tell them from the key's own copy in RAM). Every front end
    /// calls it before such a command.
    ///
    /// An error: a read that could not be done (see [`Fetch::NotRead`]); the item may still
    /// be on flash, so the command must not run (it would take the key for absent).
    pub async fn bring_to_ram(&self, store: &Store, key: &[u8], now: u32) -> io::Result<()> {
        if store.flash_candidates(key).is_empty() {
            return Ok(());
        }
        let mut others = Vec::new();
        self.get_noting_others(store, key, now, Promotion::Always, &mut others)
            .await?;
        store.spare_flash(key, &others);
        Ok(())
    }

    /// [`Flash::get`], also noting in `others` the locations read that held other keys
    /// (a shared hash tag) in sealed segments, with their seq, for [`Store::spare_flash`].
    /// An error: a read that could not be done, which changed nothing.
    pub async fn get_noting_others(
        &self,
        store: &Store,
        key: &[u8],
        now: u32,
        promotion: Promotion,
        others: &mut Vec<(FlashLoc, u64)>,
    ) -> io::Result<ReadOutcome> {
        'lookup: for _ in 0..LOOKUP_TRIES {
            others.clear();
            let locs = match store.lookup(key, now) {
                Lookup::Done(outcome) => return Ok(outcome),
                Lookup::Flash(locs) => locs,
            };
            for loc in locs {
                let seq_before = self.sealed_seq(loc);
                let mut item = match self.fetch(key, loc).await {
                    Fetch::Item(item) => item,
                    Fetch::Absent => {
                        // Only if its segment was sealed before the read: then it held the
                        // bytes read, and can take no new copy of the key.
                        if let (Some(a), Some(b)) = (seq_before, self.sealed_seq(loc)) {
                            if a == b {
                                others.push((loc, a));
                            }
                        }
                        continue;
                    }
                    Fetch::Damaged | Fetch::Failed => {
                        store.flash_forget(key, loc);
                        continue;
                    }
                    Fetch::NotRead(e) => return Err(e),
                };
                item.meta.last_access = now;
                let promote = match promotion {
                    Promotion::Always => Promote::Always,
                    Promotion::IfHot => Promote::IfHot(loc.fetched() && self.may_promote()),
                };
                match store.flash_found(key, loc, &item, now, promote) {
                    FlashFound::Served | FlashFound::Promoted => {
                        item.meta.fetched = true;
                        return Ok(ReadOutcome::Hit(item));
                    }
                    FlashFound::Expired => return Ok(ReadOutcome::Expired),
                    FlashFound::NotCurrent => continue 'lookup,
                }
            }
            return Ok(ReadOutcome::Miss);
        }
        Ok(ReadOutcome::Miss)
    }

    /// The blocks of `loc` while its segment is still in a buffer (open, or waiting for its
    /// write), else None.
    fn buffered<'a>(&self, inner: &'a Inner, loc: FlashLoc) -> Option<&'a [u8]> {
        let seg = self.seg_of(loc.block());
        let bytes = match &inner.open {
            Some(o) if o.seg == seg => &o.buf[..],
            _ => &inner.queued.iter().find(|(s, _)| *s == seg)?.1[..],
        };
        let at = (loc.block() - self.device_block(seg, 0)) as usize * BLOCK;
        Some(&bytes[at..(at + loc.nblocks() as usize * BLOCK).min(bytes.len())])
    }

    fn decode(&self, bytes: &[u8], loc: FlashLoc, key: &[u8]) -> Fetch {
        match format::find_item(bytes, loc.nblocks(), key) {
            format::Found::Item(it) => Fetch::Item(Item {
                value: it.value.to_vec(),
                meta: it.meta,
            }),
            format::Found::Absent => Fetch::Absent,
            format::Found::Damaged => Fetch::Damaged,
        }
    }

    /// A read of segment `seg` failed. Returns whether it was the device's own error
    /// ([`reader::is_device_error`]): then the segment is dropped (its entries removed by the
    /// writer thread). Else the read was not done, and only counted.
    fn read_failed(&self, seg: u32, e: &io::Error) -> bool {
        if !reader::is_device_error(e) {
            self.counters.flash_reads_not_done.fetch_add(1, Relaxed);
            return false;
        }
        self.counters.extstore_io_errors.fetch_add(1, Relaxed);
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        if s.state == SegState::Sealed {
            tracing::error!("flash read failed in segment {seg} ({e}): dropping the segment");
            s.state = SegState::Failed;
            inner.sealed.retain(|&x| x != seg);
            inner.to_drop.push(seg);
            self.work.notify_one();
        }
        true
    }

    /// Whether one more promotion to RAM is within the bound (one per 16 items written to
    /// flash, after a start allowance): promotions make RAM evict, so they cost flash writes.
    pub fn may_promote(&self) -> bool {
        let c = &self.counters;
        let allowed = c.extstore_objects_written.load(Relaxed) / PROMOTE_EVERY + PROMOTE_ALLOWANCE;
        if c.flash_promotions_allowed.load(Relaxed) < allowed {
            c.flash_promotions_allowed.fetch_add(1, Relaxed);
            true
        } else {
            false
        }
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

    // ---- checkpoints and recovery ----
    //
    // What recovery may trust. A checkpoint records, shard by shard under the shard lock,
    // each flash entry as (shard, FlashLoc, seq of its segment) instead of the value, and
    // marks that segment `pin_next`. Before the snapshot becomes current, `checkpoint_sync`
    // makes every marked segment written (sealing the open one early if it is marked) and
    // fdatasyncs the device; the list of (segment, seq) goes into a pins file beside the
    // snapshot. From the manifest's switch on (`checkpoint_commit`) those segments are
    // `pinned`: flash eviction may empty one (its entries leave the index) but never reuses it
    // until a later checkpoint no longer names it. So while a snapshot is current, every
    // segment it names holds, on the device, exactly the bytes it had when the entry was
    // recorded, under the seq recorded.
    //
    // Recovery reads the pins files of the snapshots it may load, keeps each named segment
    // whose header still carries the named seq (`recover_pins`; it is not reused either),
    // and restores an entry only if its (segment, seq) was kept (`trusts`). A restored entry
    // is the key's state as of the shard's copy, like any snapshot item; every later change of
    // the key is a log record after the snapshot's LSN, and replay applies it (a store or a
    // delete removes the key's flash entries), so an overwritten or deleted value never comes
    // back. An entry whose item has a revision past the snapshot's LSN is left out
    // (`items_past`): its record is in the replayed log (below), which makes the item again.
    // Items that went to flash after the checkpoint need no trust: their values are in
    // the snapshot (they were in RAM then) or in the log. A segment rewritten since (the
    // previous snapshot's, when the newest is damaged) fails the seq check: its items are
    // lost, as if evicted, never read as something else. Seqs start at a random 63-bit base
    // at every start, so a seq never repeats on a device.

    /// Recovery, before a snapshot is loaded: keeps the segments `pins` names whose header
    /// still carries the named seq, pinned until a checkpoint no longer names them. Returns
    /// how many were kept. Must run before anything is admitted.
    pub fn recover_pins(&self, pins: &[Pin]) -> usize {
        if !self.trust_existing {
            return 0;
        }
        let mut wanted: Vec<Pin> = pins
            .iter()
            .copied()
            .filter(|p| u64::from(p.segment) < self.superblock.segment_count)
            .collect();
        // Each (segment, seq) once; a segment's header holds one seq, so at most one of the
        // pins naming a segment is kept. Two pins of one (segment, seq) name the same bytes;
        // an older pins file may not know their largest revision (0).
        wanted.sort_unstable();
        wanted.dedup_by(|later, kept| {
            let same = (later.segment, later.seq) == (kept.segment, kept.seq);
            if same {
                kept.max_revision = kept.max_revision.max(later.max_revision);
            }
            same
        });
        // The header reads (one 4 KiB read per named segment, a thousand at 10M items) are
        // made PIN_READERS at a time: one after another they were waits on the device in a
        // row (92 ms at 10M items on an idle disk, 250 ms at 3M on a busy one).
        let per = wanted.len().div_ceil(PIN_READERS).max(1);
        let mut kept: Vec<Pin> = std::thread::scope(|s| {
            let readers: Vec<_> = wanted
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        let mut block = AlignedBuf::new(BLOCK);
                        part.iter()
                            .filter(|p| {
                                self.device
                                    .read_at(self.seg_offset(p.segment), &mut block)
                                    .is_ok()
                                    && SegmentHeader::decode(&block)
                                        .is_some_and(|h| h.segment == p.segment && h.seq == p.seq)
                            })
                            .copied()
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            readers
                .into_iter()
                .flat_map(|r| r.join().expect("a pin reader panicked"))
                .collect()
        });
        // Oldest first: flash eviction takes `sealed` from the front.
        kept.sort_unstable_by_key(|p| p.seq);
        let mut inner = self.inner.lock();
        for &pin in &kept {
            let seg = pin.segment;
            inner.free.retain(|&f| f != seg);
            let s = &mut inner.segs[seg as usize];
            s.state = SegState::Sealed;
            s.seq = pin.seq;
            s.pinned = true;
            s.max_exptime = u32::MAX;
            s.min_revision = 0;
            s.max_revision = pin.max_revision;
            inner.sealed.push_back(seg);
        }
        kept.len()
    }

    /// Recovery, after [`Flash::recover_pins`], before the snapshot of LSN `after` is loaded:
    /// the items of the kept segments with a revision past `after`. An entry of that
    /// snapshot that points at one is better left out (the per-item form of
    /// [`Flash::checkpoint_entry`]'s rule). The checkpoint recorded the entry under its shard
    /// lock, so the item's revision r was handed out before the copy ended, at or before the
    /// L1 up to which the log was made durable before the snapshot became current: record r
    /// is in the log that replay reads from `after` on, and makes the item again. Restored,
    /// the entry would be found under the key's tag when record r is replayed, and read from
    /// the device under the shard lock to tell whose it is (31.9K such reads at 10M items,
    /// made while the replay's cores idled). Items past L1 (no entry points at them) are
    /// returned too and simply match nothing. Only segments whose pins file gave a largest
    /// revision past `after` are read, whole (a few at the checkpoint's boundary),
    /// PIN_READERS at a time; one that cannot be read gives nothing (its entries stay, as
    /// before).
    pub fn items_past(&self, after: u64) -> Vec<PastItem> {
        let segs: Vec<(u32, u64)> = {
            let inner = self.inner.lock();
            inner
                .segs
                .iter()
                .enumerate()
                .filter(|(_, s)| s.pinned && s.state == SegState::Sealed && s.max_revision > after)
                .map(|(i, s)| (i as u32, s.seq))
                .collect()
        };
        let per = segs.len().div_ceil(PIN_READERS).max(1);
        std::thread::scope(|s| {
            let readers: Vec<_> = segs
                .chunks(per)
                .map(|part| {
                    s.spawn(move || {
                        let mut buf = AlignedBuf::new(self.config.segment_bytes as usize);
                        let mut found = Vec::new();
                        for &(seg, seq) in part {
                            if self.device.read_at(self.seg_offset(seg), &mut buf).is_err() {
                                continue;
                            }
                            let Some(h) = SegmentHeader::decode(&buf[..BLOCK])
                                .filter(|h| h.segment == seg && h.seq == seq)
                            else {
                                continue;
                            };
                            let used = h.used_blocks.min(self.blocks_per_seg);
                            for (block, nblocks, it) in format::segment_items(&buf, used) {
                                if it.meta.mod_revision > after {
                                    found.push(PastItem {
                                        seq,
                                        block: self.device_block(seg, block),
                                        nblocks,
                                        key: it.key.to_vec(),
                                    });
                                }
                            }
                        }
                        found
                    })
                })
                .collect();
            readers
                .into_iter()
                .flat_map(|r| r.join().expect("a segment reader panicked"))
                .collect()
        })
    }

    /// Recovery starts (true) or ends (false): see `recovering`.
    pub fn set_recovering(&self, on: bool) {
        self.recovering.store(on, Relaxed);
    }

    /// For each (entry, seq): whether recovery may restore an entry at that place recorded
    /// with that seq (its segment was kept by [`Flash::recover_pins`] with that seq). One hold
    /// of the tier's lock for all.
    pub fn trusts(&self, entries: &[(FlashLoc, u64)]) -> Vec<bool> {
        let inner = self.inner.lock();
        entries
            .iter()
            .map(|&(loc, seq)| {
                inner
                    .segs
                    .get(self.seg_of(loc.block()) as usize)
                    .is_some_and(|s| {
                        s.pinned
                            && s.seq == seq
                            && s.state == SegState::Sealed
                            && self.trust_existing
                    })
            })
            .collect()
    }

    /// A checkpoint starts: no segment is named by it yet.
    pub fn checkpoint_begin(&self) {
        for s in &mut self.inner.lock().segs {
            s.pin_next = false;
        }
    }

    /// The checkpoint whose snapshot replays the log from record `after` + 1 on (its L0)
    /// records the entry `loc` (called under its shard lock): its segment is named, and its
    /// seq returned. None when every item written into the segment has a revision past
    /// `after`: each item's state is then the one its revision's log record makes, a record
    /// recovery replays from this snapshot anyway, so the entry is left out (and the segment
    /// not named). Recovery would otherwise find it under the key's tag when replaying that
    /// record, and read it from the device, under the shard lock, to tell whose it is: at 10M
    /// items, 30K such reads (items stored while the checkpoint ran and evicted to flash
    /// before their shard was copied).
    pub fn checkpoint_entry(&self, loc: FlashLoc, after: u64) -> Option<u64> {
        let seg = self.seg_of(loc.block());
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        if s.min_revision > after {
            return None;
        }
        s.pin_next = true;
        Some(s.seq)
    }

    /// Makes every segment the checkpoint named durable on the device (written, then an
    /// fdatasync), and returns them for the pins file.
    pub fn checkpoint_sync(&self) -> io::Result<Vec<Pin>> {
        let mut inner = self.inner.lock();
        loop {
            if let Some(o) = &inner.open {
                if inner.segs[o.seg as usize].pin_next {
                    self.seal(&mut inner);
                }
            }
            let waiting = inner
                .segs
                .iter()
                .any(|s| s.pin_next && matches!(s.state, SegState::Open | SegState::Queued));
            if !waiting {
                break;
            }
            if self.stop.load(Relaxed) {
                return Err(io::Error::other("the flash writer stopped"));
            }
            self.work.notify_one();
            self.written
                .wait_for(&mut inner, Duration::from_millis(100));
        }
        if inner
            .segs
            .iter()
            .any(|s| s.pin_next && s.state == SegState::Failed)
        {
            return Err(io::Error::other(
                "a flash segment the checkpoint names failed its write",
            ));
        }
        let pins = inner
            .segs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.pin_next)
            .map(|(i, s)| Pin {
                segment: i as u32,
                seq: s.seq,
                max_revision: s.max_revision,
            })
            .collect();
        drop(inner);
        self.device.sync()?;
        Ok(pins)
    }

    /// The checkpoint is current: what it named stays; what only the one before named may be
    /// reused.
    pub fn checkpoint_commit(&self) {
        self.swap_pins(true);
    }

    /// The checkpoint failed: the current one's pins stay as they were.
    pub fn checkpoint_abort(&self) {
        self.swap_pins(false);
    }

    fn swap_pins(&self, commit: bool) {
        {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            for (i, s) in inner.segs.iter_mut().enumerate() {
                if commit {
                    s.pinned = s.pin_next;
                }
                s.pin_next = false;
                if s.state == SegState::Retired && !s.pinned {
                    s.state = SegState::Free;
                    inner.free.push_back(i as u32);
                }
            }
            inner.stalled = false;
        }
        self.work.notify_one();
    }

    /// Flash eviction is stuck: every old segment is named by the current checkpoint, so
    /// evicted items are being dropped until the next one.
    pub fn needs_checkpoint(&self) -> bool {
        let inner = self.inner.lock();
        inner.stalled && inner.free.len() < FREE_RESERVE
    }

    // ---- the writer thread ----

    fn writer_loop(self: Arc<Flash>) {
        enum Job {
            Write(u32, Arc<AlignedBuf>),
            Drop(u32),
            Reclaim,
        }
        loop {
            let job = {
                let mut inner = self.inner.lock();
                loop {
                    if self.stop.load(Relaxed) {
                        return;
                    }
                    if let Some(seg) = inner.to_drop.pop() {
                        break Job::Drop(seg);
                    }
                    if !inner.writing {
                        if let Some((seg, buf)) = inner.queued.front() {
                            let job = Job::Write(*seg, Arc::clone(buf));
                            inner.writing = true;
                            break job;
                        }
                    }
                    if inner.free.len() < FREE_RESERVE && !inner.stalled && !inner.sealed.is_empty()
                    {
                        break Job::Reclaim;
                    }
                    // A timeout too: all-expired segments become reclaimable with time.
                    self.work.wait_for(&mut inner, Duration::from_secs(1));
                    inner.stalled = false;
                }
            };
            let Some(store) = self.store.get().and_then(Weak::upgrade) else {
                return;
            };
            match job {
                Job::Write(seg, buf) => self.write_segment(&store, seg, &buf),
                Job::Drop(seg) => self.taking_shard_locks(|| self.drop_segment(&store, seg)),
                Job::Reclaim => {
                    if !self.taking_shard_locks(|| self.reclaim_one(&store)) {
                        self.inner.lock().stalled = true;
                    }
                }
            }
        }
    }

    /// Runs `f`, which takes shard locks, while an admit that waits for the writer under a
    /// shard lock gives up instead (else each would wait for the other).
    fn taking_shard_locks<R>(&self, f: impl FnOnce() -> R) -> R {
        self.taking_shard_locks.store(true, Relaxed);
        // Under the lock the waiters check the flag with: none misses it.
        drop(self.inner.lock());
        self.written.notify_all();
        let r = f();
        self.taking_shard_locks.store(false, Relaxed);
        r
    }

    fn write_segment(&self, store: &Store, seg: u32, buf: &AlignedBuf) {
        let result = self.device.write_at(self.seg_offset(seg), buf);
        if let Err(e) = &result {
            tracing::error!("flash write of segment {seg} failed ({e}): dropping its items");
            self.counters.extstore_io_errors.fetch_add(1, Relaxed);
            // Its entries go before the buffer does, so no read can meet what the device
            // holds there instead.
            self.taking_shard_locks(|| self.remove_entries(store, seg));
        } else {
            self.counters
                .extstore_bytes_written
                .fetch_add(buf.len() as u64, Relaxed);
        }
        let mut inner = self.inner.lock();
        let (s, b) = inner.queued.pop_front().expect("the segment being written");
        assert_eq!(s, seg, "segments are written in queue order");
        inner.writing = false;
        if result.is_ok() {
            inner.segs[seg as usize].state = SegState::Sealed;
            inner.sealed.push_back(seg);
        } else {
            inner.segs[seg as usize].state = SegState::Failed;
        }
        if let Ok(b) = Arc::try_unwrap(b) {
            if inner.spare.len() < 2 {
                inner.spare.push(b);
            }
        }
        drop(inner);
        self.written.notify_all();
    }

    fn drop_segment(&self, store: &Store, seg: u32) {
        self.remove_entries(store, seg);
    }

    /// Removes every index entry into `seg` (a scan of the store) and counts the segment.
    fn remove_entries(&self, store: &Store, seg: u32) {
        let first = self.device_block(seg, 0);
        let dropped = store.flash_drop_blocks(first..first + self.blocks_per_seg);
        self.counters.flash_segments_failed.fetch_add(1, Relaxed);
        self.counters
            .extstore_objects_evicted
            .fetch_add(dropped, Relaxed);
    }

    /// Frees one segment by flash eviction. False if none may be freed now.
    fn reclaim_one(&self, store: &Store) -> bool {
        let now = now_unix();
        let victim = {
            let mut inner = self.inner.lock();
            let usable = |s: &Seg| !s.pinned && !s.pin_next;
            let pick = |f: &dyn Fn(&Seg) -> bool| {
                inner
                    .sealed
                    .iter()
                    .position(|&x| usable(&inner.segs[x as usize]) && f(&inner.segs[x as usize]))
            };
            let at = pick(&|s| s.live == 0)
                .or_else(|| pick(&|s| s.max_exptime <= now))
                .or_else(|| pick(&|_| true));
            let Some(at) = at else {
                self.counters.flash_pinned_stalls.fetch_add(1, Relaxed);
                return false;
            };
            let seg = inner.sealed.remove(at).expect("position found");
            let s = &mut inner.segs[seg as usize];
            if s.live == 0 {
                s.state = SegState::Free;
                inner.free.push_back(seg);
                self.counters.extstore_page_reclaims.fetch_add(1, Relaxed);
                drop(inner);
                self.written.notify_all();
                return true;
            }
            s.reclaiming = true;
            seg
        };
        self.counters.extstore_page_evictions.fetch_add(1, Relaxed);
        let mut buf = AlignedBuf::new(self.config.segment_bytes as usize);
        match self.device.read_at(self.seg_offset(victim), &mut buf) {
            Ok(()) => {
                let used = SegmentHeader::decode(&buf[..BLOCK])
                    .filter(|h| h.segment == victim)
                    .map_or(0, |h| h.used_blocks.min(self.blocks_per_seg));
                let mut budget = self.config.segment_bytes / REINSERT_FRACTION;
                for (block, nblocks, it) in format::segment_items(&buf, used) {
                    let loc_block = self.device_block(victim, block);
                    let mut meta = it.meta;
                    meta.fetched = false;
                    let r = store.flash_reclaim(it.key, loc_block, nblocks, |hash| {
                        if (it.len as u64) > budget {
                            return None;
                        }
                        let new = self.append(hash, it.key, it.value, &meta)?;
                        budget -= it.len as u64;
                        Some(new)
                    });
                    match r {
                        Reclaimed::Evicted => {
                            self.counters.extstore_objects_evicted.fetch_add(1, Relaxed)
                        }
                        Reclaimed::Reinserted => {
                            self.counters.flash_objects_reinserted.fetch_add(1, Relaxed)
                        }
                        Reclaimed::Dead => 0,
                    };
                }
            }
            Err(e) => {
                tracing::error!("flash read of segment {victim} for eviction failed: {e}");
                self.counters.extstore_io_errors.fetch_add(1, Relaxed);
            }
        }
        if self.inner.lock().segs[victim as usize].live > 0 {
            // Entries the read could not account for (damage, an I/O error): a scan removes
            // them, since the segment is about to hold other items.
            let first = self.device_block(victim, 0);
            let n = store.flash_drop_blocks(first..first + self.blocks_per_seg);
            self.counters.extstore_objects_evicted.fetch_add(n, Relaxed);
        }
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[victim as usize];
        s.reclaiming = false;
        debug_assert_eq!(s.live, 0, "an evicted segment keeps no entries");
        if s.pinned || s.pin_next {
            s.state = SegState::Retired;
        } else {
            s.state = SegState::Free;
            inner.free.push_back(victim);
        }
        drop(inner);
        self.written.notify_all();
        true
    }
}

/// Refuses geometry that cannot work, naming the path.
fn check_geometry(config: &FlashConfig) -> Result<(), FlashError> {
    let invalid = |why: String| {
        Err(FlashError::Open(OpenError::Invalid {
            path: config.path.display().to_string(),
            why,
        }))
    };
    let seg = config.segment_bytes;
    if !seg.is_multiple_of(BLOCK as u64) || seg < 16 * BLOCK as u64 || seg > 256 << 20 {
        return invalid(format!(
            "flash_segment_size {seg} must be a multiple of 4 KiB between 64 KiB and 256 MiB"
        ));
    }
    let need = BLOCK as u64 + MIN_SEGMENTS * seg;
    if config.size_bytes < need {
        return invalid(format!(
            "flash_size {} is below {MIN_SEGMENTS} segments of {seg} bytes ({need} bytes)",
            config.size_bytes
        ));
    }
    let blocks = (config.size_bytes / BLOCK as u64) as u128;
    if blocks >= 1 << cairn_store::flash::BLOCK_BITS {
        return invalid(format!(
            "flash_size {} is over the 512 GiB one tier can address",
            config.size_bytes
        ));
    }
    if config.write_queue == 0 {
        return invalid("the write queue must hold at least one segment".into());
    }
    Ok(())
}

impl FlashTier for Flash {
    fn admit(&self, hash: u64, key: &[u8], value: &[u8], meta: &ItemMeta) -> Option<FlashLoc> {
        self.append(hash, key, value, meta)
    }

    fn release(&self, loc: FlashLoc) {
        let seg = self.seg_of(loc.block());
        let mut inner = self.inner.lock();
        let s = &mut inner.segs[seg as usize];
        s.live = s.live.saturating_sub(1);
        if s.live == 0 && s.state == SegState::Sealed && inner.free.len() < FREE_RESERVE {
            self.work.notify_one();
        }
    }

    fn restore(&self, locs: &[FlashLoc]) {
        let mut inner = self.inner.lock();
        for loc in locs {
            inner.segs[self.seg_of(loc.block()) as usize].live += 1;
        }
    }

    fn key_at(&self, loc: FlashLoc, key: &[u8]) -> KeyAt {
        let whose = |found: format::Found<'_>| match found {
            format::Found::Item(_) => KeyAt::Key,
            format::Found::Absent => KeyAt::Other,
            format::Found::Damaged => KeyAt::Unknown,
        };
        let seg = self.seg_of(loc.block());
        {
            let inner = self.inner.lock();
            if let Some(bytes) = self.buffered(&inner, loc) {
                return whose(format::find_item(bytes, loc.nblocks(), key));
            }
            if inner.segs.get(seg as usize).map(|s| s.state) != Some(SegState::Sealed) {
                return KeyAt::Unknown;
            }
        }
        // Written: while the entry is indexed (the caller holds its shard lock) the segment
        // cannot be reused, so the device holds the item it was written with.
        self.counters.flash_verify_reads.fetch_add(1, Relaxed);
        let mut buf = AlignedBuf::new(loc.nblocks() as usize * BLOCK);
        match self
            .device
            .read_at(u64::from(loc.block()) * BLOCK as u64, &mut buf)
        {
            Ok(()) => whose(format::find_item(&buf, loc.nblocks(), key)),
            // Unknown either way: the entry goes (it may be the key's old copy); only the
            // device's own error drops the segment.
            Err(e) => {
                self.read_failed(seg, &e);
                KeyAt::Unknown
            }
        }
    }

    fn sealed_seq(&self, loc: FlashLoc) -> Option<u64> {
        let seg = self.seg_of(loc.block());
        let inner = self.inner.lock();
        let s = inner.segs.get(seg as usize)?;
        (s.state == SegState::Sealed).then_some(s.seq)
    }
}

#[cfg(test)]
mod tests;
