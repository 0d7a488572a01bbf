#!/usr/bin/env bash
# Runs the public retrieval benchmark (../shared/eval) against ken and prints
# the tables per set and per repo.
#
#   scripts/eval.sh [--modes hybrid,lexical,semantic]
#                   [--sets swe-public,doc-public,ident-public,agent-public]
#
# Needs the eval work dir built once (see ../shared/eval/README.md: build.py
# --mirror-root DIR, default work dir /tmp/ken-eval); it builds the release binary.
# A set may also be a .jsonl file: the held-out agent questions are
# tests/eval/agent-unseen.jsonl and tests/eval/agent-unseen-2.jsonl, after
# tests/eval/unseen.sh has checked out their repositories.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
eval_dir="${KEN_EVAL_DIR:-$here/../shared/eval}"
work="${KEN_EVAL_WORK:-/tmp/ken-eval}"
modes="hybrid,lexical"
sets="swe-public,doc-public,ident-public,agent-public"
while [ $# -gt 0 ]; do
  case "$1" in
    --modes) modes="$2"; shift 2 ;;
    --sets) sets="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -d "$work/cases" ] || { echo "no eval cases in $work: run $eval_dir/build.py first (see its README)" >&2; exit 2; }
# Cargo's own answer for the target dir (CARGO_TARGET_DIR, a config file, or ./target).
target_dir="$(cd "$here" && cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
bin="$target_dir/release/ken"
# Always through cargo: a stale binary would score code that is not the checkout's.
(cd "$here" && cargo build --release --quiet)
# A private copy: rebuilding ken while the eval runs must not change the binary mid-run.
cp "$bin" "$work/ken-under-test"
results=()
for mode in ${modes//,/ }; do
  index_cmd="$work/ken-under-test index . -q --wait-for-adapter"
  [ "$mode" = lexical ] && index_cmd="$work/ken-under-test index . -q --no-embed"
  for set in ${sets//,/ }; do
    # A set file, wherever it is named from; run.py names its results after the file.
    # agent-public ships with the eval's code, not with the cases build.py writes.
    [ "$set" = agent-public ] && [ ! -f "$work/cases/agent-public.jsonl" ] && set="$eval_dir/agent-public.jsonl"
    [[ "$set" == *.jsonl ]] && set="$(realpath "$set")"
    python3 "$eval_dir/run.py" --set "$set" --work "$work" --name "ken-$mode" \
      --index "$index_cmd" \
      --tool "$work/ken-under-test search --json --mode $mode -k {k} {query}" >/dev/null
    results+=("$work/results/ken-$mode-$(basename "${set%.jsonl}").json")
  done
done
python3 "$eval_dir/run.py" --report "${results[@]}"
echo
python3 "$eval_dir/run.py" --report-repos "${results[@]}"
