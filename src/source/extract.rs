//! Extraction: the symbols and references of one file, from the parse tree
//! that chunking already built.
//!
//! Symbols are the named definitions of `chunks.scm` (so chunks and the graph
//! agree on what a definition is); `tags.scm` adds references (calls,
//! constructors, inheritance, imports) and may add a `@container` (e.g. a Go
//! method's receiver type) or `@self` (its receiver variable) to a definition.

use std::collections::BTreeMap;

use anyhow::Result;
use tree_sitter::{Node, Query, QueryCursor, StreamingIterator};

use crate::source::lang::Language;

/// A definition found by chunking, flattened in source order (pre-order).
pub struct DefSpan<'a> {
    pub start_byte: usize,
    pub end_byte: usize,
    pub start_line: u32,
    pub end_line: u32,
    /// The line of the definition's name (its signature).
    pub line: u32,
    pub kind: &'a str,
    pub name: Option<&'a str>,
    /// Index of the enclosing definition in the same list.
    pub parent: Option<usize>,
}

/// The graph rows of one file version.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileGraph {
    pub symbols: Vec<SymbolRow>,
    pub refs: Vec<RefRow>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolRow {
    pub name: String,
    pub kind: String,
    /// Name of the enclosing class, struct, impl, module... if any.
    pub container: Option<String>,
    pub line: u32,
    pub start_line: u32,
    pub end_line: u32,
    pub start_byte: u32,
    pub end_byte: u32,
    /// Index of the enclosing symbol in [`FileGraph::symbols`].
    pub parent: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefRow {
    /// The referenced name (for imports: the imported name, if any).
    pub name: String,
    /// call, method_call, constructor, inherits, implements or import.
    pub kind: &'static str,
    /// The object of a method call (`self` for the method's own receiver).
    pub receiver: Option<String>,
    /// For imports: the module or path imported from.
    pub module: Option<String>,
    /// For imports: the local name given with `as`.
    pub alias: Option<String>,
    pub line: u32,
    /// Index of the innermost enclosing symbol in [`FileGraph::symbols`].
    pub caller: Option<usize>,
}

pub(crate) use crate::source::chunk::{CONTAINER_KINDS, METHOD_OWNER_KINDS};

/// Bumped when extraction changes what it stores (part of the chunking fingerprint).
pub const EXTRACTOR_VERSION: u32 = 1;

/// Words that name the current object in a method.
pub const SELF_WORDS: &[&str] = &["self", "this", "$this", "cls", "Self", "@"];

/// Extracts the graph of a file whose definitions chunking found. `None` for
/// languages without a `tags.scm`.
pub fn extract(lang: &Language, root: Node, source: &str, defs: &[DefSpan]) -> Result<Option<FileGraph>> {
    let Some(query) = lang.tags_query() else {
        return Ok(None);
    };
    extract_with(query?, root, source, defs).map(Some)
}

/// The symbols [`extract`] finds, without the references.
pub fn symbols(lang: &Language, root: Node, source: &str, defs: &[DefSpan]) -> Result<Option<Vec<SymbolRow>>> {
    let Some(query) = lang.tags_definitions_query() else {
        return Ok(None);
    };
    Ok(Some(extract_with(query?, root, source, defs)?.symbols))
}

fn extract_with(query: &Query, root: Node, source: &str, defs: &[DefSpan]) -> Result<FileGraph> {
    let (mut graph, mut self_names) = definition_symbols(defs);
    let found = references(query, root, source, &mut graph, &mut self_names);
    for ((pos, _), (_, mut row, _)) in found {
        row.caller = innermost(&graph.symbols, pos);
        // The method's own receiver (Go's `s` in `func (s *Server)`) is `self`.
        if let (Some(recv), Some(caller)) = (&row.receiver, row.caller) {
            let mut up = Some(caller);
            while let Some(i) = up {
                if self_names[i].as_deref() == Some(recv.as_str()) {
                    row.receiver = Some("self".to_string());
                    break;
                }
                up = graph.symbols[i].parent;
            }
        }
        graph.refs.push(row);
    }
    Ok(graph)
}

/// The symbols of the chunk's named definitions, each under its nearest
/// named ancestor, with a slot per symbol for the name its methods call
/// themselves by (filled from the tags query).
fn definition_symbols(defs: &[DefSpan]) -> (FileGraph, Vec<Option<String>>) {
    let mut graph = FileGraph::default();
    // Named definitions become symbols; the parent of a symbol is its nearest named ancestor.
    let mut symbol_of: Vec<Option<usize>> = Vec::with_capacity(defs.len());
    let mut self_names: Vec<Option<String>> = Vec::new();
    for def in defs {
        let Some(name) = def.name.filter(|n| !n.is_empty()) else {
            symbol_of.push(None);
            continue;
        };
        let mut parent = def.parent;
        while let Some(p) = parent {
            if symbol_of[p].is_some() {
                break;
            }
            parent = defs[p].parent;
        }
        let parent_def = def.parent.map(|p| &defs[p]);
        let kind = match parent_def {
            Some(p) if def.kind == "function" && METHOD_OWNER_KINDS.contains(&p.kind) => "method",
            _ => def.kind,
        };
        let mut container = None;
        let mut up = def.parent;
        while let Some(p) = up {
            if CONTAINER_KINDS.contains(&defs[p].kind) && defs[p].name.is_some() {
                container = defs[p].name.map(str::to_string);
                break;
            }
            up = defs[p].parent;
        }
        symbol_of.push(Some(graph.symbols.len()));
        self_names.push(None);
        graph.symbols.push(SymbolRow {
            name: name.to_string(),
            kind: kind.to_string(),
            container,
            line: def.line,
            start_line: def.start_line,
            end_line: def.end_line,
            start_byte: def.start_byte as u32,
            end_byte: def.end_byte as u32,
            parent: parent.and_then(|p| symbol_of[p]),
        });
    }
    (graph, self_names)
}

/// A reference found by the tags query: (captures, row, pattern index),
/// keyed by the position of its name (or module) and its kind.
type FoundRefs = BTreeMap<(usize, &'static str), (usize, RefRow, usize)>;

/// The references the tags query finds; its definition patterns add the
/// container and the self name to the symbols already there.
fn references(
    query: &Query,
    root: Node,
    source: &str,
    graph: &mut FileGraph,
    self_names: &mut [Option<String>],
) -> FoundRefs {
    let names = query.capture_names();
    let bytes = source.as_bytes();
    let text = |n: Node| n.utf8_text(bytes).unwrap_or("").to_string();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, root, bytes);
    // Keyed by the position of the name (or module) so that two patterns
    // matching one reference yield one; the match with more captures wins.
    let mut found = FoundRefs::new();
    while let Some(m) = matches.next() {
        let mut kind = None;
        let mut node = None;
        let (mut name, mut receiver, mut module, mut alias, mut container, mut self_name) =
            (None, None, None, None, None, None);
        for cap in m.captures() {
            match names[cap.index as usize] {
                "name" => name = Some(cap.node),
                "receiver" => receiver = Some(cap.node),
                "module" => module = Some(cap.node),
                "alias" => alias = Some(cap.node),
                "container" => container = Some(cap.node),
                "self" => self_name = Some(cap.node),
                other => {
                    if let Some(k) = other.strip_prefix("reference.") {
                        kind = Some(("reference", k));
                        node = Some(cap.node);
                    } else if let Some(k) = other.strip_prefix("definition.") {
                        kind = Some(("definition", k));
                        node = Some(cap.node);
                    }
                }
            }
        }
        let (Some((what, k)), Some(node)) = (kind, node) else {
            continue;
        };
        if what == "definition" {
            // Adds to the chunk definition with the same node.
            let found = graph
                .symbols
                .iter()
                .position(|s| s.start_byte as usize == node.start_byte() && s.end_byte as usize == node.end_byte());
            if let Some(i) = found {
                if let Some(c) = container {
                    graph.symbols[i].container = Some(clean_type(&text(c)));
                }
                self_names[i] = self_name.map(text);
            }
            continue;
        }
        let kind: &'static str = match (k, receiver.is_some()) {
            ("call", true) => "method_call",
            ("call", false) => "call",
            ("constructor", _) => "constructor",
            ("inherits", _) => "inherits",
            ("implements", _) => "implements",
            ("import", _) => "import",
            _ => continue,
        };
        let module_text = module.map(|n| unquote(&text(n)));
        let alias_text = alias.map(text);
        let ref_name = match (name, &module_text) {
            (Some(n), _) => text(n),
            (None, Some(m)) if kind == "import" => module_name(m).to_string(),
            _ => continue,
        };
        if ref_name.is_empty() {
            continue;
        }
        let anchor = name.or(module).unwrap_or(node);
        let captures = m.captures().len();
        let row = RefRow {
            name: ref_name,
            kind,
            receiver: receiver.map(|r| one_line(&text(r))),
            module: module_text,
            alias: alias_text,
            line: anchor.start_position().row as u32 + 1,
            caller: None,
        };
        // A call with a receiver and one without at the same name are one
        // reference (inside a Rust macro's tokens both patterns match `a.f(x)`).
        let key = (anchor.start_byte(), if kind == "method_call" { "call" } else { kind });
        let better = match found.get(&key) {
            Some((c, _, pattern)) => captures > *c || (captures == *c && m.pattern_index < *pattern),
            None => true,
        };
        if better {
            found.insert(key, (captures, row, m.pattern_index));
        }
    }
    found
}

/// The innermost symbol whose node contains byte `pos` (symbols are in pre-order).
fn innermost(symbols: &[SymbolRow], pos: usize) -> Option<usize> {
    let after = symbols.partition_point(|s| s.start_byte as usize <= pos);
    let mut i = after.checked_sub(1)?;
    loop {
        let s = &symbols[i];
        if (s.start_byte as usize) <= pos && pos < s.end_byte as usize {
            return Some(i);
        }
        // Definitions nest, so any definition containing pos is an ancestor of
        // the last one that starts before it.
        i = s.parent?;
    }
}

fn one_line(s: &str) -> String {
    let joined: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    joined.chars().take(120).collect()
}

/// `"path"`, `'path'` and `<path>` without their quotes.
fn unquote(s: &str) -> String {
    s.trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '<' || c == '>' || c == '`')
        .to_string()
}

/// A type name without generic arguments or pointer marks.
fn clean_type(s: &str) -> String {
    let s = s.trim().trim_start_matches('*');
    s.split(['<', '[']).next().unwrap_or(s).trim().to_string()
}

/// The last component of a module path (`a.b.c`, `a/b/c`, `a::b::c`, `a\b\c`).
pub fn last_component(module: &str) -> &str {
    module
        .rsplit(['.', '/', ':', '\\'])
        .find(|c| !c.is_empty())
        .unwrap_or(module)
}

const SOURCE_EXTENSIONS: &[&str] = &[
    "h", "hh", "hpp", "hxx", "c", "cc", "cpp", "js", "jsx", "mjs", "cjs", "ts", "tsx", "rb", "py", "php", "go",
];

/// The name a module binds: its last component without a source extension
/// (`"util.h"` → `util`, `./api.js` → `api`, `a.b.c` → `c`).
pub fn module_name(module: &str) -> &str {
    let trimmed = module.trim_end_matches('/');
    let stem = match trimmed.rsplit_once('.') {
        Some((stem, ext)) if SOURCE_EXTENSIONS.contains(&ext) && !stem.is_empty() && !stem.ends_with('.') => stem,
        _ => trimmed,
    };
    last_component(stem)
}
