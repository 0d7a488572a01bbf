//! The language registry: which files are which language, and the grammar
//! and chunk query each one uses.
//!
//! Language knowledge lives in data files under `native-grammars/<lang>/`
//! (`chunks.scm` in the tree-sitter `tags.scm` capture convention); this
//! module only binds a name to its grammar, file extensions and those files.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{Context, Result};
use tree_sitter::{Language as Grammar, Query};

/// A language ken knows how to parse.
pub struct Language {
    /// Stable lowercase name, as shown to users and stored in the index.
    pub name: &'static str,
    /// File extensions (without the dot, lowercase) that select this language.
    pub extensions: &'static [&'static str],
    /// Exact file names that select this language (e.g. `Makefile`).
    pub file_names: &'static [&'static str],
    grammar: fn() -> Grammar,
    chunks_query_source: &'static str,
    chunks_query: OnceLock<Result<Query, String>>,
    /// `tags.scm` (references for the code graph), for the languages that have one.
    tags_query_source: Option<&'static str>,
    tags_query: OnceLock<Result<Query, String>>,
    /// `tags.scm` with its reference patterns disabled.
    tags_definitions_query: OnceLock<Result<Query, String>>,
}

impl Language {
    pub fn grammar(&self) -> Grammar {
        (self.grammar)()
    }

    /// The compiled `chunks.scm` query for this language, compiled once.
    /// With `KEN_GRAMMARS_DIR` set, the query is read from that folder instead
    /// of the copy built into the binary (for editing queries without a rebuild).
    pub fn chunks_query(&self) -> Result<&Query> {
        self.compiled(&self.chunks_query, CHUNKS).context("invalid chunk query")
    }

    /// The compiled `tags.scm` query (definitions, calls, imports for the code
    /// graph); `None` for languages without one.
    pub fn tags_query(&self) -> Option<Result<&Query>> {
        self.tags_query_source?;
        Some(self.compiled(&self.tags_query, TAGS).context("invalid tags query"))
    }

    /// `tags.scm` matching definitions only (what contains them, a method's
    /// receiver): for reading a file's symbols without its references, which
    /// are most of the matches.
    pub fn tags_definitions_query(&self) -> Option<Result<&Query>> {
        self.tags_query_source?;
        let compiled = self.compiled_with(&self.tags_definitions_query, TAGS, |query, source| {
            for pattern in 0..query.pattern_count() {
                let text = &source[query.start_byte_for_pattern(pattern)..query.end_byte_for_pattern(pattern)];
                if !text.contains("@definition.") {
                    query.disable_pattern(pattern);
                }
            }
        });
        Some(compiled.context("invalid tags query"))
    }

    fn compiled<'a>(&self, cell: &'a OnceLock<Result<Query, String>>, file: &str) -> Result<&'a Query> {
        self.compiled_with(cell, file, |_, _| {})
    }

    /// The query in `file`, compiled once into `cell` and then adjusted by `adjust`.
    fn compiled_with<'a>(
        &self,
        cell: &'a OnceLock<Result<Query, String>>,
        file: &str,
        adjust: impl FnOnce(&mut Query, &str),
    ) -> Result<&'a Query> {
        cell.get_or_init(|| {
            let source = self.resolved_query_source(file)?;
            let mut query = Query::new(&self.grammar(), &source)
                .map_err(|e| format!("native-grammars/{}/{file}: {e}", self.name))?;
            adjust(&mut query, &source);
            Ok(query)
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

const CHUNKS: &str = "chunks.scm";
const TAGS: &str = "tags.scm";

impl Language {
    /// This language's `chunks.scm` or `tags.scm` text, from `KEN_GRAMMARS_DIR` when set.
    fn own_query_source(&self, file: &str) -> Result<String, String> {
        let built_in = if file == TAGS {
            self.tags_query_source.unwrap_or_default()
        } else {
            self.chunks_query_source
        };
        match &crate::config::settings().grammars_dir {
            Some(dir) => {
                let path = Path::new(&dir).join(self.name).join(file);
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))
            }
            None => Ok(built_in.to_string()),
        }
    }

    /// The query with `; inherits: <lang>` lines replaced by that language's
    /// query (as in nvim-treesitter), so dialects share their patterns.
    fn resolved_query_source(&self, file: &str) -> Result<String, String> {
        let mut out = String::new();
        for line in self.own_query_source(file)?.lines() {
            match line.strip_prefix("; inherits:") {
                Some(parent) => {
                    let parent = by_name(parent.trim())
                        .ok_or_else(|| format!("{}: unknown inherited language {}", self.name, parent.trim()))?;
                    out.push_str(&parent.resolved_query_source(file)?);
                }
                None => out.push_str(line),
            }
            out.push('\n');
        }
        Ok(out)
    }
}

macro_rules! languages {
    ($( $name:literal => $grammar:expr, [$($ext:literal),*], [$($file:literal),*]; )*) => {
        fn registry() -> &'static [Language] {
            static REGISTRY: OnceLock<Vec<Language>> = OnceLock::new();
            REGISTRY.get_or_init(|| vec![$(
                Language {
                    name: $name,
                    extensions: &[$($ext),*],
                    file_names: &[$($file),*],
                    grammar: || $grammar.into(),
                    chunks_query_source: include_str!(concat!("../../native-grammars/", $name, "/chunks.scm")),
                    chunks_query: OnceLock::new(),
                    tags_query_source: tags_source($name),
                    tags_query: OnceLock::new(),
                    tags_definitions_query: OnceLock::new(),
                },
            )*])
        }
    };
}

languages! {
    "bash" => tree_sitter_bash::LANGUAGE, ["sh", "bash", "zsh"], [".bashrc", ".zshrc"];
    "c" => tree_sitter_c::LANGUAGE, ["c", "h"], [];
    "cpp" => tree_sitter_cpp::LANGUAGE, ["cc", "cpp", "cxx", "c++", "hpp", "hh", "hxx", "h++", "ipp", "tpp"], [];
    "csharp" => tree_sitter_c_sharp::LANGUAGE, ["cs"], [];
    "css" => tree_sitter_css::LANGUAGE, ["css"], [];
    "dart" => tree_sitter_dart::LANGUAGE, ["dart"], [];
    "elixir" => tree_sitter_elixir::LANGUAGE, ["ex", "exs"], [];
    "go" => tree_sitter_go::LANGUAGE, ["go"], [];
    "haskell" => tree_sitter_haskell::LANGUAGE, ["hs"], [];
    "hcl" => tree_sitter_hcl::LANGUAGE, ["hcl", "tf", "tfvars"], [];
    "html" => tree_sitter_html::LANGUAGE, ["html", "htm"], [];
    "java" => tree_sitter_java::LANGUAGE, ["java"], [];
    "javascript" => tree_sitter_javascript::LANGUAGE, ["js", "jsx", "mjs", "cjs"], [];
    "json" => tree_sitter_json::LANGUAGE, ["json", "jsonc"], [];
    "julia" => tree_sitter_julia::LANGUAGE, ["jl"], [];
    "kotlin" => tree_sitter_kotlin_ng::LANGUAGE, ["kt", "kts"], [];
    "lua" => tree_sitter_lua::LANGUAGE, ["lua"], [];
    "markdown" => tree_sitter_md::LANGUAGE, ["md", "markdown", "mdx"], [];
    "ocaml" => tree_sitter_ocaml::LANGUAGE_OCAML, ["ml"], [];
    "php" => tree_sitter_php::LANGUAGE_PHP, ["php"], [];
    "python" => tree_sitter_python::LANGUAGE, ["py", "pyi", "pyw"], [];
    "r" => tree_sitter_r::LANGUAGE, ["r"], [];
    "ruby" => tree_sitter_ruby::LANGUAGE, ["rb", "rake", "gemspec"], ["Rakefile", "Gemfile"];
    "rust" => tree_sitter_rust::LANGUAGE, ["rs"], [];
    "scala" => tree_sitter_scala::LANGUAGE, ["scala", "sc"], [];
    "sql" => tree_sitter_sequel::LANGUAGE, ["sql"], [];
    // Single-file components: the code of their `<script>` blocks, the rest
    // blanked by `chunk::parse_text`.
    "svelte" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT, ["svelte"], [];
    "swift" => tree_sitter_swift::LANGUAGE, ["swift"], [];
    "toml" => tree_sitter_toml_ng::LANGUAGE, ["toml"], [];
    "tsx" => tree_sitter_typescript::LANGUAGE_TSX, ["tsx"], [];
    "typescript" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT, ["ts", "mts", "cts"], [];
    "vue" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT, ["vue"], [];
    "yaml" => tree_sitter_yaml::LANGUAGE, ["yaml", "yml"], [];
    "zig" => tree_sitter_zig::LANGUAGE, ["zig"], [];
}

/// The `tags.scm` of the languages the code graph covers.
fn tags_source(name: &str) -> Option<&'static str> {
    macro_rules! tags {
        ($($lang:literal),*) => {
            match name {
                $($lang => Some(include_str!(concat!("../../native-grammars/", $lang, "/tags.scm"))),)*
                _ => None,
            }
        };
    }
    tags!(
        "c",
        "cpp",
        "csharp",
        "go",
        "java",
        "javascript",
        "kotlin",
        "php",
        "python",
        "ruby",
        "rust",
        "scala",
        "swift",
        "svelte",
        "tsx",
        "typescript",
        "vue"
    )
}

/// A fingerprint of every chunk and tags query in use: when it changes, stored
/// chunks and graph rows no longer match what indexing would produce.
pub fn queries_fingerprint() -> u64 {
    let mut all = String::new();
    for lang in registry() {
        all.push_str(lang.name);
        all.push_str(&lang.resolved_query_source(CHUNKS).unwrap_or_default());
        if lang.tags_query_source.is_some() {
            all.push_str(&lang.resolved_query_source(TAGS).unwrap_or_default());
        }
    }
    xxhash_rust::xxh3::xxh3_64(all.as_bytes())
}

/// Every language with a grammar.
pub fn all() -> &'static [Language] {
    registry()
}

/// The language with this name, if ken has a grammar for it.
pub fn by_name(name: &str) -> Option<&'static Language> {
    registry().iter().find(|l| l.name.eq_ignore_ascii_case(name))
}

/// The language of a file, from its name or extension.
pub fn for_path(path: &Path) -> Option<&'static Language> {
    let file_name = path.file_name()?.to_str()?;
    if let Some(lang) = registry().iter().find(|l| l.file_names.contains(&file_name)) {
        return Some(lang);
    }
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    registry().iter().find(|l| l.extensions.contains(&ext.as_str()))
}

/// The language of a file from its name and its text: as [`for_path`], but a
/// `.h` header written in C++ is C++. Projects in C++ name their headers
/// `.h` as often as `.hpp`, and the C grammar cannot parse templates,
/// classes or namespaces (it cut fmt's headers into module-level windows).
pub fn for_source(path: &Path, text: &str) -> Option<&'static Language> {
    let lang = for_path(path)?;
    let header = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("h"));
    if lang.name == "c" && header && is_cpp_header(text) {
        return by_name("cpp");
    }
    Some(lang)
}

/// Whether a `.h` file's text is C++: the signs GitHub's linguist reads to
/// tell C++ headers from C ones (its `cpp` heuristics), which a C header
/// does not have; its `#ifdef __cplusplus` guard alone is not one.
fn is_cpp_header(text: &str) -> bool {
    const STD_HEADERS: &[&str] = &[
        "cstdint",
        "cstddef",
        "string",
        "vector",
        "map",
        "list",
        "array",
        "bitset",
        "queue",
        "stack",
        "forward_list",
        "unordered_map",
        "unordered_set",
        "memory",
        "utility",
        "type_traits",
        "iostream",
        "istream",
        "ostream",
    ];
    if text.contains("std::") || text.contains("__has_cpp_attribute") || text.contains("__cplusplus >") {
        return true;
    }
    // `word` opens the line, then spaces (a template's `<` may follow at
    // once), then what `next` accepts.
    let opens = |line: &str, word: &str, next: fn(char) -> bool| {
        let Some(rest) = line.strip_prefix(word) else {
            return false;
        };
        let after = rest.trim_start();
        (after.len() < rest.len() || word == "template") && after.chars().next().is_some_and(next)
    };
    let name = |c: char| c.is_alphabetic() || c == '_';
    text.lines().any(|line| {
        let line = line.trim_start();
        let include = line
            .strip_prefix('#')
            .map(str::trim_start)
            .and_then(|l| l.strip_prefix("include"))
            .map(str::trim_start)
            .and_then(|l| l.strip_prefix('<'))
            .and_then(|l| l.split_once('>'))
            .is_some_and(|(header, _)| STD_HEADERS.contains(&header));
        include
            || opens(line, "template", |c| c == '<')
            || opens(line, "class", name)
            || opens(line, "namespace", name)
            || opens(line, "using namespace", name)
            || opens(line, "constexpr", name)
            || matches!(line.trim_end(), "public:" | "private:" | "protected:")
    })
}

/// The name stored for files without a grammar: chunked by line windows.
pub const PLAIN_TEXT: &str = "text";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_query_compiles_against_its_grammar() {
        for lang in all() {
            if let Err(e) = lang.chunks_query() {
                panic!("{}: {e:#}", lang.name);
            }
        }
    }

    #[test]
    fn every_tags_query_compiles_against_its_grammar() {
        let mut covered = 0;
        let mut failures = Vec::new();
        for lang in all() {
            if let Some(query) = lang.tags_query() {
                if let Err(e) = query {
                    failures.push(format!("{}: {e:#}", lang.name));
                }
                covered += 1;
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert!(covered >= 15, "the code graph covers {covered} languages");
    }

    #[test]
    fn paths_map_to_languages() {
        assert_eq!(for_path(Path::new("a/b.rs")).unwrap().name, "rust");
        assert_eq!(for_path(Path::new("x.TSX")).unwrap().name, "tsx");
        assert_eq!(for_path(Path::new("Rakefile")).unwrap().name, "ruby");
        assert!(for_path(Path::new("notes.txt")).is_none());
        assert!(for_path(Path::new("Makefile")).is_none());
    }

    #[test]
    fn a_header_in_cpp_is_cpp_and_a_c_header_stays_c() {
        let lang = |path: &str, text: &str| for_source(Path::new(path), text).map(|l| l.name);
        let cpp = [
            "namespace fmt {\nint f();\n}\n",
            "template <typename T>\nstruct box { T value; };\n",
            "#include <vector>\nint f(void);\n",
            "struct a {\n public:\n  int x;\n};\n",
            "class Widget;\n",
            "inline int f() { return std::max(1, 2); }\n",
        ];
        for text in cpp {
            assert_eq!(lang("include/x.h", text), Some("cpp"), "{text}");
        }
        let c = "#ifdef __cplusplus\nextern \"C\" {\n#endif\n#include <stdint.h>\nint classify(int klass);\nint class = 1;\n\
                 /* the template of a namespace */\nstruct list { struct list *next; };\n";
        assert_eq!(lang("include/list.h", c), Some("c"));
        // Only a `.h` is read for it: a `.c` file is C whatever it holds.
        assert_eq!(lang("src/x.c", "namespace a {}\n"), Some("c"));
        assert_eq!(lang("src/x.hpp", "int f(void);\n"), Some("cpp"));
    }
}
