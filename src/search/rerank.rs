//! The rerank: the factors a hit's fused score is multiplied by, each with
//! what it is for (definitions and exact names first, code the query quotes
//! or names in words, tests, examples and tools, docs, prose and config
//! files after source unless asked for).

use std::collections::HashMap;

use crate::source::lexical::{self, QueryTerms};
use crate::source::paths::{
    file_stem, is_auxiliary_path, is_changelog_path, is_config_language, is_docs_path, is_prose, is_test_path,
};

use super::candidates::Candidate;
use super::definitions::Defines;
use super::fusion::FusionExplain;
use super::hit::{code_words, contains_whole, SearchHit};
use super::query::{Query, QueryIntent};
use super::SearchMode;

/// Score factors of the rerank for what is not source code, each measured on
/// the public eval's swe set (tests, changelogs, prose and config files
/// outranked the source files an issue is about) and lifted, or softened for
/// tests, when the query asks for that kind of file.
const TEST_FACTOR: f64 = 0.3;
/// A query that says "test" often means the product's own tests (pytest's
/// issues do), so asking softens the demotion instead of lifting it.
const TEST_FACTOR_ASKED: f64 = 0.5;
/// A test that defines an identifier typed as a name or among keywords, as
/// typed: the one asked for when no source defines it so (tokio's
/// `write_closed` test came after the constant `WRITE_CLOSED`), after a
/// source definition that does.
const TEST_DEFINITION_TYPED_FACTOR: f64 = 0.9;
const DOCS_FOLDER_FACTOR: f64 = 0.7;
const PROSE_FACTOR: f64 = 0.35;
const CONFIG_FACTOR: f64 = 0.5;
const CHANGELOG_FACTOR: f64 = 0.3;
/// Examples, demos, benchmarks and the project's tools say a question's
/// words as often as the code that answers it (agent-public's pixijs).
const AUXILIARY_FACTOR: f64 = 0.6;
const MODULE_FACTOR: f64 = 0.8;
/// A question of several words asks what code does, which a function
/// answers: a type's fields and header share its words but rarely are the
/// answer (measured on the public eval, see BENCHMARKS.md "Types after code
/// for questions"). Names and keywords (one to three words) are untouched,
/// and so is a question that says "class" or "struct": those words are as
/// often about the classes the code handles (swe pytest-10356).
const TYPE_FACTOR: f64 = 0.9;
/// The same for a question asked as one (`where ...?`, `how does ...`): an
/// agent asks where code does something, and a type that shares its words
/// ranked above the function that does it. Agent questions, hybrid file R@1:
/// public .658 → .675, held-out .792 → .825 (×0.7: .683 and .825, but
/// held-out R@10 .983 → .967); doc-comment and issue-title lists unchanged.
const TYPE_IN_QUESTION_FACTOR: f64 = 0.8;
/// A definition of the identifier the query is (`parse_config`), or one of
/// a few words names: that is what was asked for.
const EXACT_SYMBOL_FACTOR: f64 = 3.0;
/// In a question of several words, an identifier is one clue among the
/// words: the answer is as often code that uses it ("Get the TreeBuilder
/// currently in use" asks for `getTreeBuilder`, not the class). Measured on
/// the public eval: hybrid file R@1 swe .506 → .519, doc .717 → .723; lexical
/// swe .512 → .525; no metric lower in any set (BENCHMARKS.md "An identifier
/// in a question, and BM25 for what the adapter passes by").
const EXACT_SYMBOL_IN_QUESTION_FACTOR: f64 = 2.0;
/// What a definition of a query identifier counts for when another one is
/// the one asked for ([`super::definitions::outranked_definitions`]): as any
/// other candidate, so the one asked for (BM25 at least half the best's,
/// times [`EXACT_SYMBOL_FACTOR`]) comes first.
const OUTRANKED_DEFINITION_FACTOR: f64 = 1.0;
/// Declarations: a question asks what code does, and these say what it is
/// (a constant too: a documented `const realIPHeader` outranked the function
/// that picks the client's address).
const TYPE_KINDS: &[&str] = &[
    "constant",
    "struct",
    "class",
    "interface",
    "type",
    "enum",
    "trait",
    "impl",
    "union",
    "object",
];
/// A chunk that holds code quoted in the query, verbatim, or lies in a file
/// the query names (swe: `method = builtin_str(method)` rose from 8th to 1st).
const FRAGMENT_FACTOR: f64 = 3.0;
/// The same for a question asked as one (`where ...?`): an agent quotes code
/// as an example of what it means (`/api/users/{id}`, `Map.Entry`) as often
/// as the code to find; an issue title quotes the call that fails. Agent
/// questions, hybrid file R@1: public .617 → .658, held-out .775 → .792
/// (×1 to ×1.5 alike; ×2 .642).
const FRAGMENT_IN_QUESTION_FACTOR: f64 = 1.5;
/// Tiny definitions packed side by side (getters, one-line wrappers) in a
/// question asked as one: an agent asks where code does something, which
/// they rarely do. Of the hybrid top tens of 165 agent questions, 4.7% of
/// packed chunks were the answer against 11.1% of other chunks
/// (docs/experiments.md "Several tiny definitions in one chunk"). A doc
/// comment or an issue title is often about one of them: untouched.
const PACKED_IN_QUESTION_FACTOR: f64 = 0.8;
/// A definition whose name the query says in words (`toRgb` for "convert to
/// a RGB color"): an undocumented function otherwise loses to a documented
/// neighbour that shares the question's words. Measured on the public eval:
/// doc cH@1 .303 → .333 at 1.1; at 1.2 and more, issue titles that name the API
/// they use (`xfail`, `default_headers`) ranked it above the file to fix.
const NAME_SAID_FACTOR: f64 = 1.1;

/// Each hit's rerank factors, each with what it is for (see [`Explain`]):
/// they depend on the hit and the query alone, so a hybrid search, which
/// fuses twice (before and after the feedback), computes them once.
pub(super) struct RerankFactors(HashMap<i64, Vec<(&'static str, f64)>>);

impl RerankFactors {
    pub(super) fn of(
        hits: &[SearchHit],
        candidates: &HashMap<i64, Candidate>,
        query: &Query,
        mode: SearchMode,
    ) -> RerankFactors {
        let says_names = query.says_names(mode);
        let factors_of = |hit: &SearchHit| {
            let mut factors = rerank_factors(hit, candidates[&hit.chunk_id].defines, query.intent);
            if let Some(factor) = quoted_code_factor(hit, query, mode) {
                factors.push(("quotes the query's code or names its file", factor));
            }
            if let Some(reason) = says_names.then(|| says_name(hit, &query.lexical)).flatten() {
                factors.push((reason, NAME_SAID_FACTOR));
            }
            factors
        };
        RerankFactors(hits.iter().map(|hit| (hit.chunk_id, factors_of(hit))).collect())
    }
}

/// Scores each hit: its fused score times its rerank `factors`; with
/// `explain`, how the score was made.
pub(super) fn rerank(
    hits: &mut [SearchHit],
    factors: &RerankFactors,
    fused: &HashMap<i64, f64>,
    explain: Option<(&FusionExplain, &HashMap<i64, Candidate>)>,
) {
    for hit in hits {
        let factors = &factors.0[&hit.chunk_id];
        let fused = fused[&hit.chunk_id];
        hit.score = fused * factors.iter().map(|(_, f)| f).product::<f64>();
        if let Some((explain, candidates)) = explain {
            hit.explain = Some(explain.explain(&candidates[&hit.chunk_id], fused, factors));
        }
    }
}

/// The factor of a hit that holds code the query quotes, or lies in a file it
/// names. Tests quote the calls and flags of the issue they reproduce: there a
/// verbatim match says little about where the code is.
fn quoted_code_factor(hit: &SearchHit, query: &Query, mode: SearchMode) -> Option<f64> {
    let quotes = quotes_fragment(hit, query.fragments(mode)) && (query.intent.tests || !is_test_code(hit));
    quotes.then_some(if query.intent.interrogative {
        FRAGMENT_IN_QUESTION_FACTOR
    } else {
        FRAGMENT_FACTOR
    })
}

/// The rerank's factors for a hit, each with what it is for (see [`Explain`]).
fn rerank_factors(hit: &SearchHit, defines: Defines, intent: QueryIntent) -> Vec<(&'static str, f64)> {
    let mut factors = Vec::new();
    if defines.any() {
        let factor = if intent.question {
            EXACT_SYMBOL_IN_QUESTION_FACTOR
        } else {
            EXACT_SYMBOL_FACTOR
        };
        factors.push(("defines the identifier", factor));
        if let Defines::Outranked(why) = defines {
            factors.push((why, OUTRANKED_DEFINITION_FACTOR / factor));
        }
    }
    if hit.kind == "module" {
        factors.push(("module-level code", MODULE_FACTOR));
    }
    if intent.interrogative && hit.packed && !defines.any() {
        factors.push(("tiny definitions packed, for a question", PACKED_IN_QUESTION_FACTOR));
    }
    if intent.question && TYPE_KINDS.contains(&hit.kind.as_str()) {
        let factor = if intent.interrogative {
            TYPE_IN_QUESTION_FACTOR
        } else {
            TYPE_FACTOR
        };
        factors.push(("a type, for a question", factor));
    }
    let prose = is_prose(&hit.kind, &hit.language);
    let changelog = prose && is_changelog_path(&hit.path);
    let config = is_config_language(&hit.language);
    let asked_for_this = (changelog && intent.changelog) || (config && intent.config);
    if !intent.docs {
        if prose && !asked_for_this {
            factors.push(("prose", PROSE_FACTOR));
        }
        if config && !intent.config {
            factors.push(("config file", CONFIG_FACTOR));
        }
        if is_docs_path(&hit.path) {
            factors.push(("docs folder", DOCS_FOLDER_FACTOR));
        }
    }
    if !intent.auxiliary && is_auxiliary_path(&hit.path) {
        factors.push(("examples, tools or benchmarks", AUXILIARY_FACTOR));
    }
    if changelog && !intent.changelog {
        factors.push(("changelog", CHANGELOG_FACTOR));
    }
    if is_test_code(hit) {
        let factor = if defines == Defines::Asked && !intent.question {
            TEST_DEFINITION_TYPED_FACTOR
        } else if intent.tests {
            TEST_FACTOR_ASKED
        } else {
            TEST_FACTOR
        };
        factors.push(("test code", factor));
    }
    factors
}

/// Test code: a test file, or a test module inside a source file (Rust's
/// `#[cfg(test)] mod tests`, whose chunks share the file of the code they test).
fn is_test_code(hit: &SearchHit) -> bool {
    is_test_path(&hit.path) || hit.context.as_deref().is_some_and(is_test_module_context)
}

/// Whether one of the enclosing signatures opens a test module (`mod tests {`).
fn is_test_module_context(context: &str) -> bool {
    context.lines().any(|line| {
        let line = line.trim_start();
        let line = line.strip_prefix("pub ").unwrap_or(line);
        line.strip_prefix("mod ").is_some_and(|rest| {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            name == "test" || name == "tests" || name.starts_with("test_") || name.ends_with("_tests")
        })
    })
}

/// Whether the query says every word of the hit's name, or of one of its
/// names in a chunk of several definitions (stopwords such as `get` and `is`
/// aside): "Convert to a RGB color object" says `toRgb`, not `toRgba`. A
/// constructor is named by its type. The reason `--explain` gives, if so.
fn says_name(hit: &SearchHit, q: &QueryTerms) -> Option<&'static str> {
    let symbol = hit.symbol.as_deref()?;
    let owner = hit.context.as_deref().and_then(enclosing_type);
    // Said in words, or typed as the identifier it is: `iter_lines` in a
    // question names that function, not `__iter__`.
    let said = |name: &str| {
        let words = lexical::name_words(name);
        (!words.is_empty() && words.iter().all(|w| lexical::says_name_word(w, &q.worded)))
            || q.identifiers.contains(&lexical::joined_key(name))
    };
    symbol
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .find_map(|name| match &owner {
            _ if name == DEFAULT_EXPORT || name == COMMONJS_EXPORT => {
                said(file_stem(&hit.path)).then_some("the question names its module (a default export)")
            }
            Some(owner) if is_constructor(name, owner) => {
                said(owner).then_some("the question names its type (a constructor)")
            }
            _ => said(name).then_some("the question says its name"),
        })
}

/// The name `chunks.scm` gives an anonymous default export (JavaScript,
/// TypeScript): importers name it after its file, and so does a question
/// (`parseHeaders.js`); "defaults" does not name it.
const DEFAULT_EXPORT: &str = "default";
/// What `chunks.scm` names a CommonJS module's one unnamed export
/// (`module.exports = function (...) {...}`): its default export.
const COMMONJS_EXPORT: &str = "exports";

/// Names a constructor has, whatever its type: a question names the type
/// ("Creates a new searcher builder" for `SearcherBuilder::new`).
const CONSTRUCTOR_NAMES: &[&str] = &[
    "new",
    "constructor",
    "__init__",
    "__new__",
    "init",
    "initialize",
    "__construct",
];

fn is_constructor(name: &str, owner: &str) -> bool {
    CONSTRUCTOR_NAMES.contains(&name) || name == owner
}

/// The type whose body holds a chunk, from the last of its enclosing
/// signatures: `impl<W: Write> Standard<W> {` → `Standard`, `impl Display
/// for Span` → `Span`, `export class GlProgram extends X` → `GlProgram`.
fn enclosing_type(context: &str) -> Option<String> {
    const TYPE_KEYWORDS: &[&str] = &[
        "class",
        "struct",
        "impl",
        "interface",
        "trait",
        "enum",
        "object",
        "record",
    ];
    // Generic parameters (`<'a, W: Write>`) name no type of the chunk.
    let mut depth = 0usize;
    let line: String = context
        .lines()
        .last()?
        .chars()
        .map(|c| {
            match c {
                '<' => depth += 1,
                '>' => depth = depth.saturating_sub(1),
                _ if depth == 0 => return c,
                _ => {}
            }
            ' '
        })
        .collect();
    let words: Vec<&str> = line
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| TYPE_KEYWORDS.contains(w))?;
    let rest = &words[at + 1..];
    // `impl Trait for Type`: the type follows `for`.
    let rest = match (words[at] == "impl", rest.iter().position(|w| *w == "for")) {
        (true, Some(f)) => &rest[f + 1..],
        _ => rest,
    };
    rest.first().map(|w| w.to_string())
}

/// Whether the hit's code holds one of the query's code fragments verbatim
/// (up to whitespace) or the hit sits in the file one of them names.
fn quotes_fragment(hit: &SearchHit, fragments: &[String]) -> bool {
    if fragments.is_empty() {
        return false;
    }
    let text = code_words(&hit.content, hit.start_line, &hit.comments, &hit.import_lines).join(" ");
    fragments
        .iter()
        .any(|f| contains_whole(&text, f) || fragment_names_path(f, &hit.path))
}

/// Whether `fragment` names the file at `path`: a path suffix (`flask/app.py`,
/// `sessions.py`) or a dotted module path (`_pytest.capture.EncodedFile` for
/// `src/_pytest/capture.py`), matched at segment boundaries.
fn fragment_names_path(fragment: &str, path: &str) -> bool {
    let ends_at_segment = |p: &str, suffix: &str| p == suffix || p.ends_with(&format!("/{suffix}"));
    let fragment = fragment.trim_start_matches("./");
    if fragment.contains(' ') {
        return false;
    }
    if ends_at_segment(path, fragment) {
        return true;
    }
    let parts: Vec<&str> = fragment.split('.').collect();
    let dotted_name = parts.len() >= 2
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_alphanumeric() || c == '_'));
    if !dotted_name {
        return false;
    }
    let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
    let stem = file_stem(path);
    let module = match (dir, stem) {
        (_, "__init__" | "mod" | "index") => dir.to_string(),
        ("", _) => stem.to_string(),
        _ => format!("{dir}/{stem}"),
    };
    (2..=parts.len()).any(|n| ends_at_segment(&module, &parts[..n].join("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_name_files_by_path_suffix_or_module() {
        for (fragment, path) in [
            ("src/flask/app.py", "src/flask/app.py"),
            ("flask/app.py", "src/flask/app.py"),
            ("sessions.py", "requests/sessions.py"),
            ("_pytest.capture.EncodedFile", "src/_pytest/capture.py"),
            ("_pytest.mark", "src/_pytest/mark/__init__.py"),
        ] {
            assert!(fragment_names_path(fragment, path), "{fragment} names {path}");
        }
        for (fragment, path) in [
            ("sessions.py", "requests/old_sessions.py"),
            ("pytest.mark.skip", "src/_pytest/mark/__init__.py"),
            ("caplog.get_records", "src/_pytest/logging.py"),
            ("a = b.c", "b/c.py"),
        ] {
            assert!(!fragment_names_path(fragment, path), "{fragment} does not name {path}");
        }
    }

    fn named(symbol: &str) -> SearchHit {
        SearchHit {
            symbol: Some(symbol.to_string()),
            ..SearchHit::default()
        }
    }

    #[test]
    fn a_question_says_a_name_when_it_has_all_its_words() {
        let q = QueryTerms::parse("Convert to a RGB color object with normalized components");
        assert_eq!(says_name(&named("toRgb"), &q), Some("the question says its name"));
        assert!(
            says_name(&named("normalize_components"), &q).is_some(),
            "words are stemmed"
        );
        assert!(
            says_name(&named("toRgba, toRgb"), &q).is_some(),
            "one of a chunk's names"
        );
        assert!(says_name(&named("toRgba"), &q).is_none());
        assert!(says_name(&named("toHsl"), &q).is_none());
        assert!(
            says_name(&named("to"), &q).is_none(),
            "a name of stopwords says nothing"
        );
        assert!(says_name(&SearchHit::default(), &q).is_none());
        let q = QueryTerms::parse("Set the maximum number of columns allowed");
        assert!(
            says_name(&named("max_columns"), &q).is_some(),
            "max abbreviates maximum"
        );
        assert!(says_name(&named("min_columns"), &q).is_none());
        // A default export is named by its module, not by "default".
        let export = |path: &str| SearchHit {
            path: path.to_string(),
            ..named("default")
        };
        let q = QueryTerms::parse("where are the raw response headers parsed, with the defaults?");
        assert_eq!(
            says_name(&export("lib/helpers/parseHeaders.js"), &q),
            Some("the question names its module (a default export)")
        );
        assert!(says_name(&export("lib/helpers/resolveConfig.js"), &q).is_none());
        // So is a CommonJS module's one unnamed export (`module.exports = function`).
        let commonjs = SearchHit {
            path: "lib/parse-headers.js".to_string(),
            ..named("exports")
        };
        assert_eq!(
            says_name(&commonjs, &q),
            Some("the question names its module (a default export)")
        );
    }

    #[test]
    fn quoted_code_weighs_less_in_a_question_and_not_at_all_in_an_import() {
        let code = |content: &str, import_lines: Vec<u32>| SearchHit {
            path: "src/main/java/kit/Pool.java".to_string(),
            start_line: 1,
            content: content.to_string(),
            import_lines,
            ..SearchHit::default()
        };
        let constructs = code("return new java.util.concurrent.ThreadPoolExecutor(1, 1);", vec![]);
        let imports = code("package kit;\nimport java.util.concurrent.ThreadPoolExecutor;", vec![2]);
        let factor = |hit: &SearchHit, q: &str| quoted_code_factor(hit, &Query::parse(q), SearchMode::Hybrid);
        let title = "java.util.concurrent.ThreadPoolExecutor keeps too many threads";
        let question = "where does a java.util.concurrent.ThreadPoolExecutor get its thread count?";
        assert_eq!(factor(&constructs, title), Some(FRAGMENT_FACTOR));
        assert_eq!(factor(&constructs, question), Some(FRAGMENT_IN_QUESTION_FACTOR));
        const { assert!(FRAGMENT_IN_QUESTION_FACTOR < FRAGMENT_FACTOR) };
        assert_eq!(
            factor(&imports, title),
            None,
            "an import says nothing of where the code is"
        );
        assert_eq!(
            quoted_code_factor(&constructs, &Query::parse(title), SearchMode::Semantic),
            None,
            "semantic ranks by meaning alone"
        );
    }

    #[test]
    fn an_identifier_in_a_question_names_itself_not_the_names_of_its_parts() {
        let q = QueryTerms::parse("When streaming with iter_lines, where are chunks split into lines?");
        assert!(says_name(&named("iter_lines"), &q).is_some());
        assert!(says_name(&named("split_lines"), &q).is_some(), "said in words");
        assert!(
            says_name(&named("__init__, __iter__"), &q).is_none(),
            "iter is only a part of iter_lines"
        );
        assert!(says_name(&named("iter_chunks"), &q).is_none());
        let q = QueryTerms::parse("Where are relative links resolved into absolute URLs, e.g. for abs:href?");
        assert!(
            says_name(&named("absUrl"), &q).is_some(),
            "a plural acronym is a word as written"
        );
    }

    #[test]
    fn a_constructor_is_named_by_its_type() {
        let member = |symbol: &str, context: &str| SearchHit {
            symbol: Some(symbol.to_string()),
            context: Some(context.to_string()),
            ..SearchHit::default()
        };
        let by_type = Some("the question names its type (a constructor)");
        let q = QueryTerms::parse("Create a new searcher builder with a default configuration");
        assert_eq!(says_name(&member("new", "impl SearcherBuilder {"), &q), by_type);
        let nested = member("new", "mod searcher {\nimpl<'a, W: Write> SearcherBuilder<W> {");
        assert_eq!(says_name(&nested, &q), by_type);
        let other = member("new", "impl StandardBuilder {");
        assert!(says_name(&other, &q).is_none(), "another type's constructor");
        let method = member("build", "impl SearcherBuilder {");
        assert!(says_name(&method, &q).is_none(), "not a constructor");
        let q = QueryTerms::parse("Creates a shiny new GlProgram.");
        for (name, context) in [
            ("constructor", "export class GlProgram extends Base"),
            ("GlProgram", "public final class GlProgram implements Program {"),
            ("__init__", "class GlProgram(Base):"),
        ] {
            assert_eq!(says_name(&member(name, context), &q), by_type, "{name}");
        }
    }

    #[test]
    fn the_enclosing_type_is_read_from_the_last_signature() {
        assert_eq!(
            enclosing_type("impl<W: Write> Standard<W> {").as_deref(),
            Some("Standard")
        );
        assert_eq!(enclosing_type("impl fmt::Display for Span {").as_deref(), Some("Span"));
        assert_eq!(
            enclosing_type("export class GlProgram extends X").as_deref(),
            Some("GlProgram")
        );
        assert_eq!(
            enclosing_type("public static final class Builder {").as_deref(),
            Some("Builder")
        );
        assert_eq!(
            enclosing_type("class Session(SessionRedirectMixin):").as_deref(),
            Some("Session")
        );
        assert_eq!(enclosing_type("func (c *Ctx) Bind() {"), None);
        assert_eq!(
            enclosing_type("impl<'a, M: Matcher<T>, W> StandardImpl<'a, M, W> {").as_deref(),
            Some("StandardImpl")
        );
    }

    #[test]
    fn a_test_module_inside_a_source_file_is_test_code() {
        let hit = |path: &str, context: Option<&str>| SearchHit {
            path: path.into(),
            context: context.map(str::to_string),
            ..SearchHit::default()
        };
        assert!(is_test_code(&hit("src/standard.rs", Some("mod tests {"))));
        assert!(is_test_code(&hit(
            "src/a.rs",
            Some("pub mod tests {\n    impl Fixture {")
        )));
        assert!(is_test_code(&hit("src/a.rs", Some("mod parser_tests {"))));
        assert!(is_test_code(&hit("tests/it.rs", None)));
        assert!(!is_test_code(&hit("src/a.rs", Some("impl StandardBuilder {"))));
        assert!(!is_test_code(&hit("src/a.rs", Some("mod testimony {"))));
        assert!(!is_test_code(&hit("src/a.rs", Some("mod attestation {"))));
        assert!(!is_test_code(&hit("src/a.rs", None)));
    }

    #[test]
    fn query_intent_lifts_only_what_the_query_names() {
        let intent = |q: &str| Query::parse(q).intent;
        assert_eq!(intent("retry backoff delay"), QueryIntent::default());
        assert!(intent("how long to wait between retries").question);
        assert!(!intent("getTreeBuilderDefaultNamespace").question);
        assert!(intent("tests for the retry delay").tests);
        assert!(intent("where is the retry configured").config);
        assert!(intent("retry settings in pyproject.toml").config);
        assert!(intent("changelog entry for retries").changelog);
        assert!(intent("release notes of 2.0").changelog);
        assert!(intent("retry guide in the docs").docs);
        assert!(intent("where does the documentation explain retries").docs);
        // A document is data the code handles: the docs are not asked for.
        assert!(!intent("where is the uploaded document's file name cleaned").docs);
        assert!(!intent("how is the parsed HTML document serialized").docs);
        let hit = |path: &str, kind: &str, language: &str| SearchHit {
            path: path.into(),
            kind: kind.into(),
            language: language.into(),
            ..SearchHit::default()
        };
        let none = QueryIntent::default();
        let rerank_factor = |hit: &SearchHit, exact: bool, intent: QueryIntent| -> f64 {
            let defines = if exact { Defines::Asked } else { Defines::No };
            rerank_factors(hit, defines, intent).iter().map(|(_, f)| f).product()
        };
        let source = rerank_factor(&hit("src/retry.py", "function", "python"), false, none);
        for other in [
            hit("CHANGELOG.md", "section", "markdown"),
            hit("pyproject.toml", "table", "toml"),
            hit("pylintrc", "text", "text"),
            hit("tests/test_retry.py", "function", "python"),
            hit("docs/retry.md", "section", "markdown"),
        ] {
            assert!(rerank_factor(&other, false, none) < source, "{}", other.path);
        }
        let changelog = hit("CHANGELOG.md", "section", "markdown");
        let asked = intent("changelog retry");
        assert!(rerank_factor(&changelog, false, asked) > rerank_factor(&changelog, false, none));
        let test = hit("tests/test_retry.py", "function", "python");
        let asked = intent("test retry");
        assert!(rerank_factor(&test, false, asked) > rerank_factor(&test, false, none));
        // A definition of the identifier asked for: most when the query is the
        // name or a few words, less inside a question, more than any other.
        let function = hit("src/retry.py", "function", "python");
        let named = rerank_factor(&function, true, intent("retry_delay"));
        let in_keywords = rerank_factor(&function, true, intent("retry_delay backoff"));
        let in_question = rerank_factor(&function, true, intent("how is retry_delay computed here"));
        assert_eq!(named, in_keywords);
        assert!(
            named > in_question && in_question > source,
            "{named} {in_question} {source}"
        );
        // A type shares a question's words but rarely answers it; less so an
        // issue title or a doc comment than a question asked as one.
        let class = hit("src/retry.py", "class", "python");
        let keywords = rerank_factor(&class, false, intent("retry policy"));
        let statement = rerank_factor(&class, false, intent("Retry policy ignores the backoff delay"));
        let asked = rerank_factor(
            &class,
            false,
            intent("where does the retry policy apply its backoff delay?"),
        );
        assert_eq!(keywords, 1.0);
        assert!(
            keywords > statement && statement > asked,
            "{keywords} {statement} {asked}"
        );
        // So does a constant: it says what something is, not what code does.
        let constant = hit("src/retry.py", "constant", "python");
        let question = intent("where does the retry policy apply its backoff delay?");
        assert_eq!(rerank_factor(&constant, false, intent("retry policy")), 1.0);
        assert!(rerank_factor(&constant, false, question) < rerank_factor(&function, false, question));
    }
}
