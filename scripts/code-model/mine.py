#!/usr/bin/env python3
"""Mine (question, code) pairs from ken indexes of public repositories.

Each documented single definition of an index gives one pair, made as ken's
query adapter makes its pairs (src/embed/adapter.rs `question_and_code`,
`without_leading_name`) and embedded as ken embeds a chunk
(src/embed/text.rs `embedding_text`): the doc comment's first sentence is
the question; the definition without its comment, after its enclosing
signatures, is the code.

    mine.py --out pairs.jsonl INDEX_DIR...   (each made by `ken index --no-embed`)
"""
import argparse
import json
import random
import re
import sqlite3
import sys
from pathlib import Path

MAX_QUESTION_CHARS = 300
MAX_CODE_CHARS = 4000
SQL = """SELECT min(c.context), min(c.symbol), t.text, min(c.doc), min(f.path) FROM chunks c
 JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
 JOIN contents t ON t.hash = c.content_hash
 JOIN files f ON f.id = c.file_id
 WHERE c.symbol IS NOT NULL AND instr(c.symbol, ', ') = 0 AND c.doc IS NOT NULL
   AND c.kind NOT IN ('text', 'section', 'module', 'namespace')
 GROUP BY t.hash ORDER BY t.hash"""


def doc_lines(label):
    out = []
    for entry in (label or "").split(","):
        a, _, b = entry.partition("-")
        if a.isdigit() and b.isdigit() and 1 <= int(a) <= int(b):
            out.append((int(a), int(b)))
    return out


def without_markers(line):
    t = line.strip()
    for attribute in ("@moduledoc", "@typedoc", "@doc"):
        if t.startswith(attribute):
            t = t[len(attribute):].lstrip()
    for opening in ("(**", "(*", "{-", 'r"', 'R"', 'u"', "r'", "R'", "u'"):
        if t.startswith(opening):
            t = t[len(opening):]
            break
    t = t.lstrip("/*!#-|;\"'")
    for close in ("*/", "*)", "-}"):
        if t.endswith(close):
            t = t[: -len(close)]
    return t.rstrip("\"'").strip()


def first_sentence(comment):
    para = []
    started = False
    for line in (l.strip() for l in comment):
        if not started and not line:
            continue
        started = True
        if not line or line.startswith("@") or line.startswith("#"):
            break
        para.append(line)
    text = " ".join(para)
    end = len(text)
    for m in re.finditer(r"[.?!]", text):
        i = m.end()
        if i == len(text) or text[i] == " ":
            end = i
            break
    sentence = text[:end][:MAX_QUESTION_CHARS]
    return sentence if len(sentence.split()) >= 3 else None


def without_leading_name(question, name):
    short = re.split(r"[.:]", name)[-1]
    first, _, rest = question.partition(" ")
    if rest and re.sub(r"^[^\w]+|[^\w]+$", "", first) == short:
        return rest
    return question


def split_identifier(word):
    parts = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", word)
    return parts or [word]


def spelled(symbol):
    words = " ".join(" ".join(split_identifier(w)) for w in re.findall(r"\w+", symbol)).lower()
    plain = re.sub(r"[_-]", " ", symbol).lower()
    return words if words != plain else None


def pair_of(context, symbol, text, label):
    docs = doc_lines(label)
    if not docs:
        return None
    first, last = docs[0]
    lines = text.split("\n")
    comment = [without_markers(lines[n - 1]) for n in range(first, last + 1) if n - 1 < len(lines)]
    code = "\n".join(l for i, l in enumerate(lines, 1) if not first <= i <= last)
    question = first_sentence(comment)
    if question is None or not code.strip():
        return None
    question = without_leading_name(question, symbol)
    if len(question.split()) < 3 or "{@inheritDoc}" in question:
        return None
    head = []
    if spelled(symbol):
        head.append(spelled(symbol))
    if context:
        head.append(context)
    return question, "\n".join(head + [code])[:MAX_CODE_CHARS]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-repo", type=int, default=2000, help="at most this many pairs from one repository")
    parser.add_argument("indexes", nargs="+")
    args = parser.parse_args()
    rng = random.Random(7)
    total = 0
    with open(args.out, "w") as out:
        for index in args.indexes:
            repo = Path(index).name
            db = sqlite3.connect(f"file:{Path(index) / 'index.db'}?mode=ro", uri=True)
            branch = db.execute("SELECT branch FROM catalog GROUP BY branch ORDER BY count(*) DESC").fetchone()[0]
            seen, pairs = set(), []
            for context, symbol, text, label, path in db.execute(SQL, (branch,)):
                pair = pair_of(context, symbol, text, label)
                if pair is None or pair[0].lower() in seen:
                    continue
                seen.add(pair[0].lower())
                pairs.append({"repo": repo, "path": path, "question": pair[0], "code": pair[1]})
            rng.shuffle(pairs)
            for pair in pairs[: args.per_repo]:
                out.write(json.dumps(pair) + "\n")
            total += min(len(pairs), args.per_repo)
            print(f"{repo}: {len(pairs)} pairs, kept {min(len(pairs), args.per_repo)}", file=sys.stderr)
    print(f"{total} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
