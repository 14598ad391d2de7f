//! The command line: every [`Config`] field's flag, memcached's letters, `-v` and `-o
//! name=value`, applied over the defaults and the file (`--config`). Not here: the settings
//! themselves (`settings.rs`) and their checks (`validate.rs`, run last).
//!
//! ```text
//!   args ─> command() (clap) ─> Config::from_matches:
//!     defaults or --config FILE ─> ARCUS's mode keys ─> flags present ─> -v ─> -o items
//!     ─> the defaults that follow -p, for the keys none of these set ─> ext_path ─> validate
//! ```

use std::ffi::OsString;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Args, FromArgMatches};

use super::error::ConfigError;
use super::memcached::is_ignored_option;
use super::port::{default_data_dir, default_grpc_listen};
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

    /// Defaults, then the file named by `--config`, then the flags in `m` (from [`command`]);
    /// then the defaults that follow the port (`port.rs`) for the keys none of them set.
    pub fn from_matches(m: &ArgMatches) -> Result<Config, ConfigError> {
        // The keys the file, the flags or -o set: the defaults that follow -p leave them alone.
        let (mut c, mut given) = match m.get_one::<PathBuf>("config") {
            Some(path) => Config::read_file(path)?,
            None => (Config::default(), Vec::new()),
        };
        given.extend(
            m.ids()
                .filter(|id| m.value_source(id.as_str()) == Some(ValueSource::CommandLine))
                .map(|id| id.to_string()),
        );
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
            if let Some(key) = c.set_option(option)? {
                given.push(key);
            }
        }
        let given = |key: &str| given.iter().any(|g| g == key);
        // The defaults that follow -p (port.rs), where nothing above set the key.
        if !given("grpc_listen") {
            c.grpc_listen = default_grpc_listen(c.port);
        }
        if !given("data_dir") {
            c.data_dir = default_data_dir(c.port);
        }
        c.note_memcached_flags(given);
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
    /// `name` for true. The value is read as the key's type: a number, a bool or text. Returns
    /// the key set, or None for one of memcached's tuning knobs (ignored, with a start note).
    fn set_option(&mut self, option: &str) -> Result<Option<String>, ConfigError> {
        let fail = |message: String| ConfigError::Option {
            option: option.to_string(),
            message,
        };
        let (name, value) = option.split_once('=').unwrap_or((option, "true"));
        if is_ignored_option(name) {
            // memcached's tuning (slab_automove, lru_crawler, ext_wbuf_size, ...): cairn has
            // no such part, and deploy scripts carry them. Logged once the log is set up.
            self.notes.push(format!(
                "-o {option}: ignored (a memcached tuning option; cairn has no such part)"
            ));
            return Ok(None);
        }
        // The notes are no setting: not in the table, kept across the round trip.
        let notes = std::mem::take(&mut self.notes);
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
        self.notes = notes;
        Ok(Some(name.to_string()))
    }
}
