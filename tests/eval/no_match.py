#!/usr/bin/env python3
"""Measures ken's "no strong match" flag (`ken search --confidence`).

  no_match.py --ken BIN --mode lexical|hybrid [--work /tmp/ken-eval]
              [--sets agent-public,doc-public,ident-public,swe-public,path/to/set.jsonl]
              [--repos ripgrep,jsoup] [--off-topic tests/eval/off-topic.jsonl]
              [--eval-dir /work/shared/eval] [--out results.json]

Two rates, per set and per repository:
  off-topic flagged:   share of the off-topic questions (off-topic.jsonl, questions the
                       repository cannot answer) whose confidence is `low` (goal >= 90%)
  correct top flagged: share of the eval's real questions whose top result is correct
                       (chunk sets: it overlaps a target span; swe: its file is a gold
                       file) and yet `low` (goal <= 5%)
The repositories must be indexed (`ken index .`, with `--no-embed` for lexical only);
SWE-bench cases are checked out at their base commit and re-indexed, as run.py does.
Scoring reuses the public eval's run.py (`score_case`).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def search(ken, mode, repo, query):
    cmd = [ken, 'search', '--json', '--confidence', '--explain', '--mode', mode, '-k', '10', '--', query]
    r = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return None, r.stderr[-300:]
    return json.loads(r.stdout), None


def run_group(args, repo, cases):
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        return list(pool.map(lambda c: (c, *search(args.ken, args.mode, repo, c['query'])), cases))


def repo_name(case):
    return case['repo_dir'].rstrip('/').split('/')[-1]


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--ken', required=True)
    ap.add_argument('--mode', default='hybrid', choices=['lexical', 'hybrid', 'semantic'])
    ap.add_argument('--work', default=os.environ.get('KEN_EVAL_WORK', '/tmp/ken-eval'))
    ap.add_argument('--sets', default='agent-public,doc-public,ident-public,swe-public')
    ap.add_argument('--repos', default=None, help='only these repositories (comma-separated names)')
    ap.add_argument('--off-topic', default=os.path.join(here, 'off-topic.jsonl'))
    ap.add_argument('--eval-dir', default='/work/shared/eval', help='where run.py is (for score_case)')
    ap.add_argument('--jobs', type=int, default=2)
    ap.add_argument('--out', default=None, help='per-query rows as JSON')
    args = ap.parse_args()
    sys.path.insert(0, args.eval_dir)
    from run import score_case  # noqa: E402

    wanted = set(args.repos.split(',')) if args.repos else None
    rows = []
    sets = [s for s in args.sets.split(',') if s]
    cases = []
    for s in sets:
        # A path names its own file (tests/eval/agent-unseen.jsonl); build.py
        # writes the generated sets; agent-public ships beside run.py.
        if s.endswith('.jsonl'):
            path, s = s, os.path.basename(s)[:-len('.jsonl')]
        else:
            built = os.path.join(args.work, 'cases', s + '.jsonl')
            path = built if os.path.exists(built) else os.path.join(args.eval_dir, s + '.jsonl')
        cases += [dict(c, _set=s) for c in load(path)]
    cases += [dict(c, _set='off-topic', level='off') for c in load(args.off_topic)]
    cases = [c for c in cases if wanted is None or repo_name(c) in wanted]
    groups = collections.OrderedDict()
    for c in cases:
        groups.setdefault((c['repo_dir'], c.get('commit'), c.get('git_dir')), []).append(c)
    # Off-topic questions of a SWE repository run on the checkout its last case left.
    order = sorted(groups, key=lambda g: (g[0], g[1] is None, g[1] or ''))
    for repo_dir, commit, git_dir in order:
        repo = os.path.join(args.work, repo_dir)
        if commit:
            subprocess.run(['git', '--git-dir', os.path.join(args.work, git_dir), '--work-tree', repo, 'checkout',
                            '-q', '-f', '--detach', commit], check=True, capture_output=True)
            index = [args.ken, 'index', '.', '-q'] + (['--no-embed'] if args.mode == 'lexical' else [])
            subprocess.run(index, cwd=repo, check=True, capture_output=True)
        for case, out, err in run_group(args, repo, groups[(repo_dir, commit, git_dir)]):
            row = dict(id=case['id'], set=case['_set'], repo=repo_name(case), query=case['query'], error=err)
            if out is not None:
                conf = out['confidence']
                row.update(level=conf['level'], score=conf['score'], note=conf.get('note'),
                           signals=conf.get('signals'),
                           top=[(r['path'], r['start_line'], r['end_line']) for r in out['results'][:3]])
                if case['_set'] != 'off-topic':
                    results = [dict(path=r['path'], start_line=r['start_line'], end_line=r['end_line'],
                                    score=r['score']) for r in out['results']]
                    m = score_case(case, results)
                    row['top_correct'] = (m.get('chunk_H@1', 0) == 1.0 if case['level'] == 'chunk'
                                          else m['file_R@1'] > 0)
            rows.append(row)
    report(rows, args.mode)
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(rows, f, indent=1)


def rates(rows):
    ok = [r for r in rows if not r['error']]
    flagged = sum(r['level'] == 'low' for r in ok)
    correct = [r for r in ok if r.get('top_correct')]
    wrong = sum(r['level'] == 'low' for r in correct)
    return len(ok), flagged, len(correct), wrong, len(rows) - len(ok)


def pct(a, b):
    return f'{100 * a / b:.1f}%' if b else '-'


def report(rows, mode):
    print(f'\n## mode {mode}')
    print('| set | repo | n | flagged low | top correct | correct top flagged low | errors |')
    print('|---|---|---|---|---|---|---|')
    by_set = collections.OrderedDict()
    for r in rows:
        by_set.setdefault(r['set'], []).append(r)
    for s, rs in by_set.items():
        groups = [('all', rs)] + sorted(
            ((repo, [r for r in rs if r['repo'] == repo]) for repo in {r['repo'] for r in rs}))
        for repo, g in groups:
            n, flagged, correct, wrong, errors = rates(g)
            print(f'| {s} | {repo} | {n} | {pct(flagged, n)} ({flagged}) | {correct} | '
                  f'{pct(wrong, correct)} ({wrong}) | {errors} |')
    real = [r for r in rows if r['set'] != 'off-topic']
    off = [r for r in rows if r['set'] == 'off-topic']
    n, flagged, _, _, _ = rates(off)
    _, _, correct, wrong, _ = rates(real)
    print(f'\noff-topic flagged: {pct(flagged, n)} of {n}; real questions with a correct top result '
          f'flagged: {pct(wrong, correct)} of {correct}')


if __name__ == '__main__':
    main()
