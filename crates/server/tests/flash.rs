//! The flash tier end to end: the real binary, a flash file with O_DIRECT in the temporary
//! folder (which must take O_DIRECT: ext4 does, tmpfs does not), data many times the RAM limit. Commands on flash items,
//! restarts and a kill -9 crash loop with persistence, a corrupted segment, refusals at start.
//! The crash loop prints its seed; CAIRN_TEST_SEED replays it.

mod common;

use std::collections::HashMap;
use std::process::Command;
use std::sync::{Arc, Mutex};

use common::{golden, Conn, Server};

/// RAM limit of these tests, MiB (one store shard).
const RAM_MB: &str = "4";

fn flash_args<'a>(dir: &'a str, mode: &'a str) -> Vec<&'a str> {
    vec![
        "--enable-admin",
        "-m",
        RAM_MB,
        "--persistence",
        mode,
        "--flash-path",
        dir,
        "--flash-size",
        "96m",
    ]
}

/// The test switch that makes RAM eviction wait for the flash writer instead of dropping
/// items when the writer is behind (other work on the machine can starve it): these tests
/// expect every item back. What happens without it is tested in cairn-flash (drops counted).
const WAIT_FOR_WRITER: (&str, &str) = (cairn_server::test_hooks::FLASH_WAIT_FOR_WRITER, "1");

/// Starts cairn with its flash file in its data folder.
fn start(tmp: &std::path::Path, mode: &str) -> Server {
    let path = tmp.join("flash.dat");
    let path = path.to_str().unwrap().to_string();
    Server::start_in_with_env(tmp, &[WAIT_FOR_WRITER], &flash_args(&path, mode))
}

fn value_of(i: usize, round: usize) -> String {
    format!("v{round}-{i:06}-").repeat(60)
}

/// Sets `keys` with pipelined batches; every reply must be STORED.
fn set_all(c: &mut Conn, keys: impl Iterator<Item = (String, String)>) {
    let keys: Vec<_> = keys.collect();
    for batch in keys.chunks(100) {
        let mut req = String::new();
        for (k, v) in batch {
            req.push_str(&format!("set {k} 0 0 {}\r\n{v}\r\n", v.len()));
        }
        assert_eq!(
            c.exchange(req.as_bytes()),
            b"STORED\r\n".repeat(batch.len())
        );
    }
}

/// Values of `keys` by multi-get (missing keys are absent from the map).
fn get_all(c: &mut Conn, keys: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for batch in keys.chunks(50) {
        let reply = c.exchange(format!("get {}\r\n", batch.join(" ")).as_bytes());
        let text = String::from_utf8(reply).unwrap();
        let mut lines = text.split("\r\n");
        while let Some(head) = lines.next() {
            if head == "END" || head.is_empty() {
                continue;
            }
            let key = head.split(' ').nth(1).unwrap().to_string();
            out.insert(key, lines.next().unwrap().to_string());
        }
    }
    out
}

fn stat(c: &mut Conn, name: &str) -> f64 {
    let text = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no stat {name} in {text}"))
        .parse()
        .unwrap()
}

fn stat_text(c: &mut Conn, name: &str) -> String {
    let text = String::from_utf8(c.exchange(b"stats\r\n")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("STAT {name} ")))
        .unwrap_or_else(|| panic!("no stat {name} in {text}"))
        .to_string()
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("key-{i}")).collect()
}

/// Fills RAM several times over with other keys, so the keys set before end on flash.
fn push_to_flash(c: &mut Conn, round: usize) {
    set_all(
        c,
        (0..16_000).map(|i| (format!("fill-{round}-{i}"), value_of(i, round))),
    );
}

#[test]
fn ten_times_ram_reads_back_exactly_from_flash() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "off");
    let mut c = server.connect();
    // 40 MiB of values through 4 MiB of RAM.
    let n = 40_000;
    let keys = keys(n);
    set_all(
        &mut c,
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), value_of(i, 0))),
    );
    let got = get_all(&mut c, &keys);
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(got.get(k), Some(&value_of(i, 0)), "{k}");
    }
    assert!(stat(&mut c, "flash_items") > (n / 2) as f64);
    assert!(stat(&mut c, "get_extstore") > (n / 2) as f64);
    assert_eq!(stat(&mut c, "evictions"), 0.0, "nothing left the cache");
    assert_eq!(stat(&mut c, "badcrc_from_extstore"), 0.0);
    let per_hit = stat(&mut c, "flash_reads_per_hit");
    assert!(
        (1.0..1.01).contains(&per_hit),
        "reads per flash hit: {per_hit}"
    );
    // Every device read went through the connection thread's own ring (the io_uring
    // engine's connection ring, or the tokio engine worker's flash ring), none through the
    // shared ring thread. (With the pread fallback, where io_uring is refused, there is none.)
    let reads = stat(&mut c, "flash_device_reads");
    if stat_text(&mut c, "flash_io_engine") == "io_uring" {
        assert_eq!(stat(&mut c, "flash_reads_own_ring"), reads);
    }
    // Misses almost never read the device.
    let absent: Vec<String> = (0..2000).map(|i| format!("absent-{i}")).collect();
    assert!(get_all(&mut c, &absent).is_empty());
    assert!(stat(&mut c, "flash_device_reads") - reads <= 20.0);
}

#[test]
fn commands_on_flash_items_keep_their_ram_semantics() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "off");
    let mut c = server.connect();
    golden(
        &mut c,
        &[
            ("set n 3 0 2\r\n10\r\n", "STORED\r\n"),
            ("set a 0 0 3\r\nabc\r\n", "STORED\r\n"),
            ("set t 0 0 1\r\nt\r\n", "STORED\r\n"),
            ("set d 0 0 1\r\nd\r\n", "STORED\r\n"),
            ("set o 0 0 3\r\nold\r\n", "STORED\r\n"),
            ("set c 0 0 1\r\nc\r\n", "STORED\r\n"),
            ("set m 9 0 2\r\nmm\r\n", "STORED\r\n"),
        ],
    );
    let cas_of = |c: &mut Conn, key: &str| -> String {
        let r = String::from_utf8(c.exchange(format!("gets {key}\r\n").as_bytes())).unwrap();
        r.split("\r\n")
            .next()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string()
    };
    let cas_c = cas_of(&mut c, "c");
    let cas_m = cas_of(&mut c, "m");
    // Twice: items read since written get a second chance in RAM once.
    push_to_flash(&mut c, 1);
    push_to_flash(&mut c, 2);
    assert!(stat(&mut c, "flash_items") > 0.0);
    assert_eq!(stat(&mut c, "evictions"), 0.0);
    let before = stat(&mut c, "get_extstore");
    golden(
        &mut c,
        &[
            // The CAS unique survives the trip to flash.
            (
                "gets c\r\n",
                &format!("VALUE c 0 1 {cas_c}\r\nc\r\nEND\r\n"),
            ),
            ("incr n 5\r\n", "15\r\n"),
            ("append a 0 0 3\r\ndef\r\n", "STORED\r\n"),
            ("touch t 1000\r\n", "TOUCHED\r\n"),
            ("delete d\r\n", "DELETED\r\n"),
            ("get d\r\n", "END\r\n"),
            ("set o 0 0 3\r\nnew\r\n", "STORED\r\n"),
            (&format!("cas c 0 0 2 {cas_c}\r\nc2\r\n"), "STORED\r\n"),
            ("mg m v f c\r\n", &format!("VA 2 f9 c{cas_m}\r\nmm\r\n")),
        ],
    );
    assert!(
        stat(&mut c, "get_extstore") > before,
        "they were read from flash"
    );
    // Everything goes to flash again; the old copies never come back.
    push_to_flash(&mut c, 3);
    push_to_flash(&mut c, 4);
    golden(
        &mut c,
        &[
            (
                "get n a t d o c\r\n",
                "VALUE n 3 2\r\n15\r\nVALUE a 0 6\r\nabcdef\r\nVALUE t 0 1\r\nt\r\n\
                 VALUE o 0 3\r\nnew\r\nVALUE c 0 2\r\nc2\r\nEND\r\n",
            ),
            ("flush_all\r\n", "OK\r\n"),
            ("get n a fill-3-1\r\n", "END\r\n"),
        ],
    );
    assert_eq!(stat(&mut c, "flash_items"), 0.0);
}

#[test]
fn a_corrupted_flash_segment_gives_misses_not_wrong_values() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "off");
    let mut c = server.connect();
    let n = 20_000;
    let keys = keys(n);
    set_all(
        &mut c,
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), value_of(i, 0))),
    );
    assert!(stat(&mut c, "extstore_bytes_written") > 0.0);
    // Flip a byte in every data block of the first two segments (1 MiB each, after the
    // 4 KiB superblock).
    let path = tmp.path().join("flash.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    for block in 1..2 * 256 {
        if block % 256 != 0 {
            bytes[4096 + block * 4096 + 100] ^= 0x5a;
        }
    }
    std::fs::write(&path, &bytes).unwrap();
    let got = get_all(&mut c, &keys);
    for (i, k) in keys.iter().enumerate() {
        if let Some(v) = got.get(k) {
            assert_eq!(v, &value_of(i, 0), "{k}: a wrong value");
        }
    }
    assert!(got.len() < n, "the damaged items are misses");
    assert!(stat(&mut c, "badcrc_from_extstore") > 0.0);
}

#[test]
fn flash_items_survive_a_graceful_restart_and_a_kill_9() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "sync");
    let mut c = server.connect();
    let n = 15_000;
    let keys = keys(n);
    set_all(
        &mut c,
        keys.iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), value_of(i, 0))),
    );
    assert!(stat(&mut c, "flash_items") > 5000.0);
    golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
    // After the checkpoint: overwrite and delete flash items (log records only).
    golden(
        &mut c,
        &[
            ("set key-1 0 0 3\r\nnew\r\n", "STORED\r\n"),
            ("delete key-2\r\n", "DELETED\r\n"),
        ],
    );
    server.kill9();
    let server = start(tmp.path(), "sync");
    let mut c = server.connect();
    let recovered = String::from_utf8(c.exchange(b"stats persistence\r\n")).unwrap();
    assert!(
        !recovered.contains("STAT recovered_flash_items 0\r\n"),
        "{recovered}"
    );
    let check = |c: &mut Conn| {
        let got = get_all(c, &keys);
        for (i, k) in keys.iter().enumerate() {
            let want = match i {
                1 => Some("new".to_string()),
                2 => None,
                _ => Some(value_of(i, 0)),
            };
            assert_eq!(got.get(k), want.as_ref(), "{k}");
        }
    };
    check(&mut c);
    // A graceful restart (its checkpoint names the flash segments) keeps them as well.
    let pid = server.child.id().to_string();
    let mut server = server;
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    assert!(server.child.wait().unwrap().success());
    let server = start(tmp.path(), "sync");
    check(&mut server.connect());
}

/// `n` disjoint pairs of keys whose hashes share the flash tag under the hash seed in the
/// flash file's superblock (these tests' RAM limit makes one store shard).
fn same_tag_pairs(flash_file: &std::path::Path, n: usize) -> Vec<(String, String)> {
    use std::io::Read;
    let mut block = vec![0u8; 4096];
    std::fs::File::open(flash_file)
        .unwrap()
        .read_exact(&mut block)
        .unwrap();
    let sb = cairn_flash::format::Superblock::decode(&block).expect("a flash superblock");
    let store = cairn_store::Store::new(
        cairn_store::StoreConfig {
            hash_seed: Some(sb.hash_seed),
            ..Default::default()
        },
        None,
    );
    let mut seen = HashMap::new();
    let mut pairs = Vec::new();
    for i in 0.. {
        let key = format!("p{i}");
        let tag = cairn_store::flash::tag_of(store.key_hash(key.as_bytes()));
        match seen.remove(&tag) {
            Some(other) => pairs.push((other, key)),
            None => {
                seen.insert(tag, key);
            }
        }
        if pairs.len() == n {
            break;
        }
    }
    pairs
}

#[test]
fn a_write_never_drops_another_key_sharing_its_flash_tag_nor_does_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "sync");
    let pairs = same_tag_pairs(&tmp.path().join("flash.dat"), 120);
    let mut c = server.connect();
    // Step by step: B of pair `step`, 100 other items (~70 KB), and the A of the pair whose B
    // went 40..72 steps before. B leaves the 4 MiB of RAM for flash after about 50 steps and
    // stays in a segment buffer not yet written for some steps more, so many A are written
    // while their B is in such a buffer, the rest while it is on the device.
    let lag = |i: usize| 40 + i % 32;
    let steps = pairs.len() + 72;
    for step in 0..steps {
        let mut batch = Vec::new();
        if let Some((_, b)) = pairs.get(step) {
            batch.push((b.clone(), format!("B-{step}")));
        }
        batch.extend((0..100).map(|j| (format!("fill-{step}-{j}"), value_of(j, step))));
        for (i, (a, _)) in pairs.iter().enumerate() {
            if i + lag(i) == step {
                batch.push((a.clone(), format!("A-{i}")));
            }
        }
        set_all(&mut c, batch.into_iter());
        if step == steps / 2 {
            golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
        }
    }
    let keys: Vec<String> = pairs
        .iter()
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let check = |c: &mut Conn, when: &str| {
        let got = get_all(c, &keys);
        let missing: Vec<_> = pairs
            .iter()
            .enumerate()
            .flat_map(|(i, (a, b))| {
                [(a, format!("A-{i}")), (b, format!("B-{i}"))]
                    .into_iter()
                    .filter(|(k, v)| got.get(*k) != Some(v))
                    .map(|(k, _)| k.clone())
            })
            .collect();
        assert!(missing.is_empty(), "{when}: {missing:?} lost");
        assert_eq!(stat(c, "flash_tag_drops"), 0.0, "{when}");
        assert_eq!(stat(c, "evictions"), 0.0, "{when}");
    };
    assert!(stat(&mut c, "flash_items") > 10_000.0);
    check(&mut c, "serving");
    // Log replay after a kill -9 stores the same keys again, evicting to flash as it goes.
    server.kill9();
    let server = start(tmp.path(), "sync");
    check(&mut server.connect(), "after a kill -9");
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// A write the crash loop's writer sent: key, the state it gives (None = deleted), acked.
type Sent = (String, Option<String>, bool);

#[test]
fn kill9_crash_loop_with_flash_loses_nothing_acknowledged() {
    let seed = std::env::var("CAIRN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("seed: {seed} (CAIRN_TEST_SEED={seed} replays it)");
    let mut rng = Rng(seed);
    let tmp = tempfile::tempdir().unwrap();
    // key -> the values it may hold: the last acknowledged one, plus one unacknowledged
    // write in flight at the kill (None = deleted).
    let mut known: HashMap<String, Vec<Option<String>>> = HashMap::new();
    let keyspace = 6000u64;
    for round in 0..4 {
        let server = start(tmp.path(), "sync");
        let addr = server.addr;
        let writes = 2000 + (rng.next() % 3000) as usize;
        let checkpoint_at = (rng.next() % writes as u64) as usize;
        let round_seed = rng.next();
        let log: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let writer_log = Arc::clone(&log);
        let writer = std::thread::spawn(move || {
            let mut rng = Rng(round_seed | 1);
            let mut c = Conn::new(addr);
            for i in 0.. {
                let key = format!("k{}", rng.next() % keyspace);
                let delete = rng.next().is_multiple_of(10);
                let state = (!delete).then(|| format!("r{round}-{i}-").repeat(300));
                writer_log
                    .lock()
                    .unwrap()
                    .push((key.clone(), state.clone(), false));
                let req = match &state {
                    Some(v) => format!("set {key} 0 0 {}\r\n{v}\r\n", v.len()),
                    None => format!("delete {key}\r\n"),
                };
                use std::io::{Read, Write};
                if c.stream.write_all(req.as_bytes()).is_err() {
                    return;
                }
                let mut buf = [0u8; 64];
                match c.stream.read(&mut buf) {
                    Ok(n) if n > 0 => {
                        let reply = &buf[..n];
                        assert!(
                            reply == b"STORED\r\n"
                                || reply == b"DELETED\r\n"
                                || reply == b"NOT_FOUND\r\n",
                            "{:?}",
                            String::from_utf8_lossy(reply)
                        );
                        writer_log.lock().unwrap().last_mut().unwrap().2 = true;
                    }
                    _ => return,
                }
            }
        });
        let mut c = server.connect();
        let mut checkpointed = false;
        loop {
            let done = log.lock().unwrap().len();
            if !checkpointed && done >= checkpoint_at {
                golden(&mut c, &[("checkpoint\r\n", "OK\r\n")]);
                checkpointed = true;
            }
            if done >= writes {
                break;
            }
            std::thread::yield_now();
        }
        let dropped = stat(&mut c, "evictions");
        assert_eq!(
            dropped, 0.0,
            "flash is large enough: nothing may leave the cache"
        );
        server.kill9();
        writer.join().unwrap();
        let ops: Vec<Sent> = log.lock().unwrap().clone();
        let checkpoint_op = checkpoint_at;
        for (key, state, acked) in log.lock().unwrap().drain(..) {
            // A key never written before may be absent (an unacknowledged first write).
            let states = known.entry(key).or_insert_with(|| vec![None]);
            if acked {
                *states = vec![state];
            } else {
                states.push(state);
            }
        }
        let server = start(tmp.path(), "sync");
        let mut c = server.connect();
        let all: Vec<String> = known.keys().cloned().collect();
        let got = get_all(&mut c, &all);
        let stats = String::from_utf8(c.exchange(b"stats\r\n")).unwrap()
            + &String::from_utf8(c.exchange(b"stats persistence\r\n")).unwrap();
        for (key, states) in known.iter_mut() {
            let now = got.get(key).cloned();
            assert!(
                states.contains(&now),
                "round {round}, seed {seed}: {key} is {:?}, may be one of {} states; its ops this \
                 round (index, deleted, acked) {:?}, checkpoint at op {checkpoint_op} of {}\n{stats}",
                now.as_ref().map(|v| &v[..12.min(v.len())]),
                states.len(),
                ops.iter()
                    .enumerate()
                    .filter(|(_, o)| &o.0 == key)
                    .map(|(i, o)| (i, o.1.is_none(), o.2))
                    .collect::<Vec<_>>(),
                ops.len()
            );
            *states = vec![now];
        }
        assert!(
            stat(&mut c, "flash_items") > 0.0,
            "round {round}: items on flash"
        );
        server.kill9();
    }
}

#[test]
fn bad_flash_settings_refuse_to_start_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let refuse = |args: &[&str]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_cairn"))
            .args(["-p", "0", "--persistence", "off", "--data-dir"])
            .arg(tmp.path())
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let small = tmp.path().join("small.dat");
    let err = refuse(&[
        "--flash-path",
        small.to_str().unwrap(),
        "--flash-size",
        "2m",
    ]);
    assert!(
        err.contains("small.dat") && err.contains("below 8 segments"),
        "{err}"
    );
    let nowhere = tmp.path().join("missing-dir").join("f.dat");
    let err = refuse(&[
        "--flash-path",
        nowhere.to_str().unwrap(),
        "--flash-size",
        "64m",
    ]);
    assert!(
        err.contains("missing-dir") && err.contains("cannot open"),
        "{err}"
    );
    let err = refuse(&["-o", "ext_path=/x"]);
    assert!(err.contains("ext_path"), "{err}");
    if std::path::Path::new("/dev/shm").is_dir() {
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let f = shm.path().join("f.dat");
        let err = refuse(&["--flash-path", f.to_str().unwrap(), "--flash-size", "64m"]);
        assert!(err.contains("f.dat") && err.contains("O_DIRECT"), "{err}");
    }
}

/// The gRPC API on items whose copy is on flash: Get, BatchGet and StreamGet read them (the
/// revision kept), and writes see them (ADD refuses, a compare holds, a delete removes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_reads_and_writes_see_flash_items() {
    use cairn_api::pb::{self, kv_client::KvClient};
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "off");
    let url = format!("http://{}", server.grpc_addr.expect("gRPC is on"));
    let mut kv = KvClient::connect(url).await.unwrap();
    let set = |key: &'static str| {
        let mut kv = kv.clone();
        async move {
            kv.set(pb::SetRequest {
                key: key.into(),
                value: format!("value of {key}").into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
        }
    };
    let a = set("a").await;
    let b = set("b").await;
    set("c").await;
    let d = set("d").await;
    let mut c = server.connect();
    push_to_flash(&mut c, 1);
    assert_eq!(stat(&mut c, "evictions"), 0.0);
    let flash_reads = stat(&mut c, "get_extstore");
    let got = kv
        .get(pb::GetRequest { key: "a".into() })
        .await
        .expect("a flash item is a hit over gRPC")
        .into_inner()
        .kv
        .unwrap();
    assert_eq!(
        (&got.value[..], got.cas, got.mod_revision),
        (&b"value of a"[..], a.cas, a.mod_revision)
    );
    let batch = kv
        .batch_get(pb::BatchGetRequest {
            keys: vec!["b".into(), "missing".into()],
        })
        .await
        .unwrap()
        .into_inner();
    let found: Vec<_> = batch.results.iter().map(|l| l.found).collect();
    assert_eq!(found, [true, false]);
    assert_eq!(
        batch.results[0].kv.as_ref().unwrap().mod_revision,
        b.mod_revision
    );
    let mut answers = kv
        .stream_get(tokio_stream::iter([pb::StreamGetRequest {
            request_id: 7,
            keys: vec!["c".into()],
        }]))
        .await
        .unwrap()
        .into_inner();
    let answer = answers.message().await.unwrap().unwrap();
    assert_eq!(
        &answer.results[0].kv.as_ref().unwrap().value[..],
        b"value of c"
    );
    assert!(
        stat(&mut c, "get_extstore") >= flash_reads + 3.0,
        "read from flash"
    );
    // Writes: ADD sees the flash item, a compare on its revision holds, a delete removes it.
    let e = kv
        .set(pb::SetRequest {
            key: "d".into(),
            value: "new".into(),
            mode: pb::SetMode::Add as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::AlreadyExists);
    kv.set(pb::SetRequest {
        key: "d".into(),
        value: "new".into(),
        compare: Some(pb::Compare {
            target: Some(pb::compare::Target::ModRevision(d.mod_revision)),
        }),
        ..Default::default()
    })
    .await
    .expect("the compare on a flash item's revision holds");
    kv.delete(pb::DeleteRequest {
        key: "b".into(),
        compare: None,
    })
    .await
    .expect("a flash item is deleted");
    golden(
        &mut c,
        &[
            ("get b\r\n", "END\r\n"),
            ("get d\r\n", "VALUE d 0 3\r\nnew\r\nEND\r\n"),
        ],
    );
}
