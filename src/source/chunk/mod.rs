//! Cutting a file into chunks: the units that are indexed, embedded and returned.
//!
//! Definitions come from the language's `chunks.scm` query (captures named
//! `@definition.<kind>` with an optional `@name`). Containers (classes, impls,
//! sections...) give a header chunk and one chunk per member (a bare `impl Foo {`
//! line gives none: it opens its first member's chunk); functions are one
//! chunk each; whatever no definition covers (imports, top-level statements)
//! becomes `module` chunks, so every line of a file belongs to some chunk.
//! Anything longer than the limits is split at syntax boundaries with a few
//! lines of overlap. Files without a grammar are cut into line windows.

use std::collections::HashSet;

use anyhow::{Context, Result};
use tree_sitter::{Node, Parser};

use crate::source::extract::FileGraph;
use crate::source::extract::{DefSpan, SymbolRow};
use crate::source::lang::Language;

mod definitions;
mod parse_text;

use definitions::find_definitions;
use parse_text::parse_tree;

/// Bumped when the chunking algorithm changes what it produces (a change of
/// the query files changes the fingerprint by itself). 5: doc comments
/// (`@doc`) recorded on each symbol. 6: a `.h` header written in C++ is parsed
/// as C++ (`lang::for_source`). 7: text the grammar cannot read blanked
/// (`parse_text`), windows not cut below a comment line, comments claimed
/// from a body that took them in and from above a definition's parent. 8:
/// Rust items inside pass-through macros (`cfg_rt! { ... }`) parsed. 9: a
/// constant names its members (a Go `const (...)` block's specs) and contains
/// the functions it holds; a macro body is checked on its own. 10: the
/// definitions inside a member named too; a comment after code on its row is
/// not the next definition's (`class E < Error # :nodoc:` kept its class).
/// 11: a docstring below a definition (a Python constant's) ends it. 12-16:
/// Kotlin names read as keywords renamed and annotations commented in the
/// parse text; a `/** ... */` block a blank line above its definition is its
/// doc. 17: a Vue or Svelte `<script>` tag ends at the first `>` outside
/// quotes (`generic="T extends Record<string, any>"`).
const CHUNKER_VERSION: u32 = 17;

/// Identifies the chunking rules in effect (algorithm, queries, limits); an
/// index built under other rules is re-chunked.
pub fn chunking_fingerprint(limits: &ChunkLimits) -> String {
    format!(
        "v{CHUNKER_VERSION}-g{}-{:016x}-{}-{}-{}-p{}-{}-{}",
        crate::source::extract::EXTRACTOR_VERSION,
        crate::source::lang::queries_fingerprint(),
        limits.max_lines,
        limits.max_bytes,
        limits.overlap_lines,
        limits.tiny_lines,
        limits.pack_max_lines,
        limits.pack_max_bytes
    )
}

/// Limits that decide when a chunk is split.
#[derive(Debug, Clone, Copy)]
pub struct ChunkLimits {
    pub max_lines: usize,
    pub max_bytes: usize,
    /// Lines repeated at the start of the next part when a chunk is split.
    pub overlap_lines: usize,
    /// A function or method of at most this many lines is packed with its
    /// neighbours: alone it has too few words for BM25 or a vector to say
    /// what it does (a getter, a one-line wrapper). 0 packs nothing.
    pub tiny_lines: usize,
    /// The most lines and bytes a packed chunk may reach.
    pub pack_max_lines: usize,
    pub pack_max_bytes: usize,
}

impl Default for ChunkLimits {
    fn default() -> Self {
        ChunkLimits {
            max_lines: 80,
            max_bytes: 4000,
            overlap_lines: 3,
            tiny_lines: 6,
            pack_max_lines: 40,
            pack_max_bytes: 1000,
        }
    }
}

/// One indexed unit of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// First line, 1-based inclusive.
    pub start_line: u32,
    /// Last line, 1-based inclusive.
    pub end_line: u32,
    pub start_byte: u32,
    pub end_byte: u32,
    pub kind: String,
    /// The definition the chunk is (part of), if any; a packed chunk has all
    /// the definitions in it, in source order.
    pub symbols: Vec<ChunkSymbol>,
    /// Signatures of the enclosing definitions (e.g. the class of a method),
    /// outermost first, one per line.
    pub context: Option<String>,
    /// The exact source text of the chunk's lines.
    pub text: String,
    /// Lines (1-based inclusive, file lines, within the chunk's) of every
    /// comment and docstring in it (`@doc` captures, whoever's doc they are):
    /// text about the code, not the code.
    pub comments: Vec<(u32, u32)>,
}

/// A named definition within a chunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkSymbol {
    pub name: String,
    /// 1-based inclusive, within the chunk's lines.
    pub start_line: u32,
    pub end_line: u32,
    /// Its doc comment's lines (1-based inclusive, file lines, within the
    /// chunk's): the `@doc` captures of `chunks.scm` that end right above
    /// the definition (no blank line between, but one below a `/** ... */`
    /// block; attributes may come between), else the one its pattern
    /// captured inside it (a Python docstring).
    pub doc: Option<(u32, u32)>,
}

impl Chunk {
    /// The chunk's names for display: `parse`, or `get, set` when packed.
    pub fn symbol_label(&self) -> Option<String> {
        let names: Vec<&str> = self.symbols.iter().map(|s| s.name.as_str()).collect();
        (!names.is_empty()).then(|| names.join(", "))
    }

    /// The doc comments of its symbols as stored ([`parse_doc_lines`] reads
    /// it back): one entry per symbol of [`Self::symbol_label`], in order,
    /// `a-b` (lines of the chunk, 1-based inclusive) or empty, joined by
    /// `,`; `None` when no symbol has one.
    pub fn doc_label(&self) -> Option<String> {
        self.symbols.iter().any(|s| s.doc.is_some()).then(|| {
            let relative = |(a, b): (u32, u32)| format!("{}-{}", a + 1 - self.start_line, b + 1 - self.start_line);
            let entries: Vec<String> = self
                .symbols
                .iter()
                .map(|s| s.doc.map(relative).unwrap_or_default())
                .collect();
            entries.join(",")
        })
    }
}

impl Chunk {
    /// [`Self::comments`] as stored ([`parse_doc_lines`] reads it back):
    /// `a-b` (lines of the chunk, 1-based inclusive) joined by `,`; `None`
    /// when it has none.
    pub fn comments_label(&self) -> Option<String> {
        (!self.comments.is_empty()).then(|| {
            let relative = |&(a, b): &(u32, u32)| format!("{}-{}", a + 1 - self.start_line, b + 1 - self.start_line);
            self.comments.iter().map(relative).collect::<Vec<_>>().join(",")
        })
    }
}

/// The doc comment lines of each symbol of a chunk, from [`Chunk::doc_label`]
/// (or of each comment, from [`Chunk::comments_label`]),
/// shifted to start at `first_line` (1 for lines of the chunk's text, the
/// chunk's start line for file lines). Malformed entries read as none.
pub fn parse_doc_lines(label: Option<&str>, first_line: u32) -> Vec<Option<(u32, u32)>> {
    let Some(label) = label else {
        return Vec::new();
    };
    label
        .split(',')
        .map(|entry| {
            let (a, b) = entry.split_once('-')?;
            let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
            (a >= 1 && a <= b).then(|| (a + first_line - 1, b + first_line - 1))
        })
        .collect()
}

/// Whether 1-based `line` lies in one of `docs` ([`parse_doc_lines`]).
pub fn in_doc(docs: &[Option<(u32, u32)>], line: u32) -> bool {
    docs.iter().flatten().any(|&(a, b)| (a..=b).contains(&line))
}

/// Kinds of definitions that tiny ones are packed with.
const PACKABLE_KINDS: &[&str] = &["function", "method", "constant"];

/// Kinds whose members become chunks of their own (and, in the code graph,
/// have it as their container).
pub(crate) const CONTAINER_KINDS: &[&str] = &[
    "class",
    "struct",
    "enum",
    "interface",
    "trait",
    "impl",
    "module",
    "namespace",
    "object",
    "section",
    "union",
];

/// A function defined directly inside one of these is a method.
pub(crate) const METHOD_OWNER_KINDS: &[&str] = &["class", "struct", "enum", "interface", "trait", "impl", "object"];

/// Chunks a file. `lang` is `None` for files without a grammar.
pub fn chunk_source(lang: Option<&Language>, source: &str, limits: &ChunkLimits) -> Result<Vec<Chunk>> {
    Ok(chunk_and_graph(lang, source, limits, false)?.0)
}

/// Chunks a file and, when `graph` is set and the language has a `tags.scm`,
/// extracts its code graph from the same parse tree.
pub fn chunk_and_graph(
    lang: Option<&Language>,
    source: &str,
    limits: &ChunkLimits,
    graph: bool,
) -> Result<(Vec<Chunk>, Option<FileGraph>)> {
    let lines = Lines::new(source);
    if lines.count() == 0 {
        return Ok((Vec::new(), None));
    }
    match lang {
        Some(lang) => chunk_with_grammar(lang, source, &lines, limits, graph),
        None => Ok((chunk_plain_text(source, &lines, limits), None)),
    }
}

/// Byte offsets of line starts, for converting rows to spans.
struct Lines {
    starts: Vec<usize>,
    len: usize,
}

impl Lines {
    fn new(source: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(source.match_indices('\n').map(|(i, _)| i + 1));
        if starts.last() == Some(&source.len()) {
            starts.pop();
        }
        if source.is_empty() {
            starts.clear();
        }
        Lines {
            starts,
            len: source.len(),
        }
    }

    fn count(&self) -> usize {
        self.starts.len()
    }

    fn start(&self, row: usize) -> usize {
        self.starts[row]
    }

    fn end(&self, row: usize) -> usize {
        self.starts.get(row + 1).copied().unwrap_or(self.len)
    }

    fn text<'s>(&self, source: &'s str, row: usize) -> &'s str {
        &source[self.start(row)..self.end(row)]
    }
}

/// A definition found by the query, with its rows after attaching leading
/// comments and decorators.
struct Def<'t> {
    node: Node<'t>,
    kind: String,
    name: Option<String>,
    /// Row of the `@name` capture: the definition's signature line.
    name_row: Option<usize>,
    /// Index of the query pattern that matched; on a tie the earlier pattern wins.
    pattern: usize,
    start_row: usize,
    end_row: usize,
    /// Rows of its doc comment (see [`ChunkSymbol::doc`]).
    doc: Option<(usize, usize)>,
    children: Vec<Def<'t>>,
}

fn end_row(node: &Node) -> usize {
    let end = node.end_position();
    if end.column == 0 && end.row > node.start_position().row {
        end.row - 1
    } else {
        end.row
    }
}

fn chunk_with_grammar(
    lang: &Language,
    source: &str,
    lines: &Lines,
    limits: &ChunkLimits,
    graph: bool,
) -> Result<(Vec<Chunk>, Option<FileGraph>)> {
    let tree = parse(lang, source)?;
    let root = tree.root_node();
    let (defs, comment_rows) = find_definitions(lang, root, source)?;
    let mut out = ChunkSink::new(source, lines, limits);
    emit_level(&mut out, root, &defs, 0, lines.count() - 1, "module", None, &[]);
    let mut chunks = out.finish();
    for chunk in &mut chunks {
        let (first, last) = (chunk.start_line as usize - 1, chunk.end_line as usize - 1);
        chunk.comments = comment_rows
            .iter()
            .map(|&(a, b)| (a.max(first), b.min(last)))
            .filter(|(a, b)| a <= b)
            .map(|(a, b)| (a as u32 + 1, b as u32 + 1))
            .collect();
    }
    let graph = match graph {
        true => {
            let mut spans = Vec::new();
            def_spans(&defs, None, &mut spans);
            // A broken tags query loses the graph of the file, never its chunks.
            crate::source::extract::extract(lang, root, source, &spans).unwrap_or_else(|e| {
                tracing::warn!("{e:#}");
                None
            })
        }
        false => None,
    };
    Ok((chunks, graph))
}

fn parse(lang: &Language, source: &str) -> Result<tree_sitter::Tree> {
    let mut parser = Parser::new();
    parser
        .set_language(&lang.grammar())
        .with_context(|| format!("loading the {} grammar", lang.name))?;
    parse_tree(lang, &mut parser, source).with_context(|| format!("parsing {} source", lang.name))
}

/// The code graph's symbols of `source` (as [`chunk_and_graph`] finds them),
/// without chunks or references; empty for a language without a graph.
pub fn graph_symbols(lang: &Language, source: &str) -> Result<Vec<SymbolRow>> {
    let tree = parse(lang, source)?;
    let root = tree.root_node();
    let (defs, _) = find_definitions(lang, root, source)?;
    let mut spans = Vec::new();
    def_spans(&defs, None, &mut spans);
    Ok(crate::source::extract::symbols(lang, root, source, &spans)?.unwrap_or_default())
}

/// The definitions in source order, for the code graph.
fn def_spans<'d>(defs: &'d [Def], parent: Option<usize>, out: &mut Vec<DefSpan<'d>>) {
    for def in defs {
        let index = out.len();
        let start_line = def.node.start_position().row as u32 + 1;
        out.push(DefSpan {
            start_byte: def.node.start_byte(),
            end_byte: def.node.end_byte(),
            start_line,
            end_line: def.end_row as u32 + 1,
            line: def.name_row.map_or(start_line, |r| r as u32 + 1),
            kind: &def.kind,
            name: def.name.as_deref(),
            parent,
        });
        def_spans(&def.children, Some(index), out);
    }
}

/// Collects chunks in order and merges trivial gaps into their neighbours.
struct ChunkSink<'s> {
    source: &'s str,
    lines: &'s Lines,
    limits: &'s ChunkLimits,
    chunks: Vec<Chunk>,
    /// Rows no chunk took yet: whitespace or punctuation, or a bare `impl` line.
    pending_trivial: Option<(usize, usize)>,
}

struct Span<'a> {
    start_row: usize,
    end_row: usize,
    kind: &'a str,
    symbol: Option<&'a str>,
    context: &'a [String],
    /// Rows of the symbol's doc comment.
    doc: Option<(usize, usize)>,
    /// Definitions inside a definition that is no container (the specs of a
    /// Go `const (...)` block): named among the chunk's symbols.
    members: &'a [Def<'a>],
}

impl<'s> ChunkSink<'s> {
    fn new(source: &'s str, lines: &'s Lines, limits: &'s ChunkLimits) -> Self {
        ChunkSink {
            source,
            lines,
            limits,
            chunks: Vec::new(),
            pending_trivial: None,
        }
    }

    /// Rows the next chunk takes in at its start.
    fn hold(&mut self, start_row: usize, end_row: usize) {
        self.pending_trivial = Some(match self.pending_trivial {
            Some((s, _)) => (s, end_row),
            None => (start_row, end_row),
        });
    }

    fn is_trivial(&self, start_row: usize, end_row: usize) -> bool {
        (start_row..=end_row).all(|row| is_closing_line(self.lines.text(self.source, row)))
    }

    /// Rows no definition covers: trivial ones (blank lines, closing braces)
    /// join the previous chunk, the rest become chunks of their own.
    fn gap(
        &mut self,
        start_row: usize,
        end_row: usize,
        node: Node,
        span_kind: &str,
        symbol: Option<&str>,
        context: &[String],
    ) {
        if start_row > end_row {
            return;
        }
        if self.is_trivial(start_row, end_row) {
            if let Some(last) = self.chunks.last_mut() {
                if last.end_line as usize == start_row {
                    let end_byte = self.lines.end(end_row);
                    last.text.push_str(&self.source[last.end_byte as usize..end_byte]);
                    last.end_line = end_row as u32 + 1;
                    last.end_byte = end_byte as u32;
                    return;
                }
            }
            self.hold(start_row, end_row);
            return;
        }
        let span = Span {
            start_row,
            end_row,
            kind: span_kind,
            symbol,
            context,
            doc: None,
            members: &[],
        };
        self.emit(span, Some(node));
    }

    /// Emits one span, split at syntax boundaries under `node` if too long.
    fn emit(&mut self, span: Span, node: Option<Node>) {
        let mut start_row = span.start_row;
        if let Some((s, _)) = self.pending_trivial.take() {
            start_row = start_row.min(s);
        }
        let bytes = self.lines.end(span.end_row) - self.lines.start(start_row);
        let rows = span.end_row - start_row + 1;
        if rows <= self.limits.max_lines && bytes <= self.limits.max_bytes {
            self.push(start_row, span.end_row, &span);
            return;
        }
        let boundaries = match node {
            Some(node) => syntax_boundaries(node, start_row, span.end_row, self.source, self.lines),
            None => blank_line_boundaries(self.source, self.lines, start_row, span.end_row),
        };
        for (s, e) in self.split(start_row, span.end_row, &boundaries) {
            self.push(s, e, &span);
        }
    }

    /// Cuts [start, end] into windows within the limits, preferring to cut
    /// where a boundary row starts; windows overlap by a few rows.
    fn split(&self, start: usize, end: usize, boundaries: &[usize]) -> Vec<(usize, usize)> {
        let mut windows = Vec::new();
        let mut s = start;
        loop {
            let mut limit = (s + self.limits.max_lines - 1).min(end);
            while limit > s && self.lines.end(limit) - self.lines.start(s) > self.limits.max_bytes {
                limit -= 1;
            }
            if limit >= end {
                windows.push((s, end));
                return windows;
            }
            // Cut before the last boundary that keeps the window within the limit,
            // unless that leaves a window of less than a quarter of the limit.
            let min_rows = (limit - s + 1) / 4;
            let cut = boundaries
                .iter()
                .rev()
                .copied()
                .find(|&b| b > s + min_rows && b <= limit + 1)
                .unwrap_or(limit + 1);
            windows.push((s, cut - 1));
            let overlap = self.limits.overlap_lines.min((cut - s) / 2);
            s = cut - overlap;
        }
    }

    fn push(&mut self, start_row: usize, end_row: usize, span: &Span) {
        let start_byte = self.lines.start(start_row);
        let end_byte = self.lines.end(end_row);
        let context = if span.context.is_empty() {
            None
        } else {
            Some(span.context.join("\n"))
        };
        // The part of a doc in these rows (a split definition's first part holds it).
        let doc_here = |doc: Option<(usize, usize)>| {
            doc.map(|(a, b)| (a.max(start_row), b.min(end_row)))
                .filter(|(a, b)| a <= b)
                .map(|(a, b)| (a as u32 + 1, b as u32 + 1))
        };
        let mut symbols: Vec<ChunkSymbol> = span
            .symbol
            .map(|name| ChunkSymbol {
                name: name.to_string(),
                start_line: start_row as u32 + 1,
                end_line: end_row as u32 + 1,
                doc: doc_here(span.doc),
            })
            .into_iter()
            .collect();
        // Members and the definitions inside them, in source order.
        let mut members: Vec<&Def> = span.members.iter().rev().collect();
        while let Some(member) = members.pop() {
            members.extend(member.children.iter().rev());
            let (first, last) = (member.start_row.max(start_row), member.end_row.min(end_row));
            if let (Some(name), true) = (member.name.as_deref(), first <= last) {
                symbols.push(ChunkSymbol {
                    name: name.to_string(),
                    start_line: first as u32 + 1,
                    end_line: last as u32 + 1,
                    doc: doc_here(member.doc),
                });
            }
        }
        self.chunks.push(Chunk {
            start_line: start_row as u32 + 1,
            end_line: end_row as u32 + 1,
            start_byte: start_byte as u32,
            end_byte: end_byte as u32,
            kind: span.kind.to_string(),
            symbols,
            context,
            text: self.source[start_byte..end_byte].to_string(),
            comments: Vec::new(),
        });
    }

    fn finish(mut self) -> Vec<Chunk> {
        // Trivial rows at the very end (or a file of nothing but those).
        if let Some((s, e)) = self.pending_trivial.take() {
            match self.chunks.last_mut() {
                Some(last) => {
                    let end_byte = self.lines.end(e);
                    last.text.push_str(&self.source[last.end_byte as usize..end_byte]);
                    last.end_line = e as u32 + 1;
                    last.end_byte = end_byte as u32;
                }
                None => {
                    let span = Span {
                        start_row: s,
                        end_row: e,
                        kind: "module",
                        symbol: None,
                        context: &[],
                        doc: None,
                        members: &[],
                    };
                    self.push(s, e, &span);
                }
            }
        }
        pack_tiny_definitions(self.chunks, self.source, self.limits)
    }
}

/// Joins each tiny function or method to the sibling before it (else the one
/// after it) when both are definitions of one kind in the same container,
/// adjacent, and the result stays within the packing limits.
fn pack_tiny_definitions(chunks: Vec<Chunk>, source: &str, limits: &ChunkLimits) -> Vec<Chunk> {
    let lines = |c: &Chunk| (c.end_line - c.start_line + 1) as usize;
    let packable = |c: &Chunk| !c.symbols.is_empty() && PACKABLE_KINDS.contains(&c.kind.as_str());
    let can_pack = |a: &Chunk, b: &Chunk| {
        (lines(a) <= limits.tiny_lines || lines(b) <= limits.tiny_lines)
            && a.end_line + 1 == b.start_line
            && a.context == b.context
            && a.kind == b.kind
            && packable(a)
            && packable(b)
            && (b.end_line - a.start_line + 1) as usize <= limits.pack_max_lines
            && (b.end_byte - a.start_byte) as usize <= limits.pack_max_bytes
    };
    let mut out: Vec<Chunk> = Vec::with_capacity(chunks.len());
    for chunk in chunks {
        match out.last_mut() {
            Some(prev) if can_pack(prev, &chunk) => {
                prev.symbols.extend(chunk.symbols);
                prev.end_line = chunk.end_line;
                prev.end_byte = chunk.end_byte;
                prev.text = source[prev.start_byte as usize..prev.end_byte as usize].to_string();
            }
            _ => out.push(chunk),
        }
    }
    out
}

/// A line that only closes something: blank, punctuation (`}`, `);`), a
/// closing keyword (`end`, `fi`, `done`) or a closing tag (`</div>`).
fn is_closing_line(line: &str) -> bool {
    let t = line.trim().trim_end_matches([';', ',', '.', ')']);
    if !t.chars().any(char::is_alphanumeric) {
        return true;
    }
    let closing_tag = t.starts_with("</")
        && t.ends_with('>')
        && t[2..t.len() - 1]
            .chars()
            .all(|c| c.is_alphanumeric() || c == '-' || c == ':');
    closing_tag
        || matches!(
            t,
            "end" | "fi" | "done" | "esac" | "endif" | "endfunction" | "endmodule" | "End"
        )
}

/// Emits the chunks of rows [start, end] that hold `defs` (sorted, disjoint
/// at this level); rows between them are gap chunks of `gap_kind`.
#[allow(clippy::too_many_arguments)]
fn emit_level(
    out: &mut ChunkSink,
    parent: Node,
    defs: &[Def],
    start: usize,
    end: usize,
    gap_kind: &str,
    gap_symbol: Option<&str>,
    context: &[String],
) {
    let mut cursor = start;
    for def in defs {
        // Two definitions on one row: the later one starts after the earlier.
        let def_start = def.start_row.max(cursor);
        if def_start > def.end_row || def.end_row > end {
            continue;
        }
        if def_start > cursor {
            out.gap(cursor, def_start - 1, parent, gap_kind, gap_symbol, context);
        }
        emit_def(out, def, def_start, parent_kind_of(gap_kind, gap_symbol), context);
        cursor = def.end_row + 1;
    }
    if cursor <= end {
        out.gap(cursor, end, parent, gap_kind, gap_symbol, context);
    }
}

/// The kind of the definition that owns a level, or None at file level.
fn parent_kind_of<'a>(gap_kind: &'a str, gap_symbol: Option<&str>) -> Option<&'a str> {
    gap_symbol.map(|_| gap_kind)
}

fn emit_def(out: &mut ChunkSink, def: &Def, start_row: usize, parent_kind: Option<&str>, context: &[String]) {
    let kind = match (def.kind.as_str(), parent_kind) {
        ("function", Some(p)) if METHOD_OWNER_KINDS.contains(&p) => "method",
        (k, _) => k,
    };
    let symbol = def.name.as_deref();
    // A constant holding functions (`const defaults = { transform: (d) => ... }`)
    // is their container; the specs of a `const (...)` block are its members.
    let is_container = CONTAINER_KINDS.contains(&kind)
        || (kind == "constant" && def.children.iter().any(|child| child.kind != def.kind));
    if !is_container || def.children.is_empty() {
        let span = Span {
            start_row,
            end_row: def.end_row,
            kind,
            symbol,
            context,
            doc: def.doc,
            members: if is_container { &[] } else { &def.children },
        };
        out.emit(span, Some(def.node));
        return;
    }
    let mut inner_context = context.to_vec();
    inner_context.push(signature_line(out.source, out.lines, def));
    // The container's own chunk runs from its start to the row before its first member.
    let first_member = def.children[0].start_row.max(start_row);
    if first_member == start_row + 1 && kind == "impl" {
        // A bare `impl Foo {` line defines nothing and answers nothing, yet as
        // a chunk of its own it outranked `Foo` and Foo's methods for Foo's
        // name: it opens its first member's chunk instead.
        out.hold(start_row, start_row);
    } else if first_member > start_row {
        let span = Span {
            start_row,
            end_row: first_member - 1,
            kind,
            symbol,
            context,
            doc: def.doc,
            members: &[],
        };
        out.emit(span, Some(def.node));
    }
    emit_level(
        out,
        def.node,
        &def.children,
        first_member,
        def.end_row,
        kind,
        symbol,
        &inner_context,
    );
}

/// The line that names a definition (else its first line that is not a
/// comment, attribute or decorator), as the context header of its members.
fn signature_line(source: &str, lines: &Lines, def: &Def) -> String {
    if let Some(row) = def.name_row {
        return lines.text(source, row).trim().chars().take(200).collect();
    }
    let node = def.node;
    let first = node.start_position().row;
    let is_preamble = |l: &str| {
        l.is_empty()
            || ["@", "#[", "//", "#", "/*", "*", "--", ";"]
                .iter()
                .any(|p| l.starts_with(p))
    };
    let row = (first..=end_row(&node))
        .find(|&r| !is_preamble(lines.text(source, r).trim()))
        .unwrap_or(first);
    lines.text(source, row).trim().chars().take(200).collect()
}

/// Rows where a syntax node starts, the places where a long span may be cut;
/// not a row right below a comment on a line of its own, which belongs to
/// what follows it (a cut there split `///` doc blocks from their members).
fn syntax_boundaries(node: Node, start: usize, end: usize, source: &str, lines: &Lines) -> Vec<usize> {
    let mut rows = Vec::new();
    let mut comment_ends = HashSet::new();
    let mut stack = vec![(node, 0usize)];
    while let Some((n, depth)) = stack.pop() {
        let row = n.start_position().row;
        if row > start && row <= end {
            rows.push(row);
        }
        if n.kind().contains("comment") && source[lines.start(row)..n.start_byte()].trim().is_empty() {
            comment_ends.insert(end_row(&n));
        }
        if depth < 3 {
            let mut c = n.walk();
            for child in n.named_children(&mut c) {
                if end_row(&child) >= start && child.start_position().row <= end {
                    stack.push((child, depth + 1));
                }
            }
        }
    }
    rows.retain(|row| !comment_ends.contains(&(row - 1)));
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Rows that follow a blank line: paragraph starts in plain text.
fn blank_line_boundaries(source: &str, lines: &Lines, start: usize, end: usize) -> Vec<usize> {
    (start + 1..=end)
        .filter(|&row| lines.text(source, row - 1).trim().is_empty() && !lines.text(source, row).trim().is_empty())
        .collect()
}

fn chunk_plain_text(source: &str, lines: &Lines, limits: &ChunkLimits) -> Vec<Chunk> {
    let mut out = ChunkSink::new(source, lines, limits);
    let span = Span {
        start_row: 0,
        end_row: lines.count() - 1,
        kind: "text",
        symbol: None,
        context: &[],
        doc: None,
        members: &[],
    };
    out.emit(span, None);
    out.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SOURCE: &str = r#"class Box:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v

    def total(self, items):
        result = 0
        for item in items:
            if item:
                result += item
        self.v = result
        return result


def free_a():
    return 1


def free_b():
    return 2
"#;

    /// (name, first line, last line)
    type Named = (String, u32, u32);

    /// (kind, first line, last line, definitions) of each chunk of SOURCE.
    fn chunks(limits: &ChunkLimits) -> Vec<(String, u32, u32, Vec<Named>)> {
        let python = crate::source::lang::by_name("python").expect("python grammar");
        chunk_source(Some(python), SOURCE, limits)
            .unwrap()
            .into_iter()
            .map(|c| {
                let symbols = c
                    .symbols
                    .into_iter()
                    .map(|s| (s.name, s.start_line, s.end_line))
                    .collect();
                (c.kind, c.start_line, c.end_line, symbols)
            })
            .collect()
    }

    fn s(name: &str, start: u32, end: u32) -> Named {
        (name.to_string(), start, end)
    }

    #[test]
    fn tiny_definitions_are_packed_with_their_siblings_only() {
        let got = chunks(&ChunkLimits::default());
        let methods: Vec<_> = got.iter().filter(|c| c.0 == "method").collect();
        // The tiny methods take in the next one, as it fits the budget.
        assert_eq!(methods.len(), 1, "{got:?}");
        assert_eq!(
            methods[0].3,
            vec![s("__init__", 2, 3), s("get", 5, 6), s("total", 8, 14)],
            "{got:?}"
        );
        // The class header is not a function: never packed.
        assert_eq!(got[0], ("class".to_string(), 1, 1, vec![s("Box", 1, 1)]));
        // Top-level functions are not packed with methods of the class.
        let functions: Vec<_> = got.iter().filter(|c| c.0 == "function").collect();
        assert_eq!(functions.len(), 1, "{got:?}");
        assert_eq!(functions[0].3, vec![s("free_a", 17, 18), s("free_b", 21, 22)]);
        // Every line is still in exactly one chunk.
        let mut next = 1;
        for c in &got {
            assert_eq!(c.1, next, "{got:?}");
            next = c.2 + 1;
        }
        assert_eq!(next as usize, SOURCE.lines().count() + 1);
    }

    #[test]
    fn packing_respects_its_limits() {
        let off = chunks(&ChunkLimits {
            tiny_lines: 0,
            ..ChunkLimits::default()
        });
        assert!(off.iter().all(|c| c.3.len() <= 1), "{off:?}");
        let small_budget = chunks(&ChunkLimits {
            pack_max_bytes: 40,
            ..ChunkLimits::default()
        });
        assert!(small_budget.iter().all(|c| c.3.len() <= 1), "{small_budget:?}");
        let fewer_lines = chunks(&ChunkLimits {
            pack_max_lines: 10,
            ..ChunkLimits::default()
        });
        let methods: Vec<_> = fewer_lines
            .iter()
            .filter(|c| c.0 == "method")
            .map(|c| c.3.clone())
            .collect();
        assert_eq!(
            methods,
            vec![vec![s("__init__", 2, 3), s("get", 5, 6)], vec![s("total", 8, 14)]]
        );
    }

    #[test]
    fn a_long_span_is_not_cut_between_a_comment_and_what_it_describes() {
        let mut source = String::from("fn long() {\n");
        for i in 0..12 {
            source.push_str(&format!(
                "    // Step {i} explains\n    // the line below.\n    let x{i} = {i};\n\n"
            ));
        }
        source.push_str("}\n");
        let rust = crate::source::lang::by_name("rust").expect("rust grammar");
        let limits = ChunkLimits {
            max_lines: 10,
            overlap_lines: 0,
            ..ChunkLimits::default()
        };
        let chunks = chunk_source(Some(rust), &source, &limits).unwrap();
        assert!(chunks.len() > 3, "{chunks:?}");
        let lines: Vec<&str> = source.lines().collect();
        for c in &chunks[..chunks.len() - 1] {
            let last = lines[c.end_line as usize - 1].trim();
            assert!(
                !last.starts_with("//"),
                "{}-{} ends in a comment: {last}",
                c.start_line,
                c.end_line
            );
        }
    }

    #[test]
    fn a_bare_impl_line_opens_its_first_methods_chunk() {
        let source = "/// A point.\nstruct Point {\n    x: i32,\n}\n\nimpl Point {\n    fn x(&self) -> i32 {\n        self.x\n    }\n}\n\n/// Shown as `(x)`.\nimpl std::fmt::Display for Point {\n    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {\n        write!(f, \"({})\", self.x)\n    }\n}\n";
        let rust = crate::source::lang::by_name("rust").expect("rust grammar");
        let got: Vec<(String, u32, u32, Option<String>)> = chunk_source(Some(rust), source, &ChunkLimits::default())
            .unwrap()
            .into_iter()
            .map(|c| (c.kind.clone(), c.start_line, c.end_line, c.symbol_label()))
            .collect();
        let chunk =
            |kind: &str, start: u32, end: u32, symbol: &str| (kind.to_string(), start, end, Some(symbol.to_string()));
        assert_eq!(got[0], chunk("struct", 1, 5, "Point"), "{got:?}");
        // `impl Point {` is no chunk of its own (and names no definition).
        assert_eq!(got[1], chunk("method", 6, 11, "x"), "{got:?}");
        // An impl with a doc comment keeps its own chunk: the comment says something.
        assert_eq!(got[2], chunk("impl", 12, 13, "Point"), "{got:?}");
        assert_eq!(got[3].0, "method", "{got:?}");
        assert_eq!(got.len(), 4, "{got:?}");
    }
}
