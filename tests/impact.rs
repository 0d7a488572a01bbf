//! `ken impact` / `change_impact`: on real git repositories of five languages,
//! known edits give exact changed symbols, callers, affected tests and test
//! commands; an empty diff, an unknown revision and a folder outside git are
//! clear errors.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{git, ken, ken_json, ken_ok, write};
use serde_json::Value;

/// A git repository holding `files`, committed on `main` and indexed.
fn project(files: &[(&str, &str)]) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    git(root, &["init", "-q", "-b", "main"]);
    for (path, text) in files {
        write(root, path, text);
    }
    commit(root, "init");
    ken_ok(root, &["index", "--no-embed"]);
    tmp
}

fn commit(root: &Path, message: &str) {
    git(root, &["add", "-A"]);
    git(
        root,
        &[
            "-c",
            "user.email=t@example.com",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            message,
        ],
    );
}

fn edit(root: &Path, path: &str, from: &str, to: &str) {
    let file = root.join(path);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(from), "{path} has no {from:?}");
    std::fs::write(&file, text.replacen(from, to, 1)).unwrap();
}

fn impact(root: &Path, args: &[&str]) -> Value {
    let mut all = vec!["impact", "--json"];
    all.extend_from_slice(args);
    ken_json(root, &all)
}

fn strings(v: &Value, key: &str, f: impl Fn(&Value) -> String) -> BTreeSet<String> {
    v[key].as_array().unwrap().iter().map(f).collect()
}

/// `change name`: the changed symbols.
fn symbols(v: &Value) -> BTreeSet<String> {
    strings(v, "symbols", |s| {
        format!("{} {}", s["change"].as_str().unwrap(), s["name"].as_str().unwrap())
    })
}

/// `caller -> callee @site`.
fn callers(v: &Value) -> BTreeSet<String> {
    strings(v, "callers", |c| {
        format!(
            "{} -> {} @{}",
            c["symbol"].as_str().unwrap(),
            c["calls"].as_str().unwrap(),
            c["site"].as_str().unwrap()
        )
    })
}

/// `path:name`: the affected tests.
fn tests(v: &Value) -> BTreeSet<String> {
    strings(v, "tests", |t| {
        format!("{}:{}", t["path"].as_str().unwrap(), t["name"].as_str().unwrap())
    })
}

/// Commits an edit of `path`, indexes, and asks for the impact of `args`.
fn commit_edit(root: &Path, path: &str, from: &str, to: &str, args: &[&str]) -> Value {
    edit(root, path, from, to);
    commit(root, "edit");
    ken_ok(root, &["index", "--no-embed"]);
    impact(root, args)
}

/// The exact changed symbols, callers and affected tests of `v`.
fn assert_sets(v: &Value, changed: &[&str], calling: &[&str], reached: &[&str]) {
    assert_eq!(symbols(v), set(changed), "{v:#}");
    assert_eq!(callers(v), set(calling), "{v:#}");
    assert_eq!(tests(v), set(reached), "{v:#}");
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

const PY_CORE: &str = "def parse(text):
    return text.split()


def _helper(x):
    return x


def count(text):
    return len(parse(text))


def old_fn():
    return 1
";

fn python() -> tempfile::TempDir {
    project(&[
        ("pyproject.toml", "[tool.pytest.ini_options]\n"),
        ("app/__init__.py", ""),
        ("app/core.py", PY_CORE),
        (
            "app/cli.py",
            "from app.core import count, old_fn\n\n\ndef main():\n    print(count(\"a b\"))\n    print(old_fn())\n",
        ),
        (
            "tests/test_core.py",
            "from app.core import count\n\n\nclass TestCount:\n    def test_count(self):\n        assert count(\"a b\") == 2\n\n\ndef test_other():\n    assert 1 == 1\n",
        ),
    ])
}

#[test]
fn python_working_tree_edit_and_deleted_function() {
    let tmp = python();
    let root = tmp.path();
    edit(root, "app/core.py", "return text.split()", "return text.split(\" \")");
    edit(root, "app/core.py", "def old_fn():\n    return 1\n", "");
    let v = impact(root, &[]);
    assert_eq!(v["files"][0]["path"], "app/core.py");
    assert_eq!(v["files"][0]["status"], "modified");
    assert_eq!(symbols(&v), set(&["modified parse", "deleted old_fn"]));
    assert_eq!(
        callers(&v),
        set(&[
            "app/cli.py:main -> old_fn @app/cli.py:6",
            "app/core.py:count -> parse @app/core.py:10",
            "app/cli.py:main -> count @app/cli.py:5",
            "tests/test_core.py:TestCount.test_count -> count @tests/test_core.py:6",
        ])
    );
    assert_eq!(tests(&v), set(&["tests/test_core.py:TestCount.test_count"]));
    assert_eq!(v["command"], "pytest tests/test_core.py::TestCount::test_count");
    assert_eq!(v["runner"], "pytest");
    assert_eq!(v["risk"]["level"], "high");
    let reasons = v["risk"]["reasons"].to_string();
    assert!(reasons.contains("no test reaches old_fn"), "{reasons}");
    assert!(reasons.contains("deleted but still called: old_fn"), "{reasons}");
    // The readable form names the same things.
    let text = ken_ok(root, &["impact"]);
    assert!(text.contains("deleted   function old_fn"), "{text}");
    assert!(
        text.contains("run: pytest tests/test_core.py::TestCount::test_count"),
        "{text}"
    );
    // Depth 1 lists direct callers only.
    let v = impact(root, &["--depth", "1"]);
    assert_eq!(
        callers(&v),
        set(&[
            "app/cli.py:main -> old_fn @app/cli.py:6",
            "app/core.py:count -> parse @app/core.py:10",
        ])
    );
    // The test two calls away is still found.
    assert_eq!(tests(&v), set(&["tests/test_core.py:TestCount.test_count"]));
}

#[test]
fn typescript_staged_change_runs_vitest_on_the_test_file() {
    let tmp = project(&[
        ("package.json", "{\"name\": \"m\", \"devDependencies\": {\"vitest\": \"^1.0.0\"}}\n"),
        (
            "src/math.ts",
            "export function add(a: number, b: number): number {\n  return a + b;\n}\n\nexport function mul(a: number, b: number): number {\n  let r = 0;\n  for (let i = 0; i < b; i++) r = add(r, a);\n  return r;\n}\n",
        ),
        (
            "src/app.ts",
            "import { mul } from './math';\n\nexport function area(w: number, h: number): number {\n  return mul(w, h);\n}\n",
        ),
        (
            "tests/math.test.ts",
            "import { describe, it, expect } from 'vitest';\nimport { mul } from '../src/math';\n\ndescribe('mul', () => {\n  it('multiplies', () => {\n    expect(mul(2, 3)).toBe(6);\n  });\n});\n",
        ),
        ("tests/other.test.ts", "import { it } from 'vitest';\n\nit('is other', () => {});\n"),
    ]);
    let root = tmp.path();
    edit(root, "src/math.ts", "return a + b;", "return b + a;");
    // Unstaged: seen by the default, not by --staged.
    let err = ken(root, &["impact", "--staged"]);
    assert_eq!(err.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&err.stderr).contains("no changes between HEAD and the staged changes"));
    git(root, &["add", "src/math.ts"]);
    let v = impact(root, &["--staged"]);
    assert_eq!(symbols(&v), set(&["modified add"]));
    assert_eq!(
        callers(&v),
        set(&[
            "src/math.ts:mul -> add @src/math.ts:7",
            "src/app.ts:area -> mul @src/app.ts:4",
            // The test case that calls it, named by its describe and its title.
            "tests/math.test.ts:mul.multiplies -> mul @tests/math.test.ts:6",
        ])
    );
    assert_eq!(tests(&v), set(&["tests/math.test.ts:mul.multiplies"]));
    assert_eq!(v["command"], "npx vitest run tests/math.test.ts");
}

#[test]
fn go_revision_range_runs_go_test_with_the_test_names() {
    let tmp = project(&[
        ("go.mod", "module example.com/m\n\ngo 1.21\n"),
        (
            "calc/calc.go",
            "package calc\n\nfunc Add(a, b int) int {\n\treturn a + b\n}\n\nfunc Sum(xs []int) int {\n\tt := 0\n\tfor _, x := range xs {\n\t\tt = Add(t, x)\n\t}\n\treturn t\n}\n",
        ),
        (
            "calc/calc_test.go",
            "package calc\n\nimport \"testing\"\n\nfunc TestSum(t *testing.T) {\n\tif Sum([]int{1, 2}) != 3 {\n\t\tt.Fatal(\"sum\")\n\t}\n}\n\nfunc TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n\nfunc TestNothing(t *testing.T) {}\n",
        ),
        (
            "main.go",
            "package main\n\nimport (\n\t\"fmt\"\n\n\t\"example.com/m/calc\"\n)\n\nfunc main() {\n\tfmt.Println(calc.Sum([]int{1}))\n}\n",
        ),
    ]);
    let root = tmp.path();
    let v = commit_edit(
        root,
        "calc/calc.go",
        "\tt := 0\n",
        "\tt := 0 // start\n",
        &["HEAD~1..HEAD"],
    );
    assert_eq!(v["compared"], "HEAD~1 and HEAD");
    assert_sets(
        &v,
        &["modified Sum"],
        &[
            "calc/calc_test.go:TestSum -> Sum @calc/calc_test.go:6",
            "main.go:main -> Sum @main.go:10",
        ],
        &["calc/calc_test.go:TestSum"],
    );
    assert_eq!(v["command"], "go test ./calc -run '^(TestSum)$'");
    // Nothing uncommitted now.
    let err = ken(root, &["impact"]);
    assert_eq!(err.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&err.stderr).contains("no changes between HEAD and the working tree"));
}

#[test]
fn rust_branch_against_main_finds_unit_and_integration_tests() {
    // Calls inside macro arguments (`assert_eq!(add(1, 2), 3)`) are token
    // trees to tree-sitter, so the tests call outside them.
    let tmp = project(&[
        ("Cargo.toml", "[package]\nname = \"m\"\nversion = \"0.1.0\"\nedition = \"2021\"\n"),
        (
            "src/lib.rs",
            "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n\npub fn total(xs: &[i32]) -> i32 {\n    xs.iter().fold(0, |t, x| add(t, *x))\n}\n\nfn unused() {}\n\n#[cfg(test)]\nmod tests {\n    use super::*;\n\n    #[test]\n    fn adds() {\n        let r = add(1, 2);\n        assert_eq!(r, 3);\n    }\n}\n",
        ),
        (
            "tests/api.rs",
            "use m::total;\n\n#[test]\nfn totals() {\n    let t = total(&[1, 2]);\n    assert_eq!(t, 3);\n}\n",
        ),
    ]);
    let root = tmp.path();
    git(root, &["checkout", "-q", "-b", "feature"]);
    let v = commit_edit(root, "src/lib.rs", "    a + b\n", "    b + a\n", &["main"]);
    assert_eq!(v["compared"], "main (merge base) and the working tree");
    assert_sets(
        &v,
        &["modified add"],
        &[
            "src/lib.rs:total -> add @src/lib.rs:6",
            "src/lib.rs:tests.adds -> add @src/lib.rs:17",
            "tests/api.rs:totals -> total @tests/api.rs:5",
        ],
        &["src/lib.rs:tests.adds", "tests/api.rs:totals"],
    );
    assert_eq!(v["command"], "cargo test -- adds && cargo test --test api -- totals");
    assert_eq!(v["risk"]["level"], "medium");
}

const JAVA_CALLERS: &[&str] = &[
    "src/main/java/com/ex/App.java:App.main -> Calc.sum @src/main/java/com/ex/App.java:5",
    "src/test/java/com/ex/CalcTest.java:CalcTest.sums -> Calc.sum @src/test/java/com/ex/CalcTest.java:8",
];
const JAVA_TESTS: &[&str] = &["src/test/java/com/ex/CalcTest.java:CalcTest.sums"];

#[test]
fn java_rename_keeps_the_old_name_callers() {
    let tmp = project(&[
        ("pom.xml", "<project><modelVersion>4.0.0</modelVersion></project>\n"),
        (
            "src/main/java/com/ex/Calc.java",
            "package com.ex;\n\npublic class Calc {\n    public static int add(int a, int b) {\n        return a + b;\n    }\n\n    public static int sum(int[] xs) {\n        int t = 0;\n        for (int x : xs) {\n            t = add(t, x);\n        }\n        return t;\n    }\n}\n",
        ),
        (
            "src/main/java/com/ex/App.java",
            "package com.ex;\n\npublic class App {\n    public static void main(String[] args) {\n        System.out.println(Calc.sum(new int[] {1}));\n    }\n}\n",
        ),
        (
            "src/test/java/com/ex/CalcTest.java",
            "package com.ex;\n\nimport org.junit.jupiter.api.Test;\n\nclass CalcTest {\n    @Test\n    void sums() {\n        Calc.sum(new int[] {1, 2});\n    }\n\n    @Test\n    void other() {\n    }\n}\n",
        ),
    ]);
    let root = tmp.path();
    edit(
        root,
        "src/main/java/com/ex/Calc.java",
        "int t = 0;",
        "int t = 0; // start",
    );
    let v = impact(root, &[]);
    assert_sets(&v, &["modified Calc.sum"], JAVA_CALLERS, JAVA_TESTS);
    assert_eq!(v["command"], "mvn test -Dtest=CalcTest#sums");
    // A rename: the new name is renamed, the old one deleted with its callers kept.
    edit(
        root,
        "src/main/java/com/ex/Calc.java",
        "int t = 0; // start",
        "int t = 0;",
    );
    edit(root, "src/main/java/com/ex/Calc.java", "int sum(", "int total(");
    let v = impact(root, &[]);
    assert_eq!(symbols(&v), set(&["renamed Calc.total", "deleted Calc.sum"]));
    let renamed = v["symbols"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["change"] == "renamed")
        .unwrap();
    assert_eq!(renamed["old_name"], "Calc.sum");
    assert_eq!(callers(&v), set(JAVA_CALLERS));
    assert_eq!(tests(&v), set(JAVA_TESTS));
}

#[test]
fn errors_are_plain() {
    let tmp = python();
    let root = tmp.path();
    // Empty diff.
    let out = ken(root, &["impact"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no changes between HEAD and the working tree"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A revision that does not exist.
    let out = ken(root, &["impact", "nope..HEAD"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown revision `nope`"));
    let out = ken(root, &["impact", "no-such-branch"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown revision `no-such-branch`"));
    // No git.
    let plain = tempfile::tempdir().unwrap();
    write(plain.path(), "a.py", "def f():\n    return 1\n");
    ken_ok(plain.path(), &["index", "--no-embed"]);
    let out = ken(plain.path(), &["impact"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a git repository"));
}

/// The test files of `v`, in ken's order, each once.
fn test_files(v: &Value) -> Vec<String> {
    let mut files: Vec<String> = Vec::new();
    for t in v["tests"].as_array().unwrap() {
        let path = t["path"].as_str().unwrap().to_string();
        if !files.contains(&path) {
            files.push(path);
        }
    }
    files
}

/// A src-layout Python package whose tests reach its modules in every way
/// ken knows: by name, through the package, by import, by direct and deeper
/// calls; and a test of the standard library's `unittest`.
fn python_package() -> tempfile::TempDir {
    project(&[
        ("pyproject.toml", "[tool.pytest.ini_options]\n"),
        ("src/shop/__init__.py", "from .cart import Cart\n"),
        (
            "src/shop/cart.py",
            "from shop.pricing import price\n\n\nclass Cart:\n    def __init__(self):\n        self.items = []\n\n\ndef checkout(items):\n    return sum(price(i) for i in items)\n",
        ),
        ("src/shop/pricing.py", "def price(x):\n    return x * 2\n"),
        ("src/shop/unittest.py", "def helper():\n    return 1\n"),
        (
            "tests/test_pricing.py",
            "import subprocess\n\n\ndef test_cli():\n    assert subprocess.run([\"true\"]).returncode == 0\n",
        ),
        ("tests/test_shop.py", "def test_nothing():\n    assert True\n"),
        (
            "tests/test_checkout.py",
            "from shop.pricing import price\n\n\ndef test_total():\n    assert price(2) == 4\n",
        ),
        ("tests/test_misc.py", "from shop import pricing\n\n\ndef test_imported():\n    assert pricing\n"),
        (
            "tests/test_deep.py",
            "from shop.cart import checkout\n\n\ndef test_checkout():\n    assert checkout([1]) == 2\n",
        ),
        ("tests/test_api.py", "import shop\n\n\ndef test_cart():\n    assert shop.Cart().items == []\n"),
        ("tests/test_version.py", "import shop\n\n\ndef test_version():\n    assert shop\n"),
        (
            "tests/test_stdlib.py",
            "import unittest\n\n\nclass T(unittest.TestCase):\n    def test_x(self):\n        self.assertTrue(True)\n",
        ),
    ])
}

#[test]
fn python_test_files_rank_by_name_then_the_closest_evidence() {
    let tmp = python_package();
    let root = tmp.path();
    edit(root, "src/shop/pricing.py", "x * 2", "x + x");
    let v = impact(root, &[]);
    // Named after the module, after its package, calling it, importing it
    // (`from shop import pricing`), calling it through a caller.
    assert_eq!(
        test_files(&v),
        [
            "tests/test_pricing.py",
            "tests/test_shop.py",
            "tests/test_checkout.py",
            "tests/test_misc.py",
            "tests/test_deep.py",
        ],
        "{v:#}"
    );
}

#[test]
fn python_reexported_class_reaches_tests_using_it_through_the_package() {
    let tmp = python_package();
    let root = tmp.path();
    edit(root, "src/shop/cart.py", "self.items = []", "self.items = list()");
    let files = test_files(&impact(root, &[]));
    // `shop.Cart()` reaches the changed `Cart.__init__` through `from .cart import Cart`;
    // importing the package alone does not.
    assert!(files.contains(&"tests/test_api.py".to_string()), "{files:?}");
    assert!(!files.contains(&"tests/test_version.py".to_string()), "{files:?}");
}

#[test]
fn python_module_named_like_the_standard_library_is_not_its_import() {
    let tmp = python_package();
    let root = tmp.path();
    edit(root, "src/shop/unittest.py", "return 1", "return 2");
    let v = impact(root, &[]);
    // `import unittest` is the standard library's, not `shop.unittest`.
    assert!(!test_files(&v).contains(&"tests/test_stdlib.py".to_string()), "{v:#}");
    assert_eq!(symbols(&v), set(&["modified helper"]));
    // Named after the package only: listed, but not proof that a test reaches it.
    assert_eq!(test_files(&v), ["tests/test_shop.py"], "{v:#}");
    assert_eq!(v["symbols"][0]["tested"], false, "{v:#}");
}
