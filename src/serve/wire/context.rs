//! The context tools' answers as a client reads them: packs of evidence for
//! a question or a symbol, a change's impact, the repository map.
//!
//! A context answer's budget covers its core value as serialized
//! (`context::pack`); these types write the same JSON, field for field, and
//! the tests below hold them to it.

use rmcp::schemars;
use serde::Serialize;

use super::search::Confidence;
use crate::context::{impact, map, pack, question, symbol};

/// A piece in the pack, as the agent receives it.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Piece {
    pub path: String,
    /// `start-end`, 1-based, inclusive.
    pub lines: String,
    pub role: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub label: String,
    pub text: String,
}

/// Evidence packed within a budget.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct Pack {
    pub pieces: Vec<Piece>,
    /// Tokens of this pack as serialized (compact JSON).
    pub tokens: usize,
    /// What did not fit, and how to get it; absent when everything fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub left_out: Option<String>,
}

impl From<pack::Pack> for Pack {
    fn from(p: pack::Pack) -> Pack {
        Pack {
            pieces: p
                .pieces
                .into_iter()
                .map(|piece| Piece {
                    path: piece.path,
                    lines: piece.lines,
                    role: piece.role,
                    label: piece.label,
                    text: piece.text,
                })
                .collect(),
            tokens: p.tokens,
            left_out: p.left_out,
        }
    }
}

/// The answer: evidence for the question, packed within `budget` tokens.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct QuestionContext {
    pub query: String,
    /// How likely the matches are to answer the question; a low one says so
    /// in a note (no strong match: the pieces are the closest there are).
    pub confidence: Confidence,
    /// Tokens the whole answer may take (o200k_base, compact JSON).
    pub budget: usize,
    /// Tokens the whole answer takes, this field included.
    pub tokens: usize,
    /// The pieces, best first: `match` (a search result), `caller` (call-site
    /// lines), `callee` (a signature), `test`, `doc` (from a knowledge base).
    pub pack: Pack,
    /// Set when the search could not do everything asked (e.g. lexical only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub notice: Option<String>,
}

impl From<question::QuestionContext> for QuestionContext {
    fn from(q: question::QuestionContext) -> QuestionContext {
        QuestionContext {
            query: q.query,
            confidence: q.confidence.into(),
            budget: q.budget,
            tokens: q.tokens,
            pack: q.pack.into(),
            notice: q.notice,
        }
    }
}

/// The symbol asked about.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct SymbolInfo {
    pub id: i64,
    /// `Container.name`, or the name.
    pub name: String,
    pub kind: String,
    pub path: String,
    /// `start-end`, 1-based, inclusive.
    pub lines: String,
    pub signature: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub doc: Option<String>,
}

/// A commit that changed the symbol's lines.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Commit {
    /// Short commit id.
    pub id: String,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    pub author: String,
    pub summary: String,
}

/// What an edit of one symbol needs, within a token budget.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct SymbolContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symbol: Option<SymbolInfo>,
    /// Call sites outside tests, same folder first: `path:line caller`
    /// (with the edge kind when not a call, `ambiguous` when the name may mean another definition).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub callers: Vec<String>,
    /// Tests that call it: `path:line test`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tests: Vec<String>,
    /// Body (first; a long one cut to its head), call sites with a few lines
    /// around, callees' signatures, tests; what did not fit is named in `left_out`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<Pack>,
    /// The last commits that changed its lines, newest first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commits: Vec<Commit>,
    /// Locations only: every definition of the name, `path:line kind name`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<String>,
    /// Why something is missing or partial (no git history, a long caller list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl From<symbol::SymbolContext> for SymbolContext {
    fn from(s: symbol::SymbolContext) -> SymbolContext {
        SymbolContext {
            symbol: s.symbol.map(|i| SymbolInfo {
                id: i.id,
                name: i.name,
                kind: i.kind,
                path: i.path,
                lines: i.lines,
                signature: i.signature,
                doc: i.doc,
            }),
            callers: s.callers,
            tests: s.tests,
            pack: s.pack.map(Pack::from),
            commits: s
                .commits
                .into_iter()
                .map(|c| Commit {
                    id: c.id,
                    date: c.date,
                    author: c.author,
                    summary: c.summary,
                })
                .collect(),
            locations: s.locations,
            note: s.note,
        }
    }
}

/// A repository map.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct RepoMap {
    /// Files with definitions on the branch.
    pub files: usize,
    /// What the rank was personalised to, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub focus: Option<String>,
    /// One piece a file, most important first: `line: signature` of its
    /// most referenced definitions.
    pub map: Pack,
}

impl From<map::RepoMap> for RepoMap {
    fn from(m: map::RepoMap) -> RepoMap {
        RepoMap {
            files: m.files,
            focus: m.focus,
            map: m.map.into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Impact {
    /// What was compared, e.g. `HEAD..working tree`.
    pub compared: String,
    pub files: Vec<ChangedFile>,
    /// Definitions whose lines changed.
    pub symbols: Vec<ChangedSymbol>,
    /// Transitive callers of the changed symbols to `depth`, nearest first.
    pub callers: Vec<Caller>,
    /// How many callers there are (more than listed when above 200).
    pub caller_count: usize,
    /// Tests that reach a changed symbol, nearest first.
    pub tests: Vec<AffectedTest>,
    pub risk: Risk,
    /// The runner that runs `tests` (pytest, cargo, go, jest, vitest, maven, gradle), if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runner: Option<String>,
    /// A command that runs just those tests; the test files when the runner is unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// Set when a graph limit cut the answer short.
    #[serde(skip_serializing_if = "std::ops::Not::not", default)]
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ChangedFile {
    pub path: String,
    /// added, modified, deleted or renamed.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_path: Option<String>,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ChangedSymbol {
    /// `Container.name` or the name.
    pub name: String,
    pub kind: String,
    pub path: String,
    /// Its line on the new side (the old side for a deleted symbol).
    pub line: u32,
    /// added, modified, deleted or renamed.
    pub change: String,
    /// The old name of a renamed symbol.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old_name: Option<String>,
    /// Direct callers in the index.
    pub callers: usize,
    /// Exported / `pub` / public.
    pub public: bool,
    /// Whether a test reaches it.
    pub tested: bool,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Caller {
    /// `path:Container.name` of the calling definition (`<module>` for top-level code).
    pub symbol: String,
    /// The changed symbol or caller it calls.
    pub calls: String,
    /// 1: calls a changed symbol directly.
    pub depth: usize,
    /// `path:line` of the call.
    pub site: String,
    /// The call's line, trimmed.
    pub text: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct AffectedTest {
    /// `Container.name` of the test function, or the file for a test file.
    pub name: String,
    pub path: String,
    pub line: u32,
    /// Calls between it and a changed symbol (0: it imports a changed module or is
    /// named after one or its package; a file using a name re-exported from one: 1).
    pub depth: usize,
    /// The changed symbol it reaches (or the module it imports).
    pub reaches: String,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Risk {
    /// low, medium or high.
    pub level: String,
    pub reasons: Vec<String>,
}

impl From<impact::Impact> for Impact {
    fn from(i: impact::Impact) -> Impact {
        Impact {
            compared: i.compared,
            files: i
                .files
                .into_iter()
                .map(|f| ChangedFile {
                    path: f.path,
                    status: f.status,
                    old_path: f.old_path,
                })
                .collect(),
            symbols: i
                .symbols
                .into_iter()
                .map(|s| ChangedSymbol {
                    name: s.name,
                    kind: s.kind,
                    path: s.path,
                    line: s.line,
                    change: s.change,
                    old_name: s.old_name,
                    callers: s.callers,
                    public: s.public,
                    tested: s.tested,
                })
                .collect(),
            callers: i
                .callers
                .into_iter()
                .map(|c| Caller {
                    symbol: c.symbol,
                    calls: c.calls,
                    depth: c.depth,
                    site: c.site,
                    text: c.text,
                })
                .collect(),
            caller_count: i.caller_count,
            tests: i
                .tests
                .into_iter()
                .map(|t| AffectedTest {
                    name: t.name,
                    path: t.path,
                    line: t.line,
                    depth: t.depth,
                    reaches: t.reaches,
                })
                .collect(),
            risk: Risk {
                level: i.risk.level,
                reasons: i.risk.reasons,
            },
            runner: i.runner,
            command: i.command,
            truncated: i.truncated,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::confidence;

    fn core_pack() -> pack::Pack {
        pack::Pack {
            pieces: vec![
                pack::Piece {
                    path: "src/a.rs".into(),
                    lines: "1-3".into(),
                    role: "match".into(),
                    label: "function a".into(),
                    text: "fn a() {}".into(),
                },
                pack::Piece {
                    path: "src/b.rs".into(),
                    lines: "4-4".into(),
                    role: "caller".into(),
                    label: String::new(),
                    text: "a()".into(),
                },
            ],
            tokens: 42,
            left_out: Some("2 callers".into()),
        }
    }

    fn same_json<C: Serialize + Clone, W: Serialize + From<C>>(core: C) {
        let expected = serde_json::to_string(&core).unwrap();
        assert_eq!(serde_json::to_string(&W::from(core)).unwrap(), expected);
    }

    /// Budgets are counted on the core values: the client must get the same JSON.
    #[test]
    fn context_answers_are_written_as_their_budget_counted_them() {
        same_json::<_, Pack>(core_pack());
        same_json::<_, QuestionContext>(question::QuestionContext {
            query: "q".into(),
            confidence: confidence::Confidence {
                level: confidence::Level::Low,
                score: 0.25,
                note: Some("no strong match".into()),
                signals: Some(confidence::Signals {
                    terms: vec![("a".into(), 2.0)],
                    held: vec![vec![0]],
                    cosine: Some(0.5),
                    ..confidence::Signals::default()
                }),
            },
            budget: 3000,
            tokens: 120,
            pack: core_pack(),
            notice: Some("lexical only".into()),
        });
        same_json::<_, SymbolContext>(symbol::SymbolContext {
            symbol: Some(symbol::SymbolInfo {
                id: 7,
                name: "T.a".into(),
                kind: "method".into(),
                path: "src/a.rs".into(),
                lines: "1-3".into(),
                signature: "fn a()".into(),
                doc: Some("Does a.".into()),
            }),
            callers: vec!["src/b.rs:4 b".into()],
            tests: vec!["tests/t.rs:1 t".into()],
            pack: Some(core_pack()),
            commits: vec![symbol::Commit {
                id: "abc".into(),
                date: "2026-01-01".into(),
                author: "A".into(),
                summary: "s".into(),
            }],
            locations: vec!["src/a.rs:1 method a".into()],
            note: Some("n".into()),
        });
        same_json::<_, SymbolContext>(symbol::SymbolContext::default());
    }
}
