//! What a search returns: the [`SearchHit`], the [`Explain`] of its score,
//! and the finishing of its text: the snippet, and a packed chunk cut to the
//! definitions the query named. Also the code words of a chunk's text, which
//! quoted code and declared names are looked for in.

use crate::source::lexical::{self, QueryTerms};

use super::definitions::Member;
use super::fusion::Weights;

/// How many lines a hit's snippet has.
const SNIPPET_LINES: usize = 4;

/// One ranked result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SearchHit {
    /// Path relative to the indexed root, `/`-separated.
    pub path: String,
    /// 1-based, inclusive.
    pub start_line: u32,
    pub end_line: u32,
    pub score: f64,
    pub kind: String,
    pub symbol: Option<String>,
    pub language: String,
    /// The lines of the chunk that best match the query.
    pub snippet: String,
    /// Signatures of enclosing definitions (e.g. the class of a method).
    pub context: Option<String>,
    /// Why the hit ranks where it does (only when asked for).
    pub explain: Option<Explain>,
    /// The same text elsewhere: chunks identical to this one, which rank
    /// here once instead of filling the list with copies.
    pub copies: Vec<Location>,
    pub content: String,
    pub chunk_id: i64,
    /// The hash of the chunk's text (0: unknown).
    pub content_hash: i64,
    /// The lines (file lines) of its comments and docstrings
    /// (`source::chunk::parse_doc_lines`).
    pub comments: Vec<Option<(u32, u32)>>,
    /// The lines (file lines) where its import statements start, read only
    /// for a query that quotes code.
    pub import_lines: Vec<u32>,
    /// Tiny definitions packed side by side (`source::chunk`'s packing), not
    /// one definition (false in the shared engine, whose rows do not say).
    pub packed: bool,
}

/// Lines of a file, 1-based and inclusive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Location {
    pub path: String,
    pub start_line: u32,
    pub end_line: u32,
}

/// How a hit's score was made: the sides of the fusion, then each factor
/// of the rerank and of the per-file spread. `score` = `fused` × the factors.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Explain {
    /// BM25 of the chunk for the query's terms (0: none of them in it).
    pub bm25: f64,
    /// The lexical side: BM25 over the best candidate's, 0..1.
    pub lexical: f64,
    /// Cosine similarity of the chunk's vector to the query's, in hybrid mode
    /// as moved by the feedback (none: no vector, or lexical mode).
    pub cosine: Option<f32>,
    /// The semantic side: that similarity scaled by the candidates' spread, 0..1.
    pub semantic: Option<f64>,
    /// Cosine similarity of the nearest of the chunk's signature vectors.
    pub signature_cosine: Option<f32>,
    /// The signature side, scaled like the semantic side.
    pub signature: Option<f64>,
    /// The sides combined (`KEN_FUSION`, `KEN_FUSION_WEIGHTS`).
    pub fused: f64,
    /// The weight of each side in `fused`, in hybrid mode with vectors:
    /// `KEN_FUSION_WEIGHTS`, else the model's (BM25's times its lexical
    /// weight); BM25's times 1.4 for a query the query adapter leaves as typed,
    /// and up to 3 times for a long one it does not carry (terms / 3).
    pub weights: Option<Weights>,
    /// The factors applied after the fusion, in order.
    pub factors: Vec<ExplainFactor>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ExplainFactor {
    pub reason: String,
    pub factor: f64,
}

/// A hit as returned: cut to the definitions the query named (`member`),
/// with the lines that best match the query as its snippet, its score
/// rounded to six decimals.
pub(super) fn finish_hit(hit: &mut SearchHit, member: Option<&Member>, q: &QueryTerms) {
    if let Some(member) = member {
        narrow_to_member(hit, member);
    }
    hit.snippet = snippet(&hit.content, q, SNIPPET_LINES);
    hit.score = (hit.score * 1e6).round() / 1e6;
}

/// Cuts a hit on a packed chunk down to the definitions the query named.
pub(super) fn narrow_to_member(hit: &mut SearchHit, (name, start, end): &Member) {
    if *start < hit.start_line || *end > hit.end_line || (*start, *end) == (hit.start_line, hit.end_line) {
        return;
    }
    let skip = (start - hit.start_line) as usize;
    let take = (end - start + 1) as usize;
    hit.content = hit.content.split_inclusive('\n').skip(skip).take(take).collect();
    hit.symbol = Some(name.clone());
    // Copies hold the same text: the same lines of it.
    for copy in &mut hit.copies {
        copy.start_line += skip as u32;
        copy.end_line = copy.start_line + take as u32 - 1;
    }
    hit.start_line = *start;
    hit.end_line = *end;
}

/// The `max_lines` consecutive lines of `content` that contain the most
/// distinct query terms (the first lines when nothing matches).
pub fn snippet(content: &str, q: &QueryTerms, max_lines: usize) -> String {
    let lines: Vec<&str> = content.lines().collect();
    if lines.len() <= max_lines {
        return lines.join("\n");
    }
    // Each line's query terms, as indexes into `q.terms`, each once.
    let mut terms = String::new();
    let line_terms: Vec<Vec<usize>> = lines
        .iter()
        .map(|line| {
            terms.clear();
            lexical::index_terms(line, &mut terms);
            let mut found: Vec<usize> = terms
                .split(' ')
                .filter_map(|t| q.terms.iter().position(|qt| qt == t))
                .collect();
            found.sort_unstable();
            found.dedup();
            found
        })
        .collect();
    // The window slides a line at a time, counting each term's lines in it.
    let mut lines_with = vec![0usize; q.terms.len()];
    let (mut distinct, mut best) = (0, (0usize, 0usize));
    for (last, entering) in line_terms.iter().enumerate() {
        for &t in entering {
            distinct += usize::from(lines_with[t] == 0);
            lines_with[t] += 1;
        }
        if let Some(leaving) = last.checked_sub(max_lines).map(|first| &line_terms[first]) {
            for &t in leaving {
                lines_with[t] -= 1;
                distinct -= usize::from(lines_with[t] == 0);
            }
        }
        if last + 1 >= max_lines && distinct > best.1 {
            best = (last + 1 - max_lines, distinct);
        }
    }
    lines[best.0..best.0 + max_lines].join("\n")
}

/// The words of a chunk's lines outside its comments and docstrings
/// (`comments`, lines numbered from `first_line` for the first line of
/// `content`) and its import statements (`imports`). A comment and a doc's
/// examples (`>>> r = requests.get(url)`) show how an API is used, an import
/// that a file uses it; quoting it, a question is after the code itself.
pub(super) fn code_words<'c>(
    content: &'c str,
    first_line: u32,
    comments: &[Option<(u32, u32)>],
    imports: &[u32],
) -> Vec<&'c str> {
    content
        .lines()
        .zip(first_line..)
        .filter(|&(_, n)| !crate::source::chunk::in_doc(comments, n) && !imports.contains(&n))
        .flat_map(|(l, _)| l.split_whitespace())
        .collect()
}

/// Whether `text` holds `fragment` not as part of a longer name: the quoted
/// `pytest.mark.skip` is not in `pytest.mark.skipif`, `get(` is not in `target(`.
pub(super) fn contains_whole(text: &str, fragment: &str) -> bool {
    let is_name_char = |c: char| c.is_alphanumeric() || c == '_';
    let starts_with_name = fragment.chars().next().is_some_and(is_name_char);
    let ends_with_name = fragment.chars().next_back().is_some_and(is_name_char);
    // `.gitignore`, `.gz`, `.git/info/exclude` name a file, not the member
    // access that spells them after a name (`opts.ignore`) or calls them
    // (a chained `.ignore(yes)`).
    let names_a_file = fragment.strip_prefix('.').is_some_and(|rest| {
        rest.starts_with(is_name_char) && rest.chars().all(|c| is_name_char(c) || matches!(c, '.' | '/' | '-'))
    });
    text.match_indices(fragment).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + fragment.len()..].chars().next();
        let joins_before = (starts_with_name || names_a_file) && before.is_some_and(is_name_char);
        let called = names_a_file && after == Some('(');
        let joins_after = ends_with_name && after.is_some_and(is_name_char);
        !(joins_before || joins_after || called)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The snippet as first written: every window's distinct terms counted
    /// anew, the first best window kept.
    fn snippet_by_counting_each_window(content: &str, q: &QueryTerms, max_lines: usize) -> String {
        let lines: Vec<&str> = content.lines().collect();
        if lines.len() <= max_lines {
            return lines.join("\n");
        }
        let line_terms: Vec<Vec<String>> = lines
            .iter()
            .map(|line| {
                let mut s = String::new();
                lexical::index_terms(line, &mut s);
                s.split(' ')
                    .filter(|t| q.terms.iter().any(|qt| qt == t))
                    .map(str::to_string)
                    .collect()
            })
            .collect();
        let mut best = (0usize, 0usize);
        for start in 0..=lines.len() - max_lines {
            let mut distinct: Vec<&String> = line_terms[start..start + max_lines].iter().flatten().collect();
            distinct.sort();
            distinct.dedup();
            if distinct.len() > best.1 {
                best = (start, distinct.len());
            }
        }
        lines[best.0..best.0 + max_lines].join("\n")
    }

    #[test]
    fn a_snippet_is_the_first_window_with_the_most_query_terms() {
        let q = QueryTerms::parse("parse config file timeout");
        let content = (0..40)
            .map(|n| match n {
                5 => "let config = parse(path);".to_string(),
                20 => "// the file is read with a timeout".to_string(),
                22 => "parse_config(file)".to_string(),
                33 => "Config::parse".to_string(),
                _ => format!("let x{n} = {n};"),
            })
            .collect::<Vec<_>>()
            .join("\n");
        let got = snippet(&content, &q, 4);
        // Lines 20 and 22 hold all four terms: the first window with both.
        assert!(got.starts_with("let x19 = 19;\n// the file is read"), "{got}");
        assert_eq!(got.lines().count(), 4);
        assert_eq!(
            snippet(&content, &QueryTerms::parse("absent"), 3),
            "let x0 = 0;\nlet x1 = 1;\nlet x2 = 2;"
        );
        assert_eq!(snippet("one\ntwo", &q, 4), "one\ntwo");
        // Every window size and query agrees with counting each window anew.
        for query in ["parse config", "timeout file parse", "config", "read the file"] {
            let q = QueryTerms::parse(query);
            for lines in 1..12 {
                assert_eq!(
                    snippet(&content, &q, lines),
                    snippet_by_counting_each_window(&content, &q, lines),
                    "{query:?} in {lines} lines"
                );
            }
        }
    }

    #[test]
    fn quoted_code_is_looked_for_outside_comments_and_docstrings() {
        let chunk = "# requests.get above\ndef fetch(url):\n    \"\"\"Fetch a page.\n    >>> r = requests.get(url)\n    ... r.ok\n    \"\"\"\n    # session.close() later\n    return session.request(url)\n";
        let python = crate::source::lang::by_name("python").unwrap();
        let chunks = crate::source::chunk::chunk_source(Some(python), chunk, &Default::default()).unwrap();
        let comments = crate::source::chunk::parse_doc_lines(chunks[0].comments_label().as_deref(), 10);
        let words = code_words(chunk, 10, &comments, &[]).join(" ");
        assert!(words.contains("session.request(url)"), "{words}");
        assert!(words.contains("def fetch(url):"), "{words}");
        for quoted in ["r.ok", "requests.get(url)", "requests.get above", "session.close()"] {
            assert!(!words.contains(quoted), "{quoted} is not code: {words}");
        }
        // Without comment lines, every line is code.
        assert!(code_words(chunk, 1, &[], &[]).join(" ").contains("r.ok"));
    }

    #[test]
    fn a_module_docstring_and_comments_are_not_code() {
        let module = "\"\"\"The kit.\n\n    >>> kit.get(url)\n\"\"\"\n# kit.get lives in api.\nfrom .api import get\n";
        let python = crate::source::lang::by_name("python").unwrap();
        let chunks = crate::source::chunk::chunk_source(Some(python), module, &Default::default()).unwrap();
        let comments = crate::source::chunk::parse_doc_lines(chunks[0].comments_label().as_deref(), 1);
        let words = code_words(module, 1, &comments, &[]).join(" ");
        assert!(!words.contains("kit.get"), "{words}");
        assert!(words.contains("from .api import get"), "{words}");
    }

    #[test]
    fn a_quoted_fragment_matches_only_whole_names() {
        assert!(contains_whole("use pytest.mark.skip here", "pytest.mark.skip"));
        assert!(contains_whole("@pytest.mark.skip(reason=x)", "pytest.mark.skip"));
        assert!(!contains_whole("use the pytest.mark.skipif marker", "pytest.mark.skip"));
        assert!(!contains_whole("mypytest.mark.skip", "pytest.mark.skip"));
        assert!(contains_whole("x = builtin_str(method)", "builtin_str(method)"));
        // Punctuation at the fragment's edge needs no boundary.
        assert!(contains_whole("self.get(key)", ".get("));
        assert!(contains_whole(r#"let name = ".ignore";"#, ".ignore"));
        assert!(contains_whole("read .git/info/exclude first", ".git/info/exclude"));
        assert!(!contains_whole("if opts.ignore || opts.git_ignore", ".ignore"));
        assert!(!contains_whole("builder .hidden(yes) .ignore(yes)", ".ignore"));
        assert!(contains_whole("--jobs=0 -v", "--jobs=0"));
        assert!(!contains_whole("--jobs=01", "--jobs=0"));
        assert!(contains_whole("é--runxfail", "--runxfail"));
    }
}
