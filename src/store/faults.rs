//! What stops the index from being read or written (no space, a read-only
//! folder or file, a lock, damage), told from SQLite's and the OS's errors
//! and said plainly ([`explain`]); and the hint SQLite's own damage reports
//! print once ([`install_damage_hint`]).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use super::integrity::integrity_of;
use super::DB_FILE;

/// What stops the index database from being read or written, as far as
/// SQLite and the file system tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// No space left on the file system (or the quota is used up).
    NoSpace,
    /// The index folder cannot be written (a read-only mount, an immutable
    /// folder, no permission).
    ReadOnlyFolder,
    /// The database file cannot be written.
    ReadOnlyFile,
    /// Another process holds a lock on the database.
    Locked,
    /// SQLite found the database damaged.
    Damaged,
    /// The file is not a SQLite database.
    NotADatabase,
    /// Another error of the file system.
    Io,
}

/// Damage found by a check of the index ([`check_integrity`]), as an error.
#[derive(Debug)]
pub struct Damage(pub String);

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl std::error::Error for Damage {}

/// The fault behind `e`, if it is one of the database or of the file system
/// (read from SQLite's error code or the OS error number; [`Fault::Io`]
/// for an I/O error whose cause only [`probe`] can tell).
pub fn fault_of(e: &anyhow::Error) -> Option<Fault> {
    use rusqlite::ErrorCode;
    for cause in e.chain() {
        if cause.downcast_ref::<Damage>().is_some() {
            return Some(Fault::Damaged);
        }
        if let Some(code) = cause
            .downcast_ref::<rusqlite::Error>()
            .and_then(|e| e.sqlite_error_code())
        {
            return match code {
                ErrorCode::DiskFull => Some(Fault::NoSpace),
                ErrorCode::ReadOnly => Some(Fault::ReadOnlyFile),
                ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => Some(Fault::Locked),
                ErrorCode::DatabaseCorrupt => Some(Fault::Damaged),
                ErrorCode::NotADatabase => Some(Fault::NotADatabase),
                ErrorCode::SystemIoFailure
                | ErrorCode::CannotOpen
                | ErrorCode::PermissionDenied
                | ErrorCode::FileLockingProtocolFailed => Some(Fault::Io),
                _ => None,
            };
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            return match io.raw_os_error() {
                Some(libc::ENOSPC | libc::EDQUOT) => Some(Fault::NoSpace),
                Some(libc::EROFS) => Some(Fault::ReadOnlyFolder),
                Some(libc::EIO) => Some(Fault::Io),
                _ => None,
            };
        }
    }
    None
}

/// Finds out why writing in `dir` (and to its database `db`) fails: a
/// read-only mount or folder, a read-only file, no space left. `None` when
/// a write works.
pub fn probe(dir: &Path, db: &Path) -> Option<Fault> {
    use std::os::unix::fs::FileExt;
    let errno = |e: &std::io::Error| e.raw_os_error().unwrap_or(0);
    let read_only = |e: &std::io::Error| matches!(errno(e), libc::EROFS | libc::EPERM | libc::EACCES);
    let no_space = |e: &std::io::Error| matches!(errno(e), libc::ENOSPC | libc::EDQUOT);
    let mut available = u64::MAX;
    if let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) {
        // SAFETY: statvfs fills the struct it is given, from a valid C string.
        let mut vfs: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut vfs) } == 0 {
            if vfs.f_flag & libc::ST_RDONLY != 0 {
                return Some(Fault::ReadOnlyFolder);
            }
            available = (vfs.f_bavail as u64).saturating_mul(vfs.f_frsize as u64);
        }
    }
    // A new file written as SQLite writes its `-shm` (a byte at the end of each page).
    let test = dir.join(format!(".ken-write-test-{}", std::process::id()));
    match File::options().write(true).create_new(true).open(&test) {
        Err(e) if read_only(&e) => return Some(Fault::ReadOnlyFolder),
        Err(e) if no_space(&e) => return Some(Fault::NoSpace),
        Err(_) => {}
        Ok(file) => {
            let written = (0..8u64).try_for_each(|page| file.write_all_at(&[0], page * 4096 + 4095));
            let _ = fs::remove_file(&test);
            if let Err(e) = written {
                if no_space(&e) {
                    return Some(Fault::NoSpace);
                }
            }
        }
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut path = db.as_os_str().to_owned();
        path.push(suffix);
        if let Err(e) = File::options().write(true).open(PathBuf::from(path)) {
            if read_only(&e) {
                return Some(Fault::ReadOnlyFile);
            }
        }
    }
    // What is left on a nearly full file system may not be enough for a write.
    (available < 1 << 20).then_some(Fault::NoSpace)
}

/// `e` with what it means for the index in `dir` said first: no space left
/// on `dir`, a read-only folder or file, a lock, damage and what repairs it.
/// Other errors are returned as they are.
pub fn explain(dir: &Path, e: anyhow::Error) -> anyhow::Error {
    let db = dir.join(DB_FILE);
    let fault = match fault_of(&e) {
        None => return e,
        Some(Fault::Io | Fault::ReadOnlyFile | Fault::ReadOnlyFolder) => probe(dir, &db).or(fault_of(&e)),
        fault => fault,
    };
    // Said once: an error explained twice (an inner call, then its caller) is not said again.
    if e.downcast_ref::<Explained>().is_some() {
        return e;
    }
    let said = match fault {
        Some(Fault::NoSpace) => format!(
            "no space left on {}: the index there was not changed; free some space and run the command again",
            dir.display()
        ),
        Some(Fault::ReadOnlyFolder) => format!(
            "the index folder {} is read-only: the index there was not changed; make the folder writable, \
             or keep the index elsewhere with --index-dir",
            dir.display()
        ),
        Some(Fault::ReadOnlyFile) => format!(
            "the index database {} is read-only: the index was not changed; make the file writable",
            db.display()
        ),
        Some(Fault::Locked) => format!(
            "the index database {} is locked by another process: the index was not changed; try again when it is done",
            db.display()
        ),
        Some(Fault::Damaged) => format!(
            "the index database {} is damaged: `ken health --repair` rebuilds it from the files, keeping every \
             vector it can read (or delete {} and run `ken index`)",
            db.display(),
            dir.display()
        ),
        Some(Fault::NotADatabase) => format!(
            "{} is not an index database, nothing in it can be read: `ken index` or `ken health --repair` \
             builds a new one (or delete {} and run `ken index`)",
            db.display(),
            dir.display()
        ),
        Some(Fault::Io) | None => format!(
            "cannot read or write the index database {}: the index was not changed",
            db.display()
        ),
    };
    e.context(Explained(said))
}

/// What [`explain`] says of an error (a type of its own, so it is said once).
#[derive(Debug)]
struct Explained(String);

impl std::fmt::Display for Explained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Whether the damage SQLite reported (`e`, on opening `db`) is confirmed:
/// the file is not a database at all, or its integrity check fails.
pub(super) fn damage_confirmed(db: &Path, e: &anyhow::Error) -> bool {
    match fault_of(e) {
        Some(Fault::NotADatabase) => true,
        Some(Fault::Damaged) => match integrity_of(db, false) {
            Ok(problems) => !problems.is_empty(),
            Err(e) => matches!(fault_of(&e), Some(Fault::Damaged | Fault::NotADatabase)),
        },
        _ => false,
    }
}

/// The first line of an error's message chain.
pub(super) fn first_line(e: &anyhow::Error) -> String {
    let text = format!("{:#}", e.root_cause());
    text.lines().next().unwrap_or_default().to_string()
}
/// Processes that handle damage themselves (a check, a repair, a rebuild)
/// while one of these lives: SQLite's reports of damage then print no hint.
pub struct DamageHandled(());

static DAMAGE_HANDLED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl DamageHandled {
    pub fn begin() -> DamageHandled {
        DAMAGE_HANDLED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        DamageHandled(())
    }
}

impl Drop for DamageHandled {
    fn drop(&mut self) {
        DAMAGE_HANDLED.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The index databases this process opened, for the hint of [`install_damage_hint`].
static OPENED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

pub(super) fn remember_db(db: &Path) {
    if let Ok(mut opened) = OPENED.lock() {
        if !opened.iter().any(|p| p == db) {
            opened.push(db.to_path_buf());
        }
    }
}

/// Asks SQLite to report the damage it finds (its error log), so that a
/// command that meets a damaged page deep in a query (a search, a status)
/// says, once, which file it is and what repairs it, besides SQLite's
/// "database disk image is malformed". Done once, before SQLite starts
/// (later it cannot be, and nothing is said).
pub(super) fn install_damage_hint() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        extern "C" fn on_log(_: *mut std::ffi::c_void, code: std::ffi::c_int, _: *const std::ffi::c_char) {
            use std::sync::atomic::{AtomicBool, Ordering};
            static SAID: AtomicBool = AtomicBool::new(false);
            let primary = code & 0xff;
            if primary != rusqlite::ffi::SQLITE_CORRUPT && primary != rusqlite::ffi::SQLITE_NOTADB {
                return;
            }
            if DAMAGE_HANDLED.load(Ordering::SeqCst) > 0 || SAID.swap(true, Ordering::SeqCst) {
                return;
            }
            let which = OPENED
                .try_lock()
                .ok()
                .and_then(|o| (o.len() == 1).then(|| o[0].clone()));
            let _ = std::panic::catch_unwind(|| match which {
                Some(db) => eprintln!(
                    "ken: {} is damaged: `ken health --repair` rebuilds it from the files, keeping every vector \
                     it can read (or delete {} and run `ken index`)",
                    db.display(),
                    db.parent().unwrap_or(Path::new(".")).display()
                ),
                None => eprintln!(
                    "ken: an index database is damaged: `ken health --repair` rebuilds it from the files, \
                     keeping every vector it can read"
                ),
            });
        }
        // SAFETY: SQLITE_CONFIG_LOG takes a function pointer and its
        // argument; the callback calls no SQLite function. If SQLite has
        // already started, it refuses (SQLITE_MISUSE) and nothing changes.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_LOG,
                on_log as extern "C" fn(_, _, _),
                std::ptr::null_mut::<std::ffi::c_void>(),
            );
        }
    });
}
