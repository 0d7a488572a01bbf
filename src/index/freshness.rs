//! The freshness contract: what an index reflects (branch, HEAD commit,
//! when it was updated, how many files changed on disk since) and whether a
//! watcher keeps it fresh. Shown by `ken status`, `index_status`, MCP search
//! results and `ken search --freshness`.

use std::collections::HashSet;
use std::path::Path;

use anyhow::Result;

use crate::source::discover::{self, DiscoverOptions, SkipReason};
use crate::source::git;
use crate::store::{self, MetaKey, Store};

#[derive(Debug, Clone, Default)]
pub struct Freshness {
    /// The catalog searched: HEAD's branch, `@detached`, or empty outside git.
    pub branch: String,
    /// HEAD's commit now (full id), when in git.
    pub head_commit: Option<String>,
    /// The branch and commit of the last index update, and when it finished.
    pub indexed_branch: Option<String>,
    pub indexed_commit: Option<String>,
    pub indexed_at: Option<String>,
    /// Files new, changed or deleted on disk since the last update (by size
    /// and mtime against the catalog); absent when not counted.
    pub pending_changes: Option<u64>,
    /// The process (`ken watch` or `ken serve`) keeping the index fresh, if any.
    pub watcher_pid: Option<u32>,
}

impl Freshness {
    /// What `store` reflects for `root`; `count_pending` walks the root (a stat per file).
    pub fn read(store: &Store, root: &Path, count_pending: bool) -> Result<Freshness> {
        let head = git::head(root);
        let branch = head.catalog_key();
        let pending_changes = if count_pending {
            let p = pending_changes(store, root, &branch, &DiscoverOptions::default())?;
            Some(p.changed + p.deleted)
        } else {
            None
        };
        Ok(Freshness {
            head_commit: head.commit,
            indexed_branch: store.meta(MetaKey::IndexedBranch)?,
            indexed_commit: store.meta(MetaKey::HeadCommit)?.filter(|c| !c.is_empty()),
            indexed_at: store.meta(MetaKey::LastIndexedAt)?,
            pending_changes,
            watcher_pid: live_watcher(store)?,
            branch,
        })
    }

    /// Whether HEAD is where the index was last brought up to date.
    pub fn is_current(&self) -> bool {
        self.indexed_branch.as_deref() == Some(self.branch.as_str())
            && self.indexed_commit == self.head_commit
            && self.pending_changes.unwrap_or(0) == 0
    }

    /// One line for people: "main @ 1a2b3c4d5e6f, indexed at ..., 0 pending changes, watched".
    pub fn describe(&self) -> String {
        let branch = if self.branch.is_empty() {
            "(not a git repository)"
        } else {
            &self.branch
        };
        let mut out = branch.to_string();
        if let Some(c) = &self.indexed_commit {
            out.push_str(&format!(" @ {}", &c[..c.len().min(12)]));
        }
        out.push_str(&format!(
            ", indexed at {}",
            self.indexed_at.as_deref().unwrap_or("never")
        ));
        if self.indexed_branch.as_deref().is_some_and(|b| b != self.branch) {
            out.push_str(&format!(
                " (last update was on `{}`)",
                self.indexed_branch.as_deref().unwrap_or_default()
            ));
        } else if self.head_commit.is_some() && self.indexed_commit != self.head_commit {
            out.push_str(" (HEAD moved since)");
        }
        if let Some(n) = self.pending_changes {
            out.push_str(&format!(", {n} pending changes"));
        }
        if let Some(pid) = self.watcher_pid {
            out.push_str(&format!(", watched by pid {pid}"));
        }
        out
    }
}

/// Files that differ between disk and a branch's catalog.
#[derive(Debug, Clone, Copy, Default)]
pub struct Pending {
    /// New files, or files whose size or mtime differ from the catalog.
    pub changed: u64,
    /// Catalog paths no longer on disk.
    pub deleted: u64,
}

/// What a re-index of `branch` would look at: a walk and a stat per file.
/// Files stored with mtime 0 (written too recently to trust their mtime) are
/// compared by content. A file left out for its content (generated,
/// binary...) is not pending while it has the size and mtime it was skipped
/// with (with mtime 0: while its content is still left out for that reason);
/// an unreadable one while it still cannot be opened.
pub fn pending_changes(store: &Store, root: &Path, branch: &str, opts: &DiscoverOptions) -> Result<Pending> {
    let catalog = store.catalog(branch)?;
    let skipped = store.skipped(branch)?;
    let found = discover::discover(root, opts);
    let on_disk: HashSet<&str> = found.files.iter().map(|c| c.rel_path.as_str()).collect();
    let changed = found
        .files
        .iter()
        .filter(|c| match catalog.get(&c.rel_path) {
            None => match skipped.get(&c.rel_path) {
                None => true,
                // Pending once it can be read (a chmod leaves the mtime as it was).
                Some(s) if s.reason == SkipReason::Unreadable => std::fs::File::open(&c.abs_path).is_ok(),
                Some(s) if s.size != c.size as i64 => true,
                Some(s) if s.mtime_ns == 0 => {
                    std::fs::read(&c.abs_path).map_or(true, |b| discover::check_content(&b).err() != Some(s.reason))
                }
                Some(s) => s.mtime_ns != c.mtime_ns,
            },
            Some(e) if e.size != c.size as i64 => true,
            Some(e) if e.mtime_ns == 0 => {
                std::fs::read(&c.abs_path).map_or(true, |b| store::content_hash(&b) != e.content_hash)
            }
            Some(e) => e.mtime_ns != c.mtime_ns,
        })
        .count() as u64;
    let deleted = catalog.keys().filter(|p| !on_disk.contains(p.as_str())).count() as u64;
    Ok(Pending { changed, deleted })
}

/// The pid recorded by a watcher of this index, if that process still lives.
pub fn live_watcher(store: &Store) -> Result<Option<u32>> {
    let pid = store.meta(MetaKey::WatcherPid)?.and_then(|p| p.parse::<u32>().ok());
    Ok(pid.filter(|&p| process_alive(p)))
}

/// Whether a process with this pid exists (signal 0 checks without sending).
pub fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}
