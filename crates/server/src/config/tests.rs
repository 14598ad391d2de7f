//! The settings' sources, precedence, checks and reference page.

use std::path::{Path, PathBuf};

use super::settings::grpc_threads_for;
use super::size::parse_size;
use super::{command, ChkptSetting, Config, ConfigError};

/// What `Config::from_args` gives for a file holding `text` (written to `path`) and the
/// `extra` flags.
fn load_result(path: &Path, text: &str, extra: &[&str]) -> Result<Config, ConfigError> {
    std::fs::write(path, text).unwrap();
    let mut args = vec!["cairn", "--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    Config::from_args(args)
}

fn load_with(path: &Path, text: &str, extra: &[&str]) -> Config {
    load_result(path, text, extra).unwrap()
}

#[test]
fn unknown_key_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "port = 1\nmemory_limt_mb = 5\n").unwrap();
    let err = Config::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("memory_limt_mb"), "{err}");
    std::fs::write(&path, "port = \"x\"\n").unwrap();
    let err = Config::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("port") || err.contains("string"), "{err}");
}

#[test]
fn arcus_keys_pick_the_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let load = |text: &str, extra: &[&str]| load_with(&path, text, extra).persistence;
    assert_eq!(load("", &[]), "sync");
    assert_eq!(load("use_persistence = false\n", &[]), "off");
    assert_eq!(
        load("use_persistence = true\nasync_logging = true\n", &[]),
        "async"
    );
    assert_eq!(
        load("async_logging = true\n", &["--persistence", "sync"]),
        "sync"
    );
    let c = load_with(&path, "logs_path = \"/x/log\"\n", &[]);
    assert_eq!(
        (c.log_dir(), c.snapshot_dir()),
        (PathBuf::from("/x/log"), PathBuf::from("cairn-data"))
    );
}

#[test]
fn flags_override_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "port = 1000\nmemory_limit_mb = 5\n").unwrap();
    let c = Config::from_args(["cairn", "--config", path.to_str().unwrap(), "-p", "2000"]).unwrap();
    assert_eq!((c.port, c.memory_limit_mb), (2000, 5));
}

#[test]
fn an_absent_flag_keeps_the_file_value_and_bool_flags_take_an_optional_value() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let text = "disable_evictions = true\nverbosity = 2\nlog_direct_io = false\n";
    let c = load_with(&path, text, &[]);
    assert!(c.disable_evictions && !c.log_direct_io && c.verbosity == 2);
    let c = load_with(&path, text, &["-M", "false", "--log-direct-io", "-v"]);
    assert!(!c.disable_evictions && c.log_direct_io && c.verbosity == 1);
    let c = load_with(&path, "", &["-M", "-A", "-p", "7"]);
    assert!(c.disable_evictions && c.enable_shutdown && c.port == 7);
    assert_eq!(Config::from_args(["cairn"]).unwrap(), Config::default());
}

/// The configuration reference's table has a row for every key (JSON keeps the unset
/// Options' keys).
#[test]
fn the_reference_lists_every_setting() {
    let readme = include_str!("../../../../docs/CONFIGURATION.md");
    let keys = serde_json::to_value(Config::default()).unwrap();
    for key in keys.as_object().unwrap().keys() {
        assert!(
            readme.contains(&format!("\n| `{key}` | ")),
            "docs/CONFIGURATION.md's settings table has no row for `{key}`"
        );
    }
}

/// Every flag `cairn --help` shows, long and short, is written in the configuration
/// reference.
#[test]
fn the_reference_lists_every_flag() {
    let readme = include_str!("../../../../docs/CONFIGURATION.md");
    let mut cmd = command();
    cmd.build();
    for arg in cmd.get_arguments() {
        let long = arg.get_long().map(|l| format!("`--{l}"));
        let short = arg.get_short().map(|s| format!("`-{s}"));
        for flag in long.into_iter().chain(short) {
            assert!(
                readme.contains(&flag),
                "docs/CONFIGURATION.md does not name {flag}`"
            );
        }
    }
}

#[test]
fn dash_o_sets_any_key_and_refuses_unknown_ones() {
    let c = Config::from_args([
        "cairn",
        "-o",
        "async_flush_ms=7,data_path=/x/snap,log_batch_sched=false",
        "-o",
        "enable_admin",
    ])
    .unwrap();
    assert_eq!(c.async_flush_ms, 7);
    assert_eq!(c.data_path, Some(PathBuf::from("/x/snap")));
    assert!(!c.log_batch_sched && c.enable_admin);
    let c = Config::from_args(["cairn", "-o", "metrics_addr=127.0.0.1:9150"]).unwrap();
    assert_eq!(c.metrics_addr, Some("127.0.0.1:9150".parse().unwrap()));
    for (option, why) in [
        ("no_such_key=1", "no_such_key"),
        ("async_flush_ms=soon", "whole number"),
        ("log_direct_io=maybe", "true or false"),
        // -o values are checked like the file's and the flags'.
        ("async_flush_ms=0", "between 1 and 60000"),
    ] {
        let err = Config::from_args(["cairn", "-o", option])
            .unwrap_err()
            .to_string();
        assert!(err.contains(why), "{option}: {err}");
    }
}

#[test]
fn log_batch_sched_is_on_unless_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let load = |text: &str, extra: &[&str]| load_with(&path, text, extra).log_batch_sched;
    assert!(load("", &[]));
    assert!(!load("log_batch_sched = false\n", &[]));
    assert!(load(
        "log_batch_sched = false\n",
        &["--log-batch-sched", "true"]
    ));
}

#[test]
fn grpc_settings_from_file_and_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let c = load_with(&path, "", &[]);
    assert_eq!(c.grpc_addr(), Some("127.0.0.1:50051".parse().unwrap()));
    assert_eq!((c.grpc_threads, c.watch_batch_ms), (0, 0));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    assert_eq!(c.grpc_thread_count(), grpc_threads_for(cpus));
    let halves: Vec<usize> = [1, 2, 3, 4, 96].map(grpc_threads_for).into();
    assert_eq!(halves, [1, 1, 1, 2, 48], "half the CPUs, at least one");
    assert_eq!(c.grpc_max_message(), (1 << 20) + (1 << 20));
    assert_eq!(c.watch_history_bytes(), 4 << 20, "a sixteenth of -m 64");
    assert_eq!(c.store_memory_bytes(), 60 << 20, "the rest is the store's");
    let c = load_with(&path, "memory_limit_mb = 4096\n", &[]);
    assert_eq!(c.watch_history_bytes(), 64 << 20, "at most 64 MiB");
    let c = load_with(&path, "memory_limit_mb = 2\n", &[]);
    assert_eq!(
        c.watch_history_bytes(),
        128 << 10,
        "a small cache, a small history"
    );
    let c = load_with(&path, "grpc_listen = \"off\"\nwatch_history_mb = 8\n", &[]);
    assert_eq!(
        (c.grpc_addr(), c.watch_history_bytes()),
        (None, 0),
        "no API, no history"
    );
    let c = load_with(&path, "watch_history_mb = 8\n", &[]);
    assert_eq!(c.watch_history_bytes(), 8 << 20);
    let c = load_with(
        &path,
        "grpc_listen = \"off\"\n",
        &[
            "--grpc-listen",
            "127.0.0.1:0",
            "--watch-progress-notify-ms",
            "50",
            "--grpc-threads",
            "2",
            "--watch-batch-ms",
            "2",
        ],
    );
    assert_eq!(c.grpc_addr(), Some("127.0.0.1:0".parse().unwrap()));
    assert_eq!((c.watch_progress_notify_ms, c.grpc_threads), (50, 2));
    assert_eq!(c.grpc_thread_count(), 2, "a count given is kept");
    assert_eq!(c.watch_batch_ms, 2);
    assert_eq!(
        load_with(&path, "watch_batch_ms = 5\n", &[]).watch_batch_ms,
        5
    );
    for (text, key) in [
        ("grpc_listen = \"nowhere\"\n", "grpc_listen"),
        ("grpc_tls_cert = \"/x.pem\"\n", "grpc_tls_cert"),
        ("grpc_max_message_bytes = 100\n", "grpc_max_message_bytes"),
        ("grpc_threads = 2000\n", "grpc_threads"),
        ("watch_progress_notify_ms = 0\n", "watch_progress_notify_ms"),
        ("watch_batch_ms = 1001\n", "watch_batch_ms"),
    ] {
        let err = load_result(&path, text, &[]).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
            "{text}: {err}"
        );
    }
}

#[test]
fn bad_ranges_refused() {
    let err = Config::from_args(["cairn", "-c", "0"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_connections"), "{err}");
    let err = Config::from_args(["cairn", "--persistence", "sometimes"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("persistence"), "{err}");
    assert_eq!(parse_size("2m"), Ok(2 << 20));
}

#[test]
fn chkpt_intervals_out_of_range_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let pct = "chkpt_interval_pct_snapshot";
    let min = "chkpt_interval_min_logsize";
    let cases: [(&str, &[&str], &str, &str); 6] = [
        (
            "chkpt_interval_pct_snapshot = 0\n",
            &[],
            pct,
            "between 1 and 10000",
        ),
        (
            "chkpt_interval_pct_snapshot = 10001\n",
            &[],
            pct,
            "between 1 and 10000",
        ),
        (
            "chkpt_interval_min_logsize = 0\n",
            &[],
            min,
            "between 1 and 1048576",
        ),
        (
            "chkpt_interval_min_logsize = 1048577\n",
            &[],
            min,
            "between 1 and 1048576",
        ),
        // A flag is checked too, and it overrides a good file value.
        (
            "chkpt_interval_pct_snapshot = 100\n",
            &["--chkpt-interval-pct-snapshot", "0"],
            pct,
            "between 1 and 10000",
        ),
        (
            "",
            &["--chkpt-interval-min-logsize", "0"],
            min,
            "between 1 and 1048576",
        ),
    ];
    for (text, flags, key, range) in cases {
        let err = load_result(&path, text, flags).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
            "{text:?} {flags:?}: {err}"
        );
        let message = err.to_string();
        assert!(
            message.contains(key) && message.contains(range),
            "{message}"
        );
    }
    // Both ends of each range are accepted, and a good flag mends a bad file value.
    let c = load_with(
        &path,
        "chkpt_interval_pct_snapshot = 10000\nchkpt_interval_min_logsize = 0\n",
        &["--chkpt-interval-min-logsize", "1048576"],
    );
    assert_eq!(
        (c.chkpt_interval_pct_snapshot, c.chkpt_interval_min_logsize),
        (10_000, 1 << 20)
    );
    let c = load_with(
        &path,
        "",
        &[
            "--chkpt-interval-pct-snapshot",
            "1",
            "--chkpt-interval-min-logsize",
            "1",
        ],
    );
    assert_eq!(
        (c.chkpt_interval_pct_snapshot, c.chkpt_interval_min_logsize),
        (1, 1)
    );
}

#[test]
fn flash_is_off_by_default_and_takes_memcacheds_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    assert!(load_with(&path, "", &[]).flash().is_none());
    let f = load_with(&path, "", &["-o", "ext_path=/ssd/x:2G,ext_item_size=64"])
        .flash()
        .unwrap();
    assert_eq!((f.path, f.size_bytes), (PathBuf::from("/ssd/x"), 2 << 30));
    let f = load_with(
        &path,
        "flash_path = \"/a\"\nflash_size = 1048576000\nflash_segment_size = 262144\n",
        &[],
    )
    .flash()
    .unwrap();
    assert_eq!(
        (f.path, f.size_bytes, f.segment_bytes),
        (PathBuf::from("/a"), 1_048_576_000, 256 << 10)
    );
    // ARCUS-style files carry memcached's key.
    let c = load_with(
        &path,
        "ext_path = \"/b:64m\"\n",
        &["--flash-direct-io", "false"],
    );
    let f = c.flash().unwrap();
    assert_eq!(
        (f.path, f.size_bytes, f.direct_io),
        (PathBuf::from("/b"), 64 << 20, false)
    );
    for (text, flags, key) in [
        ("flash_path = \"/a\"\n", &[][..], "flash_size"),
        ("", &["-o", "ext_path=/a"][..], "ext_path"),
    ] {
        let err = load_result(&path, text, flags).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
            "{text} {flags:?}: {err}"
        );
    }
    // memcached's extstore tuning is ignored, anything else unknown is refused.
    assert!(load_result(&path, "", &["-o", "ext_wbuf_size=8"]).is_ok());
    let err = load_result(&path, "", &["-o", "no_such_key=1"]).unwrap_err();
    assert!(matches!(err, ConfigError::Option { .. }), "{err}");
}

#[test]
fn chkpt_setting_names_and_ranges() {
    for s in [ChkptSetting::PctSnapshot, ChkptSetting::MinLogsize] {
        assert_eq!(ChkptSetting::from_key(s.key()), Some(s));
        let (lo, hi) = (*s.range().start(), *s.range().end());
        assert_eq!((s.check(lo).unwrap(), s.check(hi).unwrap()), (lo, hi));
        assert!(s.check(lo - 1).is_err() && s.check(hi + 1).is_err());
    }
    assert_eq!(ChkptSetting::from_key("async_logging"), None);
    // The defaults are valid.
    Config::default().validate().unwrap();
}

/// memcached's -U: off (0) by default, a port turns UDP on; with -Y (ASCII authentication) it
/// refuses to start, as memcached does. -F disables flush_all.
#[test]
fn udp_is_off_by_default_and_refused_with_auth_and_flush_all_can_be_disabled() {
    assert_eq!(Config::default().udp_port, 0);
    let c = Config::from_args(["cairn", "-U", "0", "-F"]).unwrap();
    assert_eq!((c.udp_port, c.disable_flush_all), (0, true));
    let c = Config::from_args(["cairn", "-U", "11211", "-l", "::1"]).unwrap();
    assert_eq!((c.udp_port, c.listen.as_str()), (11211, "::1"));
    let err = Config::from_args(["cairn", "-U", "11211", "-Y", "auth"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("udp_port") && err.contains("-Y"), "{err}");
    Config::from_args(["cairn", "-U", "0", "-Y", "auth"]).unwrap();
}

/// The gRPC address and the data folder follow -p unless given: 11211 keeps 50051 and
/// cairn-data, another port gets port + 38840 and cairn-data-PORT, 0 gets 0 and cairn-data-0.
#[test]
fn grpc_port_and_data_folder_follow_the_port() {
    let at = |args: &[&str]| {
        let c = Config::from_args(["cairn"].iter().chain(args)).unwrap();
        (c.grpc_listen, c.data_dir)
    };
    let want = |grpc: &str, dir: &str| (grpc.to_string(), PathBuf::from(dir));
    assert_eq!(at(&[]), want("127.0.0.1:50051", "cairn-data"));
    assert_eq!(at(&["-p", "11211"]), want("127.0.0.1:50051", "cairn-data"));
    assert_eq!(
        at(&["-p", "11802"]),
        want("127.0.0.1:50642", "cairn-data-11802")
    );
    assert_eq!(
        at(&["--port", "1"]),
        want("127.0.0.1:38841", "cairn-data-1")
    );
    assert_eq!(at(&["-p", "0"]), want("127.0.0.1:0", "cairn-data-0"));
    // The highest port that still has a gRPC port, and -o port= too.
    assert_eq!(
        at(&["-o", "port=26695"]),
        want("127.0.0.1:65535", "cairn-data-26695")
    );
    // A value given wins, by flag, by -o, or in the file (whose port the rest follows).
    assert_eq!(
        at(&["-p", "11802", "--grpc-listen", "127.0.0.1:50051"]),
        want("127.0.0.1:50051", "cairn-data-11802")
    );
    assert_eq!(
        at(&["-p", "11802", "--data-dir", "/d", "--grpc-listen", "off"]),
        want("off", "/d")
    );
    assert_eq!(
        at(&["-p", "11802", "-o", "grpc_listen=127.0.0.1:7,data_dir=x"]),
        want("127.0.0.1:7", "x")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let c = load_with(&path, "port = 11300\n", &[]);
    assert_eq!(
        (c.grpc_listen, c.data_dir),
        want("127.0.0.1:50140", "cairn-data-11300")
    );
    let c = load_with(&path, "grpc_listen = \"127.0.0.1:9\"\n", &["-p", "2"]);
    assert_eq!(
        (c.grpc_listen, c.data_dir),
        want("127.0.0.1:9", "cairn-data-2")
    );
    let c = load_with(&path, "data_dir = \"/var/lib/c\"\n", &["-p", "2"]);
    assert_eq!(
        (c.grpc_listen, c.data_dir),
        want("127.0.0.1:38842", "/var/lib/c")
    );
}

/// A port whose gRPC port would pass 65535 still starts (memcached's start lines use such
/// ports): its gRPC API on a port the OS picks; a given --grpc-listen wins.
#[test]
fn a_port_too_high_for_the_grpc_offset_gets_a_port_the_os_picks() {
    for port in ["26696", "30000", "65535"] {
        let c = Config::from_args(["cairn", "-p", port]).unwrap();
        assert_eq!(c.grpc_listen, "127.0.0.1:0", "-p {port}");
        assert_eq!(c.data_dir, PathBuf::from(format!("cairn-data-{port}")));
    }
    let c = Config::from_args(["cairn", "-p", "26695"]).unwrap();
    assert_eq!(c.grpc_listen, "127.0.0.1:65535");
    let c = Config::from_args(["cairn", "-p", "30000", "--grpc-listen", "127.0.0.1:9"]).unwrap();
    assert_eq!(c.grpc_listen, "127.0.0.1:9");
}

/// memcached's start flags that scripts pass: accepted with one note each (logged at start),
/// or refused with the reason when cairn cannot honour them (-d, -B utf8, -R 0).
#[test]
fn memcacheds_start_flags_are_accepted_or_refused_with_the_reason() {
    let c = Config::from_args([
        "cairn",
        "-C",
        "-u",
        "nobody",
        "-R",
        "5",
        "-B",
        "ascii",
        "-e",
        "/dev/shm/memory_file",
        "-o",
        "slab_reassign,slab_automove=1,lru_crawler,no_lru_crawler,lru_maintainer",
        "-o",
        "hash_algorithm=murmur3,modern,relaxed_privileges,ext_wbuf_size=8",
    ])
    .unwrap();
    assert!(c.disable_cas);
    assert_eq!(c.user.as_deref(), Some("nobody"));
    assert_eq!((c.max_reqs_per_event, c.protocol.as_str()), (5, "ascii"));
    for note in [
        "-C: accepted",
        "-R 5: ignored",
        "-B ascii",
        "-e /dev/shm/memory_file: ignored",
        "-o slab_reassign: ignored",
        "-o slab_automove=1: ignored",
        "-o no_lru_crawler: ignored",
        "-o hash_algorithm=murmur3: ignored",
        "-o relaxed_privileges: ignored",
        "-o ext_wbuf_size=8: ignored",
    ] {
        assert!(
            c.notes.iter().any(|n| n.starts_with(note)),
            "no note {note:?} in {:?}",
            c.notes
        );
    }
    assert_eq!(
        c.notes.len(),
        4 + 9,
        "one note a flag (-u is main's) or option"
    );
    // The long spellings are memcached's too, and a default start has no note.
    let c = Config::from_args(["cairn", "--protocol", "auto", "--disable-cas"]).unwrap();
    assert_eq!(c.notes.len(), 2, "{:?}", c.notes);
    assert!(Config::from_args(["cairn"]).unwrap().notes.is_empty());
    for (args, key, why) in [
        (&["-d"][..], "daemon", "systemd"),
        (&["--daemon"][..], "daemon", "systemd"),
        (&["-B", "utf8"][..], "protocol", "auto, ascii or binary"),
        (&["-R", "0"][..], "max_reqs_per_event", "at least 1"),
    ] {
        let err = Config::from_args(["cairn"].iter().chain(args)).unwrap_err();
        assert!(
            matches!(err, ConfigError::Invalid { key: k, .. } if k == key),
            "{args:?}: {err}"
        );
        assert!(err.to_string().contains(why), "{args:?}: {err}");
    }
    // An -o option that changes what clients see is not a tuning knob: refused.
    for option in ["idle_timeout=5", "ssl_verify_mode=2", "meta_response_old"] {
        let err = Config::from_args(["cairn", "-o", option]).unwrap_err();
        assert!(matches!(err, ConfigError::Option { .. }), "{option}: {err}");
    }
}
