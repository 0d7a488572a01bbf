//! The user's settings file: `$KEN_CONFIG`, else `<config dir>/ken/config.toml`
//! (`~/.config/ken/config.toml` on Linux).
//!
//! It lives outside every repository on purpose: what widens ken's reach
//! (folders an MCP client may add as knowledge bases) must not be writable by
//! an agent that works inside the project.
//!
//! ```toml
//! [serve]
//! tools = ["default", "kb"]        # what `ken serve` exposes (see `ken serve --help`)
//!
//! [knowledge_bases]
//! allow = ["~/docs/api-reference"] # folders MCP clients may add as knowledge bases
//! ```

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub serve: ServeConfig,
    #[serde(default)]
    pub knowledge_bases: KnowledgeBasesConfig,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeConfig {
    /// Tool presets and names, as `ken serve --tools` takes them.
    pub tools: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnowledgeBasesConfig {
    /// Folders (and what is under them) that MCP clients may add.
    #[serde(default)]
    pub allow: Vec<PathBuf>,
}

/// Where the settings file is looked for.
pub fn path() -> Option<PathBuf> {
    match &super::settings().config_file {
        Some(p) => Some(p.clone()),
        None => dirs::config_dir().map(|d| d.join("ken").join("config.toml")),
    }
}

/// The settings; no file is no settings, a file that does not parse is an
/// error naming it (a typo must not silently widen or narrow anything).
pub fn load() -> Result<Config> {
    let Some(path) = path() else {
        return Ok(Config::default());
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
        Err(e) => return Err(e).with_context(|| format!("reading the settings file {}", path.display())),
    };
    let mut config: Config =
        toml::from_str(&text).with_context(|| format!("the settings file {} is not valid", path.display()))?;
    config.knowledge_bases.allow = config.knowledge_bases.allow.iter().map(|p| expand_home(p)).collect();
    Ok(config)
}

/// `~/x` is the home folder's `x`.
pub fn expand_home(path: &Path) -> PathBuf {
    match (path.strip_prefix("~"), dirs::home_dir()) {
        (Ok(rest), Some(home)) => home.join(rest),
        _ => path.to_path_buf(),
    }
}
