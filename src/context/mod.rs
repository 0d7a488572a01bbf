//! Context for an agent's next step, built on the graph, the search and the
//! branch catalog: what a question needs, what an edit needs, what a change
//! affects, where to start. [`pack`] fits each into a token budget.

pub mod impact;
pub mod map;
pub mod pack;
pub mod question;
pub mod symbol;

/// Whether the test file `path` is named after the module `stem`: its name is
/// the stem with a test word before or after it (`_`, `-` and case aside), or
/// the stem itself with a `.test.` / `.spec.` part.
pub(crate) fn test_named_after(path: &str, stem: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    let mut pieces = file.split('.');
    let name: String = pieces
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .collect();
    let stem: String = stem
        .to_ascii_lowercase()
        .chars()
        .filter(|c| !matches!(c, '_' | '-'))
        .collect();
    if stem.is_empty() {
        return false;
    }
    const TEST_WORDS: [&str; 4] = ["unittest", "tests", "test", "spec"];
    if name == stem {
        return pieces.any(|p| p == "test" || p == "spec");
    }
    TEST_WORDS
        .iter()
        .any(|w| name.strip_prefix(w) == Some(stem.as_str()) || name.strip_suffix(w) == Some(stem.as_str()))
}

/// How closely a test (at `test_path`, named `test_name`) is about the
/// definition `name` of the file `path`: 0 when its file is named after that
/// module and its name mentions the definition, 1 for one of the two, 2 for
/// neither. A unit test of the function before a test that reaches it
/// through a plot or a parser.
pub(crate) fn test_affinity(test_path: &str, test_name: &str, path: &str, name: &str) -> u8 {
    let stem = crate::source::paths::file_stem(path);
    let flat = |s: &str| -> String {
        s.chars()
            .filter(|c| !matches!(c, '_' | '-'))
            .collect::<String>()
            .to_ascii_lowercase()
    };
    let mentions = !name.is_empty() && flat(test_name).contains(&flat(name));
    2 - test_named_after(test_path, stem) as u8 - mentions as u8
}
