//! Workspaces: several repositories searched together, listed in a
//! `ken.toml` file (found like Cargo finds its workspace: the nearest one
//! above the working directory, or given with `--workspace`):
//!
//! ```toml
//! [workspace]
//! members = ["../service", { path = "../lib", name = "core" }]
//! ```
//!
//! Member paths are relative to the file; each member is a repository with
//! its own index under its own `.ken/`. `ken workspace add/remove` rewrite
//! the file in this form (comments in it are not kept).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;

/// The file's name.
pub const FILE_NAME: &str = "ken.toml";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Shown in results and taken by `--member`.
    pub name: String,
    /// As written in the file (relative to it, or absolute).
    pub path: String,
    /// Absolute; canonical when the folder exists.
    pub root: PathBuf,
}

impl Member {
    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }
}

#[derive(Debug, Clone)]
pub struct Workspace {
    /// The `ken.toml` file.
    pub file: PathBuf,
    pub members: Vec<Member>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileText {
    workspace: Section,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    #[serde(default)]
    members: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Entry {
    Path(String),
    Named { path: String, name: Option<String> },
}

/// The nearest `ken.toml` with a `[workspace]` table in `start` or above it.
pub fn find(start: &Path) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join(FILE_NAME))
        .find(|f| std::fs::read_to_string(f).is_ok_and(|text| text.lines().any(|l| l.trim() == "[workspace]")))
}

impl Workspace {
    /// Reads `file`; an error names the file and what is wrong in it.
    pub fn load(file: &Path) -> Result<Workspace> {
        let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let parsed: FileText =
            toml::from_str(&text).with_context(|| format!("{} is not a valid workspace file", file.display()))?;
        let file = std::path::absolute(file)?;
        let dir = file.parent().unwrap_or(Path::new("/")).to_path_buf();
        let mut members: Vec<Member> = Vec::new();
        for entry in parsed.workspace.members {
            let (path, name) = match entry {
                Entry::Path(path) => (path, None),
                Entry::Named { path, name } => (path, name),
            };
            let member = member_at(&dir, &path, name)?;
            if let Some(twin) = members.iter().find(|m| m.name == member.name || m.root == member.root) {
                bail!(
                    "{}: `{}` and `{}` are the same member (name `{}`); give one a `name`",
                    file.display(),
                    twin.path,
                    member.path,
                    member.name
                );
            }
            members.push(member);
        }
        Ok(Workspace { file, members })
    }

    /// An empty workspace to be written at `file`.
    pub fn new(file: &Path) -> Result<Workspace> {
        Ok(Workspace {
            file: std::path::absolute(file)?,
            members: Vec::new(),
        })
    }

    fn dir(&self) -> &Path {
        self.file.parent().unwrap_or(Path::new("/"))
    }

    /// Adds the repository at `folder` (default name: the folder's).
    pub fn add(&mut self, folder: &Path, name: Option<&str>) -> Result<&Member> {
        let root = folder
            .canonicalize()
            .with_context(|| format!("{}: no such folder", folder.display()))?;
        if !root.is_dir() {
            bail!("{} is not a folder", root.display());
        }
        let dir = self.dir().canonicalize().unwrap_or_else(|_| self.dir().to_path_buf());
        let path = relative_path(&dir, &root);
        let member = member_at(self.dir(), &path, name.map(str::to_string))?;
        if let Some(twin) = self.members.iter().find(|m| m.root == member.root) {
            bail!("{} is already the member `{}`", root.display(), twin.name);
        }
        if let Some(twin) = self.members.iter().find(|m| m.name == member.name) {
            bail!(
                "a member named `{}` exists already ({}); choose another with --name",
                member.name,
                twin.path
            );
        }
        self.members.push(member);
        Ok(self.members.last().expect("just added"))
    }

    /// Removes the member named `which`, or whose folder `which` is.
    pub fn remove(&mut self, which: &str) -> Result<Member> {
        let as_folder = Path::new(which).canonicalize().ok();
        let at = self
            .members
            .iter()
            .position(|m| m.name == which || m.path == which || as_folder.as_deref() == Some(m.root.as_path()));
        match at {
            Some(at) => Ok(self.members.remove(at)),
            None => bail!("no member `{which}` in {} ({})", self.file.display(), self.names()),
        }
    }

    /// The member names, comma-separated, for errors.
    pub fn names(&self) -> String {
        match self.members.is_empty() {
            true => "it has no members".to_string(),
            false => {
                let names: Vec<&str> = self.members.iter().map(|m| m.name.as_str()).collect();
                format!("members: {}", names.join(", "))
            }
        }
    }

    /// The members named in `only` (all when empty); an unknown name is an error.
    pub fn select(&self, only: &[String]) -> Result<Vec<Member>> {
        if let Some(unknown) = only.iter().find(|n| !self.members.iter().any(|m| &&m.name == n)) {
            bail!("no member `{unknown}` in the workspace ({})", self.names());
        }
        Ok(self
            .members
            .iter()
            .filter(|m| only.is_empty() || only.contains(&m.name))
            .cloned()
            .collect())
    }

    /// The member whose folder holds `dir`, if any.
    pub fn member_holding(&self, dir: &Path) -> Option<&Member> {
        self.members.iter().find(|m| dir.starts_with(&m.root))
    }

    /// Writes the file (atomically: a temporary file renamed over it).
    pub fn save(&self) -> Result<()> {
        let mut text = String::from("[workspace]\nmembers = [\n");
        for m in &self.members {
            let path = quoted(&m.path);
            if m.name == default_name(&m.root) {
                text.push_str(&format!("    {path},\n"));
            } else {
                text.push_str(&format!("    {{ path = {path}, name = {} }},\n", quoted(&m.name)));
            }
        }
        text.push_str("]\n");
        let tmp = self.file.with_extension("toml.tmp");
        std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, &self.file).with_context(|| format!("writing {}", self.file.display()))
    }
}

/// A TOML basic string (JSON's escapes are TOML's).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

fn member_at(dir: &Path, path: &str, name: Option<String>) -> Result<Member> {
    let joined = dir.join(path);
    let root = joined.canonicalize().unwrap_or_else(|_| normalize(&joined));
    let name = name.unwrap_or_else(|| default_name(&root));
    check_name(&name)?;
    Ok(Member {
        name,
        path: path.to_string(),
        root,
    })
}

/// `a/b/../c` as `a/c`, for a member whose folder is missing.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `to` relative to `from` (both canonical), as written in the file.
fn relative_path(from: &Path, to: &Path) -> String {
    let (a, b): (Vec<_>, Vec<_>) = (from.components().collect(), to.components().collect());
    let common = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".to_string(); a.len() - common];
    parts.extend(b[common..].iter().map(|c| c.as_os_str().to_string_lossy().into_owned()));
    match parts.is_empty() {
        true => ".".to_string(),
        false => parts.join("/"),
    }
}

fn default_name(root: &Path) -> String {
    folder_name(root, "member")
}

/// A folder's name as a name ken shows (`-` for other characters than
/// letters, digits, `-` and `_`; `fallback` when nothing is left).
pub fn folder_name(root: &Path, fallback: &str) -> String {
    let raw = root
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cleaned: String = raw
        .chars()
        .map(|c| match c.is_ascii_alphanumeric() || c == '-' || c == '_' {
            true => c,
            false => '-',
        })
        .take(64)
        .collect();
    match cleaned.trim_matches('-').is_empty() {
        true => fallback.to_string(),
        false => cleaned,
    }
}

fn check_name(name: &str) -> Result<()> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!("`{name}` is not a usable member name: use 1-64 letters, digits, `-` or `_`");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_round_trip_through_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        for dir in ["ws", "service", "lib"] {
            std::fs::create_dir_all(base.join(dir)).unwrap();
        }
        let file = base.join("ws").join(FILE_NAME);
        let mut ws = Workspace::new(&file).unwrap();
        ws.add(&base.join("service"), None).unwrap();
        ws.add(&base.join("lib"), Some("core")).unwrap();
        assert!(ws.add(&base.join("lib"), None).is_err(), "same folder twice");
        assert!(ws.add(&base.join("nope"), None).is_err(), "missing folder");
        ws.save().unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("\"../service\""), "{text}");
        assert_eq!(find(&base.join("ws")), Some(file.clone()));
        let loaded = Workspace::load(&file).unwrap();
        let names: Vec<&str> = loaded.members.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["service", "core"]);
        assert_eq!(loaded.members[1].root, base.join("lib"));
        assert!(loaded.select(&["nope".to_string()]).is_err());
        let mut loaded = loaded;
        assert_eq!(loaded.remove("core").unwrap().name, "core");
        assert!(loaded.remove("core").is_err());
    }
}
