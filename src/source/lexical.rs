//! Code-aware terms for BM25: identifiers are split into their words
//! (camelCase, snake_case, kebab-case, letter/digit runs) and also kept whole,
//! so `parseConfig`, `parse_config` and "parse config" all meet.
//!
//! Terms are lowercased and stemmed (Snowball English) here, on both sides,
//! so the FTS5 vocabulary holds exactly the terms this module produces (which
//! lets search look up document frequencies). The index side writes them as
//! space-separated text into FTS5 columns (`unicode61`); the query side turns
//! user text into quoted terms, so no user input is ever FTS5 syntax.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::OnceLock;

use rust_stemmers::{Algorithm, Stemmer};

/// Terms longer than this are hashes, blobs or base64, not words.
const MAX_TERM_LEN: usize = 48;

/// English words too common in questions to help ranking.
const STOPWORDS: &[&str] = &[
    "a", "about", "all", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can", "code", "could",
    "do", "does", "doing", "done", "for", "from", "get", "gets", "has", "have", "how", "i", "if", "in", "into", "is",
    "it", "its", "me", "my", "of", "on", "or", "our", "should", "so", "some", "that", "the", "their", "them", "then",
    "there", "these", "this", "those", "to", "use", "used", "uses", "using", "was", "we", "were", "what", "when",
    "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
];

/// Calls `f` with every identifier-like word of `text`: runs of letters, digits
/// and `_`, with `-` kept inside when letters stand on both sides (kebab-case).
fn for_each_word(text: &str, mut f: impl FnMut(&str)) {
    let bytes = text.as_bytes();
    let mut start: Option<usize> = None;
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let mut iter = text.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        let joins = c == '-'
            && start.is_some()
            && i > 0
            && (bytes[i - 1] as char).is_ascii_alphabetic()
            && iter.peek().is_some_and(|&(_, n)| n.is_alphabetic());
        if is_word(c) || joins {
            start.get_or_insert(i);
        } else if let Some(s) = start.take() {
            f(&text[s..i]);
        }
    }
    if let Some(s) = start {
        f(&text[s..]);
    }
}

/// The sub-words of one identifier: split at `_`/`-`, lower→upper case
/// changes, acronym ends (`HTTPServer` → `HTTP`, `Server`) and letter/digit changes.
pub fn split_identifier(word: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    for piece in word.split(['_', '-']) {
        let chars: Vec<(usize, char)> = piece.char_indices().collect();
        let mut start = 0;
        for k in 1..chars.len() {
            let (i, c) = chars[k];
            let prev = chars[k - 1].1;
            let next = chars.get(k + 1).map(|&(_, n)| n);
            let boundary = (prev.is_lowercase() && c.is_uppercase())
                || (prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
                || (prev.is_alphabetic() && c.is_numeric())
                || (prev.is_numeric() && c.is_alphabetic());
            if boundary {
                parts.push(&piece[start..i]);
                start = i;
            }
        }
        if start < piece.len() {
            parts.push(&piece[start..]);
        }
    }
    parts
}

/// `text` with its camelCase and snake_case identifiers written as words, cut
/// where [`split_identifier`] cuts (`parseHTTPConfig` → `parse HTTP Config`,
/// `sha256` → `sha 256`), the rest kept as is.
pub fn spaced_identifiers(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let mut last = 0;
    for_each_word(text, |word| {
        let start = word.as_ptr() as usize - text.as_ptr() as usize;
        out.push_str(&text[last..start]);
        let parts = split_identifier(word);
        if parts.len() > 1 {
            out.push_str(&parts.join(" "));
        } else {
            out.push_str(word);
        }
        last = start + word.len();
    });
    out.push_str(&text[last..]);
    out
}

/// The words of `text` that [`spaced_identifiers`] cuts other than at `_`
/// and `-` (camelCase, letters and digits), cut and lowercased, in order
/// and once each: `parseHTTPConfig` → `parse http config`; not `parse_config`.
pub fn split_names(text: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for_each_word(text, |word| {
        let parts = split_identifier(word);
        let spelled = parts.join(" ").to_lowercase();
        if parts.len() > 1 && spelled != word.replace(['_', '-'], " ").to_lowercase() && !names.contains(&spelled) {
            names.push(spelled);
        }
    });
    names
}

/// Words from which a query is a question rather than a name or keywords.
pub const QUESTION_WORDS: usize = 4;

/// A question of several words, not a name or a few keywords.
pub fn is_question(text: &str) -> bool {
    text.split_whitespace().count() >= QUESTION_WORDS
}

/// The 2,000 most frequent English words, one a line (`scripts/common-words.py`).
const COMMON_WORDS: &str = include_str!("common-words.txt");

/// Whether `word` is one of the 2,000 most frequent English words
/// (`turned`, `several`, `picked`): what a question says it with, not what
/// it asks about (`kubernetes`, `thumbnails`, `backoff` are not).
pub fn is_common_english(word: &str) -> bool {
    static WORDS: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    WORDS
        .get_or_init(|| COMMON_WORDS.lines().collect())
        .contains(word.to_lowercase().as_str())
}

/// Capitalized words joined by hyphens, as HTTP headers are named
/// (`Cache-Control`, `X-Forwarded-For`): in a question the header, not the
/// accessor a repository may name after it (`cache_control`).
fn is_header_name(word: &str) -> bool {
    word.contains('-')
        && word
            .split('-')
            .all(|part| part.chars().next().is_some_and(|c| c.is_ascii_uppercase()))
}

/// A lowercase word joined by hyphens (`multi-line`, `built-in`): in a
/// question it is English, and as an identifier it would match every
/// `multi_line` and `MultiLine` of the code (ripgrep's "Generates a longer
/// multi-line version string." ranked nine of them above `generate_long`).
fn is_prose_compound(word: &str) -> bool {
    word.contains('-') && word.chars().all(|c| c == '-' || c.is_lowercase())
}

/// Lowercased identifier with separators removed: the form in which
/// `parse_config`, `parseConfig` and `ParseConfig` are equal.
pub fn joined_key(word: &str) -> String {
    word.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Appends the index terms of `text` to `out`, space separated.
pub fn index_terms(text: &str, out: &mut String) {
    for_each_word(text, |word| push_word_terms(word, out));
}

/// `term`'s stem, as the index has it.
fn stemmed(term: &str) -> String {
    let mut s = String::new();
    push_stemmed(term, &mut s);
    s
}

/// Lowercases and stems one term, memoized per thread (code repeats its words).
fn push_stemmed(term: &str, out: &mut String) {
    static STEMMER: OnceLock<Stemmer> = OnceLock::new();
    thread_local! {
        static MEMO: RefCell<HashMap<String, String, foldhash::fast::RandomState>> = RefCell::new(HashMap::default());
    }
    MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(stem) = memo.get(term) {
            out.push_str(stem);
            return;
        }
        let lower: String = term.chars().flat_map(char::to_lowercase).collect();
        let stem = STEMMER
            .get_or_init(|| Stemmer::create(Algorithm::English))
            .stem(&lower)
            .into_owned();
        out.push_str(&stem);
        if memo.len() > 200_000 {
            memo.clear();
        }
        memo.insert(term.to_string(), stem);
    });
}

/// Appends one word's index terms, memoized per thread by word (code repeats
/// its words; splitting and stemming each part again was most of a snippet).
fn push_word_terms(word: &str, out: &mut String) {
    thread_local! {
        static WORDS: RefCell<HashMap<String, String, foldhash::fast::RandomState>> = RefCell::new(HashMap::default());
    }
    let append = |terms: &str, out: &mut String| {
        if !terms.is_empty() {
            if !out.is_empty() {
                out.push(' ');
            }
            out.push_str(terms);
        }
    };
    WORDS.with(|memo| {
        let mut memo = memo.borrow_mut();
        if let Some(terms) = memo.get(word) {
            append(terms, out);
            return;
        }
        let mut terms = String::new();
        word_terms(word, &mut terms);
        append(&terms, out);
        if memo.len() > 100_000 {
            memo.clear();
        }
        memo.insert(word.to_string(), terms);
    });
}

/// One word's index terms: an identifier's joined key, then its parts, stemmed.
fn word_terms(word: &str, out: &mut String) {
    let parts = split_identifier(word);
    let mut push = |term: &str| {
        if term.len() >= 2 && term.len() <= MAX_TERM_LEN {
            if !out.is_empty() {
                out.push(' ');
            }
            push_stemmed(term, out);
        }
    };
    if parts.len() > 1 {
        push(&joined_key(word));
    }
    for part in parts {
        push(part);
    }
}

/// The query's words as typed, stopwords left out, each with the term that
/// stands for the whole word in the index (an identifier's joined key).
pub fn whole_word_terms(text: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for_each_word(text, |word| {
        if STOPWORDS.contains(&word.to_lowercase().as_str()) || out.iter().any(|(w, _)| w == word) {
            return;
        }
        let mut terms = String::new();
        push_word_terms(word, &mut terms);
        if let Some(whole) = terms.split(' ').find(|t| !t.is_empty()) {
            out.push((word.to_string(), whole.to_string()));
        }
    });
    out
}

/// The stemmed words of a definition's name that a question would say:
/// its identifier parts without stopwords (`getTreeBuilder` → `tree`, `builder`).
pub fn name_words(name: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    for part in split_identifier(name) {
        if part.len() < 2 || part.len() > MAX_TERM_LEN || STOPWORDS.contains(&part.to_lowercase().as_str()) {
            continue;
        }
        let mut stem = String::new();
        push_stemmed(part, &mut stem);
        if !words.contains(&stem) {
            words.push(stem);
        }
    }
    words
}

/// Short forms programmers write in names for the words a question spells
/// out (`max_columns` for "the maximum number of columns"). Both sides are
/// stemmed, so plurals (`args`, "arguments") need no entries of their own.
const ABBREVIATIONS: &[(&str, &[&str])] = &[
    ("addr", &["address"]),
    ("alloc", &["allocate", "allocation"]),
    ("arg", &["argument"]),
    ("argv", &["argument"]),
    ("attr", &["attribute"]),
    ("auth", &["authentication", "authorization", "authenticate"]),
    ("btn", &["button"]),
    ("buf", &["buffer"]),
    ("calc", &["calculate", "calculation"]),
    ("cfg", &["config", "configuration"]),
    ("char", &["character"]),
    ("cmd", &["command"]),
    ("cnt", &["count"]),
    ("col", &["column"]),
    ("conf", &["config", "configuration"]),
    ("config", &["configuration"]),
    ("conn", &["connection"]),
    ("ctx", &["context"]),
    ("cur", &["current", "cursor"]),
    ("curr", &["current"]),
    ("db", &["database"]),
    ("del", &["delete"]),
    ("desc", &["description", "descending"]),
    ("dest", &["destination"]),
    ("dir", &["directory"]),
    ("doc", &["document", "documentation"]),
    ("dst", &["destination"]),
    ("elem", &["element"]),
    ("env", &["environment"]),
    ("err", &["error"]),
    ("exec", &["execute"]),
    ("expr", &["expression"]),
    ("fmt", &["format"]),
    ("func", &["function"]),
    ("gen", &["generate"]),
    ("idx", &["index"]),
    ("impl", &["implementation", "implement"]),
    ("info", &["information"]),
    ("init", &["initialize", "initialise", "initialization"]),
    ("len", &["length"]),
    ("lib", &["library"]),
    ("max", &["maximum"]),
    ("mgr", &["manager"]),
    ("min", &["minimum"]),
    ("msg", &["message"]),
    ("num", &["number"]),
    ("obj", &["object"]),
    ("opt", &["option"]),
    ("param", &["parameter"]),
    ("pos", &["position"]),
    ("prev", &["previous"]),
    ("proc", &["process", "procedure"]),
    ("ptr", &["pointer"]),
    ("rect", &["rectangle"]),
    ("ref", &["reference"]),
    ("repo", &["repository"]),
    ("req", &["request"]),
    ("res", &["response", "result"]),
    ("resp", &["response"]),
    ("sep", &["separator"]),
    ("spec", &["specification"]),
    ("src", &["source"]),
    ("str", &["string"]),
    ("sync", &["synchronize", "synchronise", "synchronized"]),
    ("tmp", &["temporary"]),
    ("util", &["utility"]),
    ("val", &["value"]),
    ("var", &["variable"]),
];

/// Whether a question's `terms` say the (stemmed) name word `word`: the word
/// itself, or the word it abbreviates (`max` is said by "maximum").
pub fn says_name_word(word: &str, terms: &[String]) -> bool {
    static LONG_FORMS: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    if terms.iter().any(|t| t == word) {
        return true;
    }
    let long_forms = LONG_FORMS.get_or_init(|| {
        let mut map: HashMap<String, Vec<String>> = HashMap::new();
        for (short, longs) in ABBREVIATIONS {
            map.entry(stemmed(short))
                .or_default()
                .extend(longs.iter().map(|l| stemmed(l)));
        }
        map
    });
    long_forms
        .get(word)
        .is_some_and(|longs| longs.iter().any(|l| terms.contains(l)))
}

/// What the lexical engine searches for, derived from user text.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryTerms {
    /// Distinct lowercased terms, in the order they appear.
    pub terms: Vec<String>,
    /// Joined keys ([`joined_key`]) of the words that look like identifiers
    /// (several parts, or the whole query is one word), for exact symbol matches.
    pub identifiers: Vec<String>,
    /// Those words as typed (`provisionContext`, `poll_future`): a
    /// definition spelled so is the one asked for, before one that only
    /// shares the joined key (`ProvisionContext`, `PollFuture`).
    pub spellings: Vec<String>,
    /// Code quoted in the query ([`code_fragments`]), matched verbatim.
    pub fragments: Vec<String>,
    /// The terms of its words as written, without an identifier's parts:
    /// `iter_lines` names one function; it does not say `iter`.
    pub worded: Vec<String>,
    /// Its words as code says them ("deleted" as `remove`, "directory" as
    /// `dir`) that it does not say itself; empty unless
    /// [`Self::add_synonyms`] filled it.
    pub synonyms: Vec<String>,
}

/// A question's words and the words code says them with, mined from public
/// repositories' doc comments and their code (`scripts/synonyms/`): `delete:
/// remove`, `parses: parser`.
const SYNONYMS: &str = include_str!("synonyms.txt");

/// The words (stemmed) code says the question's (stemmed) `term` with: the
/// abbreviations of [`ABBREVIATIONS`] (`directory`: `dir`) and [`SYNONYMS`].
fn code_words_for(term: &str) -> &'static [String] {
    static TABLE: OnceLock<HashMap<String, Vec<String>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mined = SYNONYMS
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| line.split_once(':'))
            .flat_map(|(word, code_words)| code_words.split_whitespace().map(move |c| (word.trim(), c)));
        let abbreviated = ABBREVIATIONS
            .iter()
            .flat_map(|(short, longs)| longs.iter().map(move |long| (*long, *short)));
        let mut table: HashMap<String, Vec<String>> = HashMap::new();
        for (word, code_word) in abbreviated.chain(mined) {
            let (said, code_word) = (stemmed(word), stemmed(code_word));
            let entry = table.entry(said.clone()).or_default();
            if code_word != said && !entry.contains(&code_word) {
                entry.push(code_word);
            }
        }
        table
    });
    table.get(term).map_or(&[], Vec::as_slice)
}

impl QueryTerms {
    pub fn parse(text: &str) -> QueryTerms {
        let question = is_question(text);
        let mut words = Vec::new();
        for_each_word(text, |w| {
            let start = w.as_ptr() as usize - text.as_ptr() as usize;
            // Not a compound of English ("multi-line", "depth-first") unless
            // the question writes it as a flag (`--max-count`), nor a header's
            // name ("Cache-Control"): no identifier is spelled so.
            let prose = question && (is_prose_compound(w) || is_header_name(w)) && !text[..start].ends_with('-');
            words.push((w.to_string(), prose));
        });
        // Stopwords are whole words of the question, dropped before stemming.
        let content_words: Vec<&(String, bool)> = words
            .iter()
            .filter(|(w, _)| !STOPWORDS.contains(&w.to_lowercase().as_str()))
            .collect();
        let words: Vec<(String, bool)> = if content_words.is_empty() {
            words.clone()
        } else {
            content_words.into_iter().cloned().collect()
        };
        let single = words.len() == 1;
        let mut q = QueryTerms::default();
        let mut all = Vec::new();
        for (word, prose) in &words {
            let parts = split_identifier(word);
            let identifier = (parts.len() > 1 || single) && word.len() >= 2 && !prose;
            if identifier {
                let key = joined_key(word);
                if !q.identifiers.contains(&key) {
                    q.identifiers.push(key);
                }
                if !q.spellings.contains(word) {
                    q.spellings.push(word.clone());
                }
            }
            let mut terms = String::new();
            push_word_terms(word, &mut terms);
            // An identifier's first term is its whole word (`URLs`: `url`);
            // the rest are its parts.
            for (i, t) in terms.split(' ').filter(|t| !t.is_empty()).enumerate() {
                if (!identifier || i == 0) && !q.worded.iter().any(|w| w == t) {
                    q.worded.push(t.to_string());
                }
                all.push(t.to_string());
            }
        }
        for t in &all {
            if !q.terms.contains(t) {
                q.terms.push(t.clone());
            }
        }
        q.fragments = code_fragments(text);
        q
    }

    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Fills [`Self::synonyms`]: the words code says the query's words with
    /// ([`code_words_for`]), those it does not say itself.
    pub fn add_synonyms(&mut self) {
        for code_word in self.worded.iter().flat_map(|t| code_words_for(t)) {
            if !self.terms.contains(code_word) && !self.synonyms.contains(code_word) {
                self.synonyms.push(code_word.clone());
            }
        }
    }

    /// Whether `name` is one of the query's identifiers exactly as typed
    /// (case and separators included).
    pub fn spells(&self, name: &str) -> bool {
        self.spellings.iter().any(|s| s == name)
    }

    /// An FTS5 MATCH expression that ORs the given terms. Each term is a quoted
    /// string of letters and digits only, so it can never be read as syntax.
    pub fn fts_match<'a>(terms: impl IntoIterator<Item = &'a String>) -> String {
        terms
            .into_iter()
            .map(|t| format!("\"{}\"", t.replace('"', "")))
            .collect::<Vec<_>>()
            .join(" OR ")
    }
}

/// Shortest fragment worth matching verbatim (`i.e.`, `a-z` are prose).
const MIN_FRAGMENT_CHARS: usize = 5;

/// Lone tokens that join the code on both sides into one fragment.
const OPERATORS: &[&str] = &[
    "=", "==", "===", "!=", "!==", "+=", "-=", "*=", "/=", ":=", "->", "=>", "<=", ">=", "<<", ">>", "&&", "||",
];

/// Pieces of code quoted in a question, whitespace collapsed: backtick spans
/// (`` `min-similarity-lines` ``), words that carry code punctuation
/// (`builtin_str(method)`, `caplog.get_records`, `--jobs=0`, `dst[:0]`), and
/// words joined by a lone operator (`method = builtin_str(method)`). Plain
/// words and hyphenated prose (`non-empty`) are not fragments.
pub fn code_fragments(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |fragment: String| {
        let has_letter = fragment.chars().any(|c| c.is_alphabetic());
        if fragment.chars().count() >= MIN_FRAGMENT_CHARS && has_letter && !out.contains(&fragment) {
            out.push(fragment);
        }
    };
    // Backtick spans first; what lies between them is read word by word.
    let mut outside = Vec::new();
    let backticks = text.matches('`').count();
    for (i, piece) in text.split('`').enumerate() {
        // Odd pieces lie between backticks, unless the last one is unclosed.
        let quoted = i % 2 == 1 && backticks > i;
        if quoted {
            let words: Vec<&str> = piece.split_whitespace().collect();
            let span = words.join(" ");
            if words.len() == 1 && split_identifier(&span).len() <= 1 && !span.contains(is_code_punct) {
                continue; // a plain word in backticks is a term, not a phrase
            }
            push(span);
        } else {
            outside.push(piece);
        }
    }
    for piece in outside {
        let tokens: Vec<&str> = piece.split_whitespace().map(trim_prose_punct).collect();
        let mut i = 0;
        while i < tokens.len() {
            // A run: token (operator token)* joined while operators link words.
            let mut end = i;
            while end + 2 < tokens.len() && OPERATORS.contains(&tokens[end + 1]) && !tokens[end + 2].is_empty() {
                end += 2;
            }
            if end > i {
                push(tokens[i..=end].join(" "));
            } else if is_code_word(tokens[i]) {
                push(tokens[i].to_string());
            }
            i = end + 1;
        }
    }
    out
}

fn is_code_punct(c: char) -> bool {
    matches!(c, '.' | '(' | ')' | '=' | '[' | ']' | ':' | '<' | '>' | '/' | '{' | '}')
}

/// A word with code punctuation inside. A bare flag (`--help`) or a slash
/// between words (`and/or`, `-a/--text`) is not enough: CLI code and prose
/// mention those everywhere; a slash counts in a file path (`src/app.py`).
fn is_code_word(word: &str) -> bool {
    let slash_path = word.contains('/') && word.contains('.');
    !OPERATORS.contains(&word) && (word.contains(|c: char| is_code_punct(c) && c != '/') || slash_path)
}

/// A word without the sentence punctuation around it; brackets and quotes are
/// cut only when unbalanced, so `readouterr()` and `"a"` stay whole.
fn trim_prose_punct(word: &str) -> &str {
    let mut w = word.trim_end_matches(['.', ',', ';', ':', '!', '?']);
    loop {
        let before = w;
        for (open, close) in [('(', ')'), ('[', ']'), ('{', '}')] {
            let (opens, closes) = (w.matches(open).count(), w.matches(close).count());
            if closes > opens && w.ends_with(close) {
                w = &w[..w.len() - 1];
            } else if opens > closes && w.starts_with(open) {
                w = &w[1..];
            }
        }
        for quote in ['"', '\'', '“', '”', '‘', '’'] {
            if w.matches(quote).count() % 2 == 1 {
                w = w.trim_start_matches(quote).trim_end_matches(quote);
            }
        }
        w = w.trim_end_matches(['.', ',', ';', ':', '!', '?']);
        // `(client)` is a word in parentheses, `f(x)` a call.
        if let Some(inner) = w.strip_prefix('(').and_then(|w| w.strip_suffix(')')) {
            if !inner.contains(['(', ')']) {
                w = inner;
            }
        }
        if w == before {
            return w;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut s = String::new();
        index_terms(text, &mut s);
        s.split(' ').filter(|t| !t.is_empty()).map(str::to_string).collect()
    }

    #[test]
    fn identifiers_are_spelled_out_as_words() {
        assert_eq!(
            spaced_identifiers("pub fn setRespondedURI(max_size: u8) -> HTTPError {"),
            "pub fn set Responded URI(max size: u 8) -> HTTP Error {"
        );
        assert_eq!(spaced_identifiers("Add, Del, SetCookie"), "Add, Del, Set Cookie");
        assert_eq!(
            spaced_identifiers("plain words, ünïcode_näme"),
            "plain words, ünïcode näme"
        );
    }

    /// A word's terms come from the thread's memo after its first time,
    /// spaced as when computed; a word with none adds no space.
    #[test]
    fn a_words_terms_are_the_same_from_the_memo() {
        let mut out = String::from("head");
        index_terms("a getUserName x getUserName", &mut out);
        assert_eq!(out, "head getusernam get user name getusernam get user name");
        let mut fresh = String::new();
        word_terms("getUserName", &mut fresh);
        assert_eq!(fresh, "getusernam get user name");
        let mut none = String::new();
        index_terms("a x a", &mut none);
        assert_eq!(none, "");
    }

    #[test]
    fn identifiers_split_and_stay_whole() {
        assert_eq!(terms("parseConfig"), ["parseconfig", "pars", "config"]);
        assert_eq!(terms("parsing configs"), ["pars", "config"]);
        assert_eq!(terms("parse_config"), ["parseconfig", "pars", "config"]);
        assert_eq!(terms("HTTPServerError"), ["httpservererror", "http", "server", "error"]);
        assert_eq!(terms("utf8ToUtf16"), ["utf8toutf16", "utf", "to", "utf", "16"]);
        assert_eq!(terms("my-component x-1"), ["mycompon", "my", "compon"]);
        assert!(terms("a - b").is_empty());
    }

    #[test]
    fn queries_drop_stopwords_and_find_identifiers() {
        let q = QueryTerms::parse("where is the JWT token expiry checked?");
        assert_eq!(q.terms, ["jwt", "token", "expiri", "check"]);
        assert!(q.identifiers.is_empty());
        let q = QueryTerms::parse("parse_config");
        assert_eq!(q.terms, ["parseconfig", "pars", "config"]);
        assert_eq!(q.identifiers, ["parseconfig"]);
        assert!(q.spells("parse_config"));
        assert!(!q.spells("parseConfig") && !q.spells("ParseConfig"));
        let q = QueryTerms::parse("where is provisionContext called");
        assert_eq!(q.identifiers, ["provisioncontext"]);
        assert_eq!(q.spellings, ["provisionContext"]);
        let q = QueryTerms::parse("the");
        assert_eq!(q.terms, ["the"]);
    }

    #[test]
    fn a_hyphenated_word_in_a_question_is_prose_unless_written_as_a_flag() {
        let q = QueryTerms::parse("Generates a longer multi-line version string.");
        assert!(q.identifiers.is_empty());
        assert_eq!(
            q.terms,
            ["generat", "longer", "multilin", "multi", "line", "version", "string"]
        );
        let q = QueryTerms::parse("why does --max-count stop early");
        assert_eq!(q.identifiers, ["maxcount"]);
        // A name or a few keywords keep it: they may be an identifier.
        assert_eq!(QueryTerms::parse("multi-line").identifiers, ["multiline"]);
        assert_eq!(QueryTerms::parse("multi-line search").identifiers, ["multiline"]);
        // So is a header's name; a lone one may be an identifier.
        let q = QueryTerms::parse("how is the Content-Type header read");
        assert!(q.identifiers.is_empty());
        assert_eq!(q.worded, ["contenttyp", "content", "type", "header", "read"]);
        assert_eq!(QueryTerms::parse("Content-Type").identifiers, ["contenttype"]);
        // Underscores or camelCase make it an identifier anywhere.
        let q = QueryTerms::parse("how is the max_count-limit read");
        assert_eq!(q.identifiers, ["maxcountlimit"]);
        let q = QueryTerms::parse("how is the readFile-sync call made");
        assert_eq!(q.identifiers, ["readfilesync"]);
    }

    #[test]
    fn name_words_are_the_stemmed_parts_a_question_would_say() {
        assert_eq!(name_words("getTreeBuilder"), ["tree", "builder"]);
        assert_eq!(name_words("is_valid_cap_letter"), ["valid", "cap", "letter"]);
        assert_eq!(name_words("HTTPServers"), ["http", "server"]);
        assert!(name_words("get").is_empty());
    }

    #[test]
    fn a_name_word_is_said_by_itself_or_by_the_word_it_abbreviates() {
        let terms = QueryTerms::parse("Set the maximum number of columns; deletes the position").terms;
        let said = |word: &str| says_name_word(&name_words(word)[0], &terms);
        assert!(said("columns") && said("col") && said("cols"));
        assert!(said("max") && said("num") && said("pos"));
        assert!(said("del"), "stemmed on both sides: del -> delete -> deletes");
        assert!(!said("min") && !said("len") && !said("width"));
    }

    #[test]
    fn code_in_questions_becomes_fragments() {
        assert_eq!(
            code_fragments("method = builtin_str(method) problem"),
            ["method = builtin_str(method)"]
        );
        assert_eq!(
            code_fragments("caplog.get_records and caplog.clear conflict"),
            ["caplog.get_records", "caplog.clear"]
        );
        assert_eq!(
            code_fragments("Setting `min-similarity-lines` to `0` should stop `pylint`"),
            ["min-similarity-lines"]
        );
        assert_eq!(
            code_fragments("pytest 6.0.0rc1: capfd.readouterr() converts \\r (in --pdb mode)."),
            ["6.0.0rc1", "capfd.readouterr()"]
        );
        assert_eq!(code_fragments("bug in src/flask/app.py (client)"), ["src/flask/app.py"]);
        assert!(code_fragments("Possibly suggest the -a/--text flag, and/or --help").is_empty());
        assert_eq!(code_fragments("Running pylint with --jobs=0 fails"), ["--jobs=0"]);
        assert_eq!(code_fragments("grows dst[:0] as needed"), ["dst[:0]"]);
        // Prose punctuation is not code.
        assert!(code_fragments("Returns true (a-z, A-Z), i.e. non-empty; 3.8+ or 5.2.3: fails.").is_empty());
        assert!(code_fragments("where is the JWT expiry checked?").is_empty());
        assert!(code_fragments("unclosed `backtick and alone").is_empty());
    }

    #[test]
    fn hostile_text_becomes_plain_terms() {
        let q = QueryTerms::parse(r#"" AND * -foo NEAR( OR "#);
        let m = QueryTerms::fts_match(&q.terms);
        assert_eq!(m, r#""foo" OR "near""#);
        assert!(QueryTerms::parse("*** ((( ").is_empty());
    }
}
