//! What a repository offers to others' imports, read from its manifests:
//! the Go module (`go.mod`), the Rust crate (`Cargo.toml`), the npm package
//! (`package.json`) and the Python packages (top-level folders, or under
//! `src/`, with an `__init__.py`). A workspace's call graph links an import
//! of one member to another member that provides the module.

use std::path::Path;

/// One importable name a repository provides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// The language family importing it: `go`, `rust`, `python` or `js`.
    pub family: &'static str,
    /// What an import names: `example.com/lib`, `my_lib`, `mylib`, `@acme/lib`.
    pub name: String,
    /// Where its modules are, relative to the repository root (`""`: the root).
    pub dir: String,
}

impl Package {
    /// How the family separates a module's parts in an import.
    pub fn separator(&self) -> &'static str {
        match self.family {
            "rust" => "::",
            "python" => ".",
            _ => "/",
        }
    }

    /// The folder components of the module `import` within this package
    /// (the package's own folder first), if `import` is this package or in it.
    pub fn module_dirs(&self, import: &str) -> Option<Vec<String>> {
        let import = import.trim();
        let rest = match import.strip_prefix(self.name.as_str()) {
            Some("") => "",
            Some(rest) => rest.strip_prefix(self.separator())?,
            None => return None,
        };
        let mut comps: Vec<String> = self
            .dir
            .split('/')
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect();
        comps.extend(
            rest.split(self.separator())
                .filter(|c| !c.is_empty())
                .map(str::to_string),
        );
        Some(comps)
    }
}

/// The packages the repository at `root` provides (none when it has no
/// manifest ken reads).
pub fn packages(root: &Path) -> Vec<Package> {
    let mut out = Vec::new();
    let read = |name: &str| std::fs::read_to_string(root.join(name)).ok();
    if let Some(module) = read("go.mod").as_deref().and_then(go_module) {
        out.push(Package {
            family: "go",
            name: module,
            dir: String::new(),
        });
    }
    if let Some(name) = read("Cargo.toml").as_deref().and_then(crate_name) {
        out.push(Package {
            family: "rust",
            name,
            dir: "src".to_string(),
        });
    }
    let npm = read("package.json").and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok());
    if let Some(name) = npm.as_ref().and_then(|v| v["name"].as_str()) {
        out.push(Package {
            family: "js",
            name: name.to_string(),
            dir: String::new(),
        });
    }
    for base in ["", "src"] {
        out.extend(python_packages(root, base));
    }
    out
}

/// `module example.com/lib` in a go.mod.
fn go_module(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.trim().strip_prefix("module "))
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
}

/// The library's name as code imports it: `[lib] name`, else `[package]
/// name` with `-` as `_`.
fn crate_name(text: &str) -> Option<String> {
    let value: toml::Table = toml::from_str(text).ok()?;
    let name = |table: &str| value.get(table)?.get("name")?.as_str().map(str::to_string);
    let name = name("lib").or_else(|| name("package"))?;
    Some(name.replace('-', "_"))
}

/// Folders under `root/base` that are Python packages.
fn python_packages(root: &Path, base: &str) -> Vec<Package> {
    let Ok(entries) = std::fs::read_dir(root.join(base)) else {
        return Vec::new();
    };
    let mut found: Vec<Package> = entries
        .flatten()
        .filter(|e| e.path().join("__init__.py").is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|name| !name.starts_with('.') && !matches!(name.as_str(), "tests" | "test"))
        .map(|name| Package {
            family: "python",
            dir: if base.is_empty() {
                name.clone()
            } else {
                format!("{base}/{name}")
            },
            name,
        })
        .collect();
    found.sort_by(|a, b| a.name.cmp(&b.name));
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_name_what_a_repository_provides() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("go.mod"), "module example.com/lib\n\ngo 1.21\n").unwrap();
        std::fs::write(root.join("Cargo.toml"), "[package]\nname = \"my-lib\"\n").unwrap();
        std::fs::write(root.join("package.json"), r#"{"name": "@acme/lib"}"#).unwrap();
        std::fs::create_dir_all(root.join("src/mylib")).unwrap();
        std::fs::write(root.join("src/mylib/__init__.py"), "").unwrap();
        let found = packages(root);
        let names: Vec<(&str, &str, &str)> = found
            .iter()
            .map(|p| (p.family, p.name.as_str(), p.dir.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("go", "example.com/lib", ""),
                ("rust", "my_lib", "src"),
                ("js", "@acme/lib", ""),
                ("python", "mylib", "src/mylib")
            ]
        );
        assert_eq!(
            found[0].module_dirs("example.com/lib/util"),
            Some(vec!["util".to_string()])
        );
        assert_eq!(found[0].module_dirs("example.com/library"), None);
        assert_eq!(
            found[3].module_dirs("mylib.util"),
            Some(vec!["src".to_string(), "mylib".to_string(), "util".to_string()])
        );
        assert_eq!(found[1].module_dirs("my_lib"), Some(vec!["src".to_string()]));
    }
}
