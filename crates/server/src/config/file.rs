//! The TOML file (`--config FILE`): every key of [`Config`], unknown keys refused; and
//! ARCUS's file-only switches (`use_persistence`, `async_logging`) that pick the mode.

use std::path::Path;

use super::error::ConfigError;
use super::settings::Config;

impl Config {
    /// Reads a TOML file; unknown keys and bad values name the key in the error.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        Config::read_file(path).map(|(c, _)| c)
    }

    /// [`Config::from_file`], and the keys the file sets (the defaults that follow the port
    /// leave those alone).
    pub(super) fn read_file(path: &Path) -> Result<(Config, Vec<String>), ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let parse = |e: toml::de::Error| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        };
        let table: toml::Table = toml::from_str(&text).map_err(parse)?;
        let keys = table.keys().cloned().collect();
        Ok((table.try_into().map_err(parse)?, keys))
    }

    /// The mode that ARCUS's `use_persistence` / `async_logging` keys ask for, if any.
    pub(super) fn arcus_mode(&self) -> Option<&'static str> {
        if self.use_persistence == Some(false) {
            Some("off")
        } else {
            self.async_logging.map(|a| if a { "async" } else { "sync" })
        }
    }
}
