//! The code graph's answers as a client reads them: symbols, edges,
//! callers/callees and call paths.

use rmcp::schemars;
use serde::{Deserialize, Serialize};

use crate::graph::{query, resolve};

/// A definition on the branch.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Symbol {
    /// Symbol id (0: the top-level code of the file).
    pub id: i64,
    pub name: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
    pub path: String,
    pub line: u32,
    pub end_line: u32,
    pub language: String,
    /// The workspace member it is in (only in a workspace).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
}

impl From<query::Symbol> for Symbol {
    fn from(s: query::Symbol) -> Symbol {
        Symbol {
            id: s.id,
            name: s.name,
            kind: s.kind,
            container: s.container,
            path: s.path,
            line: s.line,
            end_line: s.end_line,
            language: s.language,
            member: None,
        }
    }
}

/// Symbols as a client reads them.
pub fn symbols(symbols: Vec<query::Symbol>) -> Vec<Symbol> {
    symbols.into_iter().map(Symbol::from).collect()
}

/// How a reference was tied to its definition, from surest to least sure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Confidence {
    /// Through the receiver: the method's own object or a named type.
    Receiver,
    /// A definition in the same file.
    Local,
    /// Through an import of the referencing file.
    Import,
    /// A definition in the same directory (package).
    Package,
    /// The only definition of that name in the repository.
    Unique,
    /// One of several definitions of that name; the edge lists them.
    Ambiguous,
}

impl From<resolve::Confidence> for Confidence {
    fn from(c: resolve::Confidence) -> Confidence {
        match c {
            resolve::Confidence::Receiver => Confidence::Receiver,
            resolve::Confidence::Local => Confidence::Local,
            resolve::Confidence::Import => Confidence::Import,
            resolve::Confidence::Package => Confidence::Package,
            resolve::Confidence::Unique => Confidence::Unique,
            resolve::Confidence::Ambiguous => Confidence::Ambiguous,
        }
    }
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq, schemars::JsonSchema)]
pub struct Site {
    pub path: String,
    pub line: u32,
}

/// One resolved reference: `from` refers to `to` at `call_site`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Edge {
    pub from: Symbol,
    pub to: Symbol,
    /// call, method_call, constructor, inherits, implements or import.
    pub kind: String,
    pub confidence: Confidence,
    pub call_site: Site,
    /// Distance from the queried symbol (1: direct).
    pub depth: usize,
    /// For ambiguous edges: the definitions the reference may mean, the
    /// first [`MAX_CANDIDATES`] of them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub candidates: Vec<Symbol>,
    /// For ambiguous edges: how many definitions the reference may mean
    /// (more than `candidates` lists when above [`MAX_CANDIDATES`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub candidate_count: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl From<query::Edge> for Edge {
    fn from(e: query::Edge) -> Edge {
        Edge {
            from: e.from.into(),
            to: e.to.into(),
            kind: e.kind,
            confidence: e.confidence.into(),
            call_site: Site {
                path: e.call_site.path,
                line: e.call_site.line,
            },
            depth: e.depth,
            candidates: symbols(e.candidates),
            candidate_count: e.candidate_count,
        }
    }
}

fn edges(edges: Vec<query::Edge>) -> Vec<Edge> {
    edges.into_iter().map(Edge::from).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    Callers,
    Callees,
}

impl From<Direction> for query::Direction {
    fn from(d: Direction) -> query::Direction {
        match d {
            Direction::Callers => query::Direction::Callers,
            Direction::Callees => query::Direction::Callees,
        }
    }
}

impl From<query::Direction> for Direction {
    fn from(d: query::Direction) -> Direction {
        match d {
            query::Direction::Callers => Direction::Callers,
            query::Direction::Callees => Direction::Callees,
        }
    }
}

/// The answer to a callers/callees query.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CallGraph {
    pub symbol: Symbol,
    pub direction: Direction,
    pub depth: usize,
    pub edges: Vec<Edge>,
    /// Set when the edge limit or the reference limit per level cut the answer short.
    pub truncated: bool,
    /// Why the answer is partial, when `truncated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<query::CallGraph> for CallGraph {
    fn from(g: query::CallGraph) -> CallGraph {
        CallGraph {
            symbol: g.symbol.into(),
            direction: g.direction.into(),
            depth: g.depth,
            edges: edges(g.edges),
            truncated: g.truncated,
            note: g.note,
        }
    }
}

impl CallGraph {
    /// Callers or callees across a workspace's members (`names`, by
    /// position), every symbol naming its member.
    pub fn across(g: crate::graph::workspace::CallGraphAcross, names: &[String]) -> CallGraph {
        let named = |s: query::Symbol, at: usize| Symbol {
            member: names.get(at).cloned(),
            ..Symbol::from(s)
        };
        CallGraph {
            symbol: named(g.symbol, g.member),
            direction: g.direction.into(),
            depth: g.depth,
            edges: g
                .edges
                .into_iter()
                .map(|e| {
                    let (from, to) = (
                        named(e.edge.from.clone(), e.from_member),
                        named(e.edge.to.clone(), e.to_member),
                    );
                    Edge {
                        from,
                        to,
                        ..Edge::from(e.edge)
                    }
                })
                .collect(),
            truncated: g.truncated,
            note: g.note,
        }
    }
}

/// The answer to a path query: the calls from `from` to `to`, in order.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CallPath {
    pub from: Symbol,
    pub to: Symbol,
    /// Empty when no path was found within the depth limit.
    pub edges: Vec<Edge>,
    /// Set when the reference limit per level stopped the search early (a
    /// path may exist that was not found, or a shorter one).
    pub truncated: bool,
    /// Why the search is partial, when `truncated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<query::CallPath> for CallPath {
    fn from(p: query::CallPath) -> CallPath {
        CallPath {
            from: p.from.into(),
            to: p.to.into(),
            edges: edges(p.edges),
            truncated: p.truncated,
            note: p.note,
        }
    }
}
