//! A prebuilt index to share. `ken index --export FILE` writes what the
//! index holds for the checked-out branch, once a run has brought it up to
//! date with the working tree, as one file ([`crate::store::snapshot`]),
//! recording HEAD's commit; a tree with uncommitted changes is refused
//! unless asked for (the file then says it holds them). `ken index --import
//! FILE` starts from such a file and the index run after it catches up with
//! the working tree: every file is read once (another clone's mtimes mean
//! nothing here) and only those whose content differs are parsed and embedded.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::source::git;
use crate::store::snapshot::{self, ExportOf, SnapshotHeader};
use crate::store::vectors::{self, VectorIndex};
use crate::store::{Store, WRITE_LOCK_TIMEOUT};

/// A shared index file written or read.
#[derive(Debug, Clone)]
pub struct SharedFile {
    pub file: PathBuf,
    pub header: SnapshotHeader,
    /// The file's size.
    pub bytes: u64,
    pub seconds: f64,
}

/// The tree an export records: the branch whose catalog it holds, HEAD's
/// commit, and whether the working tree differed from it.
#[derive(Debug, Clone)]
pub struct ExportedTree {
    branch: String,
    commit: Option<String>,
    dirty: bool,
}

/// The tree of `root` to export to `file`; an error naming the changed
/// files when the working tree has uncommitted changes, unless `allow_dirty`.
pub fn tree_to_export(root: &Path, file: &Path, allow_dirty: bool) -> Result<ExportedTree> {
    let root = root
        .canonicalize()
        .with_context(|| format!("cannot export {}: no such directory", root.display()))?;
    let head = git::head(&root);
    // An earlier export written inside the tree is not a change of the code.
    let target = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or_else(std::env::current_dir, |dir| Ok(dir.to_path_buf()))
        .and_then(|dir| dir.canonicalize())
        .ok()
        .and_then(|dir| Some(dir.join(file.file_name()?)));
    let ours = |path: &str| target.as_ref().is_some_and(|t| *t == root.join(path));
    let changed: Vec<String> = git::uncommitted_paths(&root, 6)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| !ours(p))
        .collect();
    if !changed.is_empty() && !allow_dirty {
        bail!(
            "the working tree has uncommitted changes ({}{}); commit them, or pass --allow-dirty to export \
             the working tree as indexed (the file then says it holds uncommitted changes)",
            changed[..changed.len().min(5)].join(", "),
            if changed.len() > 5 { ", ..." } else { "" }
        );
    }
    Ok(ExportedTree {
        branch: head.catalog_key(),
        commit: head.commit,
        dirty: !changed.is_empty(),
    })
}

/// Writes the index in `index_dir` of `tree`'s branch to `file`.
pub fn export(index_dir: &Path, tree: &ExportedTree, file: &Path) -> Result<SharedFile> {
    let started = Instant::now();
    let store = Store::open_for_read(index_dir)?;
    let of = ExportOf {
        branch: &tree.branch,
        commit: tree.commit.as_deref(),
        dirty: tree.dirty,
    };
    let header = store.export_snapshot(&of, file)?;
    Ok(SharedFile {
        file: file.to_path_buf(),
        bytes: std::fs::metadata(file)?.len(),
        header,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Makes the shared index file `file` the index of `root` in `index_dir`
/// (replacing one only with `replace`), after checking it whole, and
/// rebuilds the HNSW file of its vectors. `embedder`: the id of the
/// embedder this checkout embeds with (`None`: no embedding here); a file
/// whose vectors another one made is refused. The index run that follows
/// catches up with the working tree.
pub fn import(root: &Path, index_dir: &Path, file: &Path, replace: bool, embedder: Option<&str>) -> Result<SharedFile> {
    let started = Instant::now();
    let header = snapshot::verify_snapshot(file)?;
    if let (Some(theirs), Some(ours)) = (header.embedder.as_deref().filter(|_| header.vectors > 0), embedder) {
        if theirs != ours {
            bail!(
                "{} holds vectors of the embedder {theirs}, and this ken embeds with {ours}: import it where \
                 ken is set up as where it was made (KEN_MODEL, KEN_EMBED_*), or with --no-embed, \
                 or export it again with this setup",
                file.display()
            );
        }
    }
    let branch = git::head(root).catalog_key();
    snapshot::install_snapshot(file, &header, index_dir, &branch, replace)?;
    if let (Some(model), Some(dimensions), true) = (&header.embedder, header.dimensions, header.vectors > 0) {
        let store = Store::open_for_write(index_dir)?;
        let _lock = store.lock_for_write(WRITE_LOCK_TIMEOUT)?;
        let syncing = Instant::now();
        let in_file = VectorIndex::sync(&store, model, dimensions, vectors::configured_quantization())?;
        tracing::info!(
            "import: {in_file} vectors into the HNSW file in {:.2} s (after {:.2} s checking and installing)",
            syncing.elapsed().as_secs_f64(),
            (syncing - started).as_secs_f64()
        );
    }
    Ok(SharedFile {
        file: file.to_path_buf(),
        bytes: std::fs::metadata(file)?.len(),
        header,
        seconds: started.elapsed().as_secs_f64(),
    })
}

impl SharedFile {
    /// One line for people: what the file holds.
    pub fn describe(&self) -> String {
        let h = &self.header;
        let at = match (&h.commit, h.branch.as_str()) {
            (Some(c), "" | "@detached") => format!("commit {}", &c[..c.len().min(12)]),
            (Some(c), b) => format!("{b} @ {}", &c[..c.len().min(12)]),
            (None, _) => "a folder outside git".to_string(),
        };
        format!(
            "{at}{}: {} files, {} chunks, {} vectors, {:.1} MB ({:.1} s)",
            if h.dirty { " with uncommitted changes" } else { "" },
            h.files,
            h.chunks,
            h.vectors,
            self.bytes as f64 / 1e6,
            self.seconds
        )
    }
}
