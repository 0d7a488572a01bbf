#!/usr/bin/env python3
"""Affected-tests recall of `ken impact` on swe-public (issue 37).

For each swe-public case: a temporary clone at the base commit gets the fixing
PR's non-test source changes as uncommitted changes; `ken index . -q
--no-embed` and `ken impact --json` run there; the test files ken lists, in
its order, are scored against the PR's changed test files that existed at the
base commit (recall@5, @10), and the test functions ken lists against the
test functions the PR modified that existed at base. A baseline lists the test
files whose name matches a changed file's name.

  python3 scripts/affected_tests.py --ken path/to/release/ken [--work /tmp/ken-eval]
      [--cases ID,ID] [--out DIR] [--keep]

Definitions:
  test file       a .py file under a `test`, `tests` or `testing` folder, or named
                  test_*.py / *_test.py; conftest.py and __init__.py are support
                  files, not test files.
  source change   every changed file of the PR that is neither a test-folder file
                  nor documentation (build.py's TEST_RE / DOC_RE), applied with
                  `git apply`, then `git apply --3way`, then `git apply --reject`
                  (the hunks that apply; the case is marked partial).
  PR change set   as build.py maps it: merge commit: first parent..merge; squash
                  commit: commit^..commit; PR head ref: merge-base(base, head)..head.
  gold files      the PR's changed test files that exist at the base commit.
  gold functions  `def test*` functions (qualified `Class.test_x` as ken names them)
                  of the gold files that hold a line the PR deletes or changes, or
                  an insertion point strictly inside them, on the PR's old side
                  (parsed with Python's ast, decorators included), and that exist
                  under the same name in the file at base.
  baseline        for each changed source .py file (sorted by path) with stem S
                  (`__init__`: its folder's name), the test files at base named
                  test_S.py or S_test.py anywhere, in path order; first listing wins.

Cases whose PR changes no test file that existed at base are left out of the file
recall denominator (and those without gold functions out of function recall).
Fetched code and case data stay in temporary folders and --out (default
/tmp/ken-eval/affected-tests); nothing is written to the ken checkout.
"""
import argparse
import ast
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The same rules as ../shared/eval/build.py: what is not applied as the source change.
TEST_DIR_RE = re.compile(r'(^|/)(tests?|testing)(/|$)|(^|/)test_[^/]*\.py$|_tests?\.py$|(^|/)conftest\.py$')
DOC_RE = re.compile(r'(^|/)(docs?|doc-src|changelog|changes)(/|$)|^(CHANGES|CHANGELOG|AUTHORS|NEWS|README)')


def is_test_file(path):
    name = path.rsplit('/', 1)[-1]
    if not name.endswith('.py') or name in ('conftest.py', '__init__.py'):
        return False
    return bool(re.search(r'(^|/)(tests?|testing)/', path)) or name.startswith('test_') or name.endswith('_test.py')


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def run(cmd, cwd=None, check=True, input=None):
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, errors='replace', input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f'{" ".join(cmd)}: {r.stderr.strip()[:500]}')
    return r


def git(gitdir, *args, check=True):
    return run(['git', '--git-dir', gitdir, *args], check=check).stdout


def change_set(gitdir, case):
    """(old, new) of the PR's full change, as build.py maps the case to its PR."""
    m = case['meta']
    new = m['gold_commit']
    if m['gold_kind'] == 'merge':
        old = git(gitdir, 'rev-parse', f'{new}^1').strip()
    elif m['gold_kind'] == 'squash':
        old = git(gitdir, 'rev-parse', f'{new}^').strip()
    else:
        old = git(gitdir, 'merge-base', case['commit'], new).strip()
    return old, new


def exists_at(gitdir, commit, path):
    return run(['git', '--git-dir', gitdir, 'cat-file', '-e', f'{commit}:{path}'], check=False).returncode == 0


def show(gitdir, commit, path):
    return run(['git', '--git-dir', gitdir, 'show', f'{commit}:{path}'], check=False).stdout


def test_functions(source):
    """[(qualified name, first line, last line)] of the `test*` functions of a Python file."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []

    def walk(node, container):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                walk(child, child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if child.name.startswith('test'):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    name = f'{container}.{child.name}' if container else child.name
                    out.append((name, first, child.end_lineno))
                # a helper nested in a test belongs to that test; not walked further
    walk(tree, None)
    return out


def hunks(gitdir, old, new, path):
    """[(old_start, old_count)] of the PR's diff of `path` (zero context)."""
    out = []
    for line in git(gitdir, 'diff', '-U0', old, new, '--', path).splitlines():
        m = re.match(r'@@ -(\d+)(?:,(\d+))? \+', line)
        if m:
            out.append((int(m.group(1)), int(m.group(2) if m.group(2) is not None else 1)))
    return out


def modified_tests(gitdir, base, old, new, path):
    """Gold test functions of `path`: touched by the PR on its old side, present at base."""
    funcs = test_functions(show(gitdir, old, path))
    at_base = {name for name, _, _ in test_functions(show(gitdir, base, path))}
    touched = set()
    for start, count in hunks(gitdir, old, new, path):
        for name, first, last in funcs:
            if count > 0:
                hit = first <= start + count - 1 and start <= last
            else:  # an insertion after line `start`
                hit = first <= start < last
            if hit:
                touched.add(name)
    return sorted(touched & at_base)


def baseline_files(changed_sources, base_test_files):
    ranked = []
    for path in sorted(changed_sources):
        if not path.endswith('.py'):
            continue
        parts = path.split('/')
        stem = parts[-1][:-3]
        if stem == '__init__':
            if len(parts) < 2:
                continue
            stem = parts[-2]
        names = {f'test_{stem}.py', f'{stem}_test.py'}
        for t in sorted(base_test_files):
            if t.rsplit('/', 1)[-1] in names and t not in ranked:
                ranked.append(t)
    return ranked


def apply_change(repo, patch):
    """Applies `patch` to the clone's working tree: 'clean', '3way', 'partial' or 'failed'."""
    if not patch.strip():
        return 'failed'
    pf = os.path.join(repo, '..', 'pr.patch')
    with open(pf, 'w') as f:
        f.write(patch)
    if run(['git', 'apply', '--whitespace=nowarn', pf], cwd=repo, check=False).returncode == 0:
        return 'clean'
    if run(['git', 'apply', '--3way', '--whitespace=nowarn', pf], cwd=repo, check=False).returncode == 0:
        return '3way'
    run(['git', 'reset', '-q', '--hard'], cwd=repo)
    run(['git', 'clean', '-fdq'], cwd=repo)
    run(['git', 'apply', '--reject', '--whitespace=nowarn', pf], cwd=repo, check=False)
    rejected = 0
    for d, _, files in os.walk(repo):
        for f in files:
            if f.endswith('.rej'):
                rejected += 1
                os.remove(os.path.join(d, f))
    changed = run(['git', 'status', '--porcelain'], cwd=repo).stdout.strip()
    return 'partial' if changed else 'failed'


def recall(gold, ranked, k=None):
    top = set(ranked if k is None else ranked[:k])
    return len(set(gold) & top) / len(gold)


def ken_files(tests):
    ranked = []
    for t in tests:
        if t['path'] not in ranked:
            ranked.append(t['path'])
    return ranked


def run_case(case, args):
    gitdir = os.path.join(args.work, case['git_dir'])
    base = case['commit']
    old, new = change_set(gitdir, case)
    status = [l.split('\t') for l in git(gitdir, 'diff', '--name-status', '--no-renames', old, new).splitlines()]
    changed = [p for _, p in status]
    sources = [p for p in changed if not TEST_DIR_RE.search(p) and not DOC_RE.search(p)]
    gold = sorted(p for p in changed if is_test_file(p) and exists_at(gitdir, base, p))
    gold_funcs = sorted(f'{p}::{n}' for p in gold for n in modified_tests(gitdir, base, old, new, p))
    base_tests = [p for p in git(gitdir, 'ls-tree', '-r', '--name-only', base).splitlines() if is_test_file(p)]
    baseline = baseline_files(sources, base_tests)
    row = dict(id=case['id'], repo=case['meta']['repo'], pr=case['meta']['pr'], sources=sources,
               gold_files=gold, gold_functions=gold_funcs, baseline=baseline)
    tmp = tempfile.mkdtemp(prefix='ken-affected-')
    try:
        repo = os.path.join(tmp, 'repo')
        run(['git', 'clone', '-q', '--shared', '--no-checkout', gitdir, repo])
        run(['git', 'checkout', '-q', '--detach', base], cwd=repo)
        patch = git(gitdir, 'diff', '--binary', '--no-renames', old, new, '--', *sources) if sources else ''
        row['apply'] = apply_change(repo, patch)
        if row['apply'] == 'failed':
            return row
        t0 = time.monotonic()
        run([args.ken, 'index', '.', '-q', '--no-embed'], cwd=repo)
        row['index_s'] = round(time.monotonic() - t0, 2)
        t0 = time.monotonic()
        r = run([args.ken, 'impact', '--json'], cwd=repo, check=False)
        row['impact_ms'] = round((time.monotonic() - t0) * 1000, 1)
        if r.returncode != 0:
            row['error'] = r.stderr.strip()[:300]
            impact = dict(tests=[], symbols=[])
        else:
            impact = json.loads(r.stdout)
        row['ken'] = ken_files(impact['tests'])
        row['ken_functions'] = sorted({f"{t['path']}::{t['name']}" for t in impact['tests'] if t['name'] != t['path']})
        row['symbols'] = len(impact['symbols'])
        if args.keep_impact:
            row['impact'] = impact
        return row
    finally:
        if args.keep:
            log(f'  kept {tmp}')
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def summarize(rows):
    def mean(xs):
        return sum(xs) / len(xs) if xs else float('nan')

    groups = {}
    for r in rows:
        groups.setdefault(r['repo'].split('/')[1], []).append(r)
    groups['all'] = rows
    lines = ['| repo | cases | scored | ken R@5 | base R@5 | ken R@10 | base R@10 | ken fn recall (fns) '
             '| ken files listed | base files listed | impact p50 ms |',
             '|---|---|---|---|---|---|---|---|---|---|---|']
    for name, rs in groups.items():
        ran = [r for r in rs if 'ken' in r]
        scored = [r for r in ran if r['gold_files']]
        fn = [r for r in ran if r['gold_functions']]
        nfn = sum(len(r['gold_functions']) for r in fn)
        ms = [r['impact_ms'] for r in ran]
        lines.append(
            f"| {name} | {len(rs)} | {len(scored)} "
            f"| {mean([recall(r['gold_files'], r['ken'], 5) for r in scored]):.2f} "
            f"| {mean([recall(r['gold_files'], r['baseline'], 5) for r in scored]):.2f} "
            f"| {mean([recall(r['gold_files'], r['ken'], 10) for r in scored]):.2f} "
            f"| {mean([recall(r['gold_files'], r['baseline'], 10) for r in scored]):.2f} "
            f"| {mean([recall(r['gold_functions'], r['ken_functions']) for r in fn]):.2f} ({nfn}) "
            f"| {mean([len(r['ken']) for r in ran]):.1f} | {mean([len(r['baseline']) for r in ran]):.1f} "
            f"| {statistics.median(ms) if ms else float('nan'):.0f} |")
    return '\n'.join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--ken', required=True, help='the ken binary to measure')
    ap.add_argument('--work', default=os.environ.get('KEN_EVAL_WORK', '/tmp/ken-eval'),
                    help='eval work dir with cases/swe-public.jsonl and git/ (default %(default)s)')
    ap.add_argument('--out', default=None, help='where results go (default WORK/affected-tests)')
    ap.add_argument('--cases', default='', help='comma list of case ids (default: all)')
    ap.add_argument('--keep', action='store_true', help='keep the temporary clones')
    ap.add_argument('--keep-impact', action='store_true', help='store ken impact\'s whole answer per case')
    args = ap.parse_args()
    args.ken = os.path.abspath(args.ken)
    out = args.out or os.path.join(args.work, 'affected-tests')
    os.makedirs(out, exist_ok=True)
    cases = [json.loads(l) for l in open(os.path.join(args.work, 'cases', 'swe-public.jsonl'))]
    if args.cases:
        want = set(args.cases.split(','))
        cases = [c for c in cases if c['id'] in want]
    rows = []
    for c in cases:
        row = run_case(c, args)
        rows.append(row)
        if 'ken' in row and row['gold_files']:
            log(f"{c['id']}: apply {row['apply']}, gold {len(row['gold_files'])} files "
                f"{len(row['gold_functions'])} fns, ken R@10 {recall(row['gold_files'], row['ken'], 10):.2f} "
                f"({len(row['ken'])} listed), base R@10 {recall(row['gold_files'], row['baseline'], 10):.2f}, "
                f"{row['impact_ms']:.0f} ms")
        else:
            log(f"{c['id']}: apply {row.get('apply')}, gold {len(row['gold_files'])} files (not scored)")
    with open(os.path.join(out, 'cases.jsonl'), 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')
    applied = {}
    for r in rows:
        applied[r.get('apply')] = applied.get(r.get('apply'), 0) + 1
    table = summarize(rows)
    print(table)
    print(f"\napplied: {applied}; cases without a pre-existing test file changed by the PR: "
          f"{sum(1 for r in rows if not r['gold_files'])}; impact errors: "
          f"{sum(1 for r in rows if r.get('error'))}")
    with open(os.path.join(out, 'summary.md'), 'w') as f:
        f.write(table + '\n')


if __name__ == '__main__':
    main()
