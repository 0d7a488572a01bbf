//! The index under real faults of its storage: a full file system (a small
//! tmpfs), a read-only folder (an immutable folder or file, a read-only
//! mount), a database locked by another process, pages of the database
//! overwritten with random bytes, and processes killed (SIGKILL) during an
//! index run or an embedding pass. An index is never deleted for a fault that
//! a rebuild would not cure, a rebuild keeps its vectors, damage is found and
//! repaired, and no statistic is left behind what it counts.
//!
//! The faults need root (mount, chattr); a test that cannot make its fault
//! says so and passes. `KEN_FAULT_TRIALS` sets the trials of the randomized
//! tests (default 3), `KEN_FAULT_SEED` the pages the random damage hits;
//! `KEN_FAULTS_BIN` runs another `ken` binary (an older build, to see the
//! tests fail on it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

fn bin() -> PathBuf {
    std::env::var_os("KEN_FAULTS_BIN")
        .filter(|b| !b.is_empty())
        .map_or_else(ken_bin, PathBuf::from)
}

fn trials() -> usize {
    std::env::var("KEN_FAULT_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
}

/// A command that takes longer than this hangs: the test fails.
const HANG: Duration = Duration::from_secs(300);

/// `ken ARGS` in `dir` (the tested binary), with the per-user vector cache
/// off; a run that does not end within [`HANG`] is killed and fails the test.
fn run(dir: &Path, args: &[&str]) -> Output {
    let out = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (out.path().join("stdout"), out.path().join("stderr"));
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env_remove("KEN_INDEX_DIR")
        .env("KEN_SHARED_CACHE", "0")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .expect("ken runs");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > HANG {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ken {args:?} hung (killed after {HANG:?}): {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: std::fs::read(&stdout).unwrap(),
        stderr: std::fs::read(&stderr).unwrap(),
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn ok(dir: &Path, args: &[&str]) -> String {
    let out = run(dir, args);
    assert!(
        out.status.success(),
        "ken {args:?} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = ok(dir, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("ken {args:?} printed invalid JSON ({e}): {out}"))
}

/// [`health`], or what it printed when it printed no report.
fn try_health(dir: &Path, more: &[&str]) -> Result<(Value, i32), String> {
    let mut args = vec!["health", "--json"];
    args.extend(more);
    let out = run(dir, &args);
    match serde_json::from_slice(&out.stdout) {
        Ok(report) => Ok((report, out.status.code().unwrap_or(-1))),
        Err(_) => Err(format!("no report, exit {}: {}", out.status, stderr(&out))),
    }
}

/// `ken health --json` (and more arguments): its report and exit code.
fn health(dir: &Path, more: &[&str]) -> (Value, i32) {
    let mut args = vec!["health", "--json"];
    args.extend(more);
    let out = run(dir, &args);
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ken {args:?} printed no report ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    (report, out.status.code().unwrap_or(-1))
}

fn finding<'a>(report: &'a Value, check: &str) -> Option<&'a Value> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["check"] == check)
}

fn model() {
    ken::embed::model::fetch(&ken::embed::model::MINILM).expect("the built-in model (run `ken model fetch`)");
}

/// The sample project in `root`, indexed with the built-in model: its
/// database and how many vectors it holds.
fn embedded_sample(root: &Path) -> (PathBuf, i64) {
    model();
    sample_project(root);
    // With the query adapter's fit done here: no background fitter may still
    // be writing when a test damages the database.
    ok(root, &["index", "-q", "--wait-for-adapter"]);
    let db = root.join(".ken/index.db");
    let before = vectors(&db);
    assert!(before > 0, "the sample project has vectors");
    (db, before)
}

fn sh(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A tmpfs mounted on a new folder, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        std::fs::create_dir_all(at).unwrap();
        sh(
            "mount",
            &["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", at.to_str()?],
        )
        .then(|| Tmpfs(at.into()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        sh("umount", &["-l", self.0.to_str().unwrap()]);
    }
}

/// `chattr +i` on `path` until dropped (`chattr -i`).
struct Immutable(PathBuf);

impl Immutable {
    fn set(path: &Path) -> Option<Immutable> {
        sh("chattr", &["+i", path.to_str()?]).then(|| Immutable(path.into()))
    }
}

impl Drop for Immutable {
    fn drop(&mut self) {
        sh("chattr", &["-i", self.0.to_str().unwrap()]);
    }
}

/// Fills the file system of `dir` until nothing more can be written.
fn fill(dir: &Path) {
    use std::io::Write;
    let block = vec![0x5au8; 1 << 16];
    let mut n = 0;
    for size in [block.len(), 4096, 512] {
        loop {
            n += 1;
            let Ok(mut file) = std::fs::File::create(dir.join(format!("filler-{n}"))) else {
                break;
            };
            let mut wrote = false;
            while file.write_all(&block[..size]).is_ok() {
                wrote = true;
            }
            let _ = file.sync_all();
            if !wrote {
                break;
            }
        }
    }
    let probe = dir.join("filler-probe");
    let left = std::fs::write(&probe, vec![0u8; 4096]).is_ok();
    let _ = std::fs::remove_file(&probe);
    assert!(!left, "{} is not full", dir.display());
}

fn unfill(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("filler-") {
            std::fs::remove_file(entry.path()).unwrap();
        }
    }
}

/// Opens `db` to read it as it is, leaving no file behind: as an immutable
/// file when it has no WAL (works on a full or read-only file system too).
fn open_ro(db: &Path) -> rusqlite::Result<rusqlite::Connection> {
    use rusqlite::OpenFlags;
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0) {
        return rusqlite::Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY);
    }
    rusqlite::Connection::open_with_flags(
        format!("file:{}?immutable=1", db.display()),
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
    )
}

fn db_count(db: &Path, sql: &str) -> i64 {
    let conn = open_ro(db).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

fn vectors(db: &Path) -> i64 {
    db_count(db, "SELECT count(*) FROM embeddings")
}

/// Whether SQLite's full check finds `db` intact.
fn intact(db: &Path) -> bool {
    let Ok(conn) = open_ro(db) else {
        return false;
    };
    let rows: rusqlite::Result<Vec<String>> = conn
        .prepare("PRAGMA integrity_check")
        .and_then(|mut s| s.query_map([], |r| r.get(0))?.collect());
    rows.is_ok_and(|rows| rows == ["ok"])
}

/// The vectors (content hash, model) a plain scan of `db` reads before its
/// first error: what a repair must keep at least (of the contents it still has).
fn readable_vectors(db: &Path) -> std::collections::HashSet<(i64, String)> {
    let mut found = std::collections::HashSet::new();
    let Ok(conn) = open_ro(db) else {
        return found;
    };
    let Ok(mut stmt) = conn.prepare("SELECT content_hash, model FROM embeddings ORDER BY id") else {
        return found;
    };
    let Ok(mut rows) = stmt.query([]) else {
        return found;
    };
    while let Ok(Some(row)) = rows.next() {
        if let (Ok(hash), Ok(model)) = (row.get(0), row.get(1)) {
            found.insert((hash, model));
        }
    }
    found
}

/// The vectors of `db` (content hash, model) whose content a chunk has.
fn vectors_of_chunks(db: &Path) -> std::collections::HashSet<(i64, String)> {
    let conn = open_ro(db).unwrap();
    let mut stmt = conn
        .prepare("SELECT content_hash, model FROM embeddings WHERE content_hash IN (SELECT content_hash FROM chunks)")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

fn chunk_hashes(db: &Path) -> std::collections::HashSet<i64> {
    let conn = open_ro(db).unwrap();
    let mut stmt = conn.prepare("SELECT content_hash FROM chunks").unwrap();
    stmt.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<rusqlite::Result<_>>()
        .unwrap()
}

/// xorshift64*, for reproducible damage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Overwrites page `page` (1-based) of `db` with random bytes.
fn damage_page(db: &Path, page: u64, rng: &mut Rng) {
    use std::os::unix::fs::FileExt;
    let size = page_size(db);
    let bytes: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
    let file = std::fs::OpenOptions::new().write(true).open(db).unwrap();
    file.write_all_at(&bytes, (page - 1) * size).unwrap();
}

fn page_size(db: &Path) -> u64 {
    let header = std::fs::read(db).unwrap();
    match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65536,
        n => n as u64,
    }
}

/// The root page of table `name` in `db`.
fn root_page(db: &Path, name: &str) -> u64 {
    let conn = open_ro(db).unwrap();
    conn.query_row("SELECT rootpage FROM sqlite_master WHERE name = ?1", [name], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap() as u64
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
        }
    }
}

/// A project whose functions share words (so that some terms are common),
/// as often as their number says (so that BM25 tells them apart).
fn project(root: &Path, files: usize) {
    for i in 0..files {
        write(
            root,
            &format!("pkg{}/mod_{i}.py", i % 20),
            &format!(
                "def handler_number_{i}(request):\n    \"\"\"Handles the request value {i} and returns it.\"\"\"\n    \
                 value = request.get({i})\n    words = \"{}{}\"\n    return value\n",
                "alpha ".repeat(i % 5 + 1),
                "beta ".repeat(i % 3)
            ),
        );
    }
}

/// Defect 1: with no space left (the `-shm` of a closed index cannot even be
/// made), `ken index` said the index was "incompatible", deleted it and
/// rebuilt it without its vectors. Now it says there is no space left and
/// changes nothing; once there is space, nothing is embedded again.
#[test]
fn a_full_disk_never_deletes_the_index() {
    model();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    sample_project(&root);
    write_unrelated(&root, "util", 20);
    let (mut failures, mut refused, mut at_open) = (0, 0, 0);
    for trial in 0..trials() {
        let Some(disk) = Tmpfs::mount(&tmp.path().join(format!("disk{trial}")), "12m") else {
            eprintln!("skipped: cannot mount a tmpfs here (not root?)");
            return;
        };
        let dir = disk.0.join("index");
        let dir_arg = dir.to_str().unwrap();
        // The query adapter's fit, which `ken index` leaves to a background
        // process, is done here first: the index must be closed when the disk fills.
        ok(&root, &["index", "-q", "--wait-for-adapter", "--index-dir", dir_arg]);
        let db = dir.join("index.db");
        let (wal, shm) = (dir.join("index.db-wal"), dir.join("index.db-shm"));
        assert!(!wal.exists() && !shm.exists(), "ken leaves a closed index");
        let before = vectors(&db);
        assert!(before > 0);
        fill(&disk.0);
        write(&root, "src/lib.rs", &format!("pub fn edited_{trial}() {{}}\n"));
        let out = run(&root, &["index", "--index-dir", dir_arg]);
        let err = stderr(&out);
        if err.contains("configuring the index database") {
            at_open += 1;
        }
        if !out.status.success() {
            refused += 1;
            if !err.contains(&format!("no space left on {dir_arg}")) {
                eprintln!("trial {trial}: the error does not say there is no space left: {err}");
                failures += 1;
            }
        }
        if err.contains("rebuilding") || vectors(&db) < before || !intact(&db) {
            eprintln!("trial {trial}: the index lost its vectors or was damaged: {err}");
            failures += 1;
        }
        // Searching works (or says why not) while the disk is full.
        let searched = run(&root, &["search", "--index-dir", dir_arg, "render_template"]);
        if !searched.status.success() && !stderr(&searched).contains("no space left") {
            eprintln!("trial {trial}: search failed without saying why: {}", stderr(&searched));
            failures += 1;
        }
        unfill(&disk.0);
        let report = json(&root, &["index", "--json", "--index-dir", dir_arg]);
        let embedded = report["embedding"]["embedded"].as_i64().unwrap();
        if embedded > 1 {
            eprintln!("trial {trial}: {embedded} contents embedded again: {report}");
            failures += 1;
        }
        drop(disk);
    }
    eprintln!(
        "full disk: {} trials, {refused} refused with a message ({at_open} on opening the index), {failures} failures",
        trials()
    );
    assert_eq!(failures, 0);
}

/// Defect 11: a read-only index folder was "damaged" to readers, and
/// `ken index` tried to delete it. Now readers read it, and writers say it
/// is read-only (the folder, or the file) and change nothing.
#[test]
fn a_read_only_index_is_read_and_said_to_be_read_only() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ok(root, &["index", "--no-embed", "-q"]);
    let dir = root.join(".ken");
    let db = dir.join("index.db");
    let original = std::fs::read(&db).unwrap();
    {
        let Some(_frozen) = Immutable::set(&dir) else {
            eprintln!("skipped: chattr +i does not work here (not root?)");
            return;
        };
        assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");
        assert_eq!(json(root, &["status", "--json"])["files"], 6);
        let (report, code) = health(root, &[]);
        assert_eq!(code, 0, "{report}");
        write(root, "notes.txt", "changed while the index is read-only\n");
        let out = run(root, &["index", "--no-embed"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(&format!("the index folder {} is read-only", dir.display())),
            "{}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("damaged") && !stderr(&out).contains("rebuilding"));
    }
    assert_eq!(std::fs::read(&db).unwrap(), original, "nothing was changed");
    {
        let _frozen = Immutable::set(&db).unwrap();
        let out = run(root, &["index", "--no-embed"]);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(&format!("the index database {} is read-only", db.display())),
            "{}",
            stderr(&out)
        );
    }
    // A read-only mount.
    let Some(disk) = Tmpfs::mount(&tmp.path().join("mount"), "16m") else {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    };
    let index_dir = disk.0.join("index");
    let dir_arg = index_dir.to_str().unwrap();
    ok(root, &["index", "--no-embed", "-q", "--index-dir", dir_arg]);
    assert!(sh("mount", &["-o", "remount,ro", disk.0.to_str().unwrap()]));
    let out = run(root, &["search", "--json", "--index-dir", dir_arg, "render_template"]);
    assert!(out.status.success(), "{}", stderr(&out));
    write(root, "notes.txt", "changed again\n");
    let out = run(root, &["index", "--no-embed", "--index-dir", dir_arg]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("the index folder {dir_arg} is read-only")),
        "{}",
        stderr(&out)
    );
    assert!(sh("mount", &["-o", "remount,rw", disk.0.to_str().unwrap()]));
    assert!(intact(&index_dir.join("index.db")));
}

/// A database another process holds locked was taken for incompatible,
/// deleted and rebuilt. Now the lock is said and the index kept. (Waits
/// for SQLite's 10 s busy timeout.)
#[test]
fn a_locked_index_is_said_to_be_locked_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ok(root, &["index", "--no-embed", "-q"]);
    let db = root.join(".ken/index.db");
    let holder = rusqlite::Connection::open(&db).unwrap();
    holder
        .execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; SELECT count(*) FROM meta; COMMIT;")
        .unwrap();
    write(root, "notes.txt", "changed while the index is locked\n");
    let out = run(root, &["index", "--no-embed"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!(
            "the index database {} is locked by another process",
            db.display()
        )),
        "{}",
        stderr(&out)
    );
    drop(holder);
    assert!(!stderr(&out).contains("rebuilding"));
    assert_eq!(db_count(&db, "SELECT count(*) FROM catalog"), 6, "the index was kept");
}

/// Defect 2: a damaged page of a table. `ken health` finds it, readers say
/// which file and what repairs it, `ken health --repair` rebuilds the index
/// from the files keeping every vector, and nothing is embedded again.
#[test]
fn a_damaged_page_is_found_and_repaired_keeping_every_vector() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (db, before) = embedded_sample(root);
    damage_page(&db, root_page(&db, "contents"), &mut Rng(7));
    assert!(!intact(&db));

    let (report, code) = health(root, &[]);
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["healthy"], false, "{report}");
    let integrity = finding(&report, "integrity").unwrap_or_else(|| panic!("{report}"));
    assert!(
        integrity["message"].as_str().unwrap().contains("ken health --repair"),
        "{report}"
    );

    let out = run(root, &["search", "render_template"]);
    if !out.status.success() {
        let err = stderr(&out);
        assert!(
            err.contains("ken health --repair") && err.contains(&db.display().to_string()),
            "{err}"
        );
    }

    let (report, code) = health(root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["healthy"], true, "{report}");
    assert_eq!(finding(&report, "integrity").unwrap()["repaired"], true, "{report}");
    assert!(intact(&db));
    assert_eq!(vectors(&db), before, "every vector is kept");
    let (report, code) = health(root, &["--full"]);
    assert_eq!(code, 0, "{report}");
    let again = json(root, &["index", "--json"]);
    assert_eq!(again["embedding"]["embedded"], 0, "{again}");
    assert_eq!(again["embedding"]["signatures_embedded"], 0, "{again}");
    assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");
}

/// The first page (the file header and the schema) overwritten: SQLite
/// cannot read anything, yet the vectors are still in their pages, and the
/// repair (here `ken index` itself: the file is no database any more) keeps
/// them all.
#[test]
fn a_damaged_first_page_loses_no_vector() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (db, before) = embedded_sample(root);
    damage_page(&db, 1, &mut Rng(11));
    let (report, code) = health(root, &[]);
    assert_eq!(code, 1, "{report}");
    let out = run(root, &["index", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("rebuilding"), "never silently: {}", stderr(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 0, "{report}");
    assert_eq!(vectors(&db), before);
    let (report, code) = health(root, &[]);
    assert_eq!(code, 0, "{report}");
}

/// Defect 2, randomized: pages overwritten anywhere in the database. Each
/// trial checks that `ken health` agrees with SQLite's own full check, that
/// readers and `ken index` either work or say what repairs the index (and
/// `ken index` never leaves it damaged), and that `ken health --repair`
/// makes it whole, keeping at least the vectors a plain scan can read.
#[test]
fn random_page_damage_is_found_and_repaired() {
    model();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    write_unrelated(root, "util", 120);
    // No background fitter may write while the trials copy and damage it.
    ok(root, &["index", "-q", "--wait-for-adapter"]);
    let dir = root.join(".ken");
    let db = dir.join("index.db");
    let pristine = tmp.path().join("pristine");
    copy_dir(&dir, &pristine);
    let all_vectors = readable_vectors(&db);
    let pages = std::fs::metadata(&db).unwrap().len() / page_size(&db);
    let seed = std::env::var("KEN_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x9e37_79b9_7f4a_7c15u64);
    let mut rng = Rng(seed.max(1));
    let (mut failures, mut damaged, mut lost) = (0, 0, 0);
    for trial in 0..trials().max(1) * 3 {
        copy_dir(&pristine, &dir);
        let hits: Vec<u64> = (0..1 + rng.below(3)).map(|_| 2 + rng.below(pages - 1)).collect();
        for &page in &hits {
            damage_page(&db, page, &mut rng);
        }
        let is_damaged = !intact(&db);
        damaged += is_damaged as usize;
        let readable = readable_vectors(&db);
        let mut fail = |what: String| {
            eprintln!("trial {trial} (pages {hits:?}): {what}");
            failures += 1;
        };
        match try_health(root, &[]) {
            Ok((report, code)) if (code == 1) != is_damaged => fail(format!(
                "health exited {code}, SQLite finds it damaged: {is_damaged}: {report}"
            )),
            Ok(_) => {}
            Err(e) => fail(format!("health: {e}")),
        }
        let out = run(root, &["search", "handler"]);
        if !out.status.success() && !stderr(&out).contains("ken health --repair") {
            fail(format!("search failed with no hint: {}", stderr(&out)));
        }
        write(root, "notes.txt", &format!("notes of trial {trial}\n"));
        let out = run(root, &["index", "--no-embed"]);
        if out.status.success() && !intact(&db) {
            fail(format!(
                "ken index exited 0 leaving the index damaged: {}",
                stderr(&out)
            ));
        }
        if !out.status.success() && !stderr(&out).contains("ken health --repair") {
            fail(format!("ken index failed with no hint: {}", stderr(&out)));
        }
        let report = match try_health(root, &["--repair"]) {
            Ok((report, 0)) if intact(&db) => report,
            Ok((report, _)) => {
                fail(format!("repair left it unhealthy: {report}"));
                continue;
            }
            Err(e) => {
                fail(format!("repair: {e}"));
                continue;
            }
        };
        // Every readable vector of a content the index still has is kept.
        let (kept, chunks) = (vectors_of_chunks(&db), chunk_hashes(&db));
        let missing = readable
            .iter()
            .filter(|(hash, _)| chunks.contains(hash))
            .filter(|v| !kept.contains(*v))
            .count();
        if missing > 0 {
            fail(format!("{missing} vectors a plain scan reads are not kept: {report}"));
        }
        // What the damage cost: vectors of contents still indexed that were not kept.
        let lost_here = all_vectors
            .iter()
            .filter(|(hash, _)| chunks.contains(hash))
            .filter(|v| !kept.contains(*v))
            .count();
        if std::env::var_os("KEN_FAULT_VERBOSE").is_some() {
            eprintln!(
                "trial {trial} (pages {hits:?}): {lost_here} vectors lost, {} readable",
                readable.len()
            );
        }
        lost += lost_here;
        match try_health(root, &[]) {
            Ok((_, 0)) => {}
            Ok((report, _)) => fail(format!("unhealthy after the repair: {report}")),
            Err(e) => fail(format!("health after the repair: {e}")),
        }
        let out = run(root, &["search", "--json", "render_template"]);
        let found: Option<Value> = serde_json::from_slice(&out.stdout).ok();
        if found.is_none_or(|hits| hits[0]["path"] != "src/lib.rs") {
            fail(format!(
                "search after the repair misses render_template: {}",
                stderr(&out)
            ));
        }
    }
    eprintln!(
        "random page damage: {} trials, {damaged} damaged as SQLite sees it, {lost} vectors lost to the \
         damage (of {} a trial), {failures} failures",
        trials().max(1) * 3,
        all_vectors.len()
    );
    assert_eq!(failures, 0);
}

/// A file that is no database at all: readers say which and what to do,
/// `ken health` reports it, and the repair says nothing could be saved.
#[test]
fn a_file_that_is_no_database_is_said_and_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    sample_project(root);
    ok(root, &["index", "--no-embed", "-q"]);
    let db = root.join(".ken/index.db");
    std::fs::write(&db, b"not a database at all".repeat(300)).unwrap();
    let out = run(root, &["search", "render_template"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&db.display().to_string()) && err.contains("ken health --repair"),
        "{err}"
    );
    let (report, code) = health(root, &[]);
    assert_eq!(code, 1, "{report}");
    let (report, code) = health(root, &["--repair"]);
    assert_eq!(code, 0, "{report}");
    let message = finding(&report, "integrity").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(message.contains("nothing in it could be read"), "{message}");
    assert_eq!(search(root, "render_template", 1)[0]["path"], "src/lib.rs");
}

/// A rebuild for a schema version no upgrade leads from keeps the vectors.
#[test]
fn a_rebuild_keeps_the_vectors() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let (db, before) = embedded_sample(root);
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'", [])
        .unwrap();
    let out = run(root, &["index", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("rebuilding"), "never silently: {}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("kept its {before} vectors")),
        "{}",
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["embedding"]["embedded"], 0, "{report}");
    assert_eq!(vectors(&db), before);
}

/// Defect 3: a run killed after committing its changes but before counting
/// the common terms left their frequencies (and the chunk count) behind the
/// chunks until the next change, and BM25 scored otherwise than on a clean
/// index. Now the counts are written with the chunks or recounted.
#[test]
fn statistics_are_never_left_behind_by_a_kill() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    project(&root, 1500);
    ok(&root, &["index", "--no-embed", "-q"]);
    let db = root.join(".ken/index.db");
    let meta = |key: &str| {
        db_count(
            &db,
            &format!("SELECT coalesce((SELECT CAST(value AS INTEGER) FROM meta WHERE key = '{key}'), -1)"),
        )
    };
    let mut rng = Rng(42);
    let (mut failures, mut behind_after_kill) = (0, 0);
    for trial in 0..trials() {
        // An incremental run: files removed, added and edited.
        for i in 0..15 {
            let _ = std::fs::remove_file(root.join(format!("pkg{}/mod_{}.py", i % 20, trial * 15 + i)));
        }
        for i in 0..40 {
            write(
                &root,
                &format!("new/t{trial}_{i}.py"),
                &format!("def added_{trial}_{i}(request):\n    return request.value\n"),
            );
        }
        // Every added file in the catalog: the run commits in batches of 500
        // files (the first trial re-reads all 1,500), and one added file in
        // a batch after the kill would rightly be parsed by the next run.
        let added = format!("new/t{trial}\\_%");
        let mut child = Command::new(bin())
            .args(["index", "--no-embed", "-q"])
            .current_dir(&root)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Killed once its changes are committed, somewhere in what follows.
        let started = Instant::now();
        let conn = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        loop {
            let committed: bool = conn
                .query_row(
                    "SELECT count(*) = 40 FROM catalog WHERE path LIKE ?1 ESCAPE '\\'",
                    [&added],
                    |r| r.get(0),
                )
                .unwrap_or(false);
            if committed || started.elapsed() > Duration::from_secs(60) {
                break;
            }
            std::thread::sleep(Duration::from_micros(300));
        }
        drop(conn);
        std::thread::sleep(Duration::from_millis(rng.below(40)));
        let _ = child.kill();
        let _ = child.wait();
        let chunks = db_count(&db, "SELECT count(*) FROM chunks");
        if meta("common_terms_chunks") != chunks {
            behind_after_kill += 1;
        }
        if meta("chunk_count") != chunks {
            eprintln!(
                "trial {trial}: chunk_count {} for {chunks} chunks after the kill",
                meta("chunk_count")
            );
            failures += 1;
        }
        // The next run has nothing to change.
        let report = json(&root, &["index", "--no-embed", "--json"]);
        assert_eq!(report["parsed"], 0, "{report}");
        let chunks = db_count(&db, "SELECT count(*) FROM chunks");
        if meta("common_terms_chunks") != chunks || meta("chunk_count") != chunks {
            eprintln!(
                "trial {trial}: common terms counted at {}, chunk_count {}, for {chunks} chunks",
                meta("common_terms_chunks"),
                meta("chunk_count")
            );
            failures += 1;
        }
        // BM25 as on a clean index of the same files.
        let clean = tmp.path().join(format!("clean{trial}"));
        assert!(sh("cp", &["-r", root.to_str().unwrap(), clean.to_str().unwrap()]));
        std::fs::remove_dir_all(clean.join(".ken")).unwrap();
        ok(&clean, &["index", "--no-embed", "-q"]);
        for query in ["alpha beta", "handles the request value alpha", "added request"] {
            // The scores, best first (equal ones may come in another order).
            let scores = |dir: &Path| -> Vec<String> {
                let hits: Value =
                    serde_json::from_str(&ok(dir, &["search", "--json", "-k", "30", "--mode", "lexical", query]))
                        .unwrap();
                hits.as_array()
                    .unwrap()
                    .iter()
                    .map(|h| format!("{:.9e}", h["score"].as_f64().unwrap()))
                    .collect()
            };
            let (ours, theirs) = (scores(&root), scores(&clean));
            if ours != theirs {
                eprintln!("trial {trial}: `{query}` scores {ours:?}, on a clean index {theirs:?}");
                failures += 1;
            }
        }
        std::fs::remove_dir_all(&clean).unwrap();
    }
    eprintln!(
        "kill after commit: {} trials, {behind_after_kill} killed before the common terms were recounted, \
         {failures} failures",
        trials()
    );
    assert_eq!(failures, 0);
}

/// Defect 3: a kill during the embedding left the vector file behind the
/// stored vectors, and `ken health` failed on it until the next index run.
/// Now health brings the file up to date.
#[test]
fn health_reconciles_the_vector_file_after_a_killed_embedding() {
    model();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    project(root, 40);
    // An embedded index (its vector file published, its adapter's fit
    // done: no fitter runs beside the killed embeddings), then files to embed.
    ok(root, &["index", "-q", "--wait-for-adapter"]);
    let db = root.join(".ken/index.db");
    let (mut failures, mut mid_pass) = (0, 0);
    for trial in 0..trials() {
        for i in 0..250 {
            write(
                root,
                &format!("t{trial}/f{i}.py"),
                &format!("def added_{trial}_{i}(request):\n    \"\"\"Adds {i} to the request of trial {trial}.\"\"\"\n    return request + {i}\n"),
            );
        }
        ok(root, &["index", "--no-embed", "-q"]);
        let before = vectors(&db);
        let mut child = spawn_silent(&bin(), root, &["embed", "-q"]);
        let started = Instant::now();
        while vectors(&db) == before && started.elapsed() < Duration::from_secs(120) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(30 * trial as u64));
        let _ = child.kill();
        let _ = child.wait();
        let contents = db_count(&db, "SELECT count(DISTINCT content_hash) FROM chunks");
        let embedded = db_count(
            &db,
            "SELECT count(*) FROM embeddings WHERE model NOT LIKE '%/sig%' AND content_hash IN \
             (SELECT content_hash FROM chunks)",
        );
        if embedded < contents {
            mid_pass += 1;
        }
        let (report, code) = health(root, &[]);
        if code != 0 {
            eprintln!("trial {trial}: health after a killed embedding: {report}");
            failures += 1;
        }
        let (report, _) = health(root, &[]);
        if finding(&report, "vector_file").is_some() {
            eprintln!("trial {trial}: the vector file is still behind: {report}");
            failures += 1;
        }
    }
    eprintln!(
        "kill during embedding: {} trials, {mid_pass} killed mid-pass, {failures} failures",
        trials()
    );
    assert_eq!(failures, 0);
    let report = json(root, &["index", "--no-embed", "--json"]);
    assert_eq!(report["files"], 40 + 250 * trials(), "{report}");
}
