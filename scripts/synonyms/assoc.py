#!/usr/bin/env python3
"""Mine question-word -> code-word vocabulary-gap associations from (doc, code) pairs.

    assoc.py pairs.jsonl OUT_DIR

For each pair: Q = stems of the doc sentence's prose words, C = stems of the
identifier parts of the code (comments and string literals removed).
For question stem q and code stem c (c != q), the gap support
    g(q, c) = #pairs with q in Q, q not in C, c in C, c not in Q.
Lift is repo-adjusted: observed g over the count expected if c's gap-presence
were independent of q within each repository:
    E(q, c) = sum over q-gap pairs i of P_repo(i)(c in C and c not in Q),
so words frequent in one repository (tokio, json, ...) do not look associated
with everything that repository's docs say.  The plain (pooled) lift
P(c gap | q gap) / P(c gap) is reported too.  lift_lb uses a one-sided 95%
Poisson lower bound on g (Wilson-Hilferty).  reverse_lift is the same
statistic with the roles swapped (c said in the question while q is in the
code): true synonyms go both ways, one-way gaps (doc "number", code `len`)
do not.
"""
import collections
import json
import math
import re
import sys

import snowballstemmer

STEM = snowballstemmer.stemmer("english")

STOPWORDS = set("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she her hers
herself it its itself they them their theirs themselves what which who whom this that these those am is are
was were be been being have has had having do does did doing a an the and but if or because as until while
of at by for with about against between into through during before after above below to from up down in out
on off over under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don should now d ll m o re ve y ain
aren couldn didn doesn hadn hasn haven isn ma mightn mustn needn shan shouldn wasn weren won wouldn also may
might must shall would could e g eg ie etc via per within without upon whether however thus otherwise
""".split())

KEYWORDS = set("""
abstract async await yield throw throws catch try except finally raise rescue pass assert defer suspend guard lambda import require and as bool boolean break byte case char checked class const continue crate def del do double dyn elif else elsif enum explicit extends extern false float fn for foreach from func function go if impl implements in inout instanceof int interface internal is let long mod mut namespace new nil none not null operator or out override private protected pub public readonly ref return self short signed sizeof static str string struct super switch synchronized then this trait true type typedef typeof uint unless unsafe unsigned until use using val var virtual void volatile when where while with fun inline reified companion deinit subscript typealias associatedtype fileprivate mutating nonmutating some any unowned defmodule defp defstruct defimpl defprotocol elixir echo array callable iterable mixed php println printf usize isize u8 u16 u32 u64 i8 i16 i32 i64 f32 f64 constexpr noexcept nullptr auto decltype typename friend static_cast reinterpret_cast size_t uint8_t uint16_t uint32_t uint64_t int64_t int32_t char8_t wchar_t nodiscard undefined
""".split())

XML_TAG = re.compile(r"<[^>]*>")
BACKTICK = re.compile(r"`[^`]*`")
JAVADOC_TAG = re.compile(r"\{@\w+[^}]*\}")
MD_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
INTRA_LINK = re.compile(r"\[`?[^\]]*`?\]")  # rustdoc [`Foo`] / [Foo] intra-doc links name code
URL = re.compile(r"https?://\S+")

HASH_COMMENT_EXT = {"py", "rb", "ex", "exs", "sh"}
SQUOTE_EXT = {"py", "rb", "ex", "exs", "js", "mjs", "cts", "ts", "tsx", "php"}


def stem(w):
    return STEM.stemWord(w)


def question_stems(q):
    q = URL.sub(" ", q)
    q = JAVADOC_TAG.sub(" ", q)
    q = XML_TAG.sub(" ", q)
    q = BACKTICK.sub(" ", q)
    q = MD_LINK.sub(r"\1", q)
    q = INTRA_LINK.sub(" ", q)
    out = set()
    for w in re.findall(r"[A-Za-z]+(?:'[a-z]+)?", q):
        # prose words only: skip identifiers written inline (camelCase, snake_case handled by regex split)
        if re.search(r"[a-z][A-Z]", w) or (w.isupper() and len(w) > 1):
            continue
        w = w.lower().split("'")[0]
        if len(w) < 3 or w in STOPWORDS:
            continue
        out.add(stem(w))
    return out, q


def split_identifier(word):
    return re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+", word)


def strip_code(code, ext):
    code = re.sub(r"/\*.*?\*/", " ", code, flags=re.S)
    code = re.sub(r'"""(.*?)"""', " ", code, flags=re.S)
    code = re.sub(r"'''(.*?)'''", " ", code, flags=re.S)
    code = re.sub(r"(?<![:\w])//[^\n]*", " ", code)
    if ext in HASH_COMMENT_EXT:
        code = re.sub(r"#[^\n{]*", " ", code)
    code = re.sub(r'"(?:[^"\\\n]|\\.)*"', " ", code)
    if ext in SQUOTE_EXT:
        code = re.sub(r"'(?:[^'\\\n]|\\.)*'", " ", code)
    return code


def code_stems(code, ext):
    code = strip_code(code, ext)
    out = set()
    for ident in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code):
        if ident in KEYWORDS:
            continue
        for part in split_identifier(ident):
            p = part.lower()
            if len(p) < 3 or p in KEYWORDS or p in STOPWORDS:
                continue
            out.add(stem(p))
    return out


def poisson_lower(k, z=1.645):
    """One-sided lower confidence bound on a Poisson mean with k observed (Wilson-Hilferty)."""
    if k <= 0:
        return 0.0
    return max(0.0, k * (1 - 1 / (9 * k) - z / (3 * math.sqrt(k))) ** 3)


def main():
    path, outdir = sys.argv[1], sys.argv[2]
    pairs = []
    surface = collections.defaultdict(collections.Counter)
    seen = set()
    dups = 0
    for line in open(path):
        p = json.loads(line)
        ext = p["path"].rsplit(".", 1)[-1]
        Q, qtext = question_stems(p["question"])
        # boilerplate copied between repositories (e.g. .NET nullable-attribute polyfills) counts once
        norm = " ".join(re.findall(r"[a-z]+", qtext.lower()))
        if norm in seen:
            dups += 1
            continue
        seen.add(norm)
        C = code_stems(p["code"], ext)
        for w in re.findall(r"[A-Za-z]+", qtext):
            if not re.search(r"[a-z][A-Z]", w):
                surface[stem(w.lower())][w.lower()] += 1
        if Q and C:
            pairs.append((p["repo"], Q, C))
    N = len(pairs)
    repos = sorted({r for r, _, _ in pairs})
    print(f"{N} usable pairs from {len(repos)} repos ({dups} cross-repo duplicate questions dropped)", file=sys.stderr)

    dfq = collections.Counter()
    dfc = collections.Counter()
    for _, Q, C in pairs:
        dfq.update(Q)
        dfc.update(C)

    # per-repo gap-presence rates: qgap_r[repo][w] = P_repo(w in Q, w not in C); cgap_r similarly
    nrepo = collections.Counter(r for r, _, _ in pairs)
    qgap_cnt = collections.defaultdict(collections.Counter)
    cgap_cnt = collections.defaultdict(collections.Counter)
    qgap_all = collections.Counter()
    cgap_all = collections.Counter()
    for r, Q, C in pairs:
        qg, cg = Q - C, C - Q
        qgap_cnt[r].update(qg)
        cgap_cnt[r].update(cg)
        qgap_all.update(qg)
        cgap_all.update(cg)

    # generic words: stems in more than GENERIC_DF of pairs on either side
    GENERIC_Q, GENERIC_C = 0.04, 0.08
    generic = {w for w, n in dfq.items() if n / N > GENERIC_Q} | {w for w, n in dfc.items() if n / N > GENERIC_C}
    MIN_DF = 5
    qvocab = {w for w, n in qgap_all.items() if n >= MIN_DF and w not in generic}
    cvocab = {w for w, n in cgap_all.items() if n >= MIN_DF and w not in generic}

    # gap co-occurrence counts, and per-(q) per-repo counts for the expectation
    g = collections.Counter()
    grepos = collections.defaultdict(collections.Counter)
    q_repo_n = collections.defaultdict(collections.Counter)  # q -> repo -> #q-gap pairs in repo
    for r, Q, C in pairs:
        qg = (Q - C) & qvocab
        cg = (C - Q) & cvocab
        for q in qg:
            q_repo_n[q][r] += 1
            for c in cg:
                g[(q, c)] += 1
                grepos[(q, c)][r] += 1
    print(f"{len(g)} candidate (q,c) gap pairs", file=sys.stderr)

    # reverse role: c written in the question (c in Q, c not in C), q in code (q in C, q not in Q)
    # g_rev(q,c) = #pairs with c in Q-C and q in C-Q: that is g with roles swapped = g[(c, q)]
    # need counts for words outside the filtered vocab, so compute directly on demand
    def expected(q, c):
        return sum(n * cgap_cnt[r][c] / nrepo[r] for r, n in q_repo_n[q].items())

    def loo_lower(q, c, k, E):
        """The smallest lower-bound lift left after removing any one repository's pairs."""
        worst = poisson_lower(k) / E if E > 0 else float("inf")
        for r, kr in grepos[(q, c)].items():
            Er = q_repo_n[q][r] * cgap_cnt[r][c] / nrepo[r]
            rest = E - Er
            worst = min(worst, poisson_lower(k - kr) / rest if rest > 1e-9 else 0.0)
        return worst

    rev_needed = set()
    rows = []
    for (q, c), k in g.items():
        if k < 3:
            continue
        rows.append([q, c, k])
        rev_needed.add((c, q))
    grev = collections.Counter()
    grev_expected_parts = collections.defaultdict(collections.Counter)
    need_q = {a for a, _ in rev_needed}
    for r, Q, C in pairs:
        qg = (Q - C) & need_q
        if not qg:
            continue
        cg = C - Q
        for a in qg:
            grev_expected_parts[a][r] += 1
            for b in cg:
                if (a, b) in rev_needed:
                    grev[(a, b)] += 1

    def expected_rev(a, b):
        return sum(n * cgap_cnt[r][b] / nrepo[r] for r, n in grev_expected_parts[a].items())

    out = []
    for q, c, k in rows:
        E = expected(q, c)
        lift = k / E if E > 0 else float("inf")
        lift_lb = poisson_lower(k) / E if E > 0 else float("inf")
        pooled = k * N / (qgap_all[q] * cgap_all[c])
        kr = grev[(c, q)]
        Er = expected_rev(c, q)
        rlift = kr / Er if Er > 0 else 0.0
        rlift_lb = poisson_lower(kr) / Er if Er > 0 else 0.0
        conf = k / qgap_all[q]  # P(c gap | q gap)
        out.append(dict(q=q, c=c, support=k, repos=len(grepos[(q, c)]), top_repo_share=max(grepos[(q, c)].values()) / k,
                        lift_lb_loo=loo_lower(q, c, k, E), q_gap=qgap_all[q], c_gap=cgap_all[c],
                        expected=E, lift=lift, lift_lb=lift_lb,
                        pooled_lift=pooled, conf=conf, rev_support=kr, reverse_lift=rlift, reverse_lift_lb=rlift_lb,
                        dfq=dfq[q], dfc=dfc[c]))

    with open(f"{outdir}/candidates.jsonl", "w") as f:
        for o in out:
            f.write(json.dumps(o) + "\n")
    with open(f"{outdir}/surface.json", "w") as f:
        json.dump({s: c.most_common(1)[0][0] for s, c in surface.items()}, f)
    with open(f"{outdir}/meta.json", "w") as f:
        json.dump(dict(N=N, repos=len(repos), generic=sorted(generic),
                       generic_q=sorted(w for w, n in dfq.items() if n / N > GENERIC_Q),
                       generic_c=sorted(w for w, n in dfc.items() if n / N > GENERIC_C),
                       dfq=dfq.most_common(200), dfc=dfc.most_common(200)), f)


if __name__ == "__main__":
    main()
