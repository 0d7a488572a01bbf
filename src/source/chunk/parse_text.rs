//! The text a grammar parses: what it cannot read, and loses its neighbours
//! to, replaced by spaces of the same length, so that every node's position
//! holds for the source as written.

use std::borrow::Cow;
use std::ops::Range;

use crate::source::lang::Language;

/// The text `lang`'s grammar parses.
pub(super) fn parse_text<'s>(lang: &Language, source: &'s str) -> Cow<'s, str> {
    match lang.name {
        "c" | "cpp" => macros_blanked(source),
        "kotlin" => platform_modifiers_blanked(source),
        _ => source.into(),
    }
}

/// Kotlin's `expect` and `actual` modifiers (multiplatform code) where the
/// grammar does not take them: `actual open class A` under an annotation line
/// and `internal actual constructor(` on the line after the class read as
/// expressions, and the class and its methods were lost to them.
fn platform_modifiers_blanked(source: &str) -> Cow<'_, str> {
    const FOLLOWERS: &[&str] = &[
        "class",
        "fun",
        "val",
        "var",
        "object",
        "interface",
        "constructor",
        "typealias",
        "open",
        "abstract",
        "inline",
        "value",
        "enum",
        "annotation",
        "sealed",
        "data",
        "operator",
        "infix",
        "suspend",
        "override",
        "internal",
        "public",
        "private",
        "protected",
        "external",
        "companion",
        "final",
        "const",
    ];
    let bytes = source.as_bytes();
    let mut blanks = Vec::new();
    for word in ["actual", "expect"] {
        for (at, _) in source.match_indices(word) {
            let before_ok = at == 0 || bytes[at - 1].is_ascii_whitespace();
            let rest = &source[at + word.len()..];
            let next = rest.trim_start_matches([' ', '\t']);
            let spaced = next.len() < rest.len();
            let followed = FOLLOWERS.iter().any(|f| {
                next.strip_prefix(f)
                    .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || c == '_'))
            });
            if before_ok && spaced && followed {
                blanks.push(at..at + word.len());
            }
        }
    }
    blanked(source, blanks)
}

/// The text a C or C++ grammar parses: macros it cannot expand, which make it
/// lose what they decorate, blanked. Two shapes, in capitals: an
/// export macro between `class` or `struct` and the name (`class
/// LEVELDB_EXPORT DB {`: the class was read as a function), and a line that
/// is a macro alone at statement level (`FMT_BEGIN_NAMESPACE`, `Q_OBJECT`:
/// the definition below it was lost to an error).
fn macros_blanked(source: &str) -> Cow<'_, str> {
    let is_macro = |word: &str| {
        word.len() >= 3
            && word.starts_with(|c: char| c.is_ascii_uppercase() || c == '_')
            && word
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
    };
    let mut blanks: Vec<Range<usize>> = Vec::new();
    let mut statement_level = true;
    let mut offset = 0;
    for line in source.split_inclusive('\n') {
        let text = line.trim_end();
        let code = text.trim_start();
        let indent = text.len() - code.len();
        // `class EXPORT Name`: the macro, unless `Name` is `final` (`class URL final`).
        let mut words = code.split_whitespace();
        if let (Some("class" | "struct" | "union"), Some(mac), Some(name)) = (words.next(), words.next(), words.next())
        {
            let name_is_identifier = name.starts_with(|c: char| c.is_alphabetic() || c == '_');
            if is_macro(mac) && name_is_identifier && !name.starts_with("final") {
                let at = offset + indent + code.find(mac).unwrap_or(0);
                blanks.push(at..at + mac.len());
            }
        }
        // `MACRO` or `MACRO(args)` alone on a line that a statement may start.
        let head = code.split('(').next().unwrap_or(code);
        let alone = code == head || (code.ends_with(')') && code.matches('(').count() == code.matches(')').count());
        if statement_level && alone && head.contains('_') && is_macro(head) {
            blanks.push(offset + indent..offset + indent + code.len());
        } else if !code.is_empty() {
            statement_level =
                code.starts_with(['#', '/', '*']) || code.ends_with([';', '{', '}', ':']) || code.ends_with("*/");
        }
        offset += line.len();
    }
    blanked(source, blanks)
}

/// `source` with the byte `ranges` (ASCII words, or whole lines of code)
/// replaced by spaces.
fn blanked(source: &str, ranges: Vec<Range<usize>>) -> Cow<'_, str> {
    if ranges.is_empty() {
        return source.into();
    }
    let mut text = source.as_bytes().to_vec();
    for range in ranges {
        text[range].fill(b' ');
    }
    String::from_utf8(text).map_or(source.into(), Cow::Owned)
}
