//! What is embedded: the text of a chunk and of its signatures, and of a
//! query. Each recipe has a version that is part of the embedder id, so
//! vectors of an older recipe are never compared with new ones.

/// Characters of a chunk passed to the tokenizer (the model truncates to its
/// token budget; this only bounds tokenizer work on long chunks).
const MAX_CHARS: usize = 4000;

/// The text a chunk contributes: its symbols' names as words when the model's
/// word pieces would split them badly (`setRespondedURI` becomes `set
/// responded uri`; `parse_config` is already words to the tokenizer, and
/// spelling it again weighed the name over the body: swe-public, Python, lost
/// ranks), its enclosing signatures, then its own text. Changing this changes
/// every vector: bump [`CHUNK_TEXT_VERSION`].
pub fn embedding_text(context: Option<&str>, symbol: Option<&str>, text: &str) -> String {
    let mut s = String::with_capacity(text.len().min(MAX_CHARS) + 64);
    if let Some(spelled) = symbol.and_then(spelled_names) {
        s.push_str(&spelled);
        s.push('\n');
    }
    if let Some(c) = context {
        s.push_str(c);
        s.push('\n');
    }
    let mut end = text.len().min(MAX_CHARS);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    s.push_str(&text[..end]);
    s
}

/// `text` with its identifiers spelled as lowercase words, when that changes
/// more than `_`/`-` into spaces: the names the model's word pieces would
/// split badly (camelCase, letter/digit changes).
fn spelled_names(text: &str) -> Option<String> {
    let spelled = crate::source::lexical::spaced_identifiers(text).to_lowercase();
    (spelled != text.replace(['_', '-'], " ").to_lowercase()).then_some(spelled)
}

/// The text a query is embedded as: as typed, then, when it names identifiers
/// the word pieces would split, the same spelled as words, as chunk names are
/// (`toRgba` → `toRgba\nto rgba`). ident-public semantic: chunk H@1 .465 → .540.
/// A question gets only its names spelled after it, not itself again: the
/// model's time grows with the tokens, and a question written twice took
/// twice as long for the same meaning.
pub fn query_text(query: &str) -> std::borrow::Cow<'_, str> {
    let spelled = if crate::source::lexical::is_question(query) {
        let names = crate::source::lexical::split_names(query);
        (!names.is_empty()).then(|| names.join(", "))
    } else {
        spelled_names(query)
    };
    match spelled {
        Some(spelled) => format!("{query}\n{spelled}").into(),
        None => query.into(),
    }
}

/// The texts of a chunk's signature vector, one per name it defines (up to
/// [`MAX_SIGNATURE_NAMES`]): the name as lowercase words, the innermost
/// enclosing signature (the class of a method), then the line declaring it
/// (the first line that names it outside the doc comments, `doc`: lines of
/// `text`, 1-based, as `source::chunk::parse_doc_lines` reads them). A
/// question describing a function ("Reports whether b holds an ASCII
/// uppercase byte") is often nearer its name and signature (`has upper`,
/// `func hasUpper(b []byte) bool {`) than the whole chunk, whose vector the
/// body dilutes; and in a chunk packing several small definitions, nearer
/// the one it describes than all of them together. Empty for chunks without
/// a name and for prose. Changing this bumps [`SIGNATURE_TEXT_VERSION`].
pub fn signature_texts(
    context: Option<&str>,
    symbol: Option<&str>,
    kind: &str,
    text: &str,
    doc: &[Option<(u32, u32)>],
) -> Vec<String> {
    if matches!(kind, "text" | "section") {
        return Vec::new();
    }
    let Some(symbol) = symbol else {
        return Vec::new();
    };
    let container = context.and_then(|c| c.lines().last()).map(str::trim);
    let code = || {
        text.lines()
            .zip(1..)
            .filter(|&(l, n)| !l.trim().is_empty() && !crate::source::chunk::in_doc(doc, n))
            .map(|(l, _)| l.trim())
    };
    symbol
        .split(", ")
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .take(MAX_SIGNATURE_NAMES)
        .map(|name| {
            let mut s = crate::source::lexical::spaced_identifiers(name)
                .replace(['_', '-'], " ")
                .to_lowercase();
            if let Some(container) = container {
                s.push('\n');
                s.push_str(prefix_chars(container, MAX_SIGNATURE_LINE_CHARS));
            }
            // A name no code line spells (an anonymous function) takes the first line of code.
            if let Some(line) = code().find(|l| l.contains(name)).or_else(|| code().next()) {
                s.push('\n');
                s.push_str(prefix_chars(line, MAX_SIGNATURE_LINE_CHARS));
            }
            s
        })
        .collect()
}

/// Names of a packed chunk that get a signature of their own.
const MAX_SIGNATURE_NAMES: usize = 4;
/// Characters of a declaration line in a signature text.
const MAX_SIGNATURE_LINE_CHARS: usize = 200;

/// At most `max` characters of `s`, cut on a character boundary.
fn prefix_chars(s: &str, max: usize) -> &str {
    s.char_indices().nth(max).map_or(s, |(end, _)| &s[..end])
}

/// The version of [`signature_texts`]' recipe. 2: with the enclosing
/// signature; 3: one signature per name of a packed chunk; 4: lines skipped
/// by the chunker's doc comments, not by their look.
pub const SIGNATURE_TEXT_VERSION: u32 = 4;

/// The id signature vectors are stored under, beside the chunk vectors of
/// embedder `id` (same model, so a query vector compares with both).
pub fn signature_model(id: &str) -> String {
    format!("{}/sig{SIGNATURE_TEXT_VERSION}", cache_model(id))
}

/// The version of [`embedding_text`]'s recipe, part of every embedder id so
/// vectors of an older recipe are never compared with new ones (they are
/// re-embedded, as after a model change). 2: symbol names as words first;
/// 3: only names with case or letter/digit changes.
pub const CHUNK_TEXT_VERSION: u32 = 3;

/// The shared cache's model key: the embedder id without the version of the
/// chunk-text or signature recipe (`/text3`, `/sig3`). The cache is keyed by
/// the exact text embedded, so after a recipe change the texts that did not
/// change keep their vectors.
pub(crate) fn cache_model(id: &str) -> &str {
    for recipe in ["/text", "/sig"] {
        if let Some((model, version)) = id.rsplit_once(recipe) {
            if !version.is_empty() && version.bytes().all(|b| b.is_ascii_digit()) {
                return model;
            }
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_with_split_names_are_also_embedded_spelled_out() {
        assert_eq!(query_text("toRgba"), "toRgba\nto rgba");
        assert_eq!(
            query_text("who calls parseHTTPConfig?"),
            "who calls parseHTTPConfig?\nwho calls parse http config?"
        );
        assert_eq!(
            query_text("where is parse_config called"),
            "where is parse_config called"
        );
        assert_eq!(query_text("JWT expiry check"), "JWT expiry check");
        // A question: only the names it says, not the question again.
        assert_eq!(
            query_text("where does toRgba convert a hex string like 0xff0000, and does parse_config call toRgba?"),
            "where does toRgba convert a hex string like 0xff0000, and does parse_config call toRgba?\nto rgba, 0 xff 0000"
        );
        // A question whose only split words are flags and snake_case names is embedded as typed.
        assert_eq!(
            query_text("how does --replace expand $name in parse_config"),
            "how does --replace expand $name in parse_config"
        );
    }

    #[test]
    fn the_shared_cache_key_leaves_out_the_recipe_version() {
        assert_eq!(cache_model("all-MiniLM-L6-v2/256/text3"), "all-MiniLM-L6-v2/256");
        assert_eq!(
            cache_model("openai:text-embedding-3-small@256/text3"),
            "openai:text-embedding-3-small@256"
        );
        assert_eq!(cache_model("openai:my/textual"), "openai:my/textual");
        assert_eq!(cache_model("all-MiniLM-L6-v2/256/sig2"), "all-MiniLM-L6-v2/256");
        assert_eq!(cache_model("openai:my/signal"), "openai:my/signal");
        assert_eq!(cache_model("all-MiniLM-L6-v2/256"), "all-MiniLM-L6-v2/256");
    }

    #[test]
    fn a_signature_is_the_names_as_words_and_the_lines_declaring_them() {
        // (context, symbol, kind, text, its doc lines, signature text)
        type Case<'a> = (
            Option<&'a str>,
            Option<&'a str>,
            &'a str,
            &'a str,
            Option<(u32, u32)>,
            &'a [&'a str],
        );
        let cases: &[Case] = &[
            // Doc comments naming the function are skipped (as the chunker found them).
            (
                None,
                Some("hasUpper"),
                "function",
                "// hasUpper reports whether b holds an upper-case byte.\nfunc hasUpper(b []byte) bool {\n\treturn false\n}",
                Some((1, 1)),
                &["has upper\nfunc hasUpper(b []byte) bool {"],
            ),
            // Attributes name nothing; a Java annotation line that declares the method is kept.
            (
                None,
                Some("find_short"),
                "function",
                "/// Finds the flag.\n#[inline]\npub fn find_short(&self, c: u8) -> Option<&Flag> {\n    None\n}",
                Some((1, 1)),
                &["find short\npub fn find_short(&self, c: u8) -> Option<&Flag> {"],
            ),
            (
                None,
                Some("size"),
                "method",
                "@Override public int size() {\n    return n;\n}",
                None,
                &["size\n@Override public int size() {"],
            ),
            // A packed chunk: one signature per name, each with its own line.
            (
                Some("impl Point {"),
                Some("get_x, set_x"),
                "method",
                "fn get_x(&self) -> i32 { self.x }\nfn set_x(&mut self, x: i32) { self.x = x }",
                None,
                &["get x\nimpl Point {\nfn get_x(&self) -> i32 { self.x }", "set x\nimpl Point {\nfn set_x(&mut self, x: i32) { self.x = x }"],
            ),
            // C macros are declarations, not preprocessor noise.
            (None, Some("MAX_LEN"), "macro", "#define MAX_LEN 64", None, &["max len\n#define MAX_LEN 64"]),
            // No name, or prose: no signature vector.
            (None, None, "module", "x = 1", None, &[]),
            (None, Some("Install"), "section", "## Install\nrun it", None, &[]),
            // A name no code line spells takes the first line of code.
            (
                None,
                Some("anonymous"),
                "function",
                "// c\n(x) => x + 1",
                Some((1, 1)),
                &["anonymous\n(x) => x + 1"],
            ),
            // A method: the innermost enclosing signature after the names.
            (
                Some("public final class Range {\n    public static class AttributeRange {"),
                Some("isTracked"),
                "method",
                "public boolean isTracked() {\n    return tracked;\n}",
                None,
                &["is tracked\npublic static class AttributeRange {\npublic boolean isTracked() {"],
            ),
        ];
        for &(context, symbol, kind, text, doc, expected) in cases {
            assert_eq!(signature_texts(context, symbol, kind, text, &[doc]), expected, "{text}");
        }
        // Long declaration lines are cut on a character boundary.
        let long = format!("fn f({}) {{}}", "é".repeat(300));
        let texts = signature_texts(None, Some("f"), "function", &long, &[]);
        assert_eq!(
            texts[0].lines().nth(1).unwrap().chars().count(),
            MAX_SIGNATURE_LINE_CHARS
        );
        // At most MAX_SIGNATURE_NAMES signatures for a chunk packing more definitions.
        let names = "a, b, c, d, e, f";
        let code = "fn a() {}\nfn b() {}\nfn c() {}\nfn d() {}\nfn e() {}\nfn f() {}";
        assert_eq!(
            signature_texts(None, Some(names), "function", code, &[]).len(),
            MAX_SIGNATURE_NAMES
        );
    }

    #[test]
    fn signature_vectors_have_their_own_id_beside_the_chunk_vectors() {
        assert_eq!(
            signature_model("all-MiniLM-L6-v2/256/text3"),
            "all-MiniLM-L6-v2/256/sig4"
        );
        assert_eq!(
            signature_model("openai:text-embedding-3-small@256/text3"),
            "openai:text-embedding-3-small@256/sig4"
        );
    }

    #[test]
    fn chunk_text_starts_with_its_names_as_words() {
        assert_eq!(
            embedding_text(Some("impl Cookie {"), Some("Del, SetCookie"), "fn x() {}"),
            "del, set cookie\nimpl Cookie {\nfn x() {}"
        );
        // snake_case and one-word names are words already: no names line.
        assert_eq!(
            embedding_text(
                Some("class Session:"),
                Some("prepare_request"),
                "def prepare_request(self):"
            ),
            "class Session:\ndef prepare_request(self):"
        );
        assert_eq!(embedding_text(None, Some("Color"), "class Color {}"), "class Color {}");
        assert_eq!(
            embedding_text(None, Some("sha256_hex"), "fn f() {}"),
            "sha 256 hex\nfn f() {}"
        );
        assert_eq!(embedding_text(None, None, "# Title"), "# Title");
        // Cut on a character boundary, never inside one.
        let long = format!("a{}", "é".repeat(MAX_CHARS));
        assert_eq!(embedding_text(None, None, &long).len(), MAX_CHARS - 1);
    }
}
