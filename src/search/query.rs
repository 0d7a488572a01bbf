//! The query, parsed once into the one value every stage reads: its terms,
//! the code it quotes and the identifiers it names ([`QueryTerms`]), how it
//! is worded (an identifier, keywords or a question), the kinds of files it
//! asks for, and the text its vector is made from.

use crate::source::lexical::{self, QueryTerms};

use super::SearchMode;

/// A query as the search reads it.
#[derive(Debug, Clone)]
pub(super) struct Query {
    /// As typed.
    pub text: String,
    /// The terms BM25 counts, the identifiers the query names (joined keys
    /// and spellings) and the code it quotes.
    pub lexical: QueryTerms,
    pub wording: Wording,
    pub intent: QueryIntent,
    /// What the embedder embeds for it ([`crate::embed::text::query_text`]).
    pub embed_text: String,
}

impl Query {
    pub fn parse(text: &str) -> Query {
        let mut lexical = QueryTerms::parse(text);
        let wording = Wording::of(text.split_whitespace().count());
        let intent = QueryIntent::of(&lexical, wording, text);
        // Asking where or how code does something, an agent describes it in
        // its own words; a doc comment or an issue's title names things as
        // the code and the program show them (synonyms cost swe-public).
        if intent.interrogative {
            lexical.add_synonyms();
        }
        Query {
            text: text.to_string(),
            intent,
            lexical,
            wording,
            embed_text: crate::embed::text::query_text(text).into_owned(),
        }
    }

    /// The code the query quotes, looked for verbatim. Quoted code is a
    /// lexical signal: semantic mode ranks by meaning alone.
    pub fn fragments(&self, mode: SearchMode) -> &[String] {
        if mode == SearchMode::Semantic {
            &[]
        } else {
            &self.lexical.fragments
        }
    }

    /// Whether a hit's name said in the query's words counts
    /// ([`super::rerank`]'s `says_name`). A lone word is an identifier,
    /// answered by exact symbol matches; names are a lexical signal, so
    /// semantic mode ranks by meaning alone.
    pub fn says_names(&self, mode: SearchMode) -> bool {
        mode != SearchMode::Semantic && self.wording.several_words()
    }
}

/// How a query is worded, by its count of words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wording {
    /// No words: nothing to search for.
    Blank,
    /// One word: an identifier, or a word looked for as one.
    Identifier,
    /// A name or a few keywords, below [`lexical::QUESTION_WORDS`].
    Keywords,
    /// A question of several words, not a name or a few keywords.
    Question,
}

impl Wording {
    fn of(words: usize) -> Wording {
        match words {
            0 => Wording::Blank,
            1 => Wording::Identifier,
            n if n < lexical::QUESTION_WORDS => Wording::Keywords,
            _ => Wording::Question,
        }
    }

    /// More than one word.
    pub fn several_words(self) -> bool {
        matches!(self, Wording::Keywords | Wording::Question)
    }
}

/// Which kinds of non-source files the query asks for (stemmed terms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct QueryIntent {
    pub tests: bool,
    pub docs: bool,
    pub config: bool,
    pub changelog: bool,
    /// Says "example", "demo", "benchmark", "script" or "tool".
    pub auxiliary: bool,
    /// A question of several words, not a name or a few keywords.
    pub question: bool,
    /// Asks where or how code does something (`where does ...`, `how is
    /// ...`, or ends in `?`), as an agent does; not a statement such as an
    /// issue's title or a doc comment.
    pub interrogative: bool,
}

/// Words that open a question about code when a verb follows them
/// (`which` and `when` also open relative clauses: "which is", "when set").
const INTERROGATIVES: &[&str] = &["where", "how", "what", "why", "who"];
const AUXILIARIES: &[&str] = &[
    "does", "do", "did", "is", "are", "was", "were", "can", "could", "should", "would", "will", "has", "have",
];

/// Whether `text` asks a question: it ends in `?`, or a question word is
/// followed by a verb (`where does`, `how is`).
fn is_interrogative(text: &str) -> bool {
    if text.trim_end().ends_with('?') {
        return true;
    }
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    words
        .windows(2)
        .any(|pair| INTERROGATIVES.contains(&pair[0].as_str()) && AUXILIARIES.contains(&pair[1].as_str()))
}

impl QueryIntent {
    fn of(q: &QueryTerms, wording: Wording, text: &str) -> QueryIntent {
        let any = |pred: &dyn Fn(&str) -> bool| q.terms.iter().any(|t| pred(t));
        QueryIntent {
            tests: any(&|t| t.starts_with("test") || t == "spec"),
            // "documentation", not "document": an HTML, JSON or uploaded
            // document is data the code handles (they share a stem).
            docs: any(&|t| ["doc", "readm", "guid"].contains(&t))
                || text
                    .split(|c: char| !c.is_alphanumeric())
                    .any(|w| w.eq_ignore_ascii_case("documentation")),
            config: any(&|t| {
                t.starts_with("config")
                    || t.starts_with("setting")
                    || ["toml", "yaml", "yml", "json", "ini"].contains(&t)
            }),
            changelog: any(&|t| t == "changelog" || t == "news" || t.starts_with("releas")),
            auxiliary: any(&|t| {
                ["exampl", "sampl", "demo", "bench", "script", "tool"]
                    .iter()
                    .any(|w| t.starts_with(w))
            }),
            question: wording == Wording::Question,
            interrogative: wording == Wording::Question && is_interrogative(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_worded_by_its_count_of_words() {
        let wording = |q: &str| Query::parse(q).wording;
        assert_eq!(wording("  "), Wording::Blank);
        assert_eq!(wording("parse_config"), Wording::Identifier);
        assert_eq!(wording("retry backoff delay"), Wording::Keywords);
        assert_eq!(wording("how long to wait"), Wording::Question);
        for q in ["", "x", "a b", "a b c", "a b c d", "a  b\tc\nd e"] {
            assert_eq!(wording(q) == Wording::Question, lexical::is_question(q), "{q:?}");
        }
    }

    /// A question asked as one looks for its words as code says them too
    /// (mined synonyms and abbreviations), but not for those it says itself;
    /// a statement does not.
    #[test]
    fn a_question_asked_as_one_looks_for_its_words_as_code_says_them() {
        let synonyms = |q: &str| Query::parse(q).lexical.synonyms;
        let asked = synonyms("Where does the cache delete entries from the temporary directory?");
        for code_word in ["remov", "temp", "dir"] {
            assert!(asked.iter().any(|s| s == code_word), "{code_word}: {asked:?}");
        }
        assert!(synonyms("Delete entries from the temporary directory of the cache").is_empty());
        let said = synonyms("Where does the cache delete and remove entries once they expire?");
        assert!(!said.iter().any(|s| s == "remov"), "{said:?}");
    }

    /// A question asked as one (a question word and its verb, or a `?`)
    /// is told apart from a statement: an issue's title, a doc comment
    /// whose "which" or "how" opens a clause.
    #[test]
    fn a_question_asked_as_one_is_told_from_a_statement() {
        let asks = |q: &str| Query::parse(q).intent.interrogative;
        assert!(asks("Where does fiber answer 405 Method Not Allowed"));
        assert!(asks("How does pixi find which display object is under the pointer"));
        assert!(asks(
            "the client IP we log is a proxy's - where is the address picked out"
        ));
        assert!(asks("Is this a keypad key?"));
        assert!(!asks("Require a non-empty name for Blueprints"));
        assert!(!asks(
            "Returns how many bytes escaping s would add, which is one per delimiter"
        ));
        assert!(!asks("When running with --recursive the ignore paths are ignored"));
        assert!(!asks("where does"), "a name or a few keywords is no question");
    }
}
