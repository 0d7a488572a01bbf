//! Finding the files to index: a parallel walk that honours ignore files and
//! skips what is not source (binaries, huge, minified or generated files).
//!
//! Nothing here is an error: every file that is left out is counted under a
//! [`SkipReason`], so the summary can say what was skipped and why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::UNIX_EPOCH;

use ignore::{WalkBuilder, WalkState};
use serde::{Deserialize, Serialize};

/// Directory names never descended into: dependencies, build output, caches.
pub const DEFAULT_EXCLUDED_DIRS: &[&str] = &[
    ".git",
    ".hg",
    ".svn",
    ".ken",
    "node_modules",
    "bower_components",
    "vendor",
    "third_party",
    "target",
    "dist",
    "out",
    "__pycache__",
    ".venv",
    "venv",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".gradle",
    "Pods",
    "DerivedData",
];

/// File name suffixes that are never source code.
const NON_SOURCE_SUFFIXES: &[&str] = &[
    ".min.js",
    ".min.css",
    ".map",
    ".lock",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".bmp",
    ".ico",
    ".webp",
    ".svg",
    ".pdf",
    ".zip",
    ".gz",
    ".tgz",
    ".bz2",
    ".xz",
    ".zst",
    ".7z",
    ".rar",
    ".jar",
    ".war",
    ".class",
    ".o",
    ".a",
    ".so",
    ".dylib",
    ".dll",
    ".exe",
    ".wasm",
    ".pyc",
    ".woff",
    ".woff2",
    ".ttf",
    ".otf",
    ".eot",
    ".mp3",
    ".mp4",
    ".wav",
    ".ogg",
    ".mov",
    ".avi",
    ".webm",
    ".sqlite",
    ".db",
    ".bin",
    ".dat",
    ".pb",
    ".onnx",
    ".safetensors",
    ".npy",
    ".npz",
    ".pkl",
    ".parquet",
    ".csv",
    ".tsv",
];

/// Licence texts: never what a code search is after.
const LICENSE_PREFIXES: &[&str] = &["license", "licence", "copying", "unlicense", "notice"];

/// Lock files and other machine-written files, by exact name.
const GENERATED_FILE_NAMES: &[&str] = &[
    "package-lock.json",
    "yarn.lock",
    "pnpm-lock.yaml",
    "Cargo.lock",
    "poetry.lock",
    "Pipfile.lock",
    "composer.lock",
    "Gemfile.lock",
    "go.sum",
    "uv.lock",
];

/// Why a file was left out of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    Symlink,
    TooLarge,
    NotSource,
    Binary,
    InvalidUtf8,
    Minified,
    Generated,
    Unreadable,
    // A private key, a credentials file, or text holding a known token
    // format: never indexed, so never sent to an embedding provider. (A
    // plain comment: a documented variant would change the wire schema of
    // every skip count from named properties to a map.)
    Secret,
}

impl SkipReason {
    pub fn label(self) -> &'static str {
        match self {
            SkipReason::Symlink => "symlinks",
            SkipReason::TooLarge => "too large",
            SkipReason::NotSource => "not source",
            SkipReason::Binary => "binary",
            SkipReason::InvalidUtf8 => "invalid UTF-8",
            SkipReason::Minified => "minified",
            SkipReason::Generated => "generated",
            SkipReason::Unreadable => "unreadable",
            SkipReason::Secret => "secrets",
        }
    }
}

/// Counts of skipped files by reason.
pub type SkipCounts = BTreeMap<SkipReason, u64>;

/// Settings for the walk.
#[derive(Debug, Clone)]
pub struct DiscoverOptions {
    /// Files larger than this many bytes are skipped.
    pub max_file_size: u64,
    /// Skip [`DEFAULT_EXCLUDED_DIRS`] (vendored code, build output).
    pub default_excludes: bool,
    pub threads: usize,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            max_file_size: 1024 * 1024,
            default_excludes: true,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()).min(8),
        }
    }
}

/// A file that passed the walk's filters; its content is checked when read.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Path relative to the root, with `/` separators.
    pub rel_path: String,
    pub abs_path: PathBuf,
    pub size: u64,
    pub mtime_ns: i64,
}

/// The outcome of a walk.
#[derive(Debug, Default)]
pub struct Discovery {
    pub files: Vec<Candidate>,
    /// The folders the walk entered (what a watcher watches).
    pub dirs: Vec<PathBuf>,
    pub skipped: SkipCounts,
    /// Walk errors (unreadable directories, broken links), not fatal.
    pub errors: Vec<String>,
}

/// Walks `root` and returns the candidate files, sorted by path.
pub fn discover(root: &Path, opts: &DiscoverOptions) -> Discovery {
    discover_from(root, &[Start::Tree(root.to_path_buf())], opts)
}

/// Where a partial walk looks (for the watcher, which knows what changed).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Start {
    /// The files directly in this folder (already known to be indexed).
    Files(PathBuf),
    /// Everything under this folder, if the ignore rules let the walk into it.
    Tree(PathBuf),
}

impl Start {
    /// Whether `rel_path` (relative to `root`) is a file this start looks at.
    pub fn covers(&self, root: &Path, rel_path: &str) -> bool {
        let Some(dir) = relative_path(root, self.path()) else {
            return false;
        };
        match self {
            Start::Files(_) => rel_path.rsplit_once('/').map_or("", |(parent, _)| parent) == dir,
            Start::Tree(_) => dir.is_empty() || rel_path.strip_prefix(dir.as_str()).is_some_and(|r| r.starts_with('/')),
        }
    }

    pub fn path(&self) -> &Path {
        match self {
            Start::Files(p) | Start::Tree(p) => p,
        }
    }
}

/// Walks only `starts` (folders under `root`), with the same rules as a
/// walk of the whole root; candidates sorted by path, each once.
pub fn discover_from(root: &Path, starts: &[Start], opts: &DiscoverOptions) -> Discovery {
    let mut out = Discovery::default();
    for start in starts {
        let mut found = walk(root, start, opts);
        merge(&mut out, &mut found);
    }
    out.files.sort_unstable_by(|a, b| a.rel_path.cmp(&b.rel_path));
    out.files.dedup_by(|a, b| a.rel_path == b.rel_path);
    out.dirs.sort_unstable();
    out.dirs.dedup();
    out
}

/// Whether the walk never enters a folder of this name.
pub fn is_excluded_dir(name: &str, default_excludes: bool) -> bool {
    name == ".ken" || name == ".git" || (default_excludes && DEFAULT_EXCLUDED_DIRS.contains(&name))
}

fn walk(root: &Path, start: &Start, opts: &DiscoverOptions) -> Discovery {
    // A tree below the root is walked from its parent, so the ignore rules
    // (and the hidden and excluded names) decide whether to enter it.
    let (from, max_depth, only_under) = match start {
        Start::Files(dir) => (dir.clone(), Some(1), None),
        Start::Tree(dir) => match dir.parent().filter(|_| dir != root) {
            Some(parent) => (parent.to_path_buf(), None, Some(dir.clone())),
            None => (dir.clone(), None, None),
        },
    };
    if !from.is_dir() {
        return Discovery::default();
    }
    let mut builder = WalkBuilder::new(&from);
    builder
        .hidden(true)
        .parents(true)
        .ignore(true)
        .git_ignore(true)
        .git_global(true)
        .git_exclude(true)
        .require_git(false)
        .follow_links(false)
        .max_depth(max_depth)
        .add_custom_ignore_filename(".kenignore")
        .threads(opts.threads);
    let default_excludes = opts.default_excludes;
    builder.filter_entry(move |entry| {
        if entry.depth() == 0 {
            return true;
        }
        if let Some(under) = &only_under {
            if entry.depth() == 1 && entry.path() != under {
                return false;
            }
        }
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        !is_dir || !is_excluded_dir(&entry.file_name().to_string_lossy(), default_excludes)
    });

    let result = Mutex::new(Discovery::default());
    builder.build_parallel().run(|| {
        let mut local = ThreadLocal {
            shared: &result,
            found: Discovery::default(),
        };
        Box::new(move |entry| {
            match entry {
                Ok(entry) => visit(root, &entry, opts, &mut local.found),
                Err(err) => local.found.errors.push(err.to_string()),
            }
            WalkState::Continue
        })
    });
    let mut out = result.into_inner().unwrap_or_else(|e| e.into_inner());
    out.files.sort_unstable_by(|a, b| a.rel_path.cmp(&b.rel_path));
    out
}

/// One walker thread's findings, merged into the shared result when the thread ends.
struct ThreadLocal<'a> {
    shared: &'a Mutex<Discovery>,
    found: Discovery,
}

impl Drop for ThreadLocal<'_> {
    fn drop(&mut self) {
        let mut shared = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        merge(&mut shared, &mut self.found);
    }
}

fn merge(into: &mut Discovery, from: &mut Discovery) {
    into.files.append(&mut from.files);
    into.dirs.append(&mut from.dirs);
    into.errors.append(&mut from.errors);
    for (reason, n) in std::mem::take(&mut from.skipped) {
        *into.skipped.entry(reason).or_default() += n;
    }
}

fn visit(root: &Path, entry: &ignore::DirEntry, opts: &DiscoverOptions, out: &mut Discovery) {
    let Some(file_type) = entry.file_type() else {
        return;
    };
    if file_type.is_dir() {
        out.dirs.push(entry.path().to_path_buf());
        return;
    }
    let skip = |out: &mut Discovery, reason| *out.skipped.entry(reason).or_default() += 1;
    if file_type.is_symlink() {
        // Links are never followed: a target inside the root is indexed under its own path.
        return skip(out, SkipReason::Symlink);
    }
    if !file_type.is_file() {
        return skip(out, SkipReason::NotSource);
    }
    let path = entry.path();
    let name = entry.file_name().to_string_lossy();
    if GENERATED_FILE_NAMES.contains(&name.as_ref()) {
        return skip(out, SkipReason::Generated);
    }
    let lower = name.to_ascii_lowercase();
    if is_secret_name(&lower) && !crate::config::settings().index_secrets {
        return skip(out, SkipReason::Secret);
    }
    if NON_SOURCE_SUFFIXES.iter().any(|s| lower.ends_with(s)) || LICENSE_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        return skip(out, SkipReason::NotSource);
    }
    let meta = match entry.metadata() {
        Ok(m) => m,
        Err(_) => return skip(out, SkipReason::Unreadable),
    };
    if meta.len() > opts.max_file_size {
        return skip(out, SkipReason::TooLarge);
    }
    let Some(rel_path) = relative_path(root, path) else {
        return skip(out, SkipReason::Unreadable);
    };
    out.files.push(Candidate {
        rel_path,
        abs_path: path.to_path_buf(),
        size: meta.len(),
        mtime_ns: mtime_ns(&meta),
    });
}

/// `path` relative to `root` with `/` separators, if it is valid UTF-8.
pub fn relative_path(root: &Path, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root).ok()?;
    let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
    Some(parts?.join("/"))
}

pub fn mtime_ns(meta: &std::fs::Metadata) -> i64 {
    meta.modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i64)
}

/// Checks the content of a candidate: `Err` says why it is not indexed.
pub fn check_content(bytes: &[u8]) -> Result<&str, SkipReason> {
    let head = &bytes[..bytes.len().min(8192)];
    if head.contains(&0) {
        return Err(SkipReason::Binary);
    }
    let text = std::str::from_utf8(bytes).map_err(|_| SkipReason::InvalidUtf8)?;
    if is_minified(text) {
        return Err(SkipReason::Minified);
    }
    if is_generated(text) {
        return Err(SkipReason::Generated);
    }
    if holds_secret(text) && !crate::config::settings().index_secrets {
        return Err(SkipReason::Secret);
    }
    Ok(text)
}

/// Files that are secrets by name (lower-cased): private keys, keystores,
/// `.env` files (not their `.example`/`.sample`/`.template` copies) and the
/// credential files of common tools.
pub fn is_secret_name(lower: &str) -> bool {
    const NAMES: &[&str] = &[
        "id_rsa",
        "id_dsa",
        "id_ecdsa",
        "id_ed25519",
        "credentials",
        "credentials.json",
        "credentials.yml",
        "credentials.yaml",
        ".netrc",
        "_netrc",
        ".pgpass",
        ".npmrc",
        ".pypirc",
        ".git-credentials",
        ".dockercfg",
        ".htpasswd",
        "secrets.yml",
        "secrets.yaml",
        "secrets.json",
        "terraform.tfvars",
        "env.local",
    ];
    const SUFFIXES: &[&str] = &[
        ".pem",
        ".key",
        ".p12",
        ".pfx",
        ".jks",
        ".keystore",
        ".ppk",
        ".kdbx",
        ".tfstate",
    ];
    const TEMPLATES: &[&str] = &[".example", ".sample", ".template", ".dist", ".defaults"];
    if NAMES.contains(&lower) || SUFFIXES.iter().any(|s| lower.ends_with(s)) {
        return true;
    }
    if lower.starts_with("client_secret") && lower.ends_with(".json") {
        return true;
    }
    let dotenv = lower == ".env" || lower.starts_with(".env.") || lower.ends_with(".env");
    dotenv && !TEMPLATES.iter().any(|t| lower.ends_with(t))
}

/// Text holding a PEM private key or a token of a well-known format
/// (GitHub, GitLab, Slack, AWS, Google, Stripe, OpenAI, Anthropic, npm).
pub fn holds_secret(text: &str) -> bool {
    static TOKENS: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(concat!(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----",
            r"|\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
            r"|\bgithub_pat_[A-Za-z0-9_]{60,}",
            r"|\bglpat-[A-Za-z0-9_-]{20}\b",
            r"|\bxox[baprs]-[0-9]{6,}-[A-Za-z0-9-]{10,}",
            r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"|\bAIza[0-9A-Za-z_-]{35}\b",
            r"|\b[rs]k_live_[0-9A-Za-z]{24,}",
            r"|\bsk-(?:proj|ant|svcacct)-[A-Za-z0-9_-]{20,}",
            r"|\bsk-[A-Za-z0-9]{48}\b",
            r"|\bnpm_[A-Za-z0-9]{36}\b",
        ))
        .expect("the token patterns compile")
    });
    // AWS's documentation key ids end in EXAMPLE; they are no secret.
    TOKENS.find_iter(text).any(|m| !m.as_str().ends_with("EXAMPLE"))
}

/// Minified or machine-packed text: very long lines.
fn is_minified(text: &str) -> bool {
    let mut lines = 0usize;
    for line in text.lines() {
        lines += 1;
        if line.len() > 4000 {
            return true;
        }
    }
    text.len() > 4096 && text.len() / lines.max(1) > 300
}

/// Files that declare themselves generated in their first lines.
fn is_generated(text: &str) -> bool {
    text.lines().take(5).any(|line| {
        let l = line.to_ascii_lowercase();
        l.contains("@generated")
            || l.contains("do not edit")
            || l.contains("auto-generated")
            || l.contains("autogenerated")
            || l.contains("code generated by")
            || l.contains("this file was generated")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_cover_their_files() {
        let root = Path::new("/r");
        let files = Start::Files(root.join("src"));
        assert!(files.covers(root, "src/a.rs"));
        assert!(!files.covers(root, "src/sub/a.rs"));
        assert!(!files.covers(root, "srcx/a.rs"));
        let tree = Start::Tree(root.join("src"));
        assert!(tree.covers(root, "src/sub/a.rs"));
        assert!(!tree.covers(root, "srcx/a.rs"));
        assert!(Start::Files(root.to_path_buf()).covers(root, "top.rs"));
        assert!(Start::Tree(root.to_path_buf()).covers(root, "any/where.rs"));
    }

    #[test]
    fn secrets_are_skipped_by_name_and_by_content() {
        for name in [
            "id_rsa",
            "server.pem",
            "tls.key",
            ".env",
            ".env.local",
            "prod.env",
            "credentials.json",
            ".npmrc",
            "client_secret_123.json",
            "env.local",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in [
            "id_rsa.pub",
            ".env.example",
            ".env.sample",
            "keys.py",
            "env.py",
            "environment.ts",
            "credentials.py",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
        let pem = "x = '''\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n'''\n";
        assert_eq!(check_content(pem.as_bytes()), Err(SkipReason::Secret));
        let token = "GITHUB_TOKEN = \"ghp_0123456789abcdefghijABCDEFGHIJ012345\"\n";
        assert_eq!(check_content(token.as_bytes()), Err(SkipReason::Secret));
        assert!(holds_secret("key = 'AKIAZ7Q3MVXR4PLKW2TD'"));
        assert!(!holds_secret("aws_access_key_id = AKIAIOSFODNN7EXAMPLE"));
        assert!(!holds_secret(
            "def parse_private_key(pem):\n    return pem.startswith('-----BEGIN')\n"
        ));
        assert!(!holds_secret("let sk = \"sk-short\"; // ghp_ prefix alone"));
    }

    #[test]
    fn content_checks() {
        assert_eq!(check_content(b"fn main() {}\n"), Ok("fn main() {}\n"));
        assert_eq!(check_content(b"ab\0cd"), Err(SkipReason::Binary));
        assert_eq!(check_content(b"caf\xe9\n"), Err(SkipReason::InvalidUtf8));
        let long = "x".repeat(5000);
        assert_eq!(check_content(long.as_bytes()), Err(SkipReason::Minified));
        assert_eq!(
            check_content(b"// Code generated by protoc. DO NOT EDIT.\npackage x\n"),
            Err(SkipReason::Generated)
        );
    }
}
