//! What a repository path is: the `--path` filters that select paths, and
//! what kind of file a path (or a chunk's kind or language) is: tests,
//! documentation, release notes, prose and config files.

use anyhow::{Context, Result};
use globset::{GlobBuilder, GlobMatcher};

use crate::source::lang;

/// Compiles a `--path` filter. A pattern without glob characters is a path
/// prefix: a directory or a file.
pub fn compile_path_glob(pattern: &str) -> Result<GlobMatcher> {
    let pattern = pattern.trim().trim_start_matches("./");
    let has_meta = pattern.contains(['*', '?', '[', '{']);
    let pattern = if has_meta {
        pattern.to_string()
    } else {
        format!(
            "{{{},{}/**}}",
            pattern.trim_end_matches('/'),
            pattern.trim_end_matches('/')
        )
    };
    Ok(GlobBuilder::new(&pattern)
        .literal_separator(false)
        .build()
        .with_context(|| format!("invalid --path pattern `{pattern}`"))?
        .compile_matcher())
}

/// A test file or a file in a test folder.
pub fn is_test_path(path: &str) -> bool {
    let p = path.to_ascii_lowercase();
    p.split('/').any(|seg| {
        seg == "test"
            || seg == "tests"
            || seg == "testing"
            || seg == "__tests__"
            || seg == "spec"
            || seg.starts_with("test_")
            || seg.ends_with("_test.go")
            || seg.ends_with("_test.py")
            || seg.contains(".test.")
            || seg.contains(".spec.")
            || seg.ends_with("test.java")
            || seg.ends_with("tests.cs")
            || seg == "conftest.py"
    })
}

/// Whether `path` lies in the project's documentation (`docs/`,
/// `doc/en/example/`, `packages/ui/docs/`), not in a source module that
/// happens to be called `doc` (ripgrep's `crates/core/flags/doc/`).
pub fn is_docs_path(path: &str) -> bool {
    let folders = path.split('/').rev().skip(1).collect::<Vec<_>>();
    let Some(docs_at) = folders.iter().rposition(|s| *s == "doc" || *s == "docs") else {
        return false;
    };
    !folders[docs_at + 1..]
        .iter()
        .any(|s| SOURCE_FOLDERS.contains(&s.to_ascii_lowercase().as_str()))
}

/// Folders that hold a project's source: a `doc` folder below one is a module.
const SOURCE_FOLDERS: &[&str] = &["src", "lib", "crates", "pkg", "internal", "source"];

/// File stems of release notes (any extension, prose chunks only).
const CHANGELOG_STEMS: &[&str] = &["changelog", "changes", "history", "news", "releases"];
/// Folders of release-note fragments (towncrier and the like).
const CHANGELOG_DIRS: &[&str] = &["changelog", "changelog.d", "changes", "newsfragments"];

/// Whether `path` holds release notes: a file named like a changelog, or
/// a fragment in a folder of them.
pub fn is_changelog_path(path: &str) -> bool {
    let path = path.to_ascii_lowercase();
    let mut segments: Vec<&str> = path.split('/').collect();
    let name = segments.pop().unwrap_or_default();
    let stem = name.split('.').next().unwrap_or_default();
    CHANGELOG_STEMS.contains(&stem) || segments.iter().any(|dir| CHANGELOG_DIRS.contains(dir))
}

/// Chunks of prose: text windows and sections of markup.
pub fn is_prose_kind(kind: &str) -> bool {
    matches!(kind, "text" | "section")
}

/// Languages of config files (and plain text).
pub fn is_config_language(language: &str) -> bool {
    matches!(language, "json" | "toml" | "yaml" | lang::PLAIN_TEXT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_globs_and_prefixes() {
        let m = compile_path_glob("src/auth").unwrap();
        assert!(m.is_match("src/auth/jwt.rs"));
        assert!(m.is_match("src/auth"));
        assert!(!m.is_match("src/authz/x.rs"));
        let m = compile_path_glob("*.py").unwrap();
        assert!(m.is_match("a/b/c.py"));
        assert!(!m.is_match("a/b/c.rs"));
        assert!(compile_path_glob("src/[").is_err());
    }

    #[test]
    fn test_paths_are_recognised() {
        assert!(is_test_path("tests/test_x.py"));
        assert!(is_test_path("pkg/server_test.go"));
        assert!(is_test_path("src/app.spec.ts"));
        assert!(is_test_path("src/testing/x.rs"));
        assert!(!is_test_path("src/contest.rs"));
    }

    #[test]
    fn docs_folders_are_the_projects_not_source_modules_named_doc() {
        for docs in [
            "docs/conf.py",
            "doc/en/example/conftest.py",
            "packages/ui/docs/usage.md",
            "docs/api/src/x.py",
        ] {
            assert!(is_docs_path(docs), "{docs}");
        }
        for source in [
            "crates/core/flags/doc/version.rs",
            "src/doc/mod.rs",
            "lib/docs/render.js",
            "docs.rs",
            "a/doc",
        ] {
            assert!(!is_docs_path(source), "{source}");
        }
    }

    #[test]
    fn changelogs_are_recognised_by_name_or_folder() {
        assert!(is_changelog_path("CHANGELOG.md"));
        assert!(is_changelog_path("doc/en/ChangeLog"));
        assert!(is_changelog_path("HISTORY.rst"));
        assert!(is_changelog_path("changelog/7356.bugfix.rst"));
        assert!(is_changelog_path("newsfragments/12.feature"));
        assert!(!is_changelog_path("src/history/store.md"));
        assert!(!is_changelog_path("src/changes_view.py"));
    }
}
