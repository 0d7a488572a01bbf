//! Exact symbol matches: the definitions of the identifiers a query names,
//! and which of several is the one asked for (the spelling typed, the type
//! rather than an impl of it, the part of a split definition that declares it).

use std::collections::HashMap;

use anyhow::Result;

use crate::source::lexical::{self, QueryTerms};
use crate::source::paths::{is_config_language, is_prose};

use super::candidates::Candidate;
use super::hit::{code_words, contains_whole};
use super::query::Query;
use super::{SearchRequest, Searcher};

/// A definition inside a packed chunk: name, first and last line.
pub(super) type Member = (String, u32, u32);

/// Whether a candidate defines an identifier of the query (its joined key,
/// [`lexical::joined_key`], names one of the chunk's definitions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Defines {
    #[default]
    No,
    /// Defines it as asked: spelled as typed (or no definition is), the
    /// type itself rather than an impl of it, of a definition cut in several
    /// chunks the part that declares it.
    Asked,
    /// Defines it, but another definition among the candidates is the one
    /// asked for: why ([`outranked_definitions`]).
    Outranked(&'static str),
}

impl Defines {
    pub(super) fn any(self) -> bool {
        self != Defines::No
    }
}

/// A definition of a query identifier, as `chunk_symbols` has it (or the
/// engine's rows: the chunk's lines, a number per file).
pub(super) struct SymbolRow {
    pub chunk_id: i64,
    pub file_id: i64,
    /// The chunk's kind (`impl` for an impl block or an extension).
    pub kind: String,
    pub language: String,
    pub member: Member,
}

impl SymbolRow {
    /// A definition in code, not a heading of prose or a key of a config file.
    fn is_code(&self) -> bool {
        !is_prose(&self.kind, &self.language) && !is_config_language(&self.language)
    }
}

/// Why another definition of a query identifier is the one asked for
/// (`--explain` says it), in the order [`outranked_definitions`] looks.
const SPELLED_OTHERWISE: &str = "spelled otherwise than typed, and a definition spelled so is found";
const IMPL_OF_DEFINED_TYPE: &str = "an impl of the type, whose definition is found";
const OTHER_PART: &str = "a part of a split definition, and the part that declares it is found";

impl Searcher {
    /// Adds to `candidates` the chunks that define the query's identifiers
    /// (a chunk found only so scores half the best BM25), with whether
    /// another definition is the one asked for and the lines of the
    /// definitions named.
    pub(super) fn add_definitions(
        &self,
        candidates: &mut HashMap<i64, Candidate>,
        query: &Query,
        req: &SearchRequest,
    ) -> Result<()> {
        let best_bm25 = candidates
            .values()
            .filter(|c| !c.beyond_default_pool)
            .map(|c| c.bm25)
            .fold(0.0f64, f64::max)
            .max(1.0);
        let judged = judge_definitions(
            query,
            |key, spelled| self.symbol_candidates(key, spelled, req),
            |row| self.declares(row),
        )?;
        for (id, (defines, members)) in judged {
            let c = candidates.entry(id).or_insert(Candidate {
                bm25: best_bm25 * 0.5,
                ..Candidate::default()
            });
            // Found lexically only past the default list's pool: scored as
            // the default list scores it, found by its definition alone.
            if c.beyond_default_pool {
                *c = Candidate {
                    bm25: best_bm25 * 0.5,
                    ..Candidate::default()
                };
            }
            c.defines = defines;
            for member in members {
                c.exact_member = Some(match c.exact_member.take() {
                    // Overloads packed together, or two names the query
                    // says: the answer is all of them.
                    Some((mut names, start, end)) => {
                        if !names.split(", ").any(|n| n == member.0) {
                            names = format!("{names}, {}", member.0);
                        }
                        (names, start.min(member.1), end.max(member.2))
                    }
                    None => member,
                });
            }
        }
        Ok(())
    }

    /// Definitions of the identifier `key`: their chunks, names and lines;
    /// with `spelled`, those spelled so first.
    fn symbol_candidates(&self, key: &str, spelled: Option<&String>, req: &SearchRequest) -> Result<Vec<SymbolRow>> {
        let found = self
            .store
            .definitions_of_key(&self.chunk_filter(req), key, spelled.map(String::as_str))?;
        Ok(found
            .into_iter()
            .map(|d| SymbolRow {
                chunk_id: d.chunk_id,
                file_id: d.file_id,
                kind: d.kind,
                language: d.language,
                member: (d.name, d.start_line, d.end_line),
            })
            .collect())
    }

    /// Whether the code of the row's chunk says the row's name (doc comments
    /// aside): the part of a split definition that holds its signature.
    /// Unreadable text counts as not saying it.
    fn declares(&self, row: &SymbolRow) -> bool {
        let text = self.store.chunk_text_and_comments(row.chunk_id).ok().flatten();
        text.is_some_and(|(text, doc)| {
            let doc = crate::source::chunk::parse_doc_lines(doc.as_deref(), 1);
            contains_whole(&code_words(&text, 1, &doc, &[]).join(" "), &row.member.0)
        })
    }
}

/// Each chunk that defines an identifier of the query (its definitions as
/// `rows_of(key, spelling typed)` finds them): whether it defines one as
/// asked, and the names it is the answer by (all of its definitions when
/// another is the one asked for). A name or a few keywords type the
/// identifier as meant; a question writes it as prose does ("the current
/// TagSet" asks for `tagSet()`), and there every definition counts the same.
pub(super) fn judge_definitions(
    query: &Query,
    mut rows_of: impl FnMut(&str, Option<&String>) -> Result<Vec<SymbolRow>>,
    mut declares: impl FnMut(&SymbolRow) -> bool,
) -> Result<HashMap<i64, (Defines, Vec<Member>)>> {
    let q = &query.lexical;
    let typed = !query.intent.question;
    let mut defined: HashMap<i64, Vec<(Member, Option<&'static str>)>> = HashMap::new();
    for key in &q.identifiers {
        let spelled = q.spellings.iter().find(|s| lexical::joined_key(s) == *key);
        let rows = rows_of(key, spelled.filter(|_| typed))?;
        let outranked = if typed {
            outranked_definitions(&rows, q, &mut declares)
        } else {
            vec![None; rows.len()]
        };
        for (row, outranked) in rows.into_iter().zip(outranked) {
            defined.entry(row.chunk_id).or_default().push((row.member, outranked));
        }
    }
    Ok(defined
        .into_iter()
        .map(|(id, members)| {
            // Asked for by one of its definitions: those are the answer.
            let asked = members.iter().any(|(_, outranked)| outranked.is_none());
            let defines = match members.iter().find_map(|(_, outranked)| *outranked) {
                Some(why) if !asked => Defines::Outranked(why),
                _ => Defines::Asked,
            };
            let named = members
                .into_iter()
                .filter(|(_, o)| !asked || o.is_none())
                .map(|(member, _)| member)
                .collect();
            (id, (defines, named))
        })
        .collect())
}

/// For each definition of one query identifier (all of them, as
/// `symbol_candidates` found them), whether another one is the one asked
/// for, and why: an exact spelling beats a case or separator variant
/// (`provisionContext` is not `ProvisionContext`, `poll_future` not
/// `PollFuture`); the definition of a type beats an impl or extension of it
/// (`impl Foo`, `unsafe impl Send for Foo {}`); of a definition split into
/// several chunks, the part that declares it (`declares`: its code says the
/// name, as the signature does) beats the others. A definition is outranked
/// only by one in code that is found, so an impl whose type lies outside the
/// index, or a variant when nothing is spelled as typed (or only a heading
/// of the docs is), is still the answer.
fn outranked_definitions(
    rows: &[SymbolRow],
    q: &QueryTerms,
    mut declares: impl FnMut(&SymbolRow) -> bool,
) -> Vec<Option<&'static str>> {
    let other_part = other_parts(rows, &mut declares);
    let spelled_found = rows.iter().any(|r| r.is_code() && q.spells(&r.member.0));
    let is_impl = |r: &SymbolRow| r.kind == "impl";
    let type_found = |name: &str| {
        rows.iter()
            .zip(&other_part)
            .any(|(o, other)| o.member.0 == name && o.is_code() && !is_impl(o) && !other)
    };
    rows.iter()
        .zip(&other_part)
        .map(|(r, &other)| {
            if spelled_found && !q.spells(&r.member.0) {
                Some(SPELLED_OTHERWISE)
            } else if is_impl(r) && type_found(&r.member.0) {
                Some(IMPL_OF_DEFINED_TYPE)
            } else if other {
                Some(OTHER_PART)
            } else {
                None
            }
        })
        .collect()
}

/// Which rows are parts of a definition split into several chunks other than
/// the one that declares it: the first part whose code says the name
/// (`declares`), else the first part. Parts of one definition share its
/// name and file and overlap by the chunker's few lines; two overloads lie
/// next to each other without overlapping.
fn other_parts(rows: &[SymbolRow], declares: &mut impl FnMut(&SymbolRow) -> bool) -> Vec<bool> {
    let mut order: Vec<usize> = (0..rows.len()).collect();
    let place = |i: &usize| {
        (
            rows[*i].file_id,
            &rows[*i].member.0,
            rows[*i].member.1,
            rows[*i].member.2,
        )
    };
    order.sort_by(|a, b| place(a).cmp(&place(b)));
    let mut other = vec![false; rows.len()];
    let mut at = 0;
    while at < order.len() {
        let first = &rows[order[at]];
        let (mut end, mut next) = (first.member.2, at + 1);
        while let Some(r) = order.get(next).map(|&i| &rows[i]) {
            if r.file_id != first.file_id || r.member.0 != first.member.0 || r.member.1 > end {
                break;
            }
            end = end.max(r.member.2);
            next += 1;
        }
        let parts = &order[at..next];
        if parts.len() > 1 {
            let head = parts.iter().copied().find(|&i| declares(&rows[i])).unwrap_or(parts[0]);
            for &i in parts {
                other[i] = i != head;
            }
        }
        at = next;
    }
    other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_definition_is_outranked_by_its_spelling_its_type_and_its_declaring_part() {
        let row = |chunk_id: i64, file_id: i64, kind: &str, name: &str, start: u32, end: u32| SymbolRow {
            chunk_id,
            file_id,
            kind: kind.into(),
            language: "rust".into(),
            member: (name.into(), start, end),
        };
        let rows = [
            row(1, 1, "enum", "PollFuture", 5, 10),
            row(2, 1, "impl", "PollFuture", 12, 30),
            row(3, 1, "function", "poll_future", 40, 120),
            row(4, 1, "function", "poll_future", 118, 160),
            row(5, 2, "section", "poll_future", 1, 9),
        ];
        let declares = |r: &SymbolRow| r.chunk_id != 3;
        let why = |query: &str| outranked_definitions(&rows, &QueryTerms::parse(query), declares);
        // The function as typed, at the part that declares it (here the
        // second: the first held a long comment only).
        assert_eq!(
            why("poll_future"),
            [
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE),
                Some(OTHER_PART),
                None,
                None
            ]
        );
        // The type as typed, before its impl.
        assert_eq!(
            why("PollFuture"),
            [
                None,
                Some(IMPL_OF_DEFINED_TYPE),
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE),
                Some(SPELLED_OTHERWISE)
            ]
        );
        // Neither spelling typed: no definition outranks another by its spelling.
        assert_eq!(
            why("pollFuture"),
            [None, Some(IMPL_OF_DEFINED_TYPE), Some(OTHER_PART), None, None]
        );
        // A heading of the docs spelled as typed outranks no code, and an
        // impl whose type is not found is the answer; overloads side by side
        // are two definitions, not parts of one.
        let rows = [
            row(1, 1, "function", "Poll_future", 1, 5),
            row(5, 2, "section", "poll_future", 1, 9),
            row(6, 3, "impl", "PollFuture", 1, 3),
            row(7, 1, "function", "Poll_future", 6, 9),
        ];
        assert_eq!(
            outranked_definitions(&rows, &QueryTerms::parse("poll_future"), |_| true),
            [None, None, None, None]
        );
    }
}
