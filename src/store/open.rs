//! Opening the index: for writing (creating it, or rebuilding one that is
//! damaged or of a schema no upgrade leads from, under the writer lock), for
//! reading (upgrading an older schema first, reading a read-only folder as
//! it is), and replacing it with an empty one.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rusqlite::{Connection, OpenFlags};

use super::faults::{
    damage_confirmed, explain, fault_of, first_line, install_damage_hint, probe, remember_db, DamageHandled, Fault,
};
use super::lock::{lock_dir, WRITE_LOCK_TIMEOUT};
use super::rebuild::{create_index, Salvaged};
use super::schema::{can_migrate, migrate, migrate_db, schema_version, SCHEMA_VERSION};
use super::{Store, DB_FILE};

impl Store {
    /// Opens the index for writing, creating it if needed. An index of a
    /// schema version no upgrade leads from, or one SQLite finds damaged (and
    /// a check confirms it), is rebuilt, keeping every vector that can be
    /// read, and said so on stderr. Anything else that stops the index from
    /// opening (no space left, a read-only folder, a lock held by another
    /// process, another I/O error) is an error saying what it is, and
    /// nothing is deleted.
    pub fn open_for_write(dir: &Path) -> Result<Store> {
        Self::open_for_write_locked(dir, false)
    }

    /// [`Store::open_for_write`]; creating or rebuilding the database happens
    /// under the writer lock (taken here unless `locked`: the caller holds it),
    /// so two processes starting on a new index never race to create it.
    fn open_for_write_locked(dir: &Path, locked: bool) -> Result<Store> {
        install_damage_hint();
        fs::create_dir_all(dir).map_err(|e| {
            explain(
                dir,
                anyhow::Error::new(e).context(format!("cannot create the index directory {}", dir.display())),
            )
        })?;
        // Keeps the index out of `git status` even where .git/info/exclude is not written.
        let ignore_file = dir.join(".gitignore");
        if !ignore_file.exists() {
            let _ = fs::write(&ignore_file, "*\n");
        }
        let db = dir.join(DB_FILE);
        if !locked {
            if let Existing::Ready(conn) = Self::open_existing_db(&db, false)? {
                return Store::at(conn, dir);
            }
        }
        let _lock = if locked {
            None
        } else {
            Some(lock_dir(dir, WRITE_LOCK_TIMEOUT)?)
        };
        // Checked again under the lock: another process may have just created it.
        match Self::open_existing_db(&db, false)? {
            Existing::Ready(conn) => return Store::at(conn, dir),
            Existing::Missing => {
                create_index(dir, None)?;
            }
            Existing::Incompatible(why) => {
                let kept = create_index(dir, Some(&db))?;
                eprintln!(
                    "ken: rebuilding the index at {}: {why}; {}",
                    dir.display(),
                    kept.describe()
                );
            }
            Existing::Damaged(e) => {
                // Only damage a check confirms is rebuilt: an error SQLite
                // reports for another reason leaves the index as it is.
                if !damage_confirmed(&db, &e) {
                    return Err(explain(dir, e));
                }
                let kept = create_index(dir, Some(&db))?;
                eprintln!(
                    "ken: rebuilding the index at {}: {} is damaged ({}); {}",
                    dir.display(),
                    db.display(),
                    first_line(&e),
                    kept.describe()
                );
            }
        }
        let conn = Connection::open(&db).with_context(|| format!("cannot open {}", db.display()))?;
        configure(&conn).map_err(|e| explain(dir, e))?;
        Store::at(conn, dir)
    }

    pub(super) fn at(conn: Connection, dir: &Path) -> Result<Store> {
        plan_once(&conn)?;
        let path_filter = super::lookup::register_path_matches(&conn)?;
        Ok(Store {
            conn,
            dir: dir.to_path_buf(),
            bm25: Default::default(),
            path_filter,
        })
    }

    /// Replaces the index with an empty one (a rebuild from scratch, asked
    /// for: its vectors go too). Callers hold the writer lock.
    pub fn recreate(self) -> Result<Store> {
        let dir = self.dir.clone();
        drop(self.conn);
        create_index(&dir, None)?;
        Store::open_for_write_locked(&dir, true)
    }

    /// Replaces the index with an empty one that keeps its vectors (keyed by
    /// content and model, they are the most expensive part to make again)
    /// and the settings that come with them: for a rebuild ken decides on
    /// (the chunking rules changed). Callers hold the writer lock.
    pub fn rebuild_keeping_vectors(self) -> Result<(Store, Salvaged)> {
        let dir = self.dir.clone();
        drop(self.conn);
        let kept = create_index(&dir, Some(&dir.join(DB_FILE)))?;
        Ok((Store::open_for_write_locked(&dir, true)?, kept))
    }

    /// Opens an existing index for reading; a clear error if there is none.
    /// An index of an older schema version that `schema::MIGRATIONS` can upgrade is
    /// upgraded first (a short write); a clear error if it cannot be written.
    /// In a read-only folder the index is read as it is on disk.
    pub fn open_for_read(dir: &Path) -> Result<Store> {
        install_damage_hint();
        let db = dir.join(DB_FILE);
        let opened = Self::open_existing_db(&db, true)
            .with_context(|| format!("the index at {} cannot be used", dir.display()))?;
        match opened {
            Existing::Ready(conn) => Store::at(conn, dir),
            Existing::Missing => bail!("no index at {}; run `ken index` in the repository first", dir.display()),
            Existing::Incompatible(why) => bail!(
                "the index at {} cannot be used: {why}; run `ken index` to rebuild it (its vectors are kept)",
                dir.display()
            ),
            Existing::Damaged(e) => Err(explain(dir, e)),
        }
    }

    /// Opens the database `db` if it exists and has this schema version,
    /// upgrading an older version in place when `schema::MIGRATIONS` lead from it.
    /// `Err`: it could not be opened or upgraded for a reason that rebuilding
    /// would not cure (no space, read-only, locked, an I/O error), said as such.
    fn open_existing_db(db: &Path, read_only: bool) -> Result<Existing> {
        if !db.exists() {
            return Ok(Existing::Missing);
        }
        // What goes wrong here is said by the error itself.
        let _handled = DamageHandled::begin();
        let dir = db.parent().unwrap_or(Path::new("."));
        let (conn, version) = match connect(db, read_only) {
            Ok(opened) => opened,
            Err(e) => match fault_of(&e) {
                Some(Fault::Damaged | Fault::NotADatabase) => return Ok(Existing::Damaged(e)),
                // A reader of an index in a read-only folder reads the file as it is.
                _ if read_only && probe(dir, db) == Some(Fault::ReadOnlyFolder) && !has_pending_wal(db) => {
                    match connect_immutable(db) {
                        Ok(opened) => opened,
                        Err(_) => return Err(explain(dir, e)),
                    }
                }
                _ => return Err(explain(dir, e)),
            },
        };
        remember_db(db);
        match version {
            Some(SCHEMA_VERSION) => Ok(Existing::Ready(conn)),
            Some(v) if can_migrate(v) => {
                if read_only {
                    // Upgraded through a short read-write connection, then opened again.
                    drop(conn);
                    migrate_db(db).map_err(|e| explain(dir, e))?;
                    Self::open_existing_db(db, true)
                } else {
                    let mut conn = conn;
                    migrate(&mut conn).map_err(|e| {
                        explain(
                            dir,
                            e.context(format!(
                                "cannot upgrade the index at {} from schema version {v} to {SCHEMA_VERSION}",
                                db.display()
                            )),
                        )
                    })?;
                    Ok(Existing::Ready(conn))
                }
            }
            Some(v) => Ok(Existing::Incompatible(format!(
                "it has schema version {v}, this ken uses {SCHEMA_VERSION}"
            ))),
            None => Ok(Existing::Incompatible("it has no schema version".to_string())),
        }
    }
}

/// What [`Store::open_existing_db`] found.
enum Existing {
    /// No database yet.
    Missing,
    /// Open, of this schema version.
    Ready(Connection),
    /// Of a schema version no upgrade leads from (why): a writer rebuilds it.
    Incompatible(String),
    /// SQLite found it damaged or not a database: a writer rebuilds it once
    /// a check confirms it ([`damage_confirmed`]).
    Damaged(anyhow::Error),
}

/// Opens `db` (configured for writing unless `read_only`) and reads its
/// schema version: the first read, where a damaged or unreadable file shows.
pub(super) fn connect(db: &Path, read_only: bool) -> Result<(Connection, Option<i64>)> {
    let flags = if read_only {
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX
    } else {
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX
    };
    let conn = Connection::open_with_flags(db, flags).with_context(|| format!("cannot open {}", db.display()))?;
    if read_only {
        configure_reads(&conn)?;
    } else {
        configure(&conn)?;
    }
    let version = schema_version(&conn)?;
    Ok((conn, version))
}

/// Opens `db` read-only as an immutable file: no lock, no `-shm`, which a
/// read-only folder cannot hold. Only for a database with no pending WAL
/// ([`has_pending_wal`]): its file is then the whole index.
pub(super) fn connect_immutable(db: &Path) -> Result<(Connection, Option<i64>)> {
    let mut uri = String::from("file:");
    for byte in db.as_os_str().as_encoded_bytes() {
        match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => uri.push(*byte as char),
            _ => uri.push_str(&format!("%{byte:02X}")),
        }
    }
    uri.push_str("?immutable=1");
    let conn = Connection::open_with_flags(
        &uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
    )
    .with_context(|| format!("cannot open {}", db.display()))?;
    let version = schema_version(&conn)?;
    tracing::info!("{} is in a read-only folder: read as it is on disk", db.display());
    Ok((conn, version))
}

/// Whether `db` has a WAL with transactions not yet copied into it.
pub(super) fn has_pending_wal(db: &Path) -> bool {
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    fs::metadata(PathBuf::from(wal)).is_ok_and(|m| m.len() > 0)
}
/// Plans each statement once, whatever its parameters' values. Otherwise a
/// `col = ?` term marks its parameter as one that may change the plan, and
/// rusqlite clears a cached statement's bindings when it goes back to the
/// cache, which expires it: every `prepare_cached` statement was compiled
/// again on each use (a third of a hybrid search's time). ken keeps no
/// `sqlite_stat4`, so no plan depended on those values.
pub(crate) fn plan_once(conn: &Connection) -> Result<()> {
    conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .context("configuring the query planner")?;
    Ok(())
}

/// Pages are read through a memory map of up to this many bytes (SQLite's
/// own ceiling) rather than by a `read` call and a copy each: a search reads
/// a few hundred rows at random, and those calls were a third of their cost.
/// The pages read count in the process's RSS, as the system's file cache
/// that they are (shared, and dropped under memory pressure).
const MMAP_BYTES: u64 = 0x7fff_0000;

pub(super) fn configure(conn: &Connection) -> Result<()> {
    configure_reads(conn)?;
    conn.execute_batch(
        "PRAGMA journal_mode = WAL;
         PRAGMA synchronous = NORMAL;
         PRAGMA temp_store = MEMORY;
         PRAGMA cache_size = -65536;",
    )
    .context("configuring the index database")?;
    Ok(())
}

/// What a connection that only reads sets too (none of it writes the file;
/// a reader keeps SQLite's small page cache, the map being its cache).
fn configure_reads(conn: &Connection) -> Result<()> {
    conn.busy_timeout(Duration::from_secs(10))?;
    conn.execute_batch(&format!("PRAGMA mmap_size = {MMAP_BYTES};"))
        .context("configuring the index database")?;
    Ok(())
}

pub(super) fn remove_db_files(db: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = PathBuf::from(p);
        if p.exists() {
            fs::remove_file(&p).with_context(|| format!("cannot remove {}", p.display()))?;
        }
    }
    Ok(())
}

/// An index larger than this is not mapped in ([`populate_maps`]): from a
/// cold disk, that would read it all at once.
const POPULATE_MAX_BYTES: u64 = 1 << 30;

/// This process's memory maps of the index in `dir` (each connection that
/// has read maps the file once), as address ranges; none for an index over
/// 1 GiB, or where the system does not say.
pub fn index_maps(dir: &Path) -> Vec<std::ops::Range<usize>> {
    let db = dir.join(super::DB_FILE);
    let (Ok(db), Ok(meta)) = (fs::canonicalize(&db), fs::metadata(&db)) else {
        return Vec::new();
    };
    if meta.len() > POPULATE_MAX_BYTES {
        return Vec::new();
    }
    let Ok(maps) = fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    maps.lines()
        .filter_map(|line| {
            // `start-end perms offset dev inode path`
            let mut fields = line.split_whitespace();
            let range = fields.next()?;
            (Path::new(fields.nth(4)?) == db).then_some(())?;
            let (start, end) = range.split_once('-')?;
            Some(usize::from_str_radix(start, 16).ok()?..usize::from_str_radix(end, 16).ok()?)
        })
        .collect()
}

/// Maps in every page of `maps` ([`index_maps`]) with `MADV_POPULATE_READ`
/// (Linux 5.14 and later): a long-lived reader's searches then take no page
/// fault on a page they touch first (each costs a first question about 2 ms
/// at 100k chunks). The pages are the file's shared page cache; each map
/// counts them in the RSS. Returns the bytes mapped in.
pub fn populate_maps(maps: &[std::ops::Range<usize>]) -> usize {
    maps.iter()
        .filter(|m| populate(m.start, m.len()))
        .map(|m| m.len())
        .sum()
}

#[cfg(target_os = "linux")]
fn populate(start: usize, len: usize) -> bool {
    // SAFETY: the range is one of this process's mappings as the kernel
    // listed it; populating reads the pages and changes nothing in them (an
    // unmapped range fails with ENOMEM).
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_READ) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn populate(_start: usize, _len: usize) -> bool {
    false
}
