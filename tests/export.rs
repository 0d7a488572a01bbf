//! `ken index --export FILE` / `--import FILE` with real `ken` processes on
//! real git clones in temporary folders: the file moves an index (with its
//! vectors, from the built-in model) to a clone at another path, which then
//! catches up by parsing and embedding only what differs; a file of another
//! embedder or schema, or a damaged or truncated one, is refused and leaves
//! the existing index as it was.

mod common;

use std::path::Path;
use std::process::Output;

use common::{git, sample_project, write, write_unrelated};
use serde_json::Value;

/// Every command here: no query adapter (fitted in the background at its own
/// pace, it would make two indexes' rankings differ by timing).
fn run(dir: &Path, args: &[&str], env: &[(&str, String)]) -> Output {
    let mut all = vec![("KEN_QUERY_ADAPTER", "0".to_string())];
    all.extend(env.iter().cloned());
    common::ken_env(dir, args, &all)
}

fn run_ok(dir: &Path, args: &[&str]) -> Value {
    let out = run(dir, args, &[]);
    assert!(
        out.status.success(),
        "ken {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("ken {args:?}: not JSON ({e})"))
}

/// The refusal of `ken ARGS`: its stderr, after checking it failed.
fn refused(dir: &Path, args: &[&str], env: &[(&str, String)]) -> String {
    let out = run(dir, args, env);
    assert!(!out.status.success(), "ken {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// (path, start line) of the top results.
fn top(dir: &Path, mode: &str, query: &str) -> Vec<(String, u64)> {
    run_ok(dir, &["search", "--json", "--mode", mode, "-k", "5", query])
        .as_array()
        .expect("a list")
        .iter()
        .map(|hit| {
            (
                hit["path"].as_str().unwrap().to_string(),
                hit["start_line"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// `ken index --export FILE` of a working tree with uncommitted changes.
fn export_dirty(dir: &Path, file: &str) -> Value {
    run_ok(
        dir,
        &["index", "--json", "--no-embed", "--allow-dirty", "--export", file],
    )
}

/// A committed repository at `dir/origin`.
fn origin(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("origin");
    std::fs::create_dir_all(&root).unwrap();
    sample_project(&root);
    write_unrelated(&root, "util", 6);
    git(&root, &["init", "-q"]);
    git(&root, &["add", "."]);
    git(&root, &["commit", "-qm", "init"]);
    root
}

fn clone(dir: &Path, from: &Path, name: &str) -> std::path::PathBuf {
    git(dir, &["clone", "-q", from.to_str().unwrap(), name]);
    dir.join(name)
}

/// The database in a shared index file, decompressed.
fn database_in(file: &Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(&bytes[..8], b"KENINDEX");
    let length = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    zstd::decode_all(&bytes[12 + length..]).unwrap()
}

#[test]
fn an_index_moves_to_a_clone_elsewhere_and_catches_up_with_its_edits() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origin(dir.path());
    let file = dir.path().join("shared.ken");
    let made = run_ok(&origin, &["index", "--json", "--export", file.to_str().unwrap()]);
    let exported = &made["exported"];
    assert_eq!(exported["branch"], "main");
    assert_eq!(exported["dirty"], false);
    assert_eq!(exported["files"], made["files"]);
    assert!(exported["vectors"].as_u64().unwrap() > 0, "{exported}");
    assert_eq!(exported["bytes"], std::fs::metadata(&file).unwrap().len());
    // Nothing in it names the folder it was made in.
    let database = database_in(&file);
    let at = origin.canonicalize().unwrap();
    let at = at.to_str().unwrap().as_bytes();
    assert!(
        database.windows(at.len()).all(|w| w != at),
        "the file holds {}",
        origin.display()
    );

    // A clone at another path, as it is: nothing parsed or embedded again,
    // and the same answers.
    let same = clone(dir.path(), &origin, "teammate");
    let caught_up = run_ok(&same, &["index", "--json", "--import", file.to_str().unwrap()]);
    assert_eq!(caught_up["imported"]["vectors"], exported["vectors"]);
    assert_eq!(caught_up["parsed"], 0, "{caught_up}");
    assert_eq!(caught_up["unchanged"], made["files"]);
    assert_eq!(caught_up["embedding"]["embedded"], 0, "{caught_up}");
    for (mode, query) in [
        ("lexical", "parse_config"),
        ("lexical", "listening port"),
        ("hybrid", "reject tokens that expired"),
        ("semantic", "start the http server"),
    ] {
        let theirs = top(&origin, mode, query);
        assert!(!theirs.is_empty(), "{mode} {query}");
        assert_eq!(top(&same, mode, query), theirs, "{mode} {query}");
    }

    // A clone edited before the import: only the edited file is parsed and
    // its new chunks embedded, and its new code is found.
    let edited = clone(dir.path(), &origin, "agent");
    write(
        &edited,
        "src/auth/jwt.py",
        "def rotate_signing_keys(keyring):\n    \"\"\"Retire the oldest signing key.\"\"\"\n    return keyring[1:]\n",
    );
    let caught_up = run_ok(&edited, &["index", "--json", "--import", file.to_str().unwrap()]);
    assert_eq!(caught_up["parsed"], 1, "{caught_up}");
    assert_eq!(
        caught_up["unchanged"].as_u64().unwrap() + 1,
        made["files"].as_u64().unwrap()
    );
    let embedded = caught_up["embedding"]["embedded"].as_u64().unwrap();
    assert!((1..=2).contains(&embedded), "embedded {embedded} chunks: {caught_up}");
    assert_eq!(top(&edited, "lexical", "rotate_signing_keys")[0].0, "src/auth/jwt.py");
    let old = top(&edited, "lexical", "check_expiry");
    assert!(
        old.iter().all(|(path, _)| path != "src/auth/jwt.py"),
        "the old code is gone: {old:?}"
    );
}

#[test]
fn a_file_of_another_embedder_or_schema_is_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origin(dir.path());
    let file = dir.path().join("shared.ken");
    let made = run_ok(&origin, &["index", "--json", "--export", file.to_str().unwrap()]);
    let theirs = made["exported"]["embedder"].as_str().unwrap().to_string();
    let here = clone(dir.path(), &origin, "here");

    // Another token budget is another embedder id.
    let said = refused(
        &here,
        &["index", "--import", file.to_str().unwrap()],
        &[("KEN_EMBED_MAX_TOKENS", "64".to_string())],
    );
    assert!(said.contains(&theirs), "{said}");
    assert!(said.contains("/64/"), "{said}");
    assert!(!here.join(".ken/index.db").exists(), "nothing installed");

    // The same file claiming a schema this ken does not have.
    let bytes = std::fs::read(&file).unwrap();
    let length = u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    let mut header: Value = serde_json::from_slice(&bytes[12..12 + length]).unwrap();
    header["schema"] = 999.into();
    let header = serde_json::to_vec(&header).unwrap();
    let mut other = b"KENINDEX".to_vec();
    other.extend((header.len() as u32).to_le_bytes());
    other.extend(&header);
    other.extend(&bytes[12 + length..]);
    let future = dir.path().join("future.ken");
    std::fs::write(&future, other).unwrap();
    let said = refused(&here, &["index", "--import", future.to_str().unwrap()], &[]);
    assert!(said.contains("schema version 999"), "{said}");
    assert!(said.contains("this ken"), "{said}");
    assert!(!here.join(".ken/index.db").exists(), "nothing installed");

    // Without vectors here (--no-embed), the embedder is not in question.
    run_ok(
        &here,
        &["index", "--json", "--no-embed", "--import", file.to_str().unwrap()],
    );
}

#[test]
fn a_damaged_or_truncated_file_leaves_the_index_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origin(dir.path());
    let file = dir.path().join("shared.ken");
    run_ok(
        &origin,
        &["index", "--json", "--no-embed", "--export", file.to_str().unwrap()],
    );
    let here = clone(dir.path(), &origin, "here");
    write(&here, "src/local_only.py", "def only_in_this_clone():\n    return 1\n");
    run_ok(&here, &["index", "--json", "--no-embed"]);
    let db = here.join(".ken/index.db");
    let before = std::fs::read(&db).unwrap();
    let found = top(&here, "lexical", "only_in_this_clone");
    assert_eq!(found[0].0, "src/local_only.py");

    let bytes = std::fs::read(&file).unwrap();
    let truncated = dir.path().join("truncated.ken");
    std::fs::write(&truncated, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let mut flipped = bytes.clone();
    let middle = flipped.len() - 100;
    flipped[middle] ^= 0x55;
    let damaged = dir.path().join("damaged.ken");
    std::fs::write(&damaged, flipped).unwrap();
    let cut_header = dir.path().join("cut.ken");
    std::fs::write(&cut_header, &bytes[..20]).unwrap();
    for (file, says) in [
        (&truncated, "is truncated"),
        (&damaged, "is damaged: its checksum"),
        (&cut_header, "is truncated (in its header)"),
        (&origin.join("src/lib.rs"), "is not an index file"),
    ] {
        let said = refused(&here, &["index", "--import", file.to_str().unwrap(), "--force"], &[]);
        assert!(said.contains(says), "{said}");
        assert_eq!(std::fs::read(&db).unwrap(), before, "the index changed");
        assert_eq!(top(&here, "lexical", "only_in_this_clone"), found);
    }
    // A sound file does not replace an index unless told to.
    let said = refused(&here, &["index", "--import", file.to_str().unwrap()], &[]);
    assert!(said.contains("--force"), "{said}");
    assert_eq!(std::fs::read(&db).unwrap(), before, "the index changed");
    let leftovers: Vec<_> = std::fs::read_dir(here.join(".ken"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains("importing"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // With --force it does, and catches up with this clone's own file.
    let caught_up = run_ok(
        &here,
        &[
            "index",
            "--json",
            "--no-embed",
            "--force",
            "--import",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(caught_up["parsed"], 1, "{caught_up}");
    assert_eq!(top(&here, "lexical", "only_in_this_clone")[0].0, "src/local_only.py");
}

#[test]
fn uncommitted_changes_are_exported_only_when_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origin(dir.path());
    write(&origin, "src/draft.py", "def unfinished_idea():\n    pass\n");
    // Inside the tree: a file exported earlier is not a change.
    let file = origin.join("shared.ken");
    let said = refused(&origin, &["index", "--no-embed", "--export", "shared.ken"], &[]);
    assert!(said.contains("uncommitted changes (src/draft.py)"), "{said}");
    assert!(said.contains("--allow-dirty"), "{said}");
    assert!(!file.exists());
    let made = export_dirty(&origin, "shared.ken");
    assert_eq!(made["exported"]["dirty"], true);
    std::fs::remove_file(origin.join("src/draft.py")).unwrap();
    let made = run_ok(&origin, &["index", "--json", "--no-embed", "--export", "shared.ken"]);
    assert_eq!(made["exported"]["dirty"], false, "{made}");
}

#[test]
fn exports_made_while_a_watcher_writes_are_whole_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let origin = origin(dir.path());
    run_ok(&origin, &["index", "--json", "--no-embed"]);
    let mut watcher = common::spawn_silent(
        &common::ken_bin(),
        &origin,
        &["watch", "--no-embed", "--debounce-ms", "10"],
    );
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let written = std::sync::Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, written, origin) = (stop.clone(), written.clone(), origin.clone());
        std::thread::spawn(move || {
            while !stop.load(SeqCst) {
                let n = written.load(SeqCst);
                write(
                    &origin,
                    &format!("src/churn_{}.py", n % 7),
                    &format!("def churn_{n}():\n    return {n}\n"),
                );
                written.fetch_add(1, SeqCst);
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        })
    };
    // Each export starts after a few more writes, whatever the machine's
    // speed, so every one of them meets a watcher with files to index.
    let more_writes = |count: usize| {
        let until = written.load(SeqCst) + count;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while written.load(SeqCst) < until {
            assert!(std::time::Instant::now() < deadline, "the writer stalled");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    };
    let files: Vec<_> = (0..3)
        .map(|i| {
            more_writes(4);
            let file = dir.path().join(format!("during_{i}.ken"));
            let made = export_dirty(&origin, file.to_str().unwrap());
            assert_eq!(made["exported"]["dirty"], true);
            file
        })
        .collect();
    more_writes(2);
    stop.store(true, SeqCst);
    writer.join().unwrap();
    let _ = watcher.kill();
    let _ = watcher.wait();
    for (i, file) in files.iter().enumerate() {
        let here = clone(dir.path(), &origin, &format!("clone_{i}"));
        let caught_up = run_ok(
            &here,
            &["index", "--json", "--no-embed", "--import", file.to_str().unwrap()],
        );
        // The churned files are not in the clone: they leave its catalog.
        assert_eq!(caught_up["parsed"], 0, "{caught_up}");
        let health = run(&here, &["health", "--full"], &[]);
        assert!(health.status.success(), "{}", String::from_utf8_lossy(&health.stdout));
        assert_eq!(top(&here, "lexical", "parse_config")[0].0, "src/auth/jwt.py");
    }
}
