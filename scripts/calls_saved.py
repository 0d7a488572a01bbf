#!/usr/bin/env python3
"""Calls saved (issue 37): ten agent tasks, with and without the context tools.

For each task an agent gets on a public repository, two workflows gather the
same facts:

  A  the context tools: `symbol_context`, `codebase_context`, `change_impact`,
     `repo_map` (one call, the way an agent would make it);
  B  the older tools: `codebase_search`, `call_graph`, and the
     agent's own Read (a line range of a file, numbered like `cat -n`) and Grep
     (`path:line:text` rows, like `rg -n`). No wasted calls: B reads function
     bodies and call-site windows, not whole files, and each Read names a file
     that an earlier B answer pointed to (checked).

Each task names the facts an answer must hold (the definition's path:line,
caller names, test names, ...) as regular expressions; the script checks them
against A's answers and against B's (B must hold all of them, or the
comparison is void and the script says so). Tokens are what the agent
receives: the text of each MCP tool result (`ken serve`, all tools, the same
JSON an agent gets) or of each Read/Grep, counted with cl100k_base (tiktoken,
with the BPE file that tiktoken-rs ships, hash-checked, so no download).

  python3 scripts/calls_saved.py --ken path/to/ken [--work /tmp/ken-eval]
      [--only ID,ID] [--show ID] [--json OUT]

Repositories: /tmp/ken-eval/repos/{fiber,ripgrep,pixijs,jsoup,tmux} and
/tmp/ken-eval/swe/{pytest,requests,flask,seaborn}, as the retrieval evals
fetched them, each with its lexical index (`ken index . -q --no-embed`; the
script indexes a repository that has none). The change-impact tasks copy the
repository to a temporary folder, commit it there (`git init`), make a small
edit and index the copy; the repositories themselves are never written.
Everything is lexical (no embeddings), so the runs are deterministic.
"""
import argparse
import fnmatch
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

# ---------------------------------------------------------------- tokens


def encoder():
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    files = sorted(glob.glob(os.path.expanduser(
        '~/.cargo/registry/src/*/tiktoken-rs-*/assets/cl100k_base.tiktoken')))
    src = os.environ.get('CL100K_BPE') or (files[-1] if files else
                                            'https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken')
    ranks = load_tiktoken_bpe(src, expected_hash='223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7')
    pat = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
           r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s""")
    return tiktoken.Encoding(name='cl100k_base', pat_str=pat, mergeable_ranks=ranks, special_tokens={})


# ---------------------------------------------------------------- tools


class MCP:
    """`ken serve` over stdio, all tools, no watcher."""

    def __init__(self, ken, root):
        self.p = subprocess.Popen([ken, 'serve', '--no-watch', '--tools', 'all', '--root', root],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, cwd=root)
        self.n = 0
        self.rpc('initialize', {'protocolVersion': '2024-11-05', 'capabilities': {},
                                'clientInfo': {'name': 'calls_saved', 'version': '1'}})
        self.send({'jsonrpc': '2.0', 'method': 'notifications/initialized'})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + '\n')
        self.p.stdin.flush()

    def rpc(self, method, params):
        self.n += 1
        self.send({'jsonrpc': '2.0', 'id': self.n, 'method': method, 'params': params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise RuntimeError(f'ken serve ended during {method}')
            msg = json.loads(line)
            if msg.get('id') == self.n:
                return msg

    def call(self, tool, args):
        r = self.rpc('tools/call', {'name': tool, 'arguments': args})
        if 'error' in r:
            return 'error: ' + json.dumps(r['error'])
        return ''.join(c.get('text', '') for c in r['result']['content'])

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)


def read(root, path, start, end):
    """The agent's Read tool: lines start..end, numbered like `cat -n`."""
    with open(os.path.join(root, path), encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    return '\n'.join(f'{n:>6}\t{lines[n - 1]}' for n in range(start, min(end, len(lines)) + 1))


def grep(root, pattern, under='.', glob_=None):
    """The agent's Grep tool: `path:line:text` for every matching line (files in path order)."""
    rx = re.compile(pattern)
    out = []
    base = os.path.join(root, under)
    files = [base] if os.path.isfile(base) else sorted(
        os.path.join(d, f) for d, dirs, fs in os.walk(base) if '/.' not in d + '/' or d == base for f in fs)
    for full in files:
        rel = os.path.relpath(full, root)
        if any(part.startswith('.') for part in rel.split('/')):
            continue
        if glob_ and not fnmatch.fnmatch(os.path.basename(rel), glob_):
            continue
        try:
            with open(full, encoding='utf-8') as f:
                for n, line in enumerate(f, 1):
                    if rx.search(line):
                        out.append(f'{rel}:{n}:{line.rstrip()}')
        except (UnicodeDecodeError, OSError):
            continue
    return '\n'.join(out)


# ---------------------------------------------------------------- tasks
# A call is (tool, args) for a ken MCP tool, ('Read', path, first, last) or
# ('Grep', pattern, under[, file glob]). Facts are regular expressions that the
# answers must match (searched in the concatenated text of a workflow's answers;
# JSON strings are decoded first, so a fact is written as the agent reads it).



def at(path, line):
    """A fact: `path:line`, or an answer object whose `line`/`lines`/`start_line` starts there and whose
    `path` is path."""
    p = re.escape(path)
    return (rf'{p}:{line}\b|"lines?": "?{line}\b[^{{}}]*"path": "{p}"'
            rf'|"path": "{p}"[^{{}}]*"start_line": {line}\b')


def caller(container, name):
    """A fact: a caller named `container.name` (or a call-graph node with that container and name)."""
    c, n = re.escape(container), re.escape(name)
    return rf'\b{c}\.{n}\b|"container": "{c}"[^{{}}]*"name": "{n}"'


TASKS = [
    {
        'id': 'T1', 'repo': 'swe/requests', 'lang': 'Python',
        'task': 'edit: how redirects decide to strip the Authorization header (`should_strip_auth`)',
        'A': [('symbol_context', {'symbol': 'should_strip_auth'})],
        'B': [('call_graph', {'symbol': 'should_strip_auth'}),        # definition lines, callers, test callers
              ('Read', 'requests/sessions.py', 119, 142),              # the body
              ('Read', 'requests/sessions.py', 260, 264)],             # rebuild_auth's call site
        'facts': [at('requests/sessions.py', 119), r'def should_strip_auth', caller('SessionRedirectMixin', 'rebuild_auth'),
                  r'self\.should_strip_auth\(response\.request\.url, url\)',
                  r'test_should_strip_auth_host_change', r'test_should_strip_auth_default_port'],
    },
    {
        'id': 'T2', 'repo': 'repos/jsoup', 'lang': 'Java',
        'task': 'who calls `StringUtil.normaliseWhitespace`, with what, and which tests cover it',
        'A': [('symbol_context', {'symbol': 'StringUtil.normaliseWhitespace'})],
        'B': [('call_graph', {'symbol': 'StringUtil.normaliseWhitespace'}),
              ('Read', 'src/main/java/org/jsoup/internal/StringUtil.java', 222, 226),
              ('Read', 'src/main/java/org/jsoup/nodes/Document.java', 199, 202),
              ('Read', 'src/main/java/org/jsoup/nodes/TextNode.java', 32, 34),
              ('Read', 'src/main/java/org/jsoup/nodes/TextNode.java', 108, 111),
              # the graph lists HtmlParserTest only; the unit test calls it through a static import
              ('Grep', r'normaliseWhitespace\(', 'src/test/java/org/jsoup/internal'),
              ('Read', 'src/test/java/org/jsoup/internal/StringUtilTest.java', 106, 117)],
        'facts': [at('src/main/java/org/jsoup/internal/StringUtil.java', 222), r'public static String normaliseWhitespace',
                  caller('Document', 'title'), caller('TextNode', 'text'),
                  caller('TextNode', 'normaliseWhitespace'),
                  r'StringUtil\.normaliseWhitespace\(getWholeText\(\)\)',
                  r'HtmlParserTest', ('StringUtilTest.normaliseWhiteSpace (the unit test)', r'normaliseWhiteSpace\b')],
    },
    {
        'id': 'T3', 'repo': 'repos/ripgrep', 'lang': 'Rust',
        'task': 'edit: how `unescape` turns escape sequences into bytes (crates/cli)',
        'A': [('symbol_context', {'symbol': 'unescape'})],
        'B': [('call_graph', {'symbol': 'unescape'}),
              ('Read', 'crates/cli/src/escape.rs', 60, 69),             # doc and body
              ('Read', 'crates/cli/src/escape.rs', 76, 79),             # unescape_os's call site
              # the graph has no test callers; the tests sit in the file's own `mod tests`
              ('Grep', r'^\s*fn |unescape\(', 'crates/cli/src/escape.rs')],
        'facts': [at('crates/cli/src/escape.rs', 67), r'pub fn unescape\(s: &str\) -> Vec<u8>',
                  r'unescape_os', ('test backslash (mod tests)', r'(fn |tests::|\d )backslash\b'),
                  ('test nul (mod tests)', r'(fn |tests::|\d )nul\b')],
    },
    {
        'id': 'T4', 'repo': 'repos/fiber', 'lang': 'Go',
        'task': 'how does the router match a request path against a route with parameters?',
        'A': [('codebase_context', {'query': 'how does the router match a request path against a route with parameters',
                                    'mode': 'lexical', 'budget': 4000})],
        'B': [('codebase_search', {'query': 'how does the router match a request path against a route with parameters',
                                   'mode': 'lexical', 'limit': 5}),
              ('call_graph', {'symbol': 'Route.match'}),       # who runs it: App.next, and its tests
              ('Read', 'router.go', 524, 528)],                   # App.next's call site
        'facts': [at('router.go', 424), r'getMatch',
                  ('App.next named as a caller of Route.match', r'App\.next calls|"container": "App"[^{}]*"name": "next"'),
                  ('App.next call site', r'if !route\.match\(detectionPath, path, &c\.values, pathSlashes\)'),
                  ('Test_Route_Match_Star', r'Test_Route_Match_Star')],
    },
    {
        'id': 'T5', 'repo': 'repos/tmux', 'lang': 'C',
        'task': 'edit: how `layout_fix_panes` sizes panes after a layout change; who calls it',
        'A': [('symbol_context', {'symbol': 'layout_fix_panes'})],
        'B': [('call_graph', {'symbol': 'layout_fix_panes'}),
              ('Read', 'layout.c', 442, 508),
              ('Read', 'layout.c', 834, 837)],                    # layout_resize's call site
        'facts': [at('layout.c', '44[23]'),  # the graph names the line of the name (443), the context tools the `void` (442)
                   r'layout_fix_panes\(struct window \*w, struct window_pane \*skip\)',
                  r'layout_resize\b', r'cmd_resize_pane_exec', r'layout_set_main_h\b', r'window_unzoom',
                  r'options_push_changes', r'layout_fix_offsets\(w\);\s+(\d+\t)?\s*layout_fix_panes\(w, NULL\);'],
    },
    {
        'id': 'T6', 'repo': 'repos/pixijs', 'lang': 'TypeScript',
        'task': 'how does `Assets.load` turn a URL into a Texture?',
        'A': [('codebase_context', {'query': 'how does Assets.load load a texture from an image url',
                                    'mode': 'lexical', 'budget': 4000})],
        'B': [('codebase_search', {'query': 'how does Assets.load load a texture from an image url',
                                   'mode': 'lexical', 'limit': 5}),
              ('Grep', r'public async load<', 'src/assets/Assets.ts'),  # the entry point the task names
              ('Grep', r'loadTextures', 'src/assets', '*.test.ts')],    # its tests
        'facts': [at('src/assets/loader/parsers/textures/loadTextures.ts', 126), r'createTexture',
                  r'loadImageBitmap', ('Assets.load at Assets.ts:573', r'Assets\.ts.{0,20}573|"lines": "573'),
                  ('a test file: Loader.test.ts or Assets.test.ts', r'Loader\.test\.ts|Assets\.test\.ts')],
    },
    {
        'id': 'T7', 'repo': 'swe/flask', 'lang': 'Python',
        'task': 'where do I start in this repo?',
        'A': [('repo_map', {})],
        'B': [('Glob', 'src/flask/**/*.py'),
              ('Grep', r'^class |^def |^    def ', 'src/flask')],
        'facts': [r'class Flask\b', r'class Blueprint\b', r'class Scaffold\b', r'def route\(', r'def url_for\(',
                  r'class RequestContext\b', r'class AppContext\b', r'class Config\b'],
    },
    {
        'id': 'T10', 'repo': 'swe/seaborn', 'lang': 'Python',
        'task': 'how does histplot choose the bin edges and the number of bins?',
        'A': [('codebase_context', {'query': 'how does histplot choose the bin edges and number of bins',
                                    'mode': 'lexical', 'budget': 4000})],
        'B': [('codebase_search', {'query': 'how does histplot choose the bin edges and number of bins',
                                   'mode': 'lexical', 'limit': 5}),
              ('call_graph', {'symbol': 'Histogram.define_bin_params'})],
        'facts': [r'def define_bin_params', r'def _define_bin_edges', r'p\.plot_bivariate_histogram\(', r'plot_bivariate_histogram',
                  ('TestHistogram.test_int_bins or test_string_bins', r'test_int_bins|test_string_bins')],
    },
    {
        'id': 'T8', 'repo': 'swe/pytest', 'lang': 'Python',
        'task': 'impact: I changed `fnmatch_ex` (absolute paths); what breaks, which tests to run',
        'change': ('src/_pytest/pathlib.py', 'if path.is_absolute() and not os.path.isabs(pattern):',
                   'if path.is_absolute() and not os.path.isabs(pattern) and "**" not in pattern:'),
        'A': [('change_impact', {})],
        'B': [('call_graph', {'symbol': 'fnmatch_ex', 'depth': 2}),
              # tests of the two rewrite-hook callers (the graph lists no test caller of them)
              ('Grep', r'_early_rewrite_bailout|_should_rewrite|class Test', 'testing/test_assertrewrite.py')],
        'facts': [r'fnmatch_ex', caller('AssertionRewritingHook', '_early_rewrite_bailout'),
                  caller('AssertionRewritingHook', '_should_rewrite'), r'_is_doctest', caller('Session', '_recurse'),
                  caller('Package', '_recurse'), r'path_matches_patterns',
                  r'test_matching\b', r'test_matching_abspath', r'test_not_matching', r'TestEarlyRewriteBailout'],
    },
    {
        'id': 'T9', 'repo': 'repos/fiber', 'lang': 'Go',
        'task': 'impact: I changed `RemoveEscapeChar`; what breaks, which tests to run',
        'change': ('path.go', "\t\tif b[src] != '\\\\' {\n\t\t\tb[dst] = b[src]",
                   "\t\tif b[src] != '\\\\' || (src > 0 && b[src-1] == '\\\\') {\n\t\t\tb[dst] = b[src]"),
        'A': [('change_impact', {})],
        'B': [('call_graph', {'symbol': 'RemoveEscapeChar', 'depth': 2})],
        'facts': [r'RemoveEscapeChar', r'RoutePatternMatch', r'addParameterMetaInfo', r'parseConstraintArgs',
                  caller('App', 'addPrefixToRoute'), caller('App', 'normalizePath'), caller('App', 'register'),
                  caller('routeParser', 'analyseConstantPart'), caller('routeParser', 'analyseParameterPart'),
                  r'Test_Utils_RemoveEscapeChar', r'Test_RoutePatternMatch\b', r'TestNormalizePath',
                  r'Test_Router_Register_Missing_Handler'],
    },
]


# ---------------------------------------------------------------- running


def setup_repo(task, work, ken, tmp):
    root = os.path.join(work, task['repo'])
    change = task.get('change')
    if not change:
        # Always: an index another build made may hold an older graph (a no-op when current).
        subprocess.run([ken, 'index', '.', '-q', '--no-embed'], cwd=root, check=True)
        return root
    copy = os.path.join(tmp, task['id'])
    shutil.copytree(root, copy, symlinks=True, ignore=shutil.ignore_patterns('.ken', '.git'))
    g = ['git', '-c', 'user.name=calls-saved', '-c', 'user.email=calls-saved@example.invalid']
    for cmd in (['git', 'init', '-q'], ['git', 'add', '-A'], g + ['commit', '-q', '-m', 'base']):
        subprocess.run(cmd, cwd=copy, check=True, capture_output=True)
    path, old, new = change
    with open(os.path.join(copy, path), encoding='utf-8') as f:
        text = f.read()
    if text.count(old) != 1:
        raise RuntimeError(f'{task["id"]}: the edit\'s old text is not found exactly once in {path}')
    with open(os.path.join(copy, path), 'w', encoding='utf-8') as f:
        f.write(text.replace(old, new))
    subprocess.run([ken, 'index', '.', '-q', '--no-embed'], cwd=copy, check=True)
    return copy


def readable(text):
    """What the agent reads, for matching facts: a JSON answer compact (its structure), then each
    of its strings decoded on its own lines (code as the agent sees it)."""
    try:
        doc = json.loads(text)
    except (ValueError, TypeError):
        return text
    strings = []

    def walk(v):
        if isinstance(v, str):
            strings.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)
    walk(doc)
    return json.dumps(doc, ensure_ascii=False, sort_keys=True) + '\n' + '\n'.join(strings)


def run_workflow(calls, mcp, root, enc):
    out = []
    seen = ''
    for call in calls:
        if call[0] == 'Read':
            _, path, a, b = call
            if path not in seen:
                raise RuntimeError(f'Read {path}: no earlier answer of this workflow named the file')
            text = read(root, path, a, b)
            label = f'Read {path}:{a}-{b}'
        elif call[0] == 'Glob':
            text = '\n'.join(sorted(os.path.relpath(f, root) for f in glob.glob(os.path.join(root, call[1]), recursive=True)))
            label = 'Glob ' + call[1]
        elif call[0] == 'Grep':
            text = grep(root, *call[1:])
            label = 'Grep ' + ' '.join(map(str, call[1:]))
        else:
            text = mcp.call(call[0], call[1])
            label = f'{call[0]} {json.dumps(call[1])}'
        seen += readable(text) + '\n'
        out.append({'call': label, 'tokens': len(enc.encode(text)), 'text': text})
    return out, seen


def check(facts, seen):
    """The facts (label, regex) or regex that seen does not hold, by label."""
    missing = []
    for f in facts:
        label, rx = f if isinstance(f, tuple) else (f, f)
        if not re.search(rx, seen, re.M):
            missing.append(label)
    return missing


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--ken', required=True)
    ap.add_argument('--work', default='/tmp/ken-eval')
    ap.add_argument('--only', help='task ids, comma-separated')
    ap.add_argument('--show', help='print every answer of this task')
    ap.add_argument('--json', help='write the per-call results here')
    args = ap.parse_args()
    ken = os.path.abspath(args.ken)
    enc = encoder()
    tasks = sorted((t for t in TASKS if not args.only or t['id'] in args.only.split(',')), key=lambda t: int(t['id'][1:]))
    rows = []
    with tempfile.TemporaryDirectory(prefix='calls-saved-') as tmp:
        for t in tasks:
            root = setup_repo(t, args.work, ken, tmp)
            mcp = MCP(ken, root)
            try:
                a, a_seen = run_workflow(t['A'], mcp, root, enc)
                b, b_seen = run_workflow(t['B'], mcp, root, enc)
            finally:
                mcp.close()
            row = {'id': t['id'], 'task': t['task'], 'repo': t['repo'].split('/')[-1], 'lang': t['lang'],
                   'a_calls': len(a), 'a_tokens': sum(c['tokens'] for c in a),
                   'b_calls': len(b), 'b_tokens': sum(c['tokens'] for c in b),
                   'a_missing': check(t['facts'], a_seen), 'b_missing': check(t['facts'], b_seen),
                   'facts': t['facts'], 'a': a, 'b': b}
            rows.append(row)
            print(f"{t['id']}: A {row['a_calls']} calls {row['a_tokens']} tok, B {row['b_calls']} calls "
                  f"{row['b_tokens']} tok; A misses {row['a_missing']}; B misses {row['b_missing']}",
                  file=sys.stderr, flush=True)
            if args.show == t['id']:
                for side in ('a', 'b'):
                    for c in row[side]:
                        print(f"---- {side.upper()} {c['call']} ({c['tokens']} tokens)\n{c['text']}\n")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    print(table(rows))


def pct(a, b):
    return f'{100 * (b - a) / b:.0f}%' if b else '-'


def table(rows):
    lines = ['| # | task | repo | language | A calls | A tokens | B calls | B tokens | facts in A | facts in B |',
             '| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | --- |']
    for r in rows:
        n = len(r['facts'])
        fa = 'yes' if not r['a_missing'] else f"no: {n - len(r['a_missing'])}/{n} (missing {'; '.join(r['a_missing'])})"
        fb = 'yes' if not r['b_missing'] else f"no: {n - len(r['b_missing'])}/{n}"
        fa = fa.replace('|', '\\|')
        lines.append(f"| {r['id']} | {r['task']} | {r['repo']} | {r['lang']} | {r['a_calls']} | {r['a_tokens']:,} | "
                     f"{r['b_calls']} | {r['b_tokens']:,} | {fa} | {fb} |")
    if rows:
        s = {k: [r[k] for r in rows] for k in ('a_calls', 'a_tokens', 'b_calls', 'b_tokens')}
        tot = {k: sum(v) for k, v in s.items()}
        med = {k: statistics.median(v) for k, v in s.items()}
        ok = sum(1 for r in rows if not r['a_missing'])
        lines.append(f"| | **total** | | | **{tot['a_calls']}** | **{tot['a_tokens']:,}** | **{tot['b_calls']}** | "
                     f"**{tot['b_tokens']:,}** | {ok}/{len(rows)} tasks | "
                     f"{sum(1 for r in rows if not r['b_missing'])}/{len(rows)} tasks |")
        lines.append(f"| | median per task | | | {med['a_calls']:g} | {med['a_tokens']:,.0f} | {med['b_calls']:g} | "
                     f"{med['b_tokens']:,.0f} | | |")
        lines.append('')
        lines.append(f"A makes {pct(tot['a_calls'], tot['b_calls'])} fewer calls and receives "
                     f"{pct(tot['a_tokens'], tot['b_tokens'])} fewer tokens than B in total "
                     f"(per-task median: {pct(med['a_calls'], med['b_calls'])} fewer calls, "
                     f"{pct(med['a_tokens'], med['b_tokens'])} fewer tokens).")
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
