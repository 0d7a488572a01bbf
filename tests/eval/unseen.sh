#!/usr/bin/env bash
# Checks out the repositories of agent-unseen.jsonl and agent-unseen-2.jsonl
# (held-out agent questions, written blind to ken's results; the second set on
# 2026-11-29, after rules had been read off the first) at the commits their gold
# spans were read at.
#
#   tests/eval/unseen.sh [--mirror-root DIR] [WORK]
#
# WORK defaults to $KEN_EVAL_WORK or /tmp/ken-eval (as for run.py); the repositories
# land in WORK/unseen/<name>. With --mirror-root, clones come from DIR/<owner>+<name>/repo
# (what the library's fetch writes); otherwise from GitHub. Then, with `ken` on PATH
# (run.py runs each command in the repository's folder), as BENCHMARKS.md measured:
#
#   python3 ../shared/eval/run.py --set tests/eval/agent-unseen.jsonl \
#     --index 'ken index . -q --wait-for-adapter' \
#     --tool 'ken search --json --mode hybrid -k {k} {query}'
set -euo pipefail

mirror_root=""
if [ "${1:-}" = --mirror-root ]; then
    mirror_root=$2
    shift 2
fi
work=${1:-${KEN_EVAL_WORK:-/tmp/ken-eval}}

# name, GitHub owner/name, commit
repos=(
    "chi go-chi/chi 735ae2b87f8c733d616e809ae86e0985c1bc3350"
    "fd sharkdp/fd ee20f426ddf338ac7ead5c5f00ea49258005caaf"
    "javapoet square/javapoet b9017a9503b76e11b4ad4c1a9f050e2d29112cb0"
    "httpx encode/httpx ae1b9f66238f75ced3ced5e4485408435de10768"
    "click pallets/click 2c8cd3ac958a7eb316d67f2d316c27086c4c0369"
    "axios axios/axios 23a25af0688d1db2c396deb09229d2271cc24f6c"
    "rack rack/rack 8bf4eb078498edc9105fb04add80d89c5340e60b"
)

mkdir -p "$work/unseen"
for entry in "${repos[@]}"; do
    read -r name slug commit <<<"$entry"
    dest=$work/unseen/$name
    if [ ! -d "$dest/.git" ]; then
        if [ -n "$mirror_root" ]; then
            src=$mirror_root/${slug/\//+}/repo
        else
            src=https://github.com/$slug
        fi
        git clone -q "$src" "$dest"
    fi
    git -C "$dest" -c advice.detachedHead=false checkout -q "$commit"
    echo "$dest at $(git -C "$dest" rev-parse --short HEAD)"
done
