//! The definitions of a file: what a chunk query captures, nested, each
//! with the rows of the doc comments, attributes and decorators it takes in.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use tree_sitter::{Node, QueryCursor, StreamingIterator};

use super::{end_row, Def};
use crate::source::lang::Language;

/// Node kinds that attach to the definition that follows them.
fn is_leading_trivia(kind: &str) -> bool {
    kind.contains("comment")
        || kind == "haddock"
        || kind.contains("attribute")
        || kind.contains("decorator")
        || kind.contains("annotation")
        || kind == "pragma"
}

/// The last row of a definition, without trailing comments that some grammars
/// (indentation-based ones) hang on the node though they precede the next one.
fn definition_end_row(node: &Node) -> usize {
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    let last_code = children.iter().rev().find(|c| !c.kind().contains("comment"));
    match last_code {
        Some(child) if child.end_byte() < node.end_byte() => end_row(child).max(node.start_position().row),
        _ => end_row(node),
    }
}

/// Ends each definition before the rows its next sibling starts at, and its
/// members within it: the next one may have taken in comments the grammar
/// hung at the end of this one's body ([`trailing_comments`]).
fn end_before_next(level: &mut [Def<'_>], limit: Option<usize>) {
    for i in 0..level.len() {
        let next = level.get(i + 1).map(|d| d.start_row.saturating_sub(1));
        let def = &mut level[i];
        if let Some(bound) = next.into_iter().chain(limit).min() {
            def.end_row = def.end_row.min(bound).max(def.node.start_position().row);
        }
        let own = def.end_row;
        end_before_next(&mut def.children, Some(own));
    }
}

/// Rows `a..=b` of a file, 0-based.
type RowSpan = (usize, usize);

/// The definitions of the file, nested, and the rows of every `@doc` capture
/// (comments and docstrings, sorted).
pub(super) fn find_definitions<'t>(
    lang: &Language,
    root: Node<'t>,
    source: &str,
) -> Result<(Vec<Def<'t>>, Vec<RowSpan>)> {
    let query = lang.chunks_query()?;
    let names = query.capture_names();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(query, root, source.as_bytes());
    // Keyed by node span so that two patterns matching one node yield one definition.
    let mut found: BTreeMap<(usize, std::cmp::Reverse<usize>), Def<'t>> = BTreeMap::new();
    // `@doc` captured beside a definition (a docstring), by the definition's
    // span; else alone (a comment), attached to what it lies right above.
    let mut inner_docs: HashMap<(usize, std::cmp::Reverse<usize>), (usize, usize)> = HashMap::new();
    // Nodes captured alone as `@doc` or `@attribute`: what attaches to the
    // definition right below.
    let mut marked: HashMap<usize, Mark> = HashMap::new();
    let mut comment_rows: Vec<RowSpan> = Vec::new();
    while let Some(m) = matches.next() {
        let mut def_node = None;
        let mut kind = None;
        let mut name = None;
        let mut name_row = None;
        let mut docs: Option<(usize, usize)> = None;
        let mut doc_nodes = Vec::new();
        let mut attribute_ids = Vec::new();
        for cap in m.captures() {
            let cap_name = names[cap.index as usize];
            if let Some(k) = cap_name.strip_prefix("definition.") {
                def_node = Some(cap.node);
                kind = Some(k);
            } else if cap_name == "name" && name.is_none() {
                name = cap.node.utf8_text(source.as_bytes()).ok().map(clean_name);
                name_row = Some(cap.node.start_position().row);
            } else if cap_name == "doc"
                && cap.node.kind().contains("comment")
                && source[cap.node.byte_range()].starts_with('@')
            {
                // An annotation the parse text commented out (Kotlin's
                // `annotations_commented`): an attribute of what is below.
                attribute_ids.push(cap.node.id());
            } else if cap_name == "doc" {
                doc_nodes.push(cap.node);
                comment_rows.push((cap.node.start_position().row, end_row(&cap.node)));
                docs = Some(widen(docs, cap.node.start_position().row, end_row(&cap.node)));
            } else if cap_name == "attribute" {
                attribute_ids.push(cap.node.id());
            }
        }
        // A doc captured with its definition (a docstring) belongs to it
        // alone, not also to a member it may lie right above.
        let (Some(node), Some(kind)) = (def_node, kind) else {
            marked.extend(attribute_ids.into_iter().map(|id| (id, Mark::Attribute)));
            marked.extend(doc_nodes.into_iter().map(|n| (n.id(), doc_mark(n, source))));
            continue;
        };
        let key = (node.start_byte(), std::cmp::Reverse(node.end_byte()));
        if let Some((a, b)) = docs {
            let merged = widen(inner_docs.get(&key).copied(), a, b);
            inner_docs.insert(key, merged);
        }
        let def = Def {
            node,
            kind: kind.to_string(),
            name,
            name_row,
            pattern: m.pattern_index,
            start_row: node.start_position().row,
            end_row: definition_end_row(&node),
            doc: None,
            children: Vec::new(),
        };
        match found.get(&key) {
            Some(existing) if existing.pattern <= def.pattern => {}
            _ => {
                found.insert(key, def);
            }
        }
    }
    let mut defs: Vec<Def<'t>> = found.into_values().collect();
    let nodes: Vec<Node> = defs.iter().map(|d| d.node).collect();
    let starts = leading_trivia_starts(root, &nodes, &marked);
    for def in &mut defs {
        // A node the walk did not reach (inside an error recovery) asks its siblings.
        let (start, above) = match starts.get(&def.node.id()) {
            Some(&found) => found,
            None => trivia_start(
                def.node,
                std::iter::successors(def.node.prev_sibling(), Node::prev_sibling),
                &marked,
            ),
        };
        def.start_row = start;
        let key = (def.node.start_byte(), std::cmp::Reverse(def.node.end_byte()));
        let own_row = def.name_row.unwrap_or(def.node.start_position().row);
        // A comment on the definition's own line is no doc of it.
        def.doc = inner_docs
            .get(&key)
            .copied()
            .or(above)
            .filter(|&(a, b)| !(a..=b).contains(&own_row));
        // A docstring captured below its definition (a Python constant's)
        // ends the definition.
        if let Some((_, doc_end)) = def.doc.filter(|&(doc_start, _)| doc_start > def.end_row) {
            def.end_row = doc_end;
        }
    }
    comment_rows.sort_unstable();
    comment_rows.dedup();
    let mut defs = nest(defs);
    end_before_next(&mut defs, None);
    Ok((defs, comment_rows))
}

/// `range` (rows) widened to take in rows `a..=b`.
fn widen(range: Option<(usize, usize)>, a: usize, b: usize) -> (usize, usize) {
    range.map_or((a, b), |(s, e)| (s.min(a), e.max(b)))
}

/// Names are shown on one line; heading texts and the like may span several.
/// Generic arguments (`Parser<'a, T>`) are not part of a name.
fn clean_name(raw: &str) -> String {
    let one_line: String = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let base = match one_line.split_once('<') {
        Some((head, _)) if !head.is_empty() && !head.contains(' ') => head,
        _ => &one_line,
    };
    base.chars().take(200).collect()
}

/// The rows where definitions start once the doc comments, attributes and
/// decorators directly above them are included, keyed by node id. `nodes` are
/// sorted by (start, end descending). One walk down the definitions' ancestors:
/// `Node::prev_sibling` re-descends from the root on every call, which made a
/// class or impl with hundreds of members quadratic.
fn leading_trivia_starts(root: Node, nodes: &[Node], marked: &HashMap<usize, Mark>) -> HashMap<usize, TriviaStart> {
    /// `above`: the siblings before `parent`, in source order. A node that
    /// opens its parent (a C++ `struct S {...};` member is a field
    /// declaration's first child) takes the trivia above its parent. Slices,
    /// not copies: a parent of thousands of children stays linear.
    fn visit<'t>(
        parent: Node<'t>,
        above: &[Node<'t>],
        nodes: &[Node<'t>],
        marked: &HashMap<usize, Mark>,
        out: &mut HashMap<usize, TriviaStart>,
    ) {
        let mut cursor = parent.walk();
        let children: Vec<Node> = parent.children(&mut cursor).collect();
        let mut rest = nodes;
        for (i, child) in children.iter().enumerate() {
            let inside = rest
                .iter()
                .take_while(|n| n.start_byte() < child.end_byte() || n.id() == child.id())
                .count();
            let (here, later) = rest.split_at(inside);
            rest = later;
            let before = if i == 0 { above } else { &children[..i] };
            let mut deeper = Vec::new();
            for node in here {
                if node.id() == child.id() {
                    out.insert(node.id(), trivia_start(*child, before.iter().rev().copied(), marked));
                } else {
                    deeper.push(*node);
                }
            }
            if !deeper.is_empty() {
                visit(*child, before, &deeper, marked, out);
            }
            if rest.is_empty() {
                break;
            }
        }
    }
    let mut out = HashMap::new();
    let (top, below): (Vec<Node>, Vec<Node>) = nodes.iter().partition(|n| n.id() == root.id());
    for node in top {
        out.insert(node.id(), (node.start_position().row, None));
    }
    visit(root, &[], &below, marked, &mut out);
    out
}

/// A definition's start row with the trivia above it, and the rows of the
/// `@doc` nodes among that trivia.
type TriviaStart = (usize, Option<(usize, usize)>);

/// What a chunk query marks a node alone as: a doc (`@doc`) or an attribute
/// (`@attribute`: Elixir's `@spec` between a def and its `@doc`), both
/// attached to the definition right below.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Doc,
    /// A `/** ... */` block below some code: JSDoc, Javadoc, PHPDoc and
    /// Doxygen give it to the definition below it across a blank line, as
    /// Express writes every doc comment.
    BlockDoc,
    Attribute,
}

/// How a `@doc` node is marked: a block doc comment ([`Mark::BlockDoc`])
/// unless it opens the file, where it is the file's header.
fn doc_mark(node: Node, source: &str) -> Mark {
    let text = &source[node.byte_range()];
    let opens_file = source[..node.start_byte()].trim().is_empty();
    if text.starts_with("/**") && !text.starts_with("/**/") && !opens_file {
        Mark::BlockDoc
    } else {
        Mark::Doc
    }
}

/// `node`'s start row extended over the trivia (and the `marked` nodes) that
/// ends right above it among `before`, its preceding siblings, nearest first.
fn trivia_start<'t>(
    node: Node<'t>,
    before: impl Iterator<Item = Node<'t>>,
    marked: &HashMap<usize, Mark>,
) -> TriviaStart {
    let mut start = node.start_position().row;
    // The doc nodes taken in, nearest first.
    let mut doc_rows: Vec<(usize, usize)> = Vec::new();
    // The start before the last trivia was taken in.
    let mut start_before_last = start;
    // Takes in `prev` if it is trivia ending right above what is taken.
    let mut take = |prev: Node<'t>| {
        // A comment after code on its row (`int x; /* x */`, `class
        // BadRequest < Error # :nodoc:`) is that code's, not this one's.
        let mark = marked.get(&prev.id());
        let trivia = mark.is_some() || is_leading_trivia(prev.kind());
        if !trivia && end_row(&prev) == start && start < start_before_last {
            if doc_rows.last().is_some_and(|d| d.0 == start) {
                doc_rows.pop();
            }
            start = start_before_last;
            return false;
        }
        // One blank line may part a block doc comment from what it documents.
        let gap = if mark == Some(&Mark::BlockDoc) && start == node.start_position().row {
            2
        } else {
            1
        };
        if !trivia || end_row(&prev) + gap < start {
            return false;
        }
        start_before_last = start;
        start = prev.start_position().row;
        if matches!(mark, Some(Mark::Doc | Mark::BlockDoc)) {
            doc_rows.push((start, end_row(&prev)));
        }
        true
    };
    for prev in before {
        if take(prev) {
            continue;
        }
        // A definition whose body took in the comments after its code
        // (Scala 3's indented bodies): those right above this one are its.
        for comment in trailing_comments(prev).into_iter().rev() {
            if !take(comment) {
                break;
            }
        }
        break;
    }
    let doc = doc_rows.iter().fold(None, |acc, &(a, b)| Some(widen(acc, a, b)));
    (start, doc)
}

/// The comments a node's grammar hung at its end, after its last code, down
/// its last children, in source order.
fn trailing_comments(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    let children: Vec<Node> = node.children(&mut cursor).collect();
    match children.iter().rposition(|c| !c.kind().contains("comment")) {
        Some(last_code) => {
            let mut comments = trailing_comments(children[last_code]);
            comments.extend_from_slice(&children[last_code + 1..]);
            comments
        }
        None => children,
    }
}

/// Builds the containment tree from definitions sorted by (start asc, end desc).
fn nest(sorted: Vec<Def<'_>>) -> Vec<Def<'_>> {
    fn insert<'t>(level: &mut Vec<Def<'t>>, def: Def<'t>) {
        if let Some(last) = level.last_mut() {
            let inside = def.node.start_byte() >= last.node.start_byte() && def.node.end_byte() <= last.node.end_byte();
            if inside {
                // A wrapper (decorated or exported definition) and the definition it
                // wraps are one definition, documented by either (a Go `var (...)`
                // block's first spec may have its own comment).
                let same = def.kind == last.kind && def.name == last.name;
                if !same {
                    insert(&mut last.children, def);
                } else if last.doc.is_none() {
                    last.doc = def.doc;
                }
                return;
            }
        }
        level.push(def);
    }
    let mut top = Vec::new();
    for def in sorted {
        insert(&mut top, def);
    }
    top
}
