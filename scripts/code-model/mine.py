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
LINE_COMMENT = {"rust": "//", "go": "//", "java": "//", "c": "//", "cpp": "//", "javascript": "//",
                "typescript": "//", "tsx": "//", "kotlin": "//", "swift": "//", "c_sharp": "//", "scala": "//",
                "php": "//", "python": "#", "ruby": "#", "bash": "#"}
NOT_PROSE = re.compile(r"[;{}=<>\[\]]|\w\(|^(todo|fixme|xxx|hack|nolint|noqa|type:|pylint|eslint|prettier|istanbul|ts-|@ts|safety:|clippy|rustfmt|go:|#)", re.I)
TEST_PATH = re.compile(r"(^|/)(tests?|testing|spec|specs|__tests__|testdata|examples?|benches)/|_test\.|Tests?\.java$|\.test\.|\.spec\.|(^|/)test_")
INLINE_SQL = """SELECT min(c.context), min(c.symbol), t.text, min(c.doc), min(f.path), min(f.language) FROM chunks c
 JOIN catalog k ON k.file_id = c.file_id AND k.branch = ?1
 JOIN contents t ON t.hash = c.content_hash
 JOIN files f ON f.id = c.file_id
 WHERE c.symbol IS NOT NULL AND instr(c.symbol, ', ') = 0
   AND c.kind IN ('function', 'method', 'impl', 'class')
 GROUP BY t.hash ORDER BY t.hash"""
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


def as_embedded(context, symbol, code):
    """The code as ken embeds a chunk: its name spelled as words, its enclosing
    signatures, then the code."""
    head = [h for h in (spelled(symbol), context) if h]
    return "\n".join(head + [code])[:MAX_CODE_CHARS]


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
    return question, as_embedded(context, symbol, code)


def inline_pair(context, symbol, text, label, language):
    """An explanatory comment inside a definition's body, as the question, and
    the definition without it (its signature line, then the code from the
    comment on) as the code: comments that say what a stretch of a long
    function does, which is what agents ask about."""
    marker = LINE_COMMENT.get(language)
    if not marker:
        return None
    docs = doc_lines(label)
    lines = text.split("\n")
    in_doc = lambda n: any(a <= n <= b for a, b in docs)
    blocks, block = [], []
    for n, line in enumerate(lines, 1):
        t = line.strip()
        if n > 1 and not in_doc(n) and t.startswith(marker) and not t.startswith(marker + "/") and not t.startswith(marker + "!"):
            block.append((n, t[len(marker):].strip()))
        else:
            if block:
                blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    for block in blocks:
        words = " ".join(w for _, w in block)
        sentence = first_sentence([words])
        if sentence is None or len(sentence.split()) < 4 or NOT_PROSE.search(sentence) or sum(ch.isalpha() for ch in sentence) < 0.7 * len(sentence):
            continue
        first, last = block[0][0], block[-1][0]
        if last >= len(lines) - 1:
            continue
        body = [l for i, l in enumerate(lines, 1) if i > last and not in_doc(i)]
        if sum(1 for l in body if l.strip()) < 3:
            continue
        head_line = next((l for i, l in enumerate(lines, 1) if not in_doc(i) and l.strip()), "")
        code = "\n".join(([head_line] if first > 1 else []) + body)
        return sentence, as_embedded(context, symbol, code)
    return None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-repo", type=int, default=2000, help="at most this many pairs from one repository")
    parser.add_argument("--inline", type=int, default=0, help="at most this many inline-comment pairs from one repository")
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
            inline = []
            if args.inline:
                for context, symbol, text, label, path, language in db.execute(INLINE_SQL, (branch,)):
                    pair = inline_pair(context, symbol, text, label, language)
                    if pair is None or pair[0].lower() in seen or TEST_PATH.search(path) or len(pair[0].split()) < 5:
                        continue
                    seen.add(pair[0].lower())
                    inline.append({"repo": repo, "path": path, "question": pair[0], "code": pair[1], "kind": "inline"})
                rng.shuffle(inline)
                for pair in inline[: args.inline]:
                    out.write(json.dumps(pair) + "\n")
                total += min(len(inline), args.inline)
                print(f"{repo}: {len(inline)} inline pairs, kept {min(len(inline), args.inline)}", file=sys.stderr)
            print(f"{repo}: {len(pairs)} pairs, kept {min(len(pairs), args.per_repo)}", file=sys.stderr)
    print(f"{total} pairs", file=sys.stderr)


if __name__ == "__main__":
    main()
