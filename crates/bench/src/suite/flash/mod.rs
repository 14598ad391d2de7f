//! `cairn-bench suite flash`: the fatcache seed's figures (issue 13, F1-F6) in one run, side by
//! side: cairn with everything in RAM, cairn with `-m RAM` and a flash file, memcached with
//! extstore (`-o ext_path=FILE:SIZE,ext_item_size=64`, same `-m`), and fio on cairn's flash file.
//!
//! ```text
//!   cairn RAM-only ─ insert (F1 baseline)
//!   cairn flash    ─ insert (F1, F4) ─ uniform gets (F2) ─ one client gets (F3) ─ 9:1 sets
//!                    with hot gets (F6)
//!   memcached ext  ─ the same phases
//!   fio            ─ 4 KiB random reads, O_DIRECT, io_uring, at the load's queue depth and at 1
//!   cairn flash, persistence sync ─ insert, overwrite + delete some, kill -9, restart (F5)
//! ```
//!
//! The flash files go in `--flash-dir` (default: the output folder), which must be on the disk
//! being measured (not tmpfs).
//!
//! The files:
//!
//! ```text
//!   servers.rs  cairn (RAM-only, with flash, with persistence sync) and memcached with extstore
//!   phases.rs   the insert (F1, F4), the gets (F2, F3), the 9:1 mix (F6): a server's Figures
//!   fio.rs      fio's random reads of the flash file: the device's bound
//!   f5.rs       F5: insert, overwrite and delete some, kill -9, restart, check every key
//!   reads.rs    `--flash-phases reads` and `reads-ab`: F2 and F3 alone, or A/B of builds
//!   run.rs      `--flash-phases all` (and `f5`): every part, the table and the JSON
//! ```

mod f5;
mod fio;
mod phases;
mod reads;
mod run;
mod servers;

pub use run::run;
