//! Building an index anew ([`create_index`]): an empty database made under
//! another name and renamed into place, with what can be read of the one it
//! replaces ([`Salvaged`]): its vectors (past damaged pages, down to the
//! leaf pages of the file itself), their settings and the query adapter.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension, Transaction};

use super::faults::{explain, DamageHandled};
use super::meta::{meta, meta_parsed, set_meta, set_meta_named, MetaKey, QUERY_ADAPTER_PREFIX};
use super::open::remove_db_files;
use super::schema::create_tables;
use super::DB_FILE;

/// What a rebuild kept of the database it replaced.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Salvaged {
    /// Whether the old database could be read at all.
    pub readable: bool,
    /// Vectors copied into the new database.
    pub vectors: u64,
    /// Damaged stretches of the vectors met, and vectors left out as invalid.
    pub lost: u64,
}

impl Salvaged {
    /// "kept its 120 vectors", for messages.
    pub fn describe(&self) -> String {
        match (self.readable, self.lost) {
            (false, _) => "nothing in it could be read (its vectors will be computed again)".to_string(),
            (true, 0) => format!("kept its {} vectors", self.vectors),
            (true, _) => format!(
                "kept {} vectors; parts of it could not be read (vectors lost there will be computed again)",
                self.vectors
            ),
        }
    }
}

/// Builds an empty index in `dir` (under another name, in one transaction,
/// then renamed into place: a process killed meanwhile leaves no half-made
/// index), with what can be read of the database `salvage_from`: its vectors,
/// their settings and the query adapter. Nothing of an old database is
/// deleted unless the new one is complete. Callers hold the writer lock.
pub(super) fn create_index(dir: &Path, salvage_from: Option<&Path>) -> Result<Salvaged> {
    let _handled = DamageHandled::begin();
    let db = dir.join(DB_FILE);
    let draft = dir.join(format!("{DB_FILE}.creating"));
    remove_db_files(&draft)?;
    let built = (|| -> Result<Salvaged> {
        let mut conn = Connection::open(&draft).with_context(|| format!("cannot create {}", draft.display()))?;
        let tx = conn.transaction()?;
        create_tables(&tx)?;
        let salvaged = match salvage_from.filter(|old| old.exists()) {
            Some(old) => salvage(old, &tx)?,
            None => Salvaged {
                readable: true,
                ..Salvaged::default()
            },
        };
        tx.commit().context("writing the new index")?;
        Ok(salvaged)
    })();
    let salvaged = match built {
        Ok(salvaged) => salvaged,
        Err(e) => {
            let _ = remove_db_files(&draft);
            return Err(explain(dir, e));
        }
    };
    // A WAL left without its database must not be replayed into the new one;
    // the rename then replaces the old database in one step.
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if p.exists() {
            fs::remove_file(&p).map_err(|e| {
                explain(
                    dir,
                    anyhow::Error::new(e).context(format!("cannot remove {}", p.display())),
                )
            })?;
        }
    }
    fs::rename(&draft, &db).map_err(|e| {
        explain(
            dir,
            anyhow::Error::new(e).context(format!("cannot create {}", db.display())),
        )
    })?;
    Ok(salvaged)
}

/// Copies what can be read of the database `old` into the new index `tx`:
/// the vectors (row by row, skipping damaged pages), the settings in
/// [`MetaKey::kept_by_rebuild`] and the query adapter. Errors reading `old` only leave
/// things out; errors writing `tx` (no space left) are returned.
fn salvage(old: &Path, tx: &Transaction) -> Result<Salvaged> {
    let mut salvaged = Salvaged::default();
    let Ok(src) = Connection::open_with_flags(old, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
    else {
        return Ok(salvaged);
    };
    let _ = src.busy_timeout(Duration::from_secs(10));
    let kept_meta = kept_meta(&src);
    let schema_readable = src
        .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get::<_, i64>(0))
        .is_ok();
    let setting = |key: MetaKey| kept_meta.iter().find(|(k, _)| *k == key.name()).map(|(_, v)| v);
    let check = VectorCheck {
        dimensions: setting(MetaKey::EmbeddingDimensions).and_then(|v| v.parse().ok()),
        model: setting(MetaKey::EmbeddingModel).cloned(),
    };
    let mut insert = tx.prepare(
        "INSERT INTO embeddings (id, content_hash, model, vector) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING",
    )?;
    let mut max_id = 0i64;
    let mut damaged = !schema_readable;
    if schema_readable {
        damaged |= copy_readable_vectors(&src, &check, &mut insert, &mut salvaged, &mut max_id)?;
    }
    // Past damage, the rows under a damaged interior page (or a damaged
    // schema) are still in their leaf pages: read from the file itself.
    if damaged {
        let mut found = 0u64;
        for (id, hash, row_model, blob) in raw_vectors(old) {
            let plausible = !row_model.is_empty()
                && row_model.chars().all(|c| !c.is_control())
                && blob
                    .chunks_exact(4)
                    .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).abs() <= 1.5);
            if plausible && check.valid(&row_model, &blob) {
                let added = insert.execute(params![id, hash, row_model, blob])? as u64;
                salvaged.vectors += added;
                found += added;
                max_id = max_id.max(id);
            }
        }
        if found > 0 {
            tracing::info!("{found} vectors read from the leaf pages of {}", old.display());
        }
        salvaged.readable = schema_readable || salvaged.vectors > 0;
        if !salvaged.readable {
            return Ok(salvaged);
        }
    } else {
        salvaged.readable = true;
    }
    drop(insert);
    for (key, value) in &kept_meta {
        set_meta_named(tx, key, value)?;
    }
    let issued: i64 = meta_parsed(tx, MetaKey::EmbeddingIdsIssued)?.unwrap_or(0);
    set_meta(tx, MetaKey::EmbeddingIdsIssued, &issued.max(max_id).to_string())?;
    copy_query_adapter(&src, tx)?;
    Ok(salvaged)
}

/// The settings of the database `src` a rebuild keeps, each read on its own
/// (a damaged page loses only its keys): [`MetaKey::kept_by_rebuild`] and the query
/// adapter's.
fn kept_meta(src: &Connection) -> Vec<(String, String)> {
    let mut kept = Vec::new();
    for key in MetaKey::kept_by_rebuild_keys() {
        if let Ok(Some(value)) = meta(src, &key.name()) {
            kept.push((key.name().into_owned(), value));
        }
    }
    if let Ok(mut stmt) = src.prepare("SELECT key, value FROM meta WHERE key >= ?1 AND key < ?2") {
        let end = format!("{QUERY_ADAPTER_PREFIX}\u{10FFFF}");
        if let Ok(rows) = stmt.query_map([QUERY_ADAPTER_PREFIX, end.as_str()], |r| Ok((r.get(0)?, r.get(1)?))) {
            kept.extend(rows.map_while(|r| r.ok()));
        }
    }
    kept
}

/// What a salvaged vector must be, from the old index's settings.
struct VectorCheck {
    dimensions: Option<usize>,
    model: Option<String>,
}

impl VectorCheck {
    /// A vector of the index's model has its dimensions, a signature vector
    /// of the same embedder one or more such vectors; any other a whole
    /// number of f32s. None is NaN or infinite.
    fn valid(&self, row_model: &str, blob: &[u8]) -> bool {
        let embedder = |m: &str| m.rsplit_once('/').map_or(m.to_string(), |(base, _)| format!("{base}/"));
        let length_ok = match (self.dimensions.filter(|d| *d > 0), &self.model) {
            (Some(d), Some(m)) if row_model == m => blob.len() == d * 4,
            (Some(d), Some(m)) if row_model.starts_with(&embedder(m)) => {
                !blob.is_empty() && blob.len().is_multiple_of(d * 4)
            }
            _ => !blob.is_empty() && blob.len().is_multiple_of(4),
        };
        length_ok
            && blob
                .chunks_exact(4)
                .all(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]).is_finite())
    }
}

/// Copies the embedding rows of `src` that SQLite can read, in id order,
/// past damaged pages; `true` when damage was met.
fn copy_readable_vectors(
    src: &Connection,
    check: &VectorCheck,
    insert: &mut rusqlite::Statement,
    salvaged: &mut Salvaged,
    max_id: &mut i64,
) -> Result<bool> {
    const PAGE: usize = 512;
    let mut after = 0i64;
    let mut damaged = false;
    loop {
        let (rows, failed) = read_vectors(src, after, PAGE);
        let complete = rows.len() < PAGE;
        let progressed = !rows.is_empty();
        for (id, hash, row_model, blob) in rows {
            after = id;
            if check.valid(&row_model, &blob) {
                salvaged.vectors += insert.execute(params![id, hash, row_model, blob])? as u64;
                *max_id = (*max_id).max(id);
            } else {
                salvaged.lost += 1;
            }
        }
        if failed {
            salvaged.lost += 1;
            damaged = true;
            match next_readable_vector(src, after) {
                // Read on from the next row that can be found...
                Some(id) if progressed || id > after + 1 => after = id - 1,
                // ...unless it is the row that just failed (its overflow
                // pages are damaged): then past it.
                Some(id) => after = id,
                None => break,
            }
        } else if complete || after == i64::MAX {
            break;
        }
    }
    Ok(damaged)
}

/// Copies the query adapter of `src` into the new index `tx`, if it has one.
fn copy_query_adapter(src: &Connection, tx: &Transaction) -> Result<()> {
    let rows: Vec<(String, Vec<u8>)> = src
        .prepare("SELECT model, matrix FROM query_adapters")
        .and_then(|mut stmt| {
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .map(|rows| rows.map_while(|r| r.ok()).collect())
        })
        .unwrap_or_default();
    for (model, matrix) in rows {
        tx.execute(
            "INSERT OR IGNORE INTO query_adapters (model, matrix) VALUES (?1, ?2)",
            params![model, matrix],
        )?;
    }
    Ok(())
}

/// The embedding rows in the table leaf pages of the database file `db` and
/// its WAL, read without SQLite: for a file whose b-tree cannot lead to them
/// (a damaged interior page or schema). A row is a leaf cell whose record
/// has the shape of `embeddings` (the id, an integer, a text, a blob); the
/// caller judges the values. Pages of deleted rows may show them again
/// (their vectors are of no chunk and go with the next repair).
fn raw_vectors(db: &Path) -> Vec<VectorRow> {
    let Ok(file) = fs::read(db) else {
        return Vec::new();
    };
    if file.len() < 100 {
        return Vec::new();
    }
    let page_size = match u16::from_be_bytes([file[16], file[17]]) {
        1 => 65536,
        n if n >= 512 && n.is_power_of_two() => n as usize,
        // A damaged header: the size this ken writes.
        _ => 4096,
    };
    let usable = page_size - file[20] as usize;
    let mut pages: Vec<&[u8]> = file.chunks_exact(page_size).skip(1).collect();
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let wal = fs::read(PathBuf::from(wal)).unwrap_or_default();
    if wal.len() > 32 {
        pages.extend(wal[32..].chunks_exact(24 + page_size).map(|frame| &frame[24..]));
    }
    let page_of = |number: u32| -> Option<&[u8]> {
        let start = (number as usize).checked_sub(1)?.checked_mul(page_size)?;
        file.get(start..start + page_size)
    };
    let mut rows = Vec::new();
    for page in pages {
        leaf_rows(page, usable, &page_of, &mut rows);
    }
    rows
}

/// The embedding rows of one table leaf page (see [`raw_vectors`]).
fn leaf_rows<'f>(page: &[u8], usable: usize, page_of: &dyn Fn(u32) -> Option<&'f [u8]>, rows: &mut Vec<VectorRow>) {
    if page.first() != Some(&0x0d) || page.len() < 8 {
        return;
    }
    let cells = u16::from_be_bytes([page[3], page[4]]) as usize;
    for cell in 0..cells {
        let Some(pointer) = page.get(8 + 2 * cell..10 + 2 * cell) else {
            return;
        };
        let offset = u16::from_be_bytes([pointer[0], pointer[1]]) as usize;
        let Some(row) = leaf_cell(page, offset, usable, page_of) else {
            continue;
        };
        rows.push(row);
    }
}

/// One cell of a table leaf page, if its record is an embedding row.
fn leaf_cell<'f>(
    page: &[u8],
    offset: usize,
    usable: usize,
    page_of: &dyn Fn(u32) -> Option<&'f [u8]>,
) -> Option<VectorRow> {
    let (payload_size, n) = varint(page.get(offset..)?)?;
    let (rowid, m) = varint(page.get(offset + n..)?)?;
    let payload_size = usize::try_from(payload_size).ok()?;
    let start = offset + n + m;
    // How much of the payload is on the page (SQLite's rule for table leaves).
    let max_local = usable - 35;
    let local = if payload_size <= max_local {
        payload_size
    } else {
        let min_local = (usable - 12) * 32 / 255 - 23;
        let k = min_local + (payload_size - min_local) % (usable - 4);
        if k <= max_local {
            k
        } else {
            min_local
        }
    };
    let mut payload = page.get(start..start + local)?.to_vec();
    if local < payload_size {
        let mut next = u32::from_be_bytes(page.get(start + local..start + local + 4)?.try_into().ok()?);
        let mut hops = 0;
        while payload.len() < payload_size {
            hops += 1;
            if next == 0 || hops > 1 << 16 {
                return None;
            }
            let overflow = page_of(next)?;
            next = u32::from_be_bytes(overflow.get(..4)?.try_into().ok()?);
            let take = (payload_size - payload.len()).min(usable - 4);
            payload.extend_from_slice(overflow.get(4..4 + take)?);
        }
    }
    // The record: (id: NULL, the rowid's alias), content_hash, model, vector.
    let (header_size, mut at) = varint(&payload)?;
    let header_size = usize::try_from(header_size).ok()?;
    let mut types = Vec::new();
    while at < header_size {
        let (serial, n) = varint(payload.get(at..header_size)?)?;
        types.push(serial);
        at += n;
    }
    let [0, hash_type, text_type, blob_type] = types[..] else {
        return None;
    };
    let hash_len = match hash_type {
        1..=4 => hash_type as usize,
        5 => 6,
        6 => 8,
        8 | 9 => 0,
        _ => return None,
    };
    if text_type < 13 || text_type % 2 == 0 || blob_type < 12 || blob_type % 2 == 1 {
        return None;
    }
    let (text_len, blob_len) = (((text_type - 13) / 2) as usize, ((blob_type - 12) / 2) as usize);
    let body = payload.get(header_size..)?;
    let hash_bytes = body.get(..hash_len)?;
    let hash = match hash_type {
        8 => 0,
        9 => 1,
        _ => {
            // Big-endian two's complement of 1 to 8 bytes.
            let negative = hash_bytes.first().is_some_and(|b| b & 0x80 != 0);
            hash_bytes
                .iter()
                .fold(if negative { -1i64 } else { 0 }, |v, b| (v << 8) | *b as i64)
        }
    };
    let model = std::str::from_utf8(body.get(hash_len..hash_len + text_len)?)
        .ok()?
        .to_string();
    let vector = body.get(hash_len + text_len..hash_len + text_len + blob_len)?.to_vec();
    Some((rowid, hash, model, vector))
}

/// A SQLite varint at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut value: u64 = 0;
    for (i, byte) in bytes.iter().take(9).enumerate() {
        if i == 8 {
            return Some(((value << 8 | *byte as u64) as i64, 9));
        }
        value = value << 7 | (*byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return Some((value as i64, i + 1));
        }
    }
    None
}

/// An embedding row: id, content hash, model, vector.
type VectorRow = (i64, i64, String, Vec<u8>);

/// Up to `limit` embedding rows after id `after`, in id order, as stored
/// (any type: a damaged row is judged by the caller); `true` when a read
/// failed before the end.
fn read_vectors(src: &Connection, after: i64, limit: usize) -> (Vec<VectorRow>, bool) {
    use rusqlite::types::Value;
    let mut rows = Vec::new();
    let read = (|| -> rusqlite::Result<()> {
        let mut stmt = src.prepare_cached(
            "SELECT id, content_hash, model, vector FROM embeddings WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let mut cursor = stmt.query(params![after, limit as i64])?;
        while let Some(row) = cursor.next()? {
            let id: i64 = row.get(0)?;
            let hash = match row.get::<_, Value>(1)? {
                Value::Integer(h) => h,
                _ => 0,
            };
            let model = match row.get::<_, Value>(2)? {
                Value::Text(m) => m,
                _ => String::new(),
            };
            let blob = match row.get::<_, Value>(3)? {
                Value::Blob(b) => b,
                _ => Vec::new(),
            };
            rows.push((id, hash, model, blob));
        }
        Ok(())
    })();
    (rows, read.is_err())
}

/// The first embedding id after `after` that can be read again past a
/// damaged page: ids further and further on are tried until a read works,
/// then the first that works is searched between the last two tries.
/// `None`: no readable row follows.
fn next_readable_vector(src: &Connection, after: i64) -> Option<i64> {
    let first_from = |from: i64| -> Result<Option<i64>, ()> {
        src.query_row(
            "SELECT id FROM embeddings WHERE id >= ?1 ORDER BY id LIMIT 1",
            [from],
            |r| r.get(0),
        )
        .optional()
        .map_err(|_| ())
    };
    let (mut failed, mut gap) = (after, 1i64);
    loop {
        let from = after.checked_add(gap)?;
        match first_from(from) {
            Ok(None) => return None,
            Ok(Some(_)) => {
                // The first `from` in (failed, from] that reads.
                let mut works = from;
                while works - failed > 1 {
                    let mid = failed + (works - failed) / 2;
                    match first_from(mid) {
                        Ok(_) => works = mid,
                        Err(()) => failed = mid,
                    }
                }
                return first_from(works).ok().flatten();
            }
            Err(()) => {
                failed = from;
                gap = gap.checked_mul(2)?;
            }
        }
    }
}
