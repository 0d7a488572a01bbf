//! The command that runs the tests a change affects: each test file's runner
//! (pytest, cargo, go, jest, vitest, maven, gradle) from the repository's
//! files, and the runner's own way of naming single tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::impact::AffectedTest;

/// The runner of the repository's tests in `language`, from its files.
fn detect_runner(root: &Path, language: &str) -> Option<&'static str> {
    let has = |f: &str| root.join(f).exists();
    match language {
        "python" => Some("pytest"),
        "rust" => has("Cargo.toml").then_some("cargo"),
        "go" => has("go.mod").then_some("go"),
        "javascript" | "typescript" | "tsx" => {
            let pkg = std::fs::read_to_string(root.join("package.json")).unwrap_or_default();
            if pkg.contains("\"vitest\"") {
                Some("vitest")
            } else if pkg.contains("\"jest\"") {
                Some("jest")
            } else {
                None
            }
        }
        "java" | "kotlin" => {
            if has("pom.xml") {
                Some("maven")
            } else if has("build.gradle") || has("build.gradle.kts") {
                Some("gradle")
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The command that runs `tests` (one per runner, joined with `&&`).
pub(super) fn runner_command(root: &Path, tests: &[Test]) -> (Option<String>, Option<String>) {
    if tests.is_empty() {
        return (None, None);
    }
    // Group by runner; a file-level test stands for the whole file.
    let mut by_runner: BTreeMap<&'static str, Vec<&Test>> = BTreeMap::new();
    let mut unknown: BTreeSet<String> = BTreeSet::new();
    for t in tests {
        let lang = crate::source::lang::for_path(Path::new(&t.0.path))
            .map(|l| l.name)
            .unwrap_or("");
        match detect_runner(root, lang) {
            Some(r) => by_runner.entry(r).or_default().push(t),
            None => {
                unknown.insert(t.0.path.clone());
            }
        }
    }
    let mut commands = Vec::new();
    for (runner, tests) in &by_runner {
        commands.push(command_for(runner, tests));
    }
    if !unknown.is_empty() {
        commands.push(unknown.into_iter().collect::<Vec<_>>().join(" "));
    }
    let runner = (by_runner.len() == 1).then(|| by_runner.keys().next().unwrap().to_string());
    (runner, Some(commands.join(" && ")))
}

fn unique<T: Ord + Clone>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let set: BTreeSet<T> = items.into_iter().collect();
    set.into_iter().collect()
}

fn quote(s: &str) -> String {
    if s.chars().all(|c| c.is_alphanumeric() || "/._-:=+,#".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// An affected test with its container (class or module) and the changed
/// symbol (or module) it was found from.
type Test = (AffectedTest, String, String);

/// The command running `tests` with `runner`.
fn command_for(runner: &str, tests: &[&Test]) -> String {
    match runner {
        "pytest" => pytest(tests),
        "cargo" => cargo(tests),
        "go" => go(tests),
        "jest" | "vitest" => {
            let files = unique(tests.iter().map(|(t, _, _)| t.path.clone()));
            let run = if runner == "jest" { "npx jest" } else { "npx vitest run" };
            format!("{run} {}", files.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" "))
        }
        "maven" | "gradle" => jvm(runner, tests),
        _ => unique(tests.iter().map(|(t, _, _)| t.path.clone())).join(" "),
    }
}

/// A test that stands for its whole file.
fn file_level(t: &AffectedTest) -> bool {
    t.line == 1 && t.name == t.path
}

/// `pytest` with each test's node id (`path::Class::name`).
fn pytest(tests: &[&Test]) -> String {
    let ids = unique(tests.iter().map(|(t, container, _)| {
        if file_level(t) {
            t.path.clone()
        } else if container.is_empty() {
            format!("{}::{}", t.path, name_of(t))
        } else {
            format!("{}::{}::{}", t.path, container, name_of(t))
        }
    }));
    format!("pytest {}", ids.iter().map(|s| quote(s)).collect::<Vec<_>>().join(" "))
}

/// `cargo test`: integration tests by their file, unit tests by the library.
fn cargo(tests: &[&Test]) -> String {
    let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (t, _, _) in tests {
        let target = match t.path.strip_prefix("tests/") {
            Some(f) if !f.contains('/') => {
                format!("--test {}", f.trim_end_matches(".rs"))
            }
            _ => String::new(),
        };
        let names = groups.entry(target).or_default();
        if !file_level(t) {
            names.insert(name_of(t));
        }
    }
    groups
        .into_iter()
        .map(|(target, names)| {
            let mut cmd = "cargo test".to_string();
            if !target.is_empty() {
                cmd.push(' ');
                cmd.push_str(&target);
            }
            if !names.is_empty() {
                cmd.push_str(" -- ");
                cmd.push_str(&names.into_iter().collect::<Vec<_>>().join(" "));
            }
            cmd
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// `go test` per package folder, with a `-run` pattern of the test names.
fn go(tests: &[&Test]) -> String {
    let mut groups: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (t, _, _) in tests {
        let dir = t
            .path
            .rsplit_once('/')
            .map(|(d, _)| format!("./{d}"))
            .unwrap_or_else(|| ".".into());
        let names = groups.entry(dir).or_default();
        if !file_level(t) {
            names.insert(name_of(t));
        }
    }
    groups
        .into_iter()
        .map(|(dir, names)| {
            if names.is_empty() {
                format!("go test {dir}")
            } else {
                let names: Vec<String> = names.into_iter().collect();
                format!("go test {dir} -run '^({})$'", names.join("|"))
            }
        })
        .collect::<Vec<_>>()
        .join(" && ")
}

/// Maven's `-Dtest=Class#method+method` or Gradle's `--tests Class.method`.
fn jvm(runner: &str, tests: &[&Test]) -> String {
    let mut classes: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (t, container, _) in tests {
        let class = if container.is_empty() {
            Path::new(&t.path)
                .file_stem()
                .map(|s| s.to_string_lossy().to_string())
                .unwrap_or_default()
        } else {
            container.clone()
        };
        let methods = classes.entry(class).or_default();
        if !file_level(t) {
            methods.insert(name_of(t));
        }
    }
    if runner == "maven" {
        let spec: Vec<String> = classes
            .into_iter()
            .map(|(c, m)| {
                if m.is_empty() {
                    c
                } else {
                    format!("{c}#{}", m.into_iter().collect::<Vec<_>>().join("+"))
                }
            })
            .collect();
        format!("mvn test -Dtest={}", quote(&spec.join(",")))
    } else {
        let spec: Vec<String> = classes
            .into_iter()
            .flat_map(|(c, m)| {
                if m.is_empty() {
                    vec![format!("--tests {}", quote(&c))]
                } else {
                    m.into_iter()
                        .map(|m| format!("--tests {}", quote(&format!("{c}.{m}"))))
                        .collect()
                }
            })
            .collect();
        format!("gradle test {}", spec.join(" "))
    }
}

/// A test's own name (without its container).
fn name_of(t: &AffectedTest) -> String {
    t.name.rsplit('.').next().unwrap_or(&t.name).to_string()
}
