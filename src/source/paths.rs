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

/// A path's file name without its extensions: `lib/helpers/parseHeaders.js`
/// → `parseHeaders`, `src/app.test.ts` → `app`.
pub fn file_stem(path: &str) -> &str {
    let name = path.rsplit('/').next().unwrap_or(path);
    name.split('.').next().unwrap_or(name)
}

/// A test file or a file in a test folder, by the conventions of the
/// languages ken reads. The search's rerank and the change impact share it.
pub fn is_test_path(path: &str) -> bool {
    let (folders, file) = path.rsplit_once('/').unwrap_or(("", path));
    // A Maven or Gradle main source set holds the product, whatever its
    // classes are called (javapoet's `MethodSpec`, a test library's `BaseTest`).
    let mut main_source_set = false;
    let mut previous = "";
    for folder in folders.split('/') {
        if is_test_folder(folder) {
            return true;
        }
        main_source_set |= previous == "src" && folder == "main";
        previous = folder;
    }
    !main_source_set && is_test_file_name(file)
}

/// Folders that hold tests (`tests/`, `__tests__/`, Go's `testdata/`, the
/// `regress/` suites of C projects), a test helper package (`test_utils/`),
/// Gradle's test source sets (`src/integrationTest/`, `src/androidTest/`) and
/// .NET test projects (`Core.Tests/`, `Core.UnitTests/`).
fn is_test_folder(folder: &str) -> bool {
    const TEST_FOLDERS: &[&str] = &[
        "test",
        "tests",
        "testing",
        "__tests__",
        "spec",
        "specs",
        "testdata",
        "e2e",
        "regress",
    ];
    let camel_source_set = ["Test", "Tests"].iter().any(|suffix| {
        folder
            .strip_suffix(suffix)
            .is_some_and(|head| head.ends_with(|c: char| c.is_ascii_lowercase()))
    });
    let dotnet_project = folder
        .rsplit_once('.')
        .is_some_and(|(_, last)| last.ends_with("Tests") || last == "tests" || last == "test");
    let lower = folder.to_ascii_lowercase();
    TEST_FOLDERS.contains(&lower.as_str()) || lower.starts_with("test_") || camel_source_set || dotnet_project
}

/// Test files by name: `test_x.py`, `x_test.go`, `x.test.ts`, `x.spec.js`,
/// `conftest.py`, and JVM/.NET test classes (`ParserTest.java`, `UtilsTests.cs`;
/// case matters there, or `Latest.java` would be a test). `Spec` ends a test
/// class in Groovy, Kotlin and Scala (Spock, Kotest, ScalaTest); in Java and
/// C# it ends a product's own types (`MethodSpec`, `KeySpec`).
fn is_test_file_name(file: &str) -> bool {
    let stem = file.split('.').next().unwrap_or(file);
    let extension = file.rsplit_once('.').map_or("", |(_, extension)| extension);
    let lower_stem = stem.to_ascii_lowercase();
    let lower_file = file.to_ascii_lowercase();
    let ends_with_suffix = |suffixes: &[&str]| {
        suffixes
            .iter()
            .any(|suffix| stem.len() > suffix.len() && stem.ends_with(suffix))
    };
    lower_stem.starts_with("test_")
        || lower_stem.ends_with("_test")
        || lower_file.contains(".test.")
        || lower_file.contains(".spec.")
        || lower_file == "conftest.py"
        || (matches!(extension, "java" | "kt" | "scala" | "cs" | "groovy")
            && ends_with_suffix(&["Test", "Tests", "IT"]))
        || (matches!(extension, "kt" | "scala" | "groovy") && ends_with_suffix(&["Spec"]))
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

/// Whether `path` lies in a folder of examples, demos, benchmarks or the
/// project's own tools and scripts, not in its source (`examples/assets/x.json`,
/// `tools/gen.sh`; but `src/tools/x.rs` is source): the folder nearest the
/// top that is either kind decides. A leading `_` or `.` hides a folder from
/// its build (Go's `_examples/`), not its kind.
pub fn is_auxiliary_path(path: &str) -> bool {
    const AUXILIARY_FOLDERS: &[&str] = &[
        "example",
        "examples",
        "sample",
        "samples",
        "demo",
        "demos",
        "bench",
        "benches",
        "benchmark",
        "benchmarks",
        "tools",
        "scripts",
        "script",
    ];
    let mut folders = path.split('/');
    folders.next_back();
    folders
        .map(|folder| folder.trim_start_matches(['_', '.']).to_ascii_lowercase())
        .find(|folder| AUXILIARY_FOLDERS.contains(&folder.as_str()) || SOURCE_FOLDERS.contains(&folder.as_str()))
        .is_some_and(|folder| AUXILIARY_FOLDERS.contains(&folder.as_str()))
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

/// Chunks of prose: text windows, sections of markup, and whatever else a
/// Markdown file holds (its front matter and the text before its first
/// heading are `module` chunks).
pub fn is_prose(kind: &str, language: &str) -> bool {
    matches!(kind, "text" | "section") || language == "markdown"
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
        assert!(is_test_path("regress/session-ops.sh"));
        assert!(is_test_path("pkg/testdata/input.go"));
        assert!(is_test_path("src/test/java/org/x/ParserTest.java"));
        assert!(is_test_path("core/ParserTests.cs"));
        assert!(is_test_path("src/parser_test.cc"));
        assert!(is_test_path("c/test_grid.c"));
        assert!(is_test_path("app/src/androidTest/java/x/Main.kt"));
        assert!(is_test_path("src/integrationTest/kotlin/Api.kt"));
        assert!(is_test_path("Core.UnitTests/Parser.cs"));
        assert!(is_test_path("Core.Tests/Parser.cs"));
        assert!(!is_test_path("src/Contest/Rules.cs"));
        assert!(!is_test_path("src/latest/x.ts"));
        assert!(!is_test_path("System.Net.Http/Client.cs"));
        assert!(!is_test_path("app.contests/Rules.cs"));
        assert!(is_test_path("Core/ParserTests.g.cs"));
        assert!(!is_test_path("src/contest.rs"));
        assert!(!is_test_path("src/main/java/org/x/Latest.java"));
        assert!(!is_test_path("src/main/java/org/x/Test.java"));
        // `Spec` ends a test class in Groovy, Kotlin and Scala, a type in Java.
        assert!(is_test_path("src/test/groovy/x/ParserSpec.groovy"));
        assert!(is_test_path("core/ParserSpec.kt"));
        assert!(!is_test_path("src/com/squareup/javapoet/MethodSpec.java"));
        // A main source set holds no tests by name, only by folder.
        assert!(!is_test_path("src/main/java/com/squareup/javapoet/TypeSpec.java"));
        assert!(!is_test_path("lib/src/main/kotlin/x/ParserSpec.kt"));
        assert!(
            is_test_path("src/main/java/org/x/testing/Fixtures.java"),
            "a test folder still counts"
        );
        assert!(!is_test_path("src/attest/verify.rs"));
        assert!(!is_test_path("statsmodels/regression/linear_model.py"));
    }

    #[test]
    fn examples_and_tools_are_auxiliary_unless_inside_a_source_folder() {
        for auxiliary in [
            "examples/assets/sheet.json",
            "tools/gen.sh",
            "benches/walk.rs",
            "packages/ui/demo/app.ts",
            "_examples/rest/main.go",
            ".scripts/release.sh",
        ] {
            assert!(is_auxiliary_path(auxiliary), "{auxiliary}");
        }
        for source in [
            "src/tools/x.rs",
            "crates/core/scripts.rs",
            "lib/examples/loader.js",
            "examples.py",
            "main.go",
            "_internal/tools_test.go",
        ] {
            assert!(!is_auxiliary_path(source), "{source}");
        }
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
