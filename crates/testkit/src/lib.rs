//! cairn-testkit: what cairn's tests share, as a dev-dependency only.
//!
//! - [`FaultyFs`]: an in-memory file system that fails chosen operations, ends a process
//!   ([`kill`], like kill -9) and loses what was not synced ([`power_cut`]).
//! - [`Rng`]: a small seeded generator, so that a failing random test can be replayed.
//!
//! Nothing here stands in for the product: the log and the server run on the real disk
//! everywhere but in fault-injection tests.

pub mod faulty_fs;

pub use faulty_fs::{FaultyFs, Op};

/// Ends `process` (a log, a persistence layer: anything holding clones of `fs`) as kill -9
/// does: it writes nothing more, its threads stop, and what it wrote stays (the page cache
/// survives). Reopen on `fs.clone()`.
pub fn kill<T>(fs: &FaultyFs, process: T) {
    fs.crash();
    drop(process);
}

/// Ends `process` as a power cut does: as [`kill`], and every byte and directory change that
/// was not synced is lost.
pub fn power_cut<T>(fs: &FaultyFs, process: T) {
    kill(fs, process);
    fs.power_loss();
}

/// [`power_cut`] that tears unsynced writes at 4 KiB pages, chosen by `seed`
/// ([`FaultyFs::power_loss_torn`]).
pub fn power_cut_torn<T>(fs: &FaultyFs, process: T, seed: u64) {
    kill(fs, process);
    fs.power_loss_torn(seed);
}

/// A small deterministic generator (xorshift64*): a failing run is replayed from its seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// The seed for a random test: `CAIRN_TEST_SEED` if set, else the clock. Printed, so a
    /// failure can be replayed.
    pub fn seed() -> u64 {
        let seed = std::env::var("CAIRN_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
                    | 1
            });
        eprintln!("seed: {seed} (CAIRN_TEST_SEED={seed} replays it)");
        seed
    }
}
