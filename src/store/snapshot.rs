//! The shared index file (`ken index --export` / `--import`): one branch's
//! catalog, everything it reaches and its vectors, copied from one SQLite
//! snapshot (`VACUUM INTO`, consistent while a watcher writes), stripped of
//! what belongs to one machine (the root's absolute path, the watcher, the
//! HNSW file's bookkeeping: that file is derived and rebuilt on import), and
//! compressed with zstd behind a header saying what made it, with a
//! checksum of the payload checked before anything is touched.
//!
//! Layout: [`MAGIC`], the header's length (u32, little-endian), the header
//! (JSON, [`SnapshotHeader`]), then the payload (the zstd-compressed database).

use std::fs::{self, File};
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use rusqlite::Connection;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use super::lock::{lock_dir, WRITE_LOCK_TIMEOUT};
use super::meta::{meta, set_meta, MetaKey};
use super::open::remove_db_files;
use super::schema::{schema_version, SCHEMA_VERSION};
use super::{count, Store, DB_FILE};

/// What every shared index file starts with.
const MAGIC: &[u8; 8] = b"KENINDEX";
/// The layout of the file (not of the database in it: that is the schema version).
pub const SNAPSHOT_FORMAT: u32 = 1;
/// A header is a few hundred bytes; more is not a header.
const MAX_HEADER: u32 = 1 << 20;
/// zstd's level: 3 (its default) compresses a 1M-line index's database at
/// about 100 MB/s on one core here; higher levels cost more than they save.
const ZSTD_LEVEL: i32 = 3;

/// What a shared index file says about itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SnapshotHeader {
    pub format: u32,
    /// The index's schema version ([`SCHEMA_VERSION`] of the ken that made it).
    pub schema: i64,
    /// The version of the ken that made it.
    pub ken: String,
    /// The embedder id of its vectors (`None`: made without vectors).
    pub embedder: Option<String>,
    pub dimensions: Option<usize>,
    /// The chunking rules' fingerprint (another one re-parses every file).
    pub chunking: Option<String>,
    /// The catalog it holds (the branch exported).
    pub branch: String,
    /// HEAD's commit when exported (`None` outside git).
    pub commit: Option<String>,
    /// Whether the working tree had uncommitted changes (then it holds them).
    pub dirty: bool,
    pub files: u64,
    pub chunks: u64,
    pub vectors: u64,
    pub created_at: String,
    /// Bytes of the database once decompressed.
    pub database_bytes: u64,
    /// Bytes of the compressed payload after the header.
    pub payload_bytes: u64,
    /// `xxh3-128:<hex>` of the payload.
    pub checksum: String,
}

/// What the exporting side knows of the tree the catalog was made from.
#[derive(Debug, Clone)]
pub struct ExportOf<'a> {
    pub branch: &'a str,
    pub commit: Option<&'a str>,
    pub dirty: bool,
}

/// Removes a temporary file when dropped (an export or import that fails
/// half-way leaves nothing behind).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = remove_db_files(&self.0);
    }
}

/// `dir/.name.suffix`: a temporary file beside `file`.
fn beside(file: &Path, suffix: &str) -> Result<PathBuf> {
    let name = file
        .file_name()
        .with_context(|| format!("{} is not a file name", file.display()))?;
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    Ok(dir.join(format!(".{}.{suffix}", name.to_string_lossy())))
}

impl Store {
    /// Writes the catalog of `of.branch` (and everything it reaches, its
    /// vectors too) to `file` as a shared index file. Reads one snapshot
    /// of the index, so a writer (a watcher) may go on meanwhile.
    pub fn export_snapshot(&self, of: &ExportOf, file: &Path) -> Result<SnapshotHeader> {
        anyhow::ensure!(
            count(
                &self.conn,
                "SELECT count(*) FROM catalog WHERE branch = ?1",
                [of.branch]
            )? > 0,
            "the index holds no files of {}; run `ken index` first",
            branch_name(of.branch)
        );
        let copy = TempFile(beside(file, "ken-db")?);
        remove_db_files(&copy.0)?;
        self.conn
            .execute("VACUUM INTO ?1", [copy.0.to_str().context("non-UTF-8 export path")?])
            .with_context(|| format!("cannot copy the index to {}", copy.0.display()))?;
        let mut header = {
            let copy = Store::at(Connection::open(&copy.0)?, &self.dir)?;
            keep_only(&copy, of)?;
            describe(&copy.conn, of)?
        };
        header.database_bytes = fs::metadata(&copy.0)?.len();
        let payload = compress(&copy.0)?;
        header.payload_bytes = payload.len() as u64;
        header.checksum = checksum_of(&payload);
        let draft = TempFile(beside(file, "ken-part")?);
        let mut out =
            BufWriter::new(File::create(&draft.0).with_context(|| format!("cannot write {}", file.display()))?);
        let json = serde_json::to_vec(&header)?;
        out.write_all(MAGIC)?;
        out.write_all(&(json.len() as u32).to_le_bytes())?;
        out.write_all(&json)?;
        out.write_all(&payload)?;
        out.into_inner()?.sync_all()?;
        fs::rename(&draft.0, file).with_context(|| format!("cannot write {}", file.display()))?;
        Ok(header)
    }
}

/// "branch main" or "the detached HEAD", for messages.
fn branch_name(key: &str) -> String {
    match key {
        "" => "this folder".to_string(),
        "@detached" => "the detached HEAD".to_string(),
        b => format!("branch {b}"),
    }
}

/// Leaves only `of.branch`'s catalog and what it reaches in `copy`,
/// and no setting that belongs to the machine it was made on.
fn keep_only(copy: &Store, of: &ExportOf) -> Result<()> {
    // Deleted rows' bytes are overwritten, not left in free space (the root's path is one).
    copy.conn.execute_batch("PRAGMA secure_delete = ON")?;
    let tx = copy.conn.unchecked_transaction()?;
    let dropped = tx.execute("DELETE FROM catalog WHERE branch != ?1", [of.branch])?;
    tx.execute("DELETE FROM skipped_files WHERE branch != ?1", [of.branch])?;
    // File versions no catalog holds any more, with their chunks and rows.
    tx.execute_batch(
        "CREATE TEMP TABLE gone AS SELECT id FROM files WHERE id NOT IN (SELECT file_id FROM catalog);
         DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE file_id IN (SELECT id FROM gone));
         DELETE FROM chunk_symbols WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id IN (SELECT id FROM gone));
         DELETE FROM chunks WHERE file_id IN (SELECT id FROM gone);
         DELETE FROM symbols WHERE file_id IN (SELECT id FROM gone);
         DELETE FROM refs WHERE file_id IN (SELECT id FROM gone);
         DELETE FROM files WHERE id IN (SELECT id FROM gone);
         DELETE FROM contents WHERE hash NOT IN (SELECT content_hash FROM chunks);
         DELETE FROM embeddings WHERE content_hash NOT IN (SELECT content_hash FROM chunks);
         DROP TABLE gone;",
    )?;
    // The root's absolute path (also in the last run's report), the watcher
    // and the HNSW file's bookkeeping belong to the exporting machine.
    for key in [MetaKey::Root, MetaKey::WatcherPid, MetaKey::LastIndexReport] {
        tx.execute("DELETE FROM meta WHERE key = ?1", [key.name()])?;
    }
    tx.execute(
        "DELETE FROM meta WHERE key LIKE ?1 OR key LIKE ?2",
        [MetaKey::VectorsMaxId("%").name(), MetaKey::VectorsRemoved("%").name()],
    )?;
    set_meta(&tx, MetaKey::IndexedBranch, of.branch)?;
    set_meta(&tx, MetaKey::HeadCommit, of.commit.unwrap_or(""))?;
    tx.commit()?;
    // The totals and the lexical index's statistics counted over what is left.
    if dropped > 0 {
        copy.store_chunk_count()?;
        copy.store_common_term_frequencies()?;
        copy.optimize_lexical()?;
        copy.conn.execute_batch("VACUUM")?;
    }
    Ok(())
}

/// The header of the copy `conn` (all but the payload's size and checksum).
fn describe(conn: &Connection, of: &ExportOf) -> Result<SnapshotHeader> {
    let embedder = meta(conn, &MetaKey::EmbeddingModel.name())?.filter(|m| !m.is_empty());
    Ok(SnapshotHeader {
        format: SNAPSHOT_FORMAT,
        schema: schema_version(conn)?.context("the index has no schema version")?,
        ken: env!("CARGO_PKG_VERSION").to_string(),
        dimensions: meta(conn, &MetaKey::EmbeddingDimensions.name())?.and_then(|d| d.parse().ok()),
        vectors: match &embedder {
            Some(model) => count(conn, "SELECT count(*) FROM embeddings WHERE model = ?1", [model])?,
            None => 0,
        },
        embedder,
        chunking: meta(conn, &MetaKey::Chunking.name())?,
        branch: of.branch.to_string(),
        commit: of.commit.map(str::to_string),
        dirty: of.dirty,
        files: count(conn, "SELECT count(*) FROM catalog", [])?,
        chunks: count(conn, "SELECT count(*) FROM chunks", [])?,
        created_at: super::now_rfc3339(),
        database_bytes: 0,
        payload_bytes: 0,
        checksum: String::new(),
    })
}

fn compress(db: &Path) -> Result<Vec<u8>> {
    let input = BufReader::new(File::open(db)?);
    zstd::stream::encode_all(input, ZSTD_LEVEL).context("compressing the index")
}

fn checksum_of(payload: &[u8]) -> String {
    let mut hasher = Xxh3::new();
    hasher.update(payload);
    checksum_text(&hasher)
}

/// The checksum as the header writes it.
fn checksum_text(hasher: &Xxh3) -> String {
    format!("xxh3-128:{:032x}", hasher.digest128())
}

/// Reads and checks the header of the shared index file `file`, then the
/// whole payload against its length and checksum. Touches nothing.
pub fn verify_snapshot(file: &Path) -> Result<SnapshotHeader> {
    let (header, payload_at) = read_header(file)?;
    let mut input = File::open(file)?;
    let size = input.metadata()?.len();
    let expected = payload_at + header.payload_bytes;
    if size < expected {
        bail!(
            "{} is truncated ({size} of {expected} bytes); copy it again",
            file.display()
        );
    }
    if size > expected {
        bail!(
            "{} has {} bytes more than its header says; it is damaged, copy it again",
            file.display(),
            size - expected
        );
    }
    input.seek(SeekFrom::Start(payload_at))?;
    let mut hasher = Xxh3::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = input.read(&mut buffer)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    let found = checksum_text(&hasher);
    if found != header.checksum {
        bail!(
            "{} is damaged: its checksum is {found}, its header says {}; copy it again",
            file.display(),
            header.checksum
        );
    }
    Ok(header)
}

/// The header of `file` and where its payload starts; a clear error when
/// it is not a shared index file of a format and schema this ken reads.
fn read_header(file: &Path) -> Result<(SnapshotHeader, u64)> {
    let not_ours = || format!("{} is not an index file made by `ken index --export`", file.display());
    let mut input = BufReader::new(File::open(file).with_context(|| format!("cannot read {}", file.display()))?);
    let mut start = [0u8; 12];
    input.read_exact(&mut start).with_context(not_ours)?;
    if &start[..8] != MAGIC {
        bail!(not_ours());
    }
    let length = u32::from_le_bytes([start[8], start[9], start[10], start[11]]);
    anyhow::ensure!(length <= MAX_HEADER, not_ours());
    let mut json = vec![0u8; length as usize];
    input
        .read_exact(&mut json)
        .with_context(|| format!("{} is truncated (in its header); copy it again", file.display()))?;
    let format: serde_json::Value = serde_json::from_slice(&json).with_context(not_ours)?;
    let version = format["format"].as_u64().unwrap_or(0);
    if version != SNAPSHOT_FORMAT as u64 {
        bail!(
            "{} is of format {version}, this ken reads format {SNAPSHOT_FORMAT}: use the ken that made it ({})",
            file.display(),
            format["ken"].as_str().unwrap_or("unknown version")
        );
    }
    let header: SnapshotHeader = serde_json::from_value(format).with_context(not_ours)?;
    if header.schema != SCHEMA_VERSION {
        bail!(
            "{} was made by ken {} with index schema version {}; this ken ({}) uses schema version {SCHEMA_VERSION}: \
             export it again with this ken, or run `ken index` to build the index here",
            file.display(),
            header.ken,
            header.schema,
            env!("CARGO_PKG_VERSION")
        );
    }
    Ok((header, 12 + u64::from(length)))
}

/// Makes the verified shared index file `file` the index in `dir`, its
/// catalog that of `branch` (this checkout's), every file's mtime unknown
/// (so the next `ken index` reads each file once and re-parses only those
/// whose content differs). An existing index is replaced only with
/// `replace`; the new database is complete before it takes the old one's
/// place, so a failure leaves the old index as it was.
pub fn install_snapshot(file: &Path, header: &SnapshotHeader, dir: &Path, branch: &str, replace: bool) -> Result<()> {
    if super::has_index(dir) && !replace {
        bail!(
            "an index already exists at {}; `ken index --import FILE --force` replaces it",
            dir.display()
        );
    }
    fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let ignore_file = dir.join(".gitignore");
    if !ignore_file.exists() {
        let _ = fs::write(&ignore_file, "*\n");
    }
    let draft = TempFile(dir.join(format!("{DB_FILE}.importing")));
    remove_db_files(&draft.0)?;
    let (_, payload_at) = read_header(file)?;
    let mut input = File::open(file)?;
    input.seek(SeekFrom::Start(payload_at))?;
    {
        let mut out = BufWriter::new(File::create(&draft.0)?);
        zstd::stream::copy_decode(input.take(header.payload_bytes), &mut out)
            .with_context(|| format!("{} is damaged (its payload does not decompress)", file.display()))?;
        out.into_inner()?.sync_all()?;
    }
    {
        let conn = Connection::open(&draft.0)?;
        let version = schema_version(&conn).with_context(|| format!("{} holds no index", file.display()))?;
        anyhow::ensure!(
            version == Some(header.schema),
            "{} holds an index of schema version {version:?}, its header says {}",
            file.display(),
            header.schema
        );
        adopt(&conn, branch)?;
    }
    let _lock = lock_dir(dir, WRITE_LOCK_TIMEOUT)?;
    let db = dir.join(DB_FILE);
    // The old database's WAL must not be replayed into the new one; the
    // rename then replaces the old database in one step (as a rebuild does).
    for suffix in ["-wal", "-shm", "-journal"] {
        let side = dir.join(format!("{DB_FILE}{suffix}"));
        if side.exists() {
            fs::remove_file(&side).with_context(|| format!("cannot remove {}", side.display()))?;
        }
    }
    // The old index's HNSW files do not hold these vectors: made again from them.
    for entry in fs::read_dir(dir)?.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("vectors-") && name.contains(".usearch") {
            fs::remove_file(entry.path())?;
        }
    }
    fs::rename(&draft.0, &db).with_context(|| format!("cannot create {}", db.display()))?;
    Ok(())
}

/// Makes the imported database this checkout's: its catalog `branch`'s,
/// with every mtime unknown (another clone's files have other mtimes; a
/// coincidence must not pass a changed file as unchanged).
fn adopt(conn: &Connection, branch: &str) -> Result<()> {
    let tx = conn.unchecked_transaction()?;
    tx.execute("UPDATE catalog SET branch = ?1, mtime_ns = 0", [branch])?;
    tx.execute("UPDATE skipped_files SET branch = ?1, mtime_ns = 0", [branch])?;
    set_meta(&tx, MetaKey::IndexedBranch, branch)?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> SnapshotHeader {
        SnapshotHeader {
            format: SNAPSHOT_FORMAT,
            schema: SCHEMA_VERSION,
            ken: "0".into(),
            embedder: None,
            dimensions: None,
            chunking: None,
            branch: "main".into(),
            commit: None,
            dirty: false,
            files: 0,
            chunks: 0,
            vectors: 0,
            created_at: String::new(),
            database_bytes: 0,
            payload_bytes: 3,
            checksum: checksum_of(b"abc"),
        }
    }

    fn write_file(path: &Path, header: &SnapshotHeader, payload: &[u8]) {
        let json = serde_json::to_vec(header).unwrap();
        let mut bytes = MAGIC.to_vec();
        bytes.extend((json.len() as u32).to_le_bytes());
        bytes.extend(json);
        bytes.extend(payload);
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn a_file_is_checked_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("index.ken");
        write_file(&file, &header(), b"abc");
        assert_eq!(verify_snapshot(&file).unwrap(), header());
        write_file(&file, &header(), b"abd");
        assert!(format!("{:#}", verify_snapshot(&file).unwrap_err()).contains("is damaged: its checksum"));
        write_file(&file, &header(), b"ab");
        assert!(format!("{:#}", verify_snapshot(&file).unwrap_err()).contains("is truncated (2"));
        let newer = SnapshotHeader {
            schema: SCHEMA_VERSION + 1,
            ..header()
        };
        write_file(&file, &newer, b"abc");
        let said = format!("{:#}", verify_snapshot(&file).unwrap_err());
        assert!(
            said.contains(&format!("schema version {}", SCHEMA_VERSION + 1)),
            "{said}"
        );
        assert!(
            said.contains(&format!("uses schema version {SCHEMA_VERSION}")),
            "{said}"
        );
        fs::write(&file, b"SQLite format 3\0 and more").unwrap();
        assert!(format!("{:#}", verify_snapshot(&file).unwrap_err()).contains("is not an index file"));
    }
}
