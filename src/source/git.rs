//! What git says about a root: the branch (the key of the index catalog),
//! the HEAD commit, whether it is a linked worktree, and which local branches
//! exist (for garbage-collecting the catalogs of deleted ones). Read with
//! libgit2 (`git2`, vendored); where libgit2 cannot open the repository (an
//! unusual layout, a repository of another owner), straight from `.git`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The git state of an indexed root.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Head {
    /// Branch name; `None` for a detached HEAD or a folder outside git.
    pub branch: Option<String>,
    /// Full hex id of the HEAD commit, when it can be resolved.
    pub commit: Option<String>,
    pub detached: bool,
    /// The repository's git directory (for a worktree: its own one).
    pub git_dir: Option<PathBuf>,
    /// A linked worktree (`git worktree add`), whose HEAD lives in its own git directory.
    pub worktree: bool,
}

impl Head {
    /// The catalog key: the branch, `@detached`, or empty outside git.
    pub fn catalog_key(&self) -> String {
        match (&self.branch, self.detached) {
            (Some(b), _) => b.clone(),
            (None, true) => "@detached".to_string(),
            (None, false) => String::new(),
        }
    }

    pub fn describe(&self) -> String {
        match (&self.branch, &self.commit) {
            (Some(b), Some(c)) => format!("{b} @ {}", &c[..c.len().min(12)]),
            (Some(b), None) => b.clone(),
            (None, Some(c)) if self.detached => format!("detached @ {}", &c[..c.len().min(12)]),
            _ => "(not a git repository)".to_string(),
        }
    }
}

/// The top folder of the git work tree that `dir` is in (the nearest folder
/// above with a `.git` directory or file), if any.
pub fn work_tree_top(dir: &Path) -> Option<PathBuf> {
    dir.ancestors().find(|d| d.join(".git").exists()).map(Path::to_path_buf)
}

/// Finds the git directory that governs `root` (searching upwards).
pub fn find_git_dir(root: &Path) -> Option<PathBuf> {
    let mut dir = Some(root);
    while let Some(d) = dir {
        let dot_git = d.join(".git");
        if dot_git.is_dir() {
            return Some(dot_git);
        }
        if dot_git.is_file() {
            // A worktree or submodule: `.git` is a file naming the real git dir.
            let text = fs::read_to_string(&dot_git).ok()?;
            let target = text.strip_prefix("gitdir:")?.trim();
            let path = Path::new(target);
            return Some(if path.is_absolute() {
                path.to_path_buf()
            } else {
                d.join(path)
            });
        }
        dir = d.parent();
    }
    None
}

/// The directory shared by all worktrees of a repository.
fn common_dir(git_dir: &Path) -> PathBuf {
    match fs::read_to_string(git_dir.join("commondir")) {
        Ok(rel) => git_dir.join(rel.trim()),
        Err(_) => git_dir.to_path_buf(),
    }
}

/// What HEAD is at `root`. libgit2 takes about 0.2 ms to open a repository
/// and a server asks at every search, so the answer is kept per root with
/// the files it was read from, and read again when one of them changed.
pub fn head(root: &Path) -> Head {
    static READ: Mutex<Option<HashMap<PathBuf, (HeadFiles, Head)>>> = Mutex::new(None);
    let files = HeadFiles::of(root);
    if let Some(files) = &files {
        let read = READ.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, head)) = read
            .as_ref()
            .and_then(|r| r.get(root))
            .filter(|(seen, _)| seen == files)
        {
            return head.clone();
        }
    }
    let head = head_with_libgit2(root).unwrap_or_else(|| head_from_files(root));
    if let Some(files) = files {
        let mut read = READ.lock().unwrap_or_else(|e| e.into_inner());
        read.get_or_insert_with(HashMap::new)
            .insert(root.to_path_buf(), (files, head.clone()));
    }
    head
}

/// The files a root's HEAD is read from, as they are now: the git directory,
/// HEAD's text, and the identity of HEAD, `commondir`, `packed-refs` and each
/// reference HEAD leads to (git replaces a file it updates, so its inode changes).
#[derive(Debug, PartialEq, Eq)]
struct HeadFiles {
    git_dir: PathBuf,
    head: String,
    stamps: Vec<Option<FileStamp>>,
}

#[derive(Debug, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    #[cfg(unix)]
    inode: u64,
}

impl FileStamp {
    fn of(path: &Path) -> Option<FileStamp> {
        let meta = fs::metadata(path).ok()?;
        Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            #[cfg(unix)]
            inode: std::os::unix::fs::MetadataExt::ino(&meta),
        })
    }
}

impl HeadFiles {
    fn of(root: &Path) -> Option<HeadFiles> {
        let git_dir = find_git_dir(root)?;
        let head = fs::read_to_string(git_dir.join("HEAD")).ok()?;
        let common = common_dir(&git_dir);
        let mut paths = vec![
            git_dir.join("HEAD"),
            git_dir.join("commondir"),
            common.join("packed-refs"),
        ];
        // A symbolic reference may lead to another; a few steps at most.
        let mut text = head.clone();
        for _ in 0..5 {
            let Some(reference) = text.trim().strip_prefix("ref:").map(str::trim) else {
                break;
            };
            let (own, shared) = (git_dir.join(reference), common.join(reference));
            text = fs::read_to_string(&own)
                .or_else(|_| fs::read_to_string(&shared))
                .unwrap_or_default();
            paths.extend([own, shared]);
        }
        Some(HeadFiles {
            stamps: paths.iter().map(|p| FileStamp::of(p)).collect(),
            git_dir,
            head,
        })
    }
}

/// Opens the repository governing `root` with libgit2.
fn open_repository(root: &Path) -> Option<git2::Repository> {
    find_git_dir(root)?;
    git2::Repository::discover(root).ok()
}

fn head_with_libgit2(root: &Path) -> Option<Head> {
    let repo = open_repository(root)?;
    let git_dir = repo.path().to_path_buf();
    let worktree = repo.is_worktree();
    // An unborn branch (no commit yet) has a symbolic HEAD but no target.
    let head_ref = repo.find_reference("HEAD").ok()?;
    let head = match head_ref.symbolic_target().ok()? {
        Some(target) => Head {
            branch: Some(target.strip_prefix("refs/heads/").unwrap_or(target).to_string()),
            commit: head_ref
                .resolve()
                .ok()
                .and_then(|r| r.target())
                .map(|id| id.to_string()),
            detached: false,
            git_dir: Some(git_dir),
            worktree,
        },
        None => Head {
            branch: None,
            commit: head_ref.target().map(|id| id.to_string()),
            detached: true,
            git_dir: Some(git_dir),
            worktree,
        },
    };
    Some(head)
}

/// The paths with uncommitted changes under `root` (staged, unstaged, or
/// untracked and not ignored), at most `limit` of them; `None` outside git.
pub fn uncommitted_paths(root: &Path, limit: usize) -> Option<Vec<String>> {
    let repo = open_repository(root)?;
    let mut options = git2::StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false)
        .exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut options)).ok()?;
    Some(
        statuses
            .iter()
            .filter(|s| s.status() != git2::Status::CURRENT)
            .filter_map(|s| s.path().ok().map(str::to_string))
            .take(limit)
            .collect(),
    )
}

/// The local branch names of the repository governing `root`; `None`
/// outside git or when they cannot be listed (then nothing is collected).
pub fn local_branches(root: &Path) -> Option<Vec<String>> {
    let repo = open_repository(root)?;
    let branches = repo.branches(Some(git2::BranchType::Local)).ok()?;
    let mut names = Vec::new();
    for branch in branches {
        let (branch, _) = branch.ok()?;
        names.push(branch.name().ok()??.to_string());
    }
    Some(names)
}

/// Folders to watch for HEAD moving, with whether to watch them recursively:
/// the (worktree's) git directory for `HEAD`, the shared one for
/// `packed-refs`, and the branch refs (a commit, a branch created or deleted).
pub fn head_watch_dirs(git_dir: &Path) -> Vec<(PathBuf, bool)> {
    let common = common_dir(git_dir);
    let mut dirs = vec![(git_dir.to_path_buf(), false)];
    if common != git_dir {
        dirs.push((common.clone(), false));
    }
    dirs.push((common.join("refs").join("heads"), true));
    dirs
}

/// Whether a change to `path` (inside a git directory) can move HEAD.
pub fn is_head_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    matches!(name, "HEAD" | "packed-refs") || path.components().any(|c| c.as_os_str() == "refs")
}

fn head_from_files(root: &Path) -> Head {
    let Some(git_dir) = find_git_dir(root) else {
        return Head::default();
    };
    let Ok(text) = fs::read_to_string(git_dir.join("HEAD")) else {
        return Head {
            git_dir: Some(git_dir),
            ..Head::default()
        };
    };
    let text = text.trim();
    if let Some(reference) = text.strip_prefix("ref:") {
        let reference = reference.trim();
        let branch = reference.strip_prefix("refs/heads/").unwrap_or(reference).to_string();
        let commit = resolve_ref(&git_dir, reference);
        Head {
            branch: Some(branch),
            commit,
            detached: false,
            worktree: git_dir.join("commondir").is_file(),
            git_dir: Some(git_dir),
        }
    } else {
        Head {
            branch: None,
            commit: Some(text.to_string()),
            detached: true,
            worktree: git_dir.join("commondir").is_file(),
            git_dir: Some(git_dir),
        }
    }
}

fn resolve_ref(git_dir: &Path, reference: &str) -> Option<String> {
    for dir in [git_dir.to_path_buf(), common_dir(git_dir)] {
        if let Ok(id) = fs::read_to_string(dir.join(reference)) {
            return Some(id.trim().to_string());
        }
    }
    let packed = fs::read_to_string(common_dir(git_dir).join("packed-refs")).ok()?;
    packed.lines().find_map(|line| {
        let (id, name) = line.split_once(' ')?;
        (name == reference).then(|| id.to_string())
    })
}

/// Adds `.ken/` to the repository's `info/exclude`, so the index never shows
/// in `git status`. Best effort: a read-only repository is left alone.
pub fn exclude_index_dir(git_dir: &Path) {
    let info = common_dir(git_dir).join("info");
    let exclude = info.join("exclude");
    let current = fs::read_to_string(&exclude).unwrap_or_default();
    if current.lines().any(|l| l.trim() == ".ken/" || l.trim() == "/.ken/") {
        return;
    }
    let mut text = current;
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(".ken/\n");
    let _ = fs::create_dir_all(&info).and_then(|_| fs::write(&exclude, text));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }

    #[test]
    fn head_is_read_again_after_commits_checkouts_and_packed_refs() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git(root, &["init", "-q", "-b", "main"]);
        let commit = |message: &str| git(root, &["commit", "-q", "--allow-empty", "-m", message]);
        commit("a");
        // Each step moves HEAD; the kept answer must equal a fresh read.
        let steps: [&[&str]; 6] = [
            &["commit", "-q", "--allow-empty", "-m", "b"],
            &["checkout", "-q", "-b", "feature"],
            &["checkout", "-q", "--detach"],
            &["checkout", "-q", "main"],
            &["pack-refs", "--all"],
            &["commit", "-q", "--allow-empty", "-m", "c"],
        ];
        let mut seen = vec![head(root)];
        for step in steps {
            git(root, step);
            let now = head(root);
            assert_eq!(now, head_with_libgit2(root).unwrap(), "after git {step:?}");
            assert_eq!(now.commit.as_deref(), Some(git(root, &["rev-parse", "HEAD"]).as_str()));
            seen.push(now);
        }
        assert_eq!(seen[2].branch.as_deref(), Some("feature"));
        assert!(seen[3].detached);
        assert_ne!(seen[1].commit, seen[0].commit);
        assert_ne!(seen[6].commit, seen[5].commit);
    }
}
