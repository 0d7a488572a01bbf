//! Every language with a grammar chunks its fixture into the expected named
//! definitions, and every line of the fixture belongs to some chunk.
//!
//! Fixtures live in `tests/fixtures/langs/<lang>/`; `expected.txt` there lists
//! `<file> <kind> <symbol>` lines that must each match a chunk.

use std::collections::BTreeSet;
use std::path::Path;

use ken::source::chunk::{chunk_source, ChunkLimits};
use ken::source::lang;

fn fixture_dir(lang: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/langs")
        .join(lang)
}

#[test]
fn every_language_yields_its_named_definitions() {
    let mut failures = Vec::new();
    for language in lang::all() {
        let dir = fixture_dir(language.name);
        let expected = match std::fs::read_to_string(dir.join("expected.txt")) {
            Ok(text) => text,
            Err(_) => {
                failures.push(format!(
                    "{}: no fixture ({}/expected.txt)",
                    language.name,
                    dir.display()
                ));
                continue;
            }
        };
        let mut named = 0;
        for line in expected.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('#')) {
            let mut parts = line.splitn(3, ' ');
            let (file, kind, symbol) = (
                parts.next().unwrap(),
                parts.next().unwrap_or(""),
                parts.next().unwrap_or(""),
            );
            let path = dir.join(file);
            let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(
                lang::for_source(&path, &source).map(|l| l.name),
                Some(language.name),
                "{} is not detected as {}",
                path.display(),
                language.name
            );
            let chunks = chunk_source(Some(language), &source, &ChunkLimits::default()).unwrap();
            let found = chunks.iter().any(|c| {
                (c.kind == kind && c.symbols.iter().any(|s| s.name == symbol))
                    || (kind == "impl" && opens_with_its_container(c, symbol))
            });
            if found {
                named += 1;
            } else {
                let got: Vec<String> = chunks
                    .iter()
                    .map(|c| format!("{} {}", c.kind, c.symbol_label().as_deref().unwrap_or("-")))
                    .collect();
                failures.push(format!(
                    "{}: {file}: no `{kind} {symbol}` chunk; got {got:?}",
                    language.name
                ));
            }
        }
        if named == 0 {
            failures.push(format!("{}: no named chunk expected or found", language.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn every_line_of_every_fixture_is_in_a_chunk() {
    for language in lang::all() {
        let Ok(entries) = std::fs::read_dir(fixture_dir(language.name)) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == "expected.txt") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let chunks = chunk_source(lang::for_path(&path), &source, &ChunkLimits::default()).unwrap();
            let covered: BTreeSet<u32> = chunks.iter().flat_map(|c| c.start_line..=c.end_line).collect();
            let lines = source.lines().count() as u32;
            let missing: Vec<u32> = (1..=lines).filter(|l| !covered.contains(l)).collect();
            assert!(
                missing.is_empty(),
                "{}: lines {missing:?} are in no chunk",
                path.display()
            );
            for c in &chunks {
                assert!(
                    c.start_line <= c.end_line && c.end_line <= lines,
                    "{}: bad span {c:?}",
                    path.display()
                );
                let text = &source[c.start_byte as usize..c.end_byte as usize];
                assert_eq!(
                    text,
                    c.text,
                    "{}: chunk text differs from its byte span",
                    path.display()
                );
            }
        }
    }
}

/// A bare `impl` line (`impl Foo {`, `extension Foo {`) has no chunk of its
/// own: it opens its first member's chunk, whose enclosing signature it is.
fn opens_with_its_container(chunk: &ken::source::chunk::Chunk, name: &str) -> bool {
    let first_line = chunk.text.lines().next().unwrap_or("").trim();
    let container = chunk.context.as_deref().and_then(|c| c.lines().last()).unwrap_or("");
    first_line == container.trim() && first_line.contains(name)
}

/// A function a top-level call is given is named by the string before it
/// (`defineGetter(req, 'fresh', function () {...})`), but a listener is not
/// named by its event: `click` names no handler.
#[test]
fn a_listener_is_not_named_by_its_event() {
    let source = "defineGetter(req, 'fresh', function () {\n  return true;\n});\n\nbutton.addEventListener('click', () => {\n  open();\n});\n\nprocess.on('exit', function () {\n  flush();\n});\n";
    let javascript = lang::by_name("javascript").unwrap();
    let chunks = chunk_source(Some(javascript), source, &ChunkLimits::default()).unwrap();
    let names: Vec<&str> = chunks
        .iter()
        .flat_map(|c| &c.symbols)
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["fresh"], "{chunks:#?}");
}
