//! The TOML file (`--config FILE`): every key of [`Config`], unknown keys refused; and
//! ARCUS's file-only switches (`use_persistence`, `async_logging`) that pick the mode.

use std::path::Path;

use super::error::ConfigError;
use super::settings::Config;

impl Config {
    /// Reads a TOML file; unknown keys and bad values name the key in the error.
    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })
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
