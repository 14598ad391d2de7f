//! The fuzz targets' checks on the stable toolchain, as CI runs them: every seed of each
//! target's corpus, then a bounded random run of mutated seeds (a few seconds per target, not
//! the minutes `cargo fuzz` spends; see fuzz/README.md). A failing input is printed with the
//! random seed that produced it (`CAIRN_TEST_SEED=<n>` replays the run).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use cairn_fuzz_checks::{Target, TARGETS};
use cairn_store::{DeleteReason, ItemMeta, Mutation};
use cairn_testkit::Rng;

/// How long the random run of one target lasts at most, and how many inputs it tries at most.
const RANDOM_RUN: Duration = Duration::from_secs(3);
const RANDOM_INPUTS: u32 = 200_000;

fn fuzz_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The seed corpus of a target: every file of `fuzz/seeds/<seeds>`, sorted by name.
fn seeds(t: &Target) -> Vec<(String, Vec<u8>)> {
    let dir = fuzz_dir().join("seeds").join(t.seeds);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<_> = files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// Runs `t`'s check on `input`; on a panic, prints the input (and how to replay it) first.
fn check(t: &Target, input: &[u8], origin: &str) {
    let result = std::panic::catch_unwind(|| (t.check)(input));
    if let Err(panic) = result {
        eprintln!(
            "fuzz target {} failed on {origin}: {:?}",
            t.name,
            String::from_utf8_lossy(input)
        );
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn every_seed_passes_every_check() {
    for t in TARGETS {
        for (name, data) in seeds(t) {
            check(t, &data, &format!("seed {name}"));
        }
    }
}

/// One record of each kind, as the log writes them: the `record_decode` seeds.
fn record_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let meta = |exptime, stale| ItemMeta {
        flags: 0xdead_beef,
        exptime,
        cas: 42,
        last_access: 0,
        fetched: false,
        stale,
        win_sent: false,
        mod_revision: 0,
    };
    let gone = |reason| Mutation::Deleted {
        key: b"gone",
        reason,
        prev: None,
    };
    let mutations = [
        (
            "stored",
            Mutation::Stored {
                key: b"key",
                value: b"value",
                meta: meta(0, false),
                prev: None,
            },
        ),
        (
            "stored_stale_expiring",
            Mutation::Stored {
                key: b"k",
                value: b"",
                meta: meta(1_800_000_000, true),
                prev: None,
            },
        ),
        ("deleted", gone(DeleteReason::Client)),
        ("expired", gone(DeleteReason::Expired)),
        ("evicted", gone(DeleteReason::Evicted)),
        ("flushed", Mutation::Flushed),
        (
            "flush_scheduled",
            Mutation::FlushScheduled { at: 1_800_000_000 },
        ),
    ];
    mutations
        .into_iter()
        .map(|(name, m)| {
            let mut out = Vec::new();
            cairn_persist::record::encode(&mut out, &m);
            (name, out)
        })
        .collect()
}

/// The committed `record_decode` seeds are what the encoder writes today (run with
/// `CAIRN_WRITE_SEEDS=1` to rewrite them after a format change).
#[test]
fn record_seeds_are_the_encoders_output() {
    let dir = fuzz_dir().join("seeds/record_decode");
    for (name, bytes) in record_seeds() {
        let path = dir.join(name);
        if std::env::var_os("CAIRN_WRITE_SEEDS").is_some() {
            std::fs::write(&path, &bytes).unwrap();
        }
        assert_eq!(
            std::fs::read(&path).ok(),
            Some(bytes),
            "{} is stale: CAIRN_WRITE_SEEDS=1 cargo test -p cairn-fuzz-checks",
            path.display()
        );
    }
}

/// A number in `0..n` (0 when `n` is 0).
fn below(rng: &mut Rng, n: usize) -> usize {
    rng.below(n.max(1) as u64) as usize
}

/// The tokens of a libFuzzer dictionary file (`"..."` lines, with `\xNN` escapes).
fn dictionary(path: &std::path::Path) -> Vec<Vec<u8>> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix('"')?.strip_suffix('"'))
        .map(|quoted| {
            let mut out = Vec::new();
            let b = quoted.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'\\' && b.get(i + 1) == Some(&b'x') && i + 3 < b.len() {
                    let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).unwrap());
                    i += 4;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            out
        })
        .collect()
}

/// One to four of libFuzzer's kinds of mutation: flip, insert, delete, duplicate, a dictionary
/// token, a splice with another seed.
fn mutate(rng: &mut Rng, input: &mut Vec<u8>, seeds: &[Vec<u8>], dict: &[Vec<u8>]) {
    for _ in 0..=below(rng, 4) {
        let at = below(rng, input.len() + 1);
        match below(rng, 7) {
            0 if !input.is_empty() => {
                let i = below(rng, input.len());
                input[i] ^= 1 << below(rng, 8);
            }
            1 => input.insert(at, rng.next_u64() as u8),
            2 if !input.is_empty() => {
                let end = (at + 1 + below(rng, 8)).min(input.len());
                input.drain(at.min(end)..end);
            }
            3 if !input.is_empty() => {
                let from = below(rng, input.len());
                let end = (from + 1 + below(rng, 16)).min(input.len());
                let piece = input[from..end].to_vec();
                input.splice(at..at, piece);
            }
            4 | 5 if !dict.is_empty() => {
                let token = &dict[below(rng, dict.len())];
                input.splice(at..at, token.iter().copied());
            }
            _ => {
                let other = &seeds[below(rng, seeds.len())];
                let from = below(rng, other.len() + 1);
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
        }
    }
    input.truncate(4096);
}

#[test]
fn a_bounded_random_run_finds_nothing() {
    let seed = Rng::seed();
    let dict = dictionary(&fuzz_dir().join("proto.dict"));
    for t in TARGETS {
        let corpus: Vec<Vec<u8>> = seeds(t).into_iter().map(|(_, d)| d).collect();
        let dict: &[Vec<u8>] = if t.protocol_dict { &dict } else { &[] };
        let mut rng = Rng::new(seed);
        let started = Instant::now();
        let mut tried = 0;
        while tried < RANDOM_INPUTS && started.elapsed() < RANDOM_RUN {
            let mut input = corpus[below(&mut rng, corpus.len())].clone();
            mutate(&mut rng, &mut input, &corpus, dict);
            check(
                t,
                &input,
                &format!("a mutated seed (CAIRN_TEST_SEED={seed})"),
            );
            tried += 1;
        }
        eprintln!("{}: {tried} inputs in {:?}", t.name, started.elapsed());
        assert!(tried > 100, "{}: only {tried} inputs", t.name);
    }
}
