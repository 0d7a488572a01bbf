#!/usr/bin/env bash
# Times a repository indexed from scratch: when the lexical index answers,
# then semantic coverage every minute until it is complete.
#
#   scripts/bench-coverage.sh REPO INDEX_DIR VECTOR_CACHE_DIR
#
# INDEX_DIR and VECTOR_CACHE_DIR should be new folders, so nothing is re-used.
# Uses target/release/ken unless KEN names another binary.
set -euo pipefail
[ $# -eq 3 ] || { sed -n 4p "$0" >&2; exit 2; }
repo="$1" index="$2"
export KEN_CACHE_DIR="$3"
ken="${KEN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/ken}"
status() { "$ken" status --json --root "$repo" --index-dir "$index" 2>/dev/null; }

t0=$(date +%s.%N)
"$ken" index --background -q --index-dir "$index" "$repo"
t1=$(date +%s.%N)
"$ken" search --root "$repo" --index-dir "$index" -k 3 "parse the query string" >/dev/null
t2=$(date +%s.%N)
echo "lexical_ready_s $(echo "$t1 - $t0" | bc) first_search_answered_s $(echo "$t2 - $t0" | bc)"
while true; do
  now=$(date +%s.%N)
  line=$(status | python3 -c "
import json, sys
d = json.load(sys.stdin)
print(round($now - $t0, 1), d['chunks'], d.get('embedded_contents'), d.get('distinct_contents'), d.get('embedding_coverage'))")
  echo "t $line"
  [ "${line##* }" = "1.0" ] && { echo "complete_s $(echo "$(date +%s.%N) - $t0" | bc)"; break; }
  sleep 60
done
