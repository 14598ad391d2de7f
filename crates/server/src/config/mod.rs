//! Settings: built-in defaults, then the TOML file (`--config`), then command-line flags.
//!
//! ```text
//!   Config::default()  <──  [file.toml]  (unknown key or bad value: refuse to start)
//!                      <──  flags: --key-name VALUE, memcached's short letters (-p -l -t -c -m
//!                           -M -I -v -A -Y -Z), and -o key=value,key=value (memcached's -o)
//!                      ──>  Config::validate (ranges: refuse to start naming the key)
//! ```
//!
//! [`Config`] is the one list of settings. clap and serde both derive from it: each field is a
//! key of the file (its Rust name), a `--long-flag` (the same name with dashes, or the
//! `long = ".."` memcached spelling), and a `-o name=value` option.
//!
//! ## Adding a setting (one place)
//! 1. Add a field to [`Config`] (`settings.rs`) with a `///` line (it is the `--help` text),
//!    and its default in `impl Default for Config`. Give it `#[arg(short = 'X')]` only for a
//!    memcached letter, and `#[arg(skip)]` if it must not be a flag (a file-only key).
//! 2. If some values are wrong, refuse them in [`Config::validate`] (`validate.rs`) with the
//!    key's name.
//!
//! That is all: the file, the flag and `-o` then accept it, and the flag overrides the file.
//! A `bool` flag takes an optional value (`-M`, `--log-direct-io false`), an `Option<T>` is
//! unset by default. The flags do not repeat the defaults ([`command`] makes every flag
//! optional): a flag that is absent leaves the file's value alone.
//!
//! The settings that an admin line can also change while running (`config KEY N`, see
//! `cmd/admin.rs`) keep their range in one place, [`ChkptSetting`], so that the file, the flags
//! and the admin line accept exactly the same values.
//!
//! One concern a file:
//!
//! ```text
//!   settings.rs  the Config struct (every setting, its --help line), its defaults, and what
//!                is derived from it (the mode, the folders, thread counts, the flash tier)
//!   cli.rs       the command line: the clap command, -v, -o name=value; defaults <- file <- flags
//!   file.rs      the TOML file, and ARCUS's file-only keys that pick the mode
//!   validate.rs  the ranges and combinations serde cannot check
//!   ranges.rs    the settings an admin line can change while running (ChkptSetting)
//!   size.rs      sizes with a k/m/g/t suffix, and memcached's ext_path PATH:SIZE
//!   error.rs     why the server refuses to start (ConfigError)
//! ```

mod cli;
mod error;
mod file;
mod ranges;
mod settings;
mod size;
mod validate;

#[cfg(test)]
mod tests;

pub use cli::command;
pub use error::ConfigError;
pub use ranges::{ChkptSetting, CHKPT_INTERVAL_MIN_LOGSIZE_MB, CHKPT_INTERVAL_PCT_SNAPSHOT};
pub use settings::Config;
