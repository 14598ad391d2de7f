//! Why the server refuses to start: the one error of settings.

use std::path::PathBuf;

/// Why the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("invalid setting {key}: {why}")]
    Invalid { key: &'static str, why: String },
    #[error("option -o {option}: {message}")]
    Option { option: String, message: String },
    /// A flag clap refused, or `--help` / `--version` (print it with `clap::Error::exit`).
    #[error("{0}")]
    Flags(#[from] clap::Error),
}
