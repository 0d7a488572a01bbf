//! Doc comments are the `@doc` captures of `chunks.scm`: the comments right
//! above a definition (no blank line between; one for a `/** ... */` block
//! below some code) or, where the language puts them there, its docstring;
//! any other comment a blank line away is no doc.

use ken::source::chunk::{chunk_source, ChunkLimits};
use ken::source::lang;

/// The lines of `name`'s doc comment in `source`, trimmed and joined by `|`.
fn doc_of(language: &str, source: &str, name: &str) -> Option<String> {
    let language = lang::by_name(language).unwrap_or_else(|| panic!("no grammar {language}"));
    let chunks = chunk_source(Some(language), source, &ChunkLimits::default()).unwrap();
    let lines: Vec<&str> = source.lines().collect();
    let symbol = chunks
        .iter()
        .flat_map(|c| &c.symbols)
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("{name} is no chunk symbol of\n{source}\n{chunks:#?}"));
    let (a, b) = symbol.doc?;
    Some(
        lines[a as usize - 1..b as usize]
            .iter()
            .map(|l| l.trim())
            .collect::<Vec<_>>()
            .join("|"),
    )
}

/// (language, source, symbol, its doc lines joined by `|`, or none).
type Case<'a> = (&'a str, &'a str, &'a str, Option<&'a str>);

fn check(cases: &[Case]) {
    let mut failures = Vec::new();
    for &(language, source, name, expected) in cases {
        let got = doc_of(language, source, name);
        if got.as_deref() != expected {
            failures.push(format!("{language} {name}: got {got:?}, expected {expected:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn comments_right_above_a_definition_are_its_doc() {
    check(&[
        (
            "rust",
            "/// Parses it.\n/// Twice.\n#[inline]\npub fn parse() {}\n",
            "parse",
            Some("/// Parses it.|/// Twice."),
        ),
        (
            "rust",
            "struct S;\n\nimpl S {\n    /** Block doc. */\n    fn m(&self) {}\n}\n",
            "m",
            Some("/** Block doc. */"),
        ),
        // Top-level constants, and the members of a Go `var (...)` block.
        (
            "go",
            "package p\n\n// MaxKeySize is the largest key.\nconst MaxKeySize = 32768\n",
            "MaxKeySize",
            Some("// MaxKeySize is the largest key."),
        ),
        (
            "go",
            "package p\n\nvar (\n\tErrTimeout = errors.New(\"timeout\")\n\t// ErrClosed is returned after Close.\n\tErrClosed = errors.New(\"closed\")\n)\n",
            "ErrClosed",
            Some("// ErrClosed is returned after Close."),
        ),
        (
            "go",
            "package p\n\nvar (\n\t// ErrTimeout is returned on a timeout.\n\tErrTimeout = errors.New(\"timeout\")\n)\n",
            "ErrTimeout",
            Some("// ErrTimeout is returned on a timeout."),
        ),
        (
            "typescript",
            "/** Prefix of resolved fs paths. */\nexport const FS_PREFIX = `/@fs/`\n",
            "FS_PREFIX",
            Some("/** Prefix of resolved fs paths. */"),
        ),
        (
            "python",
            "import os\n\n#: Default terminal width.\nDEFAULT_WIDTH = 80\n",
            "DEFAULT_WIDTH",
            Some("#: Default terminal width."),
        ),
        // PEP 257's attribute docstring, right below the constant.
        (
            "python",
            "import os\n\nWIDTH = 80\n\"\"\"The default width.\"\"\"\n\n\ndef f():\n    pass\n",
            "WIDTH",
            Some("\"\"\"The default width.\"\"\""),
        ),
        // Items a macro passes through (`cfg_rt! { ... }`) keep their docs.
        (
            "rust",
            "cfg_rt! {\n    /// Spawns a task.\n    pub fn spawn() {}\n}\n",
            "spawn",
            Some("/// Spawns a task."),
        ),
        (
            "go",
            "package p\n\n// Bind parses the body.\nfunc Bind() {}\n",
            "Bind",
            Some("// Bind parses the body."),
        ),
        (
            "go",
            "package p\n\n// Config holds settings.\ntype Config struct {\n\tA int\n}\n",
            "Config",
            Some("// Config holds settings."),
        ),
        (
            "javascript",
            "/**\n * Adds.\n */\nfunction add(a, b) {\n  return a + b;\n}\n",
            "add",
            Some("/**|* Adds.|*/"),
        ),
        (
            "typescript",
            "/** Greets. */\nexport function greet(n: string): string {\n  return n;\n}\n",
            "greet",
            Some("/** Greets. */"),
        ),
        (
            "tsx",
            "// A button.\nexport const Button = () => {\n  return <b/>;\n};\n",
            "Button",
            Some("// A button."),
        ),
        (
            "java",
            "class A {\n    /** Returns the size. */\n    @Override\n    public int size() {\n        return 0;\n    }\n}\n",
            "size",
            Some("/** Returns the size. */"),
        ),
        (
            "c",
            "/* Frees the list. */\nvoid list_free(struct list *l) {\n}\n",
            "list_free",
            Some("/* Frees the list. */"),
        ),
        (
            "cpp",
            "// Draws it.\nvoid draw() {\n}\n",
            "draw",
            Some("// Draws it."),
        ),
        (
            "csharp",
            "class A {\n    /// <summary>Runs.</summary>\n    public void Run() {\n    }\n}\n",
            "Run",
            Some("/// <summary>Runs.</summary>"),
        ),
        (
            "ruby",
            "# Says hello.\n# Loudly.\ndef hello\n  puts 1\nend\n",
            "hello",
            Some("# Says hello.|# Loudly."),
        ),
        (
            "python",
            "# Helper.\ndef helper():\n    return 1\n",
            "helper",
            Some("# Helper."),
        ),
        (
            "php",
            "<?php\n/** Loads. */\nfunction load() {\n}\n",
            "load",
            Some("/** Loads. */"),
        ),
        (
            "kotlin",
            "/** Sums. */\nfun sum(a: Int): Int {\n    return a\n}\n",
            "sum",
            Some("/** Sums. */"),
        ),
        (
            "swift",
            "/// Runs.\nfunc run() {\n}\n",
            "run",
            Some("/// Runs."),
        ),
        (
            "scala",
            "/** Maps. */\ndef map(x: Int): Int = x\n",
            "map",
            Some("/** Maps. */"),
        ),
        (
            "lua",
            "-- Adds.\nlocal function add(a, b)\n  return a + b\nend\n",
            "add",
            Some("-- Adds."),
        ),
        (
            "bash",
            "# Builds it.\nbuild() {\n  make\n}\n",
            "build",
            Some("# Builds it."),
        ),
        (
            "haskell",
            // (The first declaration's comment lies outside the declarations node.)
            "module M where\n\nx :: Int\nx = 1\n\n-- | Doubles.\ndouble :: Int -> Int\ndouble x = x * 2\n",
            "double",
            Some("-- | Doubles."),
        ),
        (
            "zig",
            "/// Adds.\npub fn add(a: i32) i32 {\n    return a;\n}\n",
            "add",
            Some("/// Adds."),
        ),
        (
            "elixir",
            "defmodule M do\n  # Adds.\n  def add(a), do: a\nend\n",
            "add",
            Some("# Adds."),
        ),
        (
            "elixir",
            "defmodule M do\n  @doc \"\"\"\n  Adds.\n  \"\"\"\n  def add(a), do: a\nend\n",
            "add",
            Some("@doc \"\"\"|Adds.|\"\"\""),
        ),
        // Scala 3's indented body takes in the Scaladoc after it: it is still
        // the next definition's.
        (
            "scala",
            "package demo\n\n/** Doc A. */\nclass A:\n  def f: Int = 1\n\n/** Doc B. */\nclass B:\n  def g: Int = 2\n",
            "B",
            Some("/** Doc B. */"),
        ),
        (
            "scala",
            "package demo\n\n/** Doc A. */\nclass A:\n  def f: Int = 1\n\n/** Doc B. */\nclass B:\n  def g: Int = 2\n",
            "f",
            None,
        ),
        // At the top level Kotlin's grammar reads `@Throws(...)` above a
        // function as a statement of its own: still the function's annotation.
        (
            "kotlin",
            "package x\n\n/** Reads. */\n@Throws(IOException::class)\nfun read() = 1\n",
            "read",
            Some("/** Reads. */"),
        ),
        // An exported overload's doc is above its first signature's `export`.
        (
            "typescript",
            "/** Parses a value. */\nexport function parse(a: string): number;\nexport function parse(a: any): number {\n  return 1;\n}\n",
            "parse",
            Some("/** Parses a value. */"),
        ),
        // `export declare`: the doc is above the `export`.
        (
            "typescript",
            "/** Registers it. */\nexport declare function register(name: string): void;\n",
            "register",
            Some("/** Registers it. */"),
        ),
        // A definition that opens its parent node takes the comments above
        // that node: a C++ member struct is a field declaration's first child,
        // a Ruby class's first method its body's.
        (
            "cpp",
            "class Db {\n private:\n  // Stats of one level.\n  struct Stats {\n    int micros;\n  };\n};\n",
            "Stats",
            Some("// Stats of one level."),
        ),
        (
            "ruby",
            "module Rack\n  # Wraps a body.\n  class BodyProxy\n    # Keeps the body.\n    def initialize(body)\n      @body = body\n    end\n  end\nend\n",
            "initialize",
            Some("# Keeps the body."),
        ),
        (
            "ruby",
            "module Rack\n  # Wraps a body.\n  class BodyProxy\n    # Keeps the body.\n    def initialize(body)\n      @body = body\n    end\n  end\nend\n",
            "BodyProxy",
            Some("# Wraps a body."),
        ),
        // `@spec` and `@impl` between a def and its `@doc` do not cut it off.
        (
            "elixir",
            "defmodule M do\n  @doc \"Adds.\"\n  @spec add(integer) :: integer\n  @impl true\n  def add(a), do: a\nend\n",
            "add",
            Some("@doc \"Adds.\""),
        ),
    ]);
}

#[test]
fn a_docstring_is_the_doc_of_its_definition() {
    check(&[
        (
            "python",
            "def f(x):\n    \"\"\"Fetch a page.\n\n    More.\n    \"\"\"\n    return x\n",
            "f",
            Some("\"\"\"Fetch a page.||More.|\"\"\""),
        ),
        (
            "python",
            "class Box:\n    '''A box.'''\n\n    def get(self):\n        return 1\n",
            "Box",
            Some("'''A box.'''"),
        ),
        (
            "python",
            "@cache\ndef g():\n    \"\"\"Cached.\"\"\"\n    return 1\n",
            "g",
            Some("\"\"\"Cached.\"\"\""),
        ),
        // A string that is not the first statement is no docstring.
        ("python", "def h():\n    x = 1\n    \"\"\"Not doc.\"\"\"\n", "h", None),
        (
            "elixir",
            "defmodule M do\n  @moduledoc \"Math.\"\n\n  def add(a), do: a\nend\n",
            "M",
            Some("@moduledoc \"Math.\""),
        ),
    ]);
}

#[test]
fn a_comment_a_blank_line_away_or_on_the_definition_line_is_no_doc() {
    check(&[
        ("rust", "// Licence.\n\npub fn parse() {}\n", "parse", None),
        ("go", "package p\n\n// Section.\n\nfunc Bind() {}\n", "Bind", None),
        ("python", "# Section.\n\ndef helper():\n    return 1\n", "helper", None),
        ("javascript", "/* header */\n\nfunction add() {}\n", "add", None),
        ("ruby", "# Section.\n\ndef hello\nend\n", "hello", None),
        ("java", "class A {\n    // x\n\n    void m() {}\n}\n", "m", None),
        // The comment of the definition before is not the next one's.
        ("rust", "/// Doc of a.\nfn a() {}\nfn b() {}\n", "b", None),
        ("c", "int x; /* trailing */\nint f(void) { return 0; }\n", "f", None),
        // A block doc comment that opens the file is its header.
        ("javascript", "/**\n * express\n */\n\nfunction add() {}\n", "add", None),
        // Two blank lines part it from the code below.
        (
            "javascript",
            "var a = 1;\n\n/** Adds. */\n\n\nfunction add() {}\n",
            "add",
            None,
        ),
    ]);
}

#[test]
fn a_block_doc_comment_one_blank_line_above_a_definition_is_its_doc() {
    // JSDoc, Javadoc and PHPDoc attach it across the blank line Express
    // leaves under every doc comment.
    check(&[
        (
            "javascript",
            "var req = {};\n\n/**\n * Check if the given `encoding`s are accepted.\n */\n\nreq.acceptsEncodings = function(){\n  return true;\n};\n",
            "acceptsEncodings",
            Some("/**|* Check if the given `encoding`s are accepted.|*/"),
        ),
        (
            "java",
            "class A {\n    /** Parses it. */\n\n    void parse() {}\n}\n",
            "parse",
            Some("/** Parses it. */"),
        ),
        // Kotlin: the annotations between a doc and its declaration are not doc.
        (
            "kotlin",
            "/** Runs a server. */\n@Target(AnnotationTarget.FIELD)\n@Retention(AnnotationRetention.RUNTIME)\nannotation class StartStop\n",
            "StartStop",
            Some("/** Runs a server. */"),
        ),
        (
            "kotlin",
            "/** A hot flow. */\n@OptIn(ExperimentalSubclassOptIn::class)\n@SubclassOptInRequired(Internal::class)\npublic interface SharedFlow<out T> {\n    val replayCache: List<T>\n}\n\n/** The next one. */\nfun next() {}\n",
            "SharedFlow",
            Some("/** A hot flow. */"),
        ),
        (
            "kotlin",
            "/** Suppressed. */\n@Suppress(\"UNCHECKED_CAST\")\nfun f() {}\n\nfun g() {}\n",
            "f",
            Some("/** Suppressed. */"),
        ),
        // A line comment keeps to its own paragraph.
        ("javascript", "var a = 1;\n\n// Adds.\n\nfunction add() {}\n", "add", None),
    ]);
}

#[test]
fn a_julia_docstring_above_a_definition_is_its_doc() {
    check(&[
        (
            "julia",
            "\"\"\"\n    add(a, b)\n\nAdds.\n\"\"\"\nfunction add(a, b)\n    a + b\nend\n",
            "add",
            Some("\"\"\"|add(a, b)||Adds.|\"\"\""),
        ),
        (
            "julia",
            "module M\n\n\"Doubles.\"\ndouble(x) = 2x\n\nend\n",
            "double",
            Some("\"Doubles.\""),
        ),
    ]);
}
