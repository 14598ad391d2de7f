//! A fault-injecting, in-memory [`FileSystem`] for tests only: it fails chosen operations,
//! ends a process that uses it ([`FaultyFs::crash`]: kill -9, the page cache survives), and
//! simulates a power loss by forgetting every byte and every directory change that was not
//! synced ([`FaultyFs::power_loss`]), or, tearing unsynced writes, by keeping a random subset
//! of the unsynced pages ([`FaultyFs::power_loss_torn`]).
//!
//! ```text
//!   file:  data (what reads see)   durable (what survives power_loss: as of the last sync_data)
//!   dir:   names (what list sees)  durable names (as of the last sync_dir)
//!   process: every clone of a FaultyFs is one "process": it and the files it opened belong to
//!            the generation current when it was cloned; crash() starts a new generation, and
//!            every call through an older one fails with EIO from then on
//! ```
//!
//! So a test ends a log or a persistence layer the way a crash does, with no `mem::forget`:
//! `fs.crash()` (nothing it does from then on reaches the "disk"), then drop it (its threads
//! stop; its attempts to flush fail), then `fs.power_loss()` for a power cut, and reopen on
//! `fs.clone()`, a new process. [`crate::kill`] and [`crate::power_cut`] do those steps.
//!
//! Faults armed with [`FaultyFs::fail_after`] skip the spare segment file (`*.spare`, the next
//! segment a background thread prepares; see [`crate::format::is_spare_name`]) so that they
//! land on the operation a test aims at whatever that thread is doing;
//! [`FaultyFs::fail_spare_after`] aims at the spare instead. Once renamed into a segment the
//! file is an ordinary target again.
//!
//! Not a stand-in for the product: the real log always runs on [`cairn_wal::RealFs`].

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use cairn_wal::format::is_spare_name;
use cairn_wal::{FileSystem, FolderLock, LogFile};

/// Operations that can be made to fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Op {
    Write,
    Sync,
    Rename,
    SyncDir,
    Create,
}

#[derive(Default)]
struct FileData {
    /// Bytes as reads see them.
    data: Vec<u8>,
    /// Bytes as of the last sync_data.
    durable: Vec<u8>,
    /// Created under a spare name and not renamed since: only spare faults apply.
    spare: bool,
}

fn path_is_spare(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_spare_name)
}

#[derive(Default)]
struct State {
    /// Current directory entries: path -> file.
    names: BTreeMap<PathBuf, Arc<Mutex<FileData>>>,
    /// Entries as of the last sync_dir of their directory.
    durable_names: BTreeMap<PathBuf, Arc<Mutex<FileData>>>,
    /// For each operation, on ordinary files (false) or the spare (true): fail the call after
    /// this many more successes, with this errno.
    faults: BTreeMap<(Op, bool), (usize, i32)>,
    /// Bytes a write may still add in total before ENOSPC (None = unlimited).
    space_left: Option<usize>,
    /// Every write to an ordinary file: (file, offset, length), see [`FaultyFs::writes`].
    writes: Vec<(PathBuf, u64, usize)>,
    /// `drop_cache` calls on ordinary files, by file.
    cache_drops: Vec<PathBuf>,
}

/// The fake filesystem. Cheap to clone; clones share state, and each clone is a new process
/// (see the module doc).
#[derive(Default)]
pub struct FaultyFs {
    state: Arc<Mutex<State>>,
    /// The generation now: bumped by every crash.
    generation: Arc<AtomicU64>,
    /// The generation this handle belongs to; `None` for the handle [`FaultyFs::new`] returns,
    /// which the test itself uses and no crash ends.
    process: Option<u64>,
    /// While true, sync_data of ordinary files blocks (a slow disk, for backpressure tests).
    hold: Arc<(Mutex<bool>, Condvar)>,
    /// How many sync_data calls are blocked by `hold_syncs` right now.
    held: Arc<AtomicUsize>,
}

impl Clone for FaultyFs {
    /// A handle for a new process: it belongs to the generation current now.
    fn clone(&self) -> FaultyFs {
        FaultyFs {
            state: Arc::clone(&self.state),
            generation: Arc::clone(&self.generation),
            process: Some(self.generation.load(Ordering::SeqCst)),
            hold: Arc::clone(&self.hold),
            held: Arc::clone(&self.held),
        }
    }
}

impl FaultyFs {
    pub fn new() -> FaultyFs {
        FaultyFs::default()
    }

    /// Ends every process using this file system, as kill -9 does: from now on every call
    /// through an earlier clone (or a file it opened) fails with EIO and changes nothing.
    /// What was written stays, as in the page cache; [`FaultyFs::power_loss`] drops what was
    /// not synced.
    pub fn crash(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.hold_syncs(false);
    }

    /// Another handle of the same process (for the files it opens).
    fn same_process(&self) -> FaultyFs {
        FaultyFs {
            process: self.process,
            ..self.clone()
        }
    }

    /// Err(EIO) if this handle's process was ended by a crash.
    fn alive(&self) -> io::Result<()> {
        match self.process {
            Some(g) if g != self.generation.load(Ordering::SeqCst) => {
                Err(io::Error::from_raw_os_error(libc::EIO))
            }
            _ => Ok(()),
        }
    }

    /// Makes the `op` call after `successes` more successful ones fail with `errno`, once.
    pub fn fail_after(&self, op: Op, successes: usize, errno: i32) {
        self.state
            .lock()
            .faults
            .insert((op, false), (successes, errno));
    }

    /// Like [`FaultyFs::fail_after`], for operations on the spare segment file only.
    pub fn fail_spare_after(&self, op: Op, successes: usize, errno: i32) {
        self.state
            .lock()
            .faults
            .insert((op, true), (successes, errno));
    }

    /// While `on`, every sync_data of an ordinary file blocks until `hold_syncs(false)`.
    pub fn hold_syncs(&self, on: bool) {
        let (held, cv) = &*self.hold;
        *held.lock() = on;
        cv.notify_all();
    }

    /// How many sync_data calls `hold_syncs` is blocking right now.
    pub fn syncs_held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Limits how many more bytes writes may add; beyond it they fail with ENOSPC.
    pub fn set_space_left(&self, bytes: Option<usize>) {
        self.state.lock().space_left = bytes;
    }

    /// Forgets everything not synced: file contents fall back to their last sync_data, and
    /// directory entries to their last sync_dir. Ends every process first ([`FaultyFs::crash`]).
    pub fn power_loss(&self) {
        self.crash();
        let mut s = self.state.lock();
        s.names = s.durable_names.clone();
        for f in s.names.values() {
            let mut f = f.lock();
            f.data = f.durable.clone();
        }
        s.faults.clear();
        s.space_left = None;
    }

    /// A power loss that tears unsynced writes: directory entries fall back to their last
    /// sync_dir, and each 4 KiB page of a file that changed since its last sync_data keeps
    /// the new bytes or the old ones, chosen by `seed` (disks persist pages in any order).
    pub fn power_loss_torn(&self, seed: u64) {
        self.crash();
        const PAGE: usize = 4096;
        let mut rng = seed | 1;
        let mut coin = move || {
            // xorshift64: enough to pick pages, and repeatable from the seed.
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng & 1 == 1
        };
        let mut s = self.state.lock();
        s.names = s.durable_names.clone();
        for f in s.names.values() {
            let mut f = f.lock();
            let mut torn = f.durable.clone();
            if torn.len() < f.data.len() {
                torn.resize(f.data.len(), 0);
            }
            for start in (0..f.data.len()).step_by(PAGE) {
                let end = (start + PAGE).min(f.data.len());
                if f.data[start..end] != torn[start..end] && coin() {
                    torn[start..end].copy_from_slice(&f.data[start..end]);
                }
            }
            f.durable = torn.clone();
            f.data = torn;
        }
        s.faults.clear();
        s.space_left = None;
    }

    /// Every write made so far to an ordinary (not spare) file: (path, offset, length), in
    /// order; the path is the one the file was opened or created under.
    pub fn writes(&self) -> Vec<(PathBuf, u64, usize)> {
        self.state.lock().writes.clone()
    }

    /// The ordinary files whose cache was dropped ([`LogFile::drop_cache`]), one entry a
    /// call, in order.
    pub fn cache_drops(&self) -> Vec<PathBuf> {
        self.state.lock().cache_drops.clone()
    }

    /// Direct access for corruption tests: runs `f` on a file's bytes (both views).
    pub fn corrupt(&self, path: &Path, f: impl Fn(&mut Vec<u8>)) {
        let s = self.state.lock();
        let file = s.names.get(path).expect("file exists");
        let mut file = file.lock();
        f(&mut file.data);
        f(&mut file.durable);
    }

    fn check(&self, op: Op, spare: bool) -> io::Result<()> {
        self.alive()?;
        let mut s = self.state.lock();
        if let Some((left, errno)) = s.faults.get_mut(&(op, spare)) {
            if *left == 0 {
                let errno = *errno;
                s.faults.remove(&(op, spare));
                return Err(io::Error::from_raw_os_error(errno));
            }
            *left -= 1;
        }
        Ok(())
    }
}

struct FaultyFile {
    fs: FaultyFs,
    data: Arc<Mutex<FileData>>,
    /// The name it was opened or created under (for [`FaultyFs::writes`]).
    path: PathBuf,
}

impl LogFile for FaultyFile {
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut f = self.data.lock();
        self.fs.check(Op::Write, f.spare)?;
        let end = offset as usize + buf.len();
        let growth = end.saturating_sub(f.data.len());
        {
            let mut s = self.fs.state.lock();
            if !f.spare {
                s.writes.push((self.path.clone(), offset, buf.len()));
            }
            if let Some(left) = s.space_left.as_mut() {
                if growth > *left {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                *left -= growth;
            }
        }
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        f.data[offset as usize..end].copy_from_slice(buf);
        Ok(())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        self.fs.alive()?;
        let f = self.data.lock();
        let start = (offset as usize).min(f.data.len());
        let n = buf.len().min(f.data.len() - start);
        buf[..n].copy_from_slice(&f.data[start..start + n]);
        Ok(n)
    }

    fn sync_data(&self) -> io::Result<()> {
        let spare = self.data.lock().spare;
        if !spare {
            let (held, cv) = &*self.fs.hold;
            let mut held = held.lock();
            if *held {
                self.fs.held.fetch_add(1, Ordering::SeqCst);
                while *held {
                    cv.wait(&mut held);
                }
                self.fs.held.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let mut f = self.data.lock();
        self.fs.check(Op::Sync, spare)?;
        f.durable = f.data.clone();
        Ok(())
    }

    fn size(&self) -> io::Result<u64> {
        self.fs.alive()?;
        Ok(self.data.lock().data.len() as u64)
    }

    fn drop_cache(&self) {
        if self.fs.alive().is_ok() && !self.data.lock().spare {
            self.fs.state.lock().cache_drops.push(self.path.clone());
        }
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.fs.alive()?;
        let mut f = self.data.lock();
        let growth = (len as usize).saturating_sub(f.data.len());
        {
            let mut s = self.fs.state.lock();
            if let Some(left) = s.space_left.as_mut() {
                if growth > *left {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
                *left -= growth;
            }
        }
        f.data.resize(len as usize, 0);
        Ok(())
    }
}

impl FileSystem for FaultyFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        self.check(Op::Create, path_is_spare(path))?;
        let mut s = self.state.lock();
        if s.names.contains_key(path) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let data = Arc::new(Mutex::new(FileData {
            spare: path_is_spare(path),
            ..FileData::default()
        }));
        s.names.insert(path.to_path_buf(), Arc::clone(&data));
        Ok(Box::new(FaultyFile {
            fs: self.same_process(),
            data,
            path: path.to_path_buf(),
        }))
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn LogFile>> {
        self.alive()?;
        let s = self.state.lock();
        let data = s
            .names
            .get(path)
            .cloned()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        Ok(Box::new(FaultyFile {
            fs: self.same_process(),
            data,
            path: path.to_path_buf(),
        }))
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.alive()?;
        let s = self.state.lock();
        Ok(s.names
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.alive()?;
        self.state
            .lock()
            .names
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.check(Op::Rename, path_is_spare(from))?;
        let mut s = self.state.lock();
        let f = s
            .names
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        f.lock().spare = path_is_spare(to);
        s.names.insert(to.to_path_buf(), f);
        Ok(())
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.check(Op::SyncDir, false)?;
        let mut s = self.state.lock();
        let current: Vec<_> = s
            .names
            .iter()
            .filter(|(p, _)| p.parent() == Some(dir))
            .map(|(p, f)| (p.clone(), Arc::clone(f)))
            .collect();
        s.durable_names.retain(|p, _| p.parent() != Some(dir));
        s.durable_names.extend(current);
        Ok(())
    }

    fn create_dir_all(&self, _dir: &Path) -> io::Result<()> {
        Ok(())
    }
    /// Nothing to hold: no other process sees this disk.
    fn lock_folder(&self, _dir: &Path) -> io::Result<FolderLock> {
        Ok(FolderLock::in_memory())
    }
}
