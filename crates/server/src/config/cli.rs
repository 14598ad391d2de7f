//! The command line: every [`Config`] field's flag, memcached's letters, `-v` and `-o
//! name=value`, applied over the defaults and the file (`--config`). Not here: the settings
//! themselves (`settings.rs`) and their checks (`validate.rs`, run last).
//!
//! ```text
//!   args ─> command() (clap) ─> Config::from_matches:
//!     defaults or --config FILE ─> ARCUS's mode keys ─> flags present ─> -v ─> -o items
//!     ─> ext_path ─> validate
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};

use super::error::ConfigError;
use super::settings::Config;
use super::size::parse_ext_path;

/// The command line: every [`Config`] field's flag (all optional, none with a default, so that
/// an absent flag leaves the file's value), plus the three flags that are not settings:
/// `--config FILE`, `-v` (counted into `verbosity`) and `-o name=value,...`.
pub fn command() -> clap::Command {
    let cmd = clap::Command::new("cairn").version(env!("CARGO_PKG_VERSION"));
    Config::augment_args(cmd)
        .about("A durable, memcached-compatible cache server")
        // As memcached: a flag given twice takes the last value.
        .args_override_self(true)
        .mut_args(|a| {
            let a = a.required(false);
            if matches!(a.get_action(), ArgAction::SetTrue) {
                // A bare `-M` means true; `--log-direct-io false` turns a file's true off. No
                // implicit default `false`, which would override the file.
                a.action(ArgAction::Set)
                    .num_args(0..=1)
                    .default_missing_value("true")
                    .value_parser(clap::value_parser!(bool))
            } else {
                a
            }
        })
        .arg(
            Arg::new("config")
                .long("config")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("TOML file holding any of the settings (flags override it)"),
        )
        .arg(
            Arg::new("verbose")
                .short('v')
                .action(ArgAction::Count)
                .help("Verbose logging; repeat for more (sets verbosity)"),
        )
        .arg(
            Arg::new("option")
                .short('o')
                .value_name("NAME=VALUE,...")
                .action(ArgAction::Append)
                .value_delimiter(',')
                .help("Any setting by its file key, memcached style (e.g. -o ssl_key=k.pem)"),
        )
}

impl Config {
    /// Defaults, then the file, then the flags, from a whole command line (`args[0]` is the
    /// program name). `--help`, `--version` and a malformed flag come back as
    /// [`ConfigError::Flags`].
    pub fn from_args<I, T>(args: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        Config::from_matches(&command().try_get_matches_from(args)?)
    }

    /// Defaults, then the file named by `--config`, then the flags in `m` (from [`command`]).
    pub fn from_matches(m: &ArgMatches) -> Result<Config, ConfigError> {
        let mut c = match m.get_one::<PathBuf>("config") {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        // ARCUS's switches (file only) pick the mode; a persistence flag or -o wins over both.
        if let Some(mode) = c.arcus_mode() {
            c.persistence = mode.into();
        }
        // Only the flags present: clap's derive leaves a field alone when its flag is absent.
        c.update_from_arg_matches(m)?;
        let verbose = m.get_count("verbose");
        if verbose > 0 {
            c.verbosity = verbose;
        }
        for option in m.get_many::<String>("option").into_iter().flatten() {
            c.set_option(option)?;
        }
        // memcached's spelling of the flash tier; an explicit flash_path wins.
        if let Some(v) = c.ext_path.take() {
            let (path, size) = parse_ext_path(&v)?;
            if c.flash_path.is_none() {
                c.flash_path = Some(path);
                c.flash_size = size;
            }
        }
        c.validate()?;
        Ok(c)
    }

    /// Sets the setting named like its file key from one `-o` item: `name=value`, or a bare
    /// `name` for true. The value is read as the key's type: a number, a bool or text.
    fn set_option(&mut self, option: &str) -> Result<(), ConfigError> {
        let fail = |message: String| ConfigError::Option {
            option: option.to_string(),
            message,
        };
        let (name, value) = option.split_once('=').unwrap_or((option, "true"));
        if name.starts_with("ext_") && name != "ext_path" {
            // memcached's extstore tuning (ext_item_size, ext_wbuf_size, ...): cairn sizes
            // these itself, and deploy scripts carry them.
            tracing::info!("-o {option}: ignored (cairn has no such setting)");
            return Ok(());
        }
        let mut table = toml::Table::try_from(&*self).map_err(|e| fail(e.to_string()))?;
        let value = match table.get(name) {
            Some(toml::Value::Integer(_)) => value
                .parse::<i64>()
                .map(toml::Value::Integer)
                .map_err(|_| fail("must be a whole number".into()))?,
            Some(toml::Value::Boolean(_)) => value
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .map_err(|_| fail("must be true or false".into()))?,
            Some(_) => toml::Value::String(value.to_string()),
            // An unset Option: a bool or a number if it reads as one, otherwise text.
            None => value
                .parse::<bool>()
                .map(toml::Value::Boolean)
                .or_else(|_| value.parse::<i64>().map(toml::Value::Integer))
                .unwrap_or_else(|_| toml::Value::String(value.to_string())),
        };
        table.insert(name.to_string(), value);
        *self = table
            .try_into()
            .map_err(|e: toml::de::Error| fail(e.message().to_string()))?;
        Ok(())
    }
}
