#!/usr/bin/env python3
"""Select the synonym table from assoc.py's candidates.jsonl (in DIR) and write
DIR/table_full.tsv (every row that passes, with its numbers) and ken's table,
src/source/synonyms.txt (OUT).

    select_table.py DIR OUT

Thresholds (reasons in the report):
  support >= 5          gap pairs (q in question only, c in code only)
  repos >= 3            seen in at least three projects
  lift_lb_loo >= 2      95% lower bound of the repo-adjusted lift, after removing
                        whichever single repository helps most, is at least 2
  conf >= 0.05          c accompanies at least 1 in 20 of q's gap pairs
  neither stem generic  (question-side df > 4% or code-side df > 8%; assoc.py)
  at most 3 c per q
score = log2(lift_lb_loo) + 0.5 * log2(max(1, reverse_lift_lb))
weight = 1 - 1/lift_lb_loo   (lower bound on the share of co-occurrence not due to chance)

ken's table keeps a word's other forms and abbreviations (`parses: parser`,
`temporary: temp`) and, of the other associations, those that also hold the
other way round (reverse_lift_lb >= 1: `delete: remove`); one-way topical
ones (`two: lhs`, `process: stderr`) are left out.
"""
import collections
import json
import math
import sys


MIN_SUPPORT, MIN_REPOS, MIN_LOO, MIN_CONF, PER_Q = 5, 3, 2.0, 0.05, 3


def relation(q, c):
    if c.startswith(q) or q.startswith(c):
        return "morph"
    # c's letters in order inside q, same first letter: an abbreviation (dir < directori)
    if len(c) < len(q) and c[0] == q[0]:
        it = iter(q)
        if all(ch in it for ch in c):
            return "abbrev"
    return "assoc"


def main():
    folder, out = sys.argv[1], sys.argv[2]
    rows = [json.loads(l) for l in open(f"{folder}/candidates.jsonl")]
    surface = json.load(open(f"{folder}/surface.json"))
    for r in rows:
        r["score"] = math.log2(max(r["lift_lb_loo"], 1e-9)) + 0.5 * math.log2(max(1.0, r["reverse_lift_lb"]))
    ok = [r for r in rows if r["support"] >= MIN_SUPPORT and r["repos"] >= MIN_REPOS
          and r["lift_lb_loo"] >= MIN_LOO and r["conf"] >= MIN_CONF]
    ok.sort(key=lambda r: -r["score"])
    per_q = collections.Counter()
    table = []
    for r in ok:
        if per_q[r["q"]] >= PER_Q:
            continue
        per_q[r["q"]] += 1
        table.append(r)
    cols = ["q_word", "q_stem", "c_stem", "support", "lift", "reverse_lift", "score", "weight", "lift_lb", "lift_lb_loo",
            "pooled_lift", "conf", "repos", "top_repo_share", "rev_support", "reverse_lift_lb", "relation"]
    with open(f"{folder}/table_full.tsv", "w") as f:
        f.write("\t".join(cols) + "\n")
        for r in table:
            vals = [surface.get(r["q"], r["q"]), r["q"], r["c"], r["support"], f"{r['lift']:.2f}", f"{r['reverse_lift']:.2f}",
                    f"{r['score']:.2f}", f"{1 - 1 / r['lift_lb_loo']:.2f}", f"{r['lift_lb']:.2f}", f"{r['lift_lb_loo']:.2f}",
                    f"{r['pooled_lift']:.2f}", f"{r['conf']:.3f}", r["repos"], f"{r['top_repo_share']:.2f}",
                    r["rev_support"], f"{r['reverse_lift_lb']:.2f}", relation(r["q"], r["c"])]
            f.write("\t".join(map(str, vals)) + "\n")
    kept = collections.defaultdict(list)
    for r in table:
        if relation(r["q"], r["c"]) != "assoc" or r["reverse_lift_lb"] >= 1:
            kept[surface.get(r["q"], r["q"])].append(r["c"])
    with open(out, "w") as f:
        f.write("# A question's word: the words (stemmed) code says it with. Made by scripts/synonyms/.\n")
        for word, code_words in kept.items():
            f.write(f"{word}: {' '.join(code_words)}\n")
    print(f"{len(rows)} candidates (g>=3), {len(ok)} pass thresholds, {len(table)} rows, {len(per_q)} question stems",
          file=sys.stderr)
    print(collections.Counter(relation(r["q"], r["c"]) for r in table), file=sys.stderr)


if __name__ == "__main__":
    main()
