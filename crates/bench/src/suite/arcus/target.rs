//! The servers an ARCUS run measures, from the flags: cairn in each `--cairn-modes` (and each
//! `--cairn-alt` build), memcached, Redis in each `--redis-modes`, and `--target` servers this
//! suite does not start. A server that is not installed is skipped with a note.
//!
//! Non-goals: starting them (servers.rs).

use std::path::PathBuf;

use crate::load::Protocol;
use crate::servers::installed;
use crate::suite::SuiteArgs;

/// A server to measure.
#[derive(Clone, Debug)]
pub enum Target {
    /// cairn in a persistence mode, from `--cairn-bin` or a labelled `--cairn-alt` build.
    Cairn {
        mode: String,
        alt: Option<(String, PathBuf)>,
    },
    Memcached,
    Redis(String),
    External {
        host: String,
        port: u16,
        protocol: Protocol,
    },
}

impl Target {
    pub fn name(&self) -> String {
        match self {
            Target::Cairn { mode, alt: None } => format!("cairn {mode}"),
            Target::Cairn {
                mode,
                alt: Some((label, _)),
            } => format!("cairn {mode} [{label}]"),
            Target::Memcached => "memcached".into(),
            Target::Redis(m) => format!("redis {m}"),
            Target::External { host, port, .. } => format!("{host}:{port}"),
        }
    }

    pub(super) fn protocol(&self) -> Protocol {
        match self {
            Target::Redis(_) => Protocol::Redis,
            Target::External { protocol, .. } => *protocol,
            _ => Protocol::MemcacheText,
        }
    }
}

pub(super) fn targets(args: &SuiteArgs) -> Result<Vec<Target>, String> {
    let mut v = Vec::new();
    let list = |s: &str| {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect::<Vec<_>>()
    };
    if !list(&args.cairn_modes).is_empty() && !args.cairn_bin.exists() {
        return Err(format!("{} not found: build it with `cargo build --release -p cairn-server` or pass --cairn-bin", args.cairn_bin.display()));
    }
    for m in list(&args.cairn_modes) {
        if !["off", "async", "sync"].contains(&m.as_str()) {
            return Err(format!("cairn mode {m:?}: use off, async or sync"));
        }
        v.push(Target::Cairn {
            mode: m.clone(),
            alt: None,
        });
        for (label, path) in &args.cairn_alt {
            if !path.exists() {
                return Err(format!("--cairn-alt {label}: {} not found", path.display()));
            }
            v.push(Target::Cairn {
                mode: m.clone(),
                alt: Some((label.clone(), path.clone())),
            });
        }
    }
    if !args.no_memcached {
        if installed("memcached") {
            v.push(Target::Memcached);
        } else {
            eprintln!("note: memcached is not installed; skipped");
        }
    }
    let redis = list(&args.redis_modes);
    if !redis.is_empty() {
        if installed("redis-server") {
            for m in redis {
                if !["none", "everysec", "always"].contains(&m.as_str()) {
                    return Err(format!("redis mode {m:?}: use none, everysec or always"));
                }
                v.push(Target::Redis(m));
            }
        } else {
            eprintln!("note: redis-server is not installed; skipped");
        }
    }
    for t in &args.target {
        let parts: Vec<&str> = t.rsplitn(3, ':').collect();
        let [proto, port, host] = parts.as_slice() else {
            return Err(format!("--target {t:?}: expected HOST:PORT:PROTOCOL"));
        };
        v.push(Target::External {
            host: host.to_string(),
            port: port
                .parse()
                .map_err(|_| format!("--target {t:?}: bad port"))?,
            protocol: Protocol::parse(proto)?,
        });
    }
    Ok(v)
}
