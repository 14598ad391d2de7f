//! The power-cut loop: the persistence layer on the fault-injecting file system, writers on
//! several threads, a checkpoint now and then, and the power cut at a random moment: every
//! byte not yet fdatasync'd is lost, or torn at 4 KiB pages (`FaultyFs::power_loss_torn`).
//! Then recovery, checked exactly: the store holds the model applied up to the recovered
//! log's last LSN (a prefix of the log, so no deleted or overwritten value comes back), and
//! that prefix reaches every write the mode promised to keep: in sync mode every
//! acknowledged write, in async mode every acknowledged write the log had fdatasync'd.
//!
//! kill -9 keeps the page cache, so the crash loops of the server cannot catch a missing
//! fdatasync; this loop does. Each run prints its seed; `CAIRN_TEST_SEED` replays it, and
//! `CAIRN_POWER_CUTS` runs more cut points than the 100 per mode of a normal run.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cairn_persist::{Mode, PersistConfig, Persistence, Ticket, DEFAULT_MAX_PENDING_BYTES};
use cairn_store::StoreConfig;
use cairn_testkit::{FaultyFs, Rng};
use cairn_wal::{block_on, Lsn};

const WRITERS: usize = 3;
const KEYS_PER_WRITER: u64 = 24;

/// One write that got a log record: its LSN, key and resulting state (None = deleted).
#[derive(Clone, Debug)]
struct Logged {
    lsn: Lsn,
    key: String,
    state: Option<String>,
    acked: bool,
}

fn config(fs: &FaultyFs, mode: Mode, direct_io: bool) -> PersistConfig {
    PersistConfig {
        mode,
        data_path: Path::new("/p/data").into(),
        logs_path: Path::new("/p/log").into(),
        // Long enough that async mode leaves written, unsynced records at most cuts.
        async_flush_ms: 50,
        chkpt_interval_pct_snapshot: 100,
        chkpt_interval_min_logsize_mb: 256,
        checkpoint_rate_mb_s: 0,
        // Small segments: cuts land around segment switches and reused files too.
        segment_bytes: 16 << 10,
        direct_io,
        syncer_batch_sched: false,
        max_pending_bytes: DEFAULT_MAX_PENDING_BYTES,
        fs: Arc::new(fs.clone()),
        flash: None,
    }
}

fn open(fs: &FaultyFs, mode: Mode, direct_io: bool) -> Persistence {
    Persistence::open(config(fs, mode, direct_io), StoreConfig::default())
        .unwrap_or_else(|e| panic!("recovery refused: {e}"))
}

fn now() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as u32
}

/// A writer: sets (4 in 5) and deletes on its own keys until a write fails (the power is
/// gone) or `stop`. Each write goes the front ends' way: room, store call, ticket, wait until
/// acknowledged.
fn writer(
    p: Arc<Persistence>,
    id: usize,
    seed: u64,
    acked: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    out: Arc<Mutex<Vec<Logged>>>,
) {
    let mut rng = Rng::new(seed ^ (id as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let store = p.store();
    let mut n = 0u64;
    while !stop.load(Ordering::Acquire) {
        n += 1;
        let key = format!("w{id}-k{}", rng.below(KEYS_PER_WRITER));
        // Values of varied length, so records straddle pages differently.
        let state = (rng.below(5) != 0)
            .then(|| format!("w{id}-v{n}-{}", "x".repeat(rng.below(300) as usize)));
        block_on(p.room());
        let (stored, revision) = store.entry_reporting(key.as_bytes(), now(), |e| match &state {
            Some(v) => e.store(&[v.as_bytes()], 0, 0, None).is_ok(),
            None => {
                e.delete();
                true
            }
        });
        let ticket = Ticket::from_revision(revision);
        assert!(stored, "the store has room for every write");
        if ticket.failed() {
            return;
        }
        let Some(lsn) = ticket.lsn() else {
            continue; // A delete of a missing key: nothing changed, nothing logged.
        };
        let i = {
            let mut out = out.lock().unwrap();
            out.push(Logged {
                lsn,
                key,
                state,
                acked: false,
            });
            out.len() - 1
        };
        if block_on(p.acknowledged(ticket)).is_err() {
            return;
        }
        out.lock().unwrap()[i].acked = true;
        acked.fetch_add(1, Ordering::Release);
    }
}

/// The store's contents: key -> value.
fn contents(p: &Persistence) -> BTreeMap<String, String> {
    let store = p.store();
    let mut out = BTreeMap::new();
    for shard in 0..store.shard_count() {
        store.visit_shard(shard, now(), |k, v, _| {
            out.insert(
                String::from_utf8(k.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            );
        });
    }
    out
}

/// One cut point: write, cut the power, recover, check. `known` is the state the previous
/// round recovered (the keys' state before this round's writes).
fn one_cut(
    fs: &FaultyFs,
    mode: Mode,
    rng: &mut Rng,
    round: usize,
    known: &mut BTreeMap<String, String>,
) {
    let direct_io = rng.below(2) == 0;
    let p = Arc::new(open(fs, mode, direct_io));
    assert_eq!(
        &contents(&p),
        known,
        "round {round}: reopening changed the state"
    );
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let out = Arc::new(Mutex::new(Vec::new()));
    let seed = rng.next_u64();
    let writers: Vec<_> = (0..WRITERS)
        .map(|id| {
            let (p, acked, stop, out) = (
                Arc::clone(&p),
                Arc::clone(&acked),
                Arc::clone(&stop),
                Arc::clone(&out),
            );
            std::thread::spawn(move || writer(p, id, seed, acked, stop, out))
        })
        .collect();
    // Cut after a random number of acknowledged writes; now and then a checkpoint runs
    // (and may be cut in the middle).
    let cut_after = 1 + rng.below(400) as usize;
    let checkpoint_at = (rng.below(3) == 0).then(|| rng.below(cut_after as u64) as usize);
    let mut checkpoint = None;
    while acked.load(Ordering::Acquire) < cut_after {
        if checkpoint.is_none()
            && checkpoint_at.is_some_and(|at| acked.load(Ordering::Acquire) >= at)
        {
            let p = Arc::clone(&p);
            checkpoint = Some(std::thread::spawn(move || p.checkpoint().is_ok()));
        }
        std::thread::yield_now();
    }
    // The power goes: nothing reaches the disk from here on.
    fs.crash();
    stop.store(true, Ordering::Release);
    for w in writers {
        w.join().unwrap();
    }
    if let Some(c) = checkpoint {
        c.join().unwrap();
    }
    // Stop the log's threads, then read what it had made durable before the cut.
    let _ = p.close();
    let durable = p.durable_lsn();
    drop(p);
    fs.power_loss_torn(rng.next_u64());

    let p = open(fs, mode, direct_io);
    let logged = std::mem::take(&mut *out.lock().unwrap());
    let recovered = p.stats().log.appended_lsn;
    let required = logged
        .iter()
        .filter(|w| w.acked && (mode == Mode::Sync || w.lsn <= durable))
        .map(|w| w.lsn)
        .max()
        .unwrap_or(0);
    assert!(
        recovered >= required,
        "round {round} ({mode:?}, direct_io {direct_io}): recovered up to {recovered}, but {required} was acknowledged{}",
        if mode == Mode::Async { " and fdatasync'd" } else { "" }
    );
    // The model: the state before the round, then every logged write up to the recovered
    // LSN, in LSN order.
    let mut model = known.clone();
    let mut in_order = logged;
    in_order.sort_by_key(|w| w.lsn);
    for w in in_order.iter().take_while(|w| w.lsn <= recovered) {
        match &w.state {
            Some(v) => model.insert(w.key.clone(), v.clone()),
            None => model.remove(&w.key),
        };
    }
    let got = contents(&p);
    if got != model {
        let diff: Vec<_> = model
            .keys()
            .chain(got.keys())
            .filter(|k| model.get(*k) != got.get(*k))
            .take(5)
            .map(|k| {
                format!(
                    "{k}: recovered {:?}, expected {:?}",
                    got.get(k),
                    model.get(k)
                )
            })
            .collect();
        panic!("round {round} ({mode:?}, direct_io {direct_io}, cut at {recovered}): {diff:?}");
    }
    *known = got;
    cairn_testkit::kill(fs, p);
}

fn power_cut_loop(mode: Mode) {
    let seed = Rng::seed();
    let mut rng = Rng::new(seed);
    let cuts: usize = std::env::var("CAIRN_POWER_CUTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    // A few file systems in a row, each carried through many cuts (the state and the log
    // build up: checkpoints, segment switches, reused segments, several recoveries).
    let per_fs = 25;
    let mut done = 0;
    while done < cuts {
        let fs = FaultyFs::new();
        let mut known = BTreeMap::new();
        for _ in 0..per_fs.min(cuts - done) {
            one_cut(&fs, mode, &mut rng, done, &mut known);
            done += 1;
        }
    }
    eprintln!("{mode:?}: {done} power cuts recovered exactly (seed {seed})");
}

#[test]
fn sync_power_cuts_lose_no_acknowledged_write() {
    power_cut_loop(Mode::Sync);
}

#[test]
fn async_power_cuts_lose_only_what_was_not_fdatasynced() {
    power_cut_loop(Mode::Async);
}
