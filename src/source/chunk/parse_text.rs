//! The text a grammar parses: what it cannot read, and loses its neighbours
//! to, replaced by spaces of the same length, so that every node's position
//! holds for the source as written.

use std::borrow::Cow;
use std::collections::HashSet;
use std::ops::Range;

use anyhow::{Context, Result};
use tree_sitter::{Node, Parser, Tree};

use crate::source::lang::Language;

/// The parse tree of `source` by `parser` (set to `lang`'s grammar), its
/// positions those of `source` as written.
pub(super) fn parse_tree(lang: &Language, parser: &mut Parser, source: &str) -> Result<Tree> {
    let text = parse_text(lang, source);
    let tree = parser.parse(text.as_ref(), None).context("the parser gave no tree")?;
    match lang.name {
        "rust" => Ok(item_macros_unwrapped(parser, text, tree)),
        _ => Ok(tree),
    }
}

/// The text `lang`'s grammar parses.
fn parse_text<'s>(lang: &Language, source: &'s str) -> Cow<'s, str> {
    match lang.name {
        "c" | "cpp" => macros_blanked(source),
        "vue" | "svelte" => outside_scripts_blanked(source),
        "kotlin" => {
            let blanks = [platform_modifiers(source), constructor_annotations(source)].concat();
            annotations_commented(names_read_as_keywords_renamed(blanked(source, blanks)))
        }
        _ => source.into(),
    }
}

/// Rust macros at item level whose body is items (`cfg_rt! { pub fn spawn
/// ... }`, `pin_project! { pub struct Sleep ... }`): the grammar reads the
/// body as a token tree, and every definition in it was lost. With the
/// macro's name and braces blanked the body parses as the items it is. A body
/// that does not parse as items on its own (`bitflags! { struct F: u32 {
/// ... } }`, a DSL) keeps its macro, and costs no neighbour its items; nested
/// macros unwrap a level a round.
fn item_macros_unwrapped(parser: &mut Parser, text: Cow<'_, str>, tree: Tree) -> Tree {
    const MAX_ROUNDS: usize = 8;
    let (mut text, mut tree) = (text, tree);
    // Bodies found not to be items, by start (blanking keeps positions): a
    // later round does not parse them again.
    let mut not_items: HashSet<usize> = HashSet::new();
    for _ in 0..MAX_ROUNDS {
        let mut wrappers: Vec<Range<usize>> = Vec::new();
        for m in item_macros(tree.root_node()) {
            if not_items.contains(&m.body.start) {
                continue;
            }
            if parses_as_items(parser, &text[m.body.clone()]) {
                wrappers.extend(m.wrapper);
            } else {
                not_items.insert(m.body.start);
            }
        }
        if wrappers.is_empty() {
            break;
        }
        let unwrapped = blanked(&text, wrappers).into_owned();
        let Some(next) = parser.parse(&unwrapped, None) else {
            break;
        };
        (text, tree) = (Cow::Owned(unwrapped), next);
    }
    tree
}

fn parses_as_items(parser: &mut Parser, body: &str) -> bool {
    parser
        .parse(body, None)
        .is_some_and(|tree| !tree.root_node().has_error())
}

/// A macro invocation whose body is items: the bytes that wrap the body
/// (`name! {` and the closing `}`), and the body.
struct ItemMacro {
    wrapper: [Range<usize>; 2],
    body: Range<usize>,
}

/// The macro invocations among `root`'s items (and those of its modules and
/// impls) whose braced body begins with an item.
fn item_macros(root: Node) -> Vec<ItemMacro> {
    const ITEM_LISTS: &[&str] = &["source_file", "declaration_list"];
    let mut found = Vec::new();
    let mut stack = vec![root];
    while let Some(node) = stack.pop() {
        let mut cursor = node.walk();
        for child in node.children(&mut cursor) {
            match child.kind() {
                "mod_item" | "impl_item" | "trait_item" => stack.extend(child.child_by_field_name("body")),
                "macro_invocation" if ITEM_LISTS.contains(&node.kind()) => found.extend(item_macro(child)),
                _ => {}
            }
        }
    }
    found
}

fn item_macro(invocation: Node) -> Option<ItemMacro> {
    const ITEM_STARTS: &[&str] = &[
        "pub", "fn", "struct", "enum", "union", "impl", "trait", "mod", "use", "const", "static", "type", "async",
        "unsafe", "extern",
    ];
    let body = invocation.child(invocation.child_count().checked_sub(1)?)?;
    let open = body.child(0)?;
    let close = body.child(body.child_count().checked_sub(1)?)?;
    if body.kind() != "token_tree" || open.kind() != "{" || close.kind() != "}" || body.child_count() < 3 {
        return None;
    }
    let mut cursor = body.walk();
    let tokens: Vec<&str> = body
        .children(&mut cursor)
        .skip(1)
        .map(|token| token.kind())
        .filter(|kind| !matches!(*kind, "line_comment" | "block_comment"))
        .take(16)
        .collect();
    let path = tokens
        .iter()
        .take_while(|kind| matches!(**kind, "identifier" | "::" | "crate" | "self" | "super"))
        .count();
    let begins_item = tokens.first().is_some_and(|first| ITEM_STARTS.contains(first))
        // an attribute (`#[cfg(...)]`, `#![unix]`)
        || (tokens.first() == Some(&"#") && matches!(tokens.get(1), Some(&"token_tree" | &"!")))
        // a nested item macro (`cfg_net! {`, `crate::cfg_rt! {`)
        || (path > 0 && tokens.get(path) == Some(&"!"));
    begins_item.then(|| ItemMacro {
        wrapper: [invocation.start_byte()..open.end_byte(), close.byte_range()],
        body: open.end_byte()..close.start_byte(),
    })
}

/// A single-file component (Vue, Svelte) with everything but the code of its
/// `<script>` blocks blanked: the template and the styles, and the tags.
fn outside_scripts_blanked(source: &str) -> Cow<'_, str> {
    let mut blanks = Vec::new();
    let mut from = 0;
    let mut rest = source;
    while let Some(open) = find_tag(rest, "<script") {
        let Some(open_end) = tag_end(&rest[open..]).map(|e| open + e) else {
            break;
        };
        let close = find_tag(&rest[open_end..], "</script").map_or(rest.len(), |c| open_end + c);
        let offset = source.len() - rest.len();
        blanks.push(from..offset + open_end);
        from = offset + close;
        rest = &rest[close..];
    }
    blanks.push(from..source.len());
    blanks.retain(|r| !r.is_empty());
    blanked(source, blanks)
}

/// The length of the tag `text` opens with, to its closing `>` outside
/// quoted attribute values (`generic="T extends Record<string, any>"`).
fn tag_end(text: &str) -> Option<usize> {
    let mut quote = None;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '>') => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// Where the tag `name` (`<script`, `</script`) opens in `text`, followed by
/// `>`, a space or a line break, ASCII case aside.
fn find_tag(text: &str, name: &str) -> Option<usize> {
    let lower = text.to_ascii_lowercase();
    lower.match_indices(name).map(|(at, _)| at).find(|&at| {
        lower[at + name.len()..]
            .chars()
            .next()
            .is_some_and(|c| c == '>' || c.is_ascii_whitespace())
    })
}

/// Kotlin's `expect` and `actual` modifiers (multiplatform code) where the
/// grammar does not take them: `actual open class A` under an annotation line
/// and `internal actual constructor(` on the line after the class read as
/// expressions, and the class and its methods were lost to them.
fn platform_modifiers(source: &str) -> Vec<Range<usize>> {
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
            let followed = FOLLOWERS.iter().any(|f| starts_with_word(next, f));
            if before_ok && spaced && followed {
                blanks.push(at..at + word.len());
            }
        }
    }
    blanks
}

/// Kotlin annotations that open a line before a primary constructor with a
/// modifier (`class A\n  @Inject internal constructor(`, `@PublishedApi
/// internal constructor(`): the grammar took the constructor for an
/// expression, and the class body for a lambda.
fn constructor_annotations(source: &str) -> Vec<Range<usize>> {
    const MODIFIERS: &[&str] = &["internal", "public", "private", "protected", "actual", "expect"];
    let mut blanks = Vec::new();
    for (at, code) in indented_lines(source) {
        if !code.starts_with('@') {
            continue;
        }
        // The annotations and modifiers up to `constructor`, on this line and the next.
        let mut rest = &source[at..];
        let mut end = at;
        let mut modified = false;
        loop {
            rest = rest.trim_start();
            if let Some(annotation) = annotation_len(rest) {
                end = source.len() - rest.len() + annotation;
                rest = &rest[annotation..];
            } else if let Some(word) = MODIFIERS.iter().find(|m| starts_with_word(rest, m)) {
                rest = &rest[word.len()..];
                modified = true;
            } else {
                break;
            }
        }
        // Without a modifier (`@JvmOverloads\n constructor(`) the grammar reads it.
        if starts_with_word(rest, "constructor") && modified && end > at {
            blanks.push(at..end);
        }
    }
    blanks
}

/// The length of the annotation `text` starts with (`@Name`, `@a.b.Name(...)`
/// with its arguments on one line), if it does.
fn annotation_len(text: &str) -> Option<usize> {
    let name = text.strip_prefix('@')?;
    let name_len = name
        .find(|c: char| !(is_name_char(c) || c == '.'))
        .unwrap_or(name.len());
    if name_len == 0 {
        return None;
    }
    let after = &name[name_len..];
    if !after.starts_with('(') {
        return Some(1 + name_len);
    }
    let mut depth = 0;
    for (i, c) in after.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            '\n' => return None,
            _ => {}
        }
        if depth == 0 {
            return Some(1 + name_len + i + 1);
        }
    }
    None
}

/// Kotlin annotations the grammar reads as an expression, not as the
/// declaration's: any before an `enum class`, `annotation class` or `fun
/// interface` (`@Target(AnnotationTarget.FIELD)\nannotation class
/// StartStop`: the rest of the file was lost with them), and those before a
/// top-level declaration (`@OptIn(X::class)\npublic interface SharedFlow`
/// parsed as an annotated expression and a bare interface, its doc
/// parted from it). Each becomes a block comment of its length, so the
/// declaration keeps its doc above them.
fn annotations_commented(text: Cow<'_, str>) -> Cow<'_, str> {
    const AFTER_ANNOTATIONS: &[&str] = &["enum class", "annotation class", "fun interface"];
    let lines: Vec<(usize, &str)> = indented_lines(&text).collect();
    let mut commented: Vec<Range<usize>> = Vec::new();
    for (i, &(at, code)) in lines.iter().enumerate() {
        let (own, rest) = leading_annotations(at, code);
        let top_level = at == 0 || text.as_bytes()[at - 1] == b'\n';
        let declaration = rest.starts_with(|c: char| c.is_alphabetic());
        if AFTER_ANNOTATIONS.iter().any(|k| starts_with_word(rest, k)) {
            // Those on its own line too (`@Retention(RUNTIME) annotation class`).
            commented.extend(own);
        } else if !(top_level && declaration) {
            continue;
        }
        // The lines of annotations alone above it. Not those on a top-level
        // declaration's own line: a comment before `internal val` on its line
        // cost the statement after it.
        for &(above_at, above) in lines[..i].iter().rev() {
            let (spans, rest) = leading_annotations(above_at, above.trim_end());
            if spans.is_empty() || !rest.is_empty() {
                break;
            }
            commented.extend(spans);
        }
    }
    // A comment needs four bytes, and ends at no `*/` inside (nor opens a
    // nested one); only ASCII bytes are replaced.
    commented.retain(|r| {
        let span = &text[r.clone()];
        let ends_ascii = |b: &[u8]| b.iter().all(u8::is_ascii);
        span.len() >= 4
            && !span.contains("*/")
            && !span.contains("/*")
            && ends_ascii(&span.as_bytes()[..2])
            && ends_ascii(&span.as_bytes()[span.len() - 2..])
    });
    if commented.is_empty() {
        return text;
    }
    let mut bytes = text.into_owned().into_bytes();
    for range in commented {
        bytes[range.start..range.start + 2].copy_from_slice(b"/*");
        bytes[range.end - 2..range.end].copy_from_slice(b"*/");
    }
    String::from_utf8(bytes).expect("ASCII replaced by ASCII").into()
}

/// The annotations `code` (at offset `at` of the text) opens with, as
/// ranges of the text, and what follows them.
fn leading_annotations(at: usize, code: &str) -> (Vec<Range<usize>>, &str) {
    let mut spans = Vec::new();
    let mut rest = code;
    while let Some(len) = annotation_len(rest) {
        let start = at + code.len() - rest.len();
        spans.push(start..start + len);
        rest = rest[len..].trim_start_matches([' ', '\t']);
    }
    (spans, rest)
}

/// Each line of `text` from its first character after the indentation, with
/// that character's offset in `text`.
fn indented_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.split_inclusive('\n').scan(0, |offset, line| {
        let code = line.trim_start_matches([' ', '\t']);
        let at = *offset + line.len() - code.len();
        *offset += line.len();
        Some((at, code))
    })
}

/// A character of a name (an identifier or a keyword).
fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Whether `text` starts with `word` as a whole word.
fn starts_with_word(text: &str, word: &str) -> bool {
    text.strip_prefix(word)
        .is_some_and(|after| !after.starts_with(is_name_char))
}

/// Kotlin names the grammar reads as keywords at the start of a line, where
/// the class around them was lost to the error: a modifier used as a
/// variable (`open = isOpen`, `set += bit`, `suspend = { ... }`) and a name
/// that starts as the operator `in` or `as` (`in1.close()`). Their first
/// letter becomes `_`, so the line reads as the name it is.
fn names_read_as_keywords_renamed(text: Cow<'_, str>) -> Cow<'_, str> {
    const READ_AS_MODIFIERS: &[&str] = &[
        "abstract",
        "by",
        "crossinline",
        "dynamic",
        "external",
        "final",
        "get",
        "infix",
        "inline",
        "internal",
        "lateinit",
        "noinline",
        "open",
        "override",
        "private",
        "protected",
        "public",
        "sealed",
        "set",
        "suspend",
        "tailrec",
        "vararg",
        "where",
    ];
    // What follows a name used as one, never a modifier.
    const NAME_USES: &[&str] = &[".", "?.", "[", "!!", "++", "--", "+=", "-=", "*=", "/=", "%="];
    let mut renamed = Vec::new();
    for (at, code) in indented_lines(&text) {
        let word = &code[..code.find(|c: char| !is_name_char(c)).unwrap_or(code.len())];
        let rest = code[word.len()..].trim_start_matches([' ', '\t']);
        let assigned = rest.starts_with('=') && !rest.starts_with("==");
        let as_modifier =
            READ_AS_MODIFIERS.contains(&word) && (assigned || NAME_USES.iter().any(|u| rest.starts_with(u)));
        let as_operator = ["in", "as"].iter().any(|op| {
            word.strip_prefix(op)
                .is_some_and(|tail| tail.starts_with(|c: char| c.is_ascii_digit() || c == '_'))
        });
        if as_modifier || as_operator {
            renamed.push(at);
        }
    }
    if renamed.is_empty() {
        return text;
    }
    let mut bytes = text.into_owned().into_bytes();
    for at in renamed {
        bytes[at] = b'_';
    }
    // Each replaced byte was an ASCII letter.
    String::from_utf8(bytes).expect("ASCII replaced by ASCII").into()
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

/// `source` with the byte `ranges` (whole characters of code) replaced by
/// spaces, line breaks kept, so rows and byte offsets hold.
fn blanked(source: &str, ranges: Vec<Range<usize>>) -> Cow<'_, str> {
    if ranges.is_empty() {
        return source.into();
    }
    let mut text = source.as_bytes().to_vec();
    for range in ranges {
        text[range].iter_mut().filter(|b| **b != b'\n').for_each(|b| *b = b' ');
    }
    String::from_utf8(text).map_or(source.into(), Cow::Owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_parses_as_the_code_of_its_scripts() {
        // A `>` inside a quoted attribute does not end the tag.
        let source = "<script setup lang=\"ts\" generic=\"T extends Record<string, any>\">\nconst a = 1\n</script>\n\n<template><p>{{ a }}</p></template>\n<SCRIPT>\nlet b = 2\n</SCRIPT>\n";
        let text = outside_scripts_blanked(source);
        assert_eq!(text.len(), source.len());
        let lines: Vec<&str> = text.lines().collect();
        let code: Vec<(usize, &str)> = lines
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .collect();
        assert_eq!(code, [(1, "const a = 1"), (6, "let b = 2")], "{text:?}");
    }
}
