//! Reads of the branches' catalogs and the stored file versions and chunks:
//! what a branch holds (paths, versions, skipped files, totals), a file
//! version's chunks, and samples of them for benchmarks.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use rusqlite::{params, OptionalExtension};

use super::{count, counts_by, Store};
use crate::source::discover::SkipReason;

/// Up to how many file versions outside a branch its totals are counted
/// as the whole index's less theirs (see `branch_distinct_contents`).
const FEW_VERSIONS_OUTSIDE: usize = 2_000;

/// The range of relative paths under the folder `dir` ("" for all):
/// `dir/` up to `dir0` (`0` follows `/`).
fn path_range(dir: &str) -> (String, String) {
    if dir.is_empty() {
        // Past every path: none starts with U+10FFFF, a noncharacter.
        (String::new(), char::MAX.to_string())
    } else {
        (format!("{dir}/"), format!("{dir}0"))
    }
}

/// The file versions and contents outside one branch's catalog, read once
/// for several totals of that branch (`ken status` takes five of them):
/// see [`Store::outside_of`].
pub struct BranchOutside {
    branch: String,
    /// None when there are too many to count this way.
    files: Option<Vec<i64>>,
    contents: std::cell::OnceCell<Option<Vec<i64>>>,
}

impl BranchOutside {
    pub fn branch(&self) -> &str {
        &self.branch
    }
}

/// A path's entry in a branch's catalog.
#[derive(Debug, Clone, Copy)]
pub struct CatalogEntry {
    pub file_id: i64,
    pub mtime_ns: i64,
    pub size: i64,
    pub content_hash: i64,
}

/// A file of a branch that was read and left out for its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedEntry {
    pub mtime_ns: i64,
    pub size: i64,
    pub reason: SkipReason,
}

impl SkippedEntry {
    /// Whether a file of this size and mtime is the one that was skipped,
    /// by size and a trusted (non-zero) mtime alone, so it is not read again.
    /// An unreadable file never is: it may have become readable with no
    /// change of mtime (a chmod), so it is tried again.
    pub fn matches(&self, size: u64, mtime_ns: i64) -> bool {
        self.reason != SkipReason::Unreadable
            && self.mtime_ns != 0
            && self.mtime_ns == mtime_ns
            && self.size == size as i64
    }
}

/// The stable text key of a skip reason in the index (its serde name, e.g.
/// `generated`, `invalid_utf8`).
pub fn skip_reason_key(reason: SkipReason) -> String {
    match serde_json::to_value(reason) {
        Ok(serde_json::Value::String(key)) => key,
        _ => unreachable!("a SkipReason serializes as a string"),
    }
}

/// The skip reason of a key written by [`skip_reason_key`]; `None` for a key
/// this ken does not know.
pub fn parse_skip_reason(key: &str) -> Option<SkipReason> {
    serde_json::from_value(serde_json::Value::String(key.to_string())).ok()
}
/// A sampled chunk: its enclosing context, its text and its symbol names.
pub type SampledChunk = (Option<String>, String, Option<String>);

impl Store {
    pub fn catalog(&self, branch: &str) -> Result<HashMap<String, CatalogEntry>> {
        self.catalog_under(branch, "")
    }

    /// The entries of `branch` whose path is under the folder `dir`
    /// (relative, no trailing `/`; "" is the root): a range of the primary
    /// key, so the watcher's one-file runs do not load a large catalog.
    pub fn catalog_under(&self, branch: &str, dir: &str) -> Result<HashMap<String, CatalogEntry>> {
        let (from, to) = path_range(dir);
        let mut stmt = self.conn.prepare_cached(
            "SELECT c.path, c.file_id, c.mtime_ns, c.size, f.content_hash
             FROM catalog c JOIN files f ON f.id = c.file_id
             WHERE c.branch = ?1 AND c.path >= ?2 AND c.path < ?3",
        )?;
        let rows = stmt.query_map(params![branch, from, to], |r| {
            Ok((
                r.get::<_, String>(0)?,
                CatalogEntry {
                    file_id: r.get(1)?,
                    mtime_ns: r.get(2)?,
                    size: r.get(3)?,
                    content_hash: r.get(4)?,
                },
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The files of `branch` read and left out for their content, by path
    /// (rows of a reason this ken does not know are left out: read again).
    pub fn skipped(&self, branch: &str) -> Result<HashMap<String, SkippedEntry>> {
        self.skipped_under(branch, "")
    }

    /// The skipped files of `branch` under the folder `dir` (as [`Self::catalog_under`]).
    pub fn skipped_under(&self, branch: &str, dir: &str) -> Result<HashMap<String, SkippedEntry>> {
        let (from, to) = path_range(dir);
        let mut stmt = self.conn.prepare_cached(
            "SELECT path, mtime_ns, size, reason FROM skipped_files
             WHERE branch = ?1 AND path >= ?2 AND path < ?3",
        )?;
        let rows = stmt.query_map(params![branch, from, to], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
                r.get::<_, String>(3)?,
            ))
        })?;
        let mut skipped = HashMap::new();
        for row in rows {
            let (path, mtime_ns, size, reason) = row?;
            if let Some(reason) = parse_skip_reason(&reason) {
                skipped.insert(path, SkippedEntry { mtime_ns, size, reason });
            }
        }
        Ok(skipped)
    }
}

impl Store {
    /// Whether the index holds any file version.
    pub fn has_files(&self) -> Result<bool> {
        Ok(count(&self.conn, "SELECT count(*) FROM files", [])? > 0)
    }

    /// The files of `branch`.
    pub fn branch_file_count(&self, branch: &str) -> Result<u64> {
        count(&self.conn, "SELECT count(*) FROM catalog WHERE branch = ?1", [branch])
    }

    /// The chunks of `branch`.
    pub fn branch_chunk_count(&self, branch: &str) -> Result<u64> {
        self.branch_chunk_count_in(&self.outside_of(branch)?)
    }

    /// [`Self::branch_chunk_count`] of the branch `outside` was read for.
    pub fn branch_chunk_count_in(&self, outside: &BranchOutside) -> Result<u64> {
        if let Some(files) = &outside.files {
            let mut chunks_of = self
                .conn
                .prepare_cached("SELECT count(*) FROM chunks WHERE file_id = ?1")?;
            let mut outside_chunks = 0;
            for file in files {
                outside_chunks += chunks_of.query_row([file], |r| r.get::<_, i64>(0))?.max(0) as u64;
            }
            let all = count(&self.conn, "SELECT count(*) FROM chunks", [])?;
            return Ok(all.saturating_sub(outside_chunks));
        }
        count(
            &self.conn,
            "SELECT count(*) FROM chunks c JOIN catalog k ON k.file_id = c.file_id WHERE k.branch = ?1",
            [&outside.branch],
        )
    }

    /// The files of `branch` per language.
    pub fn branch_languages(&self, branch: &str) -> Result<BTreeMap<String, u64>> {
        self.branch_languages_in(&self.outside_of(branch)?)
    }

    /// [`Self::branch_languages`] of the branch `outside` was read for.
    pub fn branch_languages_in(&self, outside: &BranchOutside) -> Result<BTreeMap<String, u64>> {
        if let Some(files) = &outside.files {
            let mut languages = counts_by(&self.conn, "SELECT language, count(*) FROM files GROUP BY language", [])?;
            let mut language_of = self.conn.prepare_cached("SELECT language FROM files WHERE id = ?1")?;
            for file in files {
                let language: String = language_of.query_row([file], |r| r.get(0))?;
                if let Some(n) = languages.get_mut(&language) {
                    *n = n.saturating_sub(1);
                }
            }
            languages.retain(|_, n| *n > 0);
            return Ok(languages);
        }
        counts_by(
            &self.conn,
            "SELECT f.language, count(*) FROM catalog k JOIN files f ON f.id = k.file_id
             WHERE k.branch = ?1 GROUP BY f.language",
            [&outside.branch],
        )
    }

    /// The distinct chunk contents of `branch` (the whole index's less those
    /// only outside it, see [`Self::files_outside`]; at 800k chunks the join
    /// over the branch's chunks took seconds, this ~0.1 s).
    pub fn branch_distinct_contents(&self, branch: &str) -> Result<u64> {
        self.branch_distinct_contents_in(&self.outside_of(branch)?)
    }

    /// [`Self::branch_distinct_contents`] of the branch `outside` was read for.
    pub fn branch_distinct_contents_in(&self, outside: &BranchOutside) -> Result<u64> {
        match self.contents_outside(outside)? {
            Some(contents) => {
                let all = count(&self.conn, "SELECT count(DISTINCT content_hash) FROM chunks", [])?;
                Ok(all.saturating_sub(contents.len() as u64))
            }
            None => count(
                &self.conn,
                "SELECT count(DISTINCT c.content_hash) FROM chunks c JOIN catalog k ON k.file_id = c.file_id WHERE k.branch = ?1",
                [&outside.branch],
            ),
        }
    }

    /// What lies outside `branch`'s catalog, read once for several totals of it.
    pub fn outside_of(&self, branch: &str) -> Result<BranchOutside> {
        Ok(BranchOutside {
            branch: branch.to_string(),
            files: self.files_outside(branch)?,
            contents: std::cell::OnceCell::new(),
        })
    }

    /// The file versions outside `branch`'s catalog (other branches'
    /// versions, or versions no catalog holds any more); None when there are
    /// more than [`FEW_VERSIONS_OUTSIDE`]. A branch's totals are the whole
    /// index's less theirs: a scan of a small table or a covering index
    /// instead of a join over every chunk of the branch.
    fn files_outside(&self, branch: &str) -> Result<Option<Vec<i64>>> {
        // A branch's catalog has one version per path: when it counts as
        // many as the index holds, none is outside (one branch, the common case).
        let versions = count(&self.conn, "SELECT count(*) FROM files", [])?;
        if versions == self.branch_file_count(branch)? {
            return Ok(Some(Vec::new()));
        }
        let mut outside_files = self.conn.prepare_cached(
            "SELECT id FROM files WHERE id NOT IN (SELECT file_id FROM catalog WHERE branch = ?1) LIMIT ?2",
        )?;
        let files: Vec<i64> = outside_files
            .query_map(params![branch, FEW_VERSIONS_OUTSIDE as i64 + 1], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok((files.len() <= FEW_VERSIONS_OUTSIDE).then_some(files))
    }

    /// The contents that only the versions outside the branch hold (see
    /// [`Self::files_outside`]); None when those are many. Read once per `outside`.
    pub(super) fn contents_outside<'o>(&self, outside: &'o BranchOutside) -> Result<Option<&'o [i64]>> {
        if let Some(contents) = outside.contents.get() {
            return Ok(contents.as_deref());
        }
        let contents = self.read_contents_outside(outside)?;
        Ok(outside.contents.get_or_init(|| contents).as_deref())
    }

    fn read_contents_outside(&self, outside: &BranchOutside) -> Result<Option<Vec<i64>>> {
        let (Some(files), branch) = (&outside.files, &outside.branch) else {
            return Ok(None);
        };
        let mut contents_of = self
            .conn
            .prepare_cached("SELECT DISTINCT content_hash FROM chunks WHERE file_id = ?1")?;
        let mut in_branch = self.conn.prepare_cached(
            "SELECT 1 FROM chunks c JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?2
             WHERE c.content_hash = ?1 LIMIT 1",
        )?;
        let mut held_outside = std::collections::BTreeSet::new();
        for file in files {
            for hash in contents_of.query_map([file], |r| r.get::<_, i64>(0))? {
                held_outside.insert(hash?);
            }
        }
        let mut only_outside = Vec::new();
        for hash in held_outside {
            if !in_branch.exists(params![hash, branch])? {
                only_outside.push(hash);
            }
        }
        Ok(Some(only_outside))
    }

    /// The files of each branch the index holds.
    pub fn files_per_branch(&self) -> Result<BTreeMap<String, u64>> {
        counts_by(&self.conn, "SELECT branch, count(*) FROM catalog GROUP BY branch", [])
    }

    /// The branches the index holds a catalog of.
    pub fn branches(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare("SELECT DISTINCT branch FROM catalog")?;
        let keys = stmt.query_map([], |r| r.get(0))?;
        Ok(keys.collect::<rusqlite::Result<_>>()?)
    }

    /// The content hashes of the stored versions of `path` (any branch).
    pub fn versions_of(&self, path: &str) -> Result<Vec<i64>> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT content_hash FROM files WHERE path = ?1")?;
        let hashes = stmt.query_map([path], |r| r.get(0))?;
        Ok(hashes.collect::<rusqlite::Result<_>>()?)
    }

    /// The content hashes of every stored file version (any branch), by path.
    pub fn all_versions(&self) -> Result<HashMap<String, Vec<i64>>> {
        let mut map: HashMap<String, Vec<i64>> = HashMap::new();
        let mut stmt = self.conn.prepare("SELECT path, content_hash FROM files")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (path, hash) = row?;
            map.entry(path).or_default().push(hash);
        }
        Ok(map)
    }

    /// The content hash of the file version `file_id`, if it is stored.
    pub fn file_content_hash(&self, file_id: i64) -> Result<Option<i64>> {
        Ok(self
            .conn
            .prepare_cached("SELECT content_hash FROM files WHERE id = ?1")?
            .query_row([file_id], |r| r.get(0))
            .optional()?)
    }

    /// The chunks of the file version `file_id`: (start line, text).
    pub fn chunk_texts_of_file(&self, file_id: i64) -> Result<Vec<(usize, String)>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT c.start_line, t.text FROM chunks c JOIN contents t ON t.hash = c.content_hash WHERE c.file_id = ?1",
        )?;
        let rows = stmt.query_map([file_id], |r| {
            Ok((r.get::<_, i64>(0)? as usize, r.get::<_, String>(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The labels of up to 100 named chunks (of more than 5 characters),
    /// picked evenly across the index (the same on every run).
    pub fn sampled_chunk_symbols(&self) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT symbol FROM chunks WHERE symbol IS NOT NULL AND length(symbol) > 5
             AND id % 97 = 0 ORDER BY id LIMIT 100",
        )?;
        let labels = stmt.query_map([], |r| r.get::<_, String>(0))?;
        Ok(labels.collect::<rusqlite::Result<_>>()?)
    }

    /// Up to `limit` distinct chunk contents in hash order (a fixed, spread
    /// sample).
    pub fn sampled_chunk_texts(&self, limit: usize) -> Result<Vec<SampledChunk>> {
        let mut stmt = self.conn.prepare(
            "SELECT c.context, t.text, c.symbol FROM chunks c JOIN contents t ON t.hash = c.content_hash
             GROUP BY t.hash ORDER BY t.hash LIMIT ?1",
        )?;
        let rows = stmt.query_map([limit as i64], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_reasons_have_stable_keys() {
        assert_eq!(skip_reason_key(SkipReason::Generated), "generated");
        assert_eq!(skip_reason_key(SkipReason::InvalidUtf8), "invalid_utf8");
        for reason in [
            SkipReason::Symlink,
            SkipReason::TooLarge,
            SkipReason::NotSource,
            SkipReason::Binary,
            SkipReason::InvalidUtf8,
            SkipReason::Minified,
            SkipReason::Generated,
            SkipReason::Unreadable,
        ] {
            assert_eq!(parse_skip_reason(&skip_reason_key(reason)), Some(reason));
        }
        assert_eq!(parse_skip_reason("from_a_later_ken"), None);
    }
}
