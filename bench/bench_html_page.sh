#!/usr/bin/env bash
# What the HTML pages cost on long runs: `cumemtrace html` wall time and the page's size, and the
# time headless Chromium takes from navigation to a drawn page (the page's own data-render-ms),
# for (1) a PyTorch run of 10,000 steps with its automatic phases (tests/viz/make_synthetic.py
# --pytorch-steps 10000, about 288 K entries: the step axis, the ledger) and (2) a 1 M-entry trace
# (make_synthetic.py --events 1000000), drawn whole and zoomed to a window of 100,000 entries (the
# event axis, #axis=event&zoom=0.45,0.55), at the default 2,000 buckets and at --buckets 20000.
# Usage: bench/bench_html_page.sh [build-dir] [ROUNDS]   (prints one table; medians of ROUNDS)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${2:-3}
BIN=$BUILD/bin/cumemtrace
BROWSER=$(command -v chromium || command -v chromium-browser || command -v google-chrome)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
python3 tests/viz/make_synthetic.py --pytorch-steps 10000 "$out/steps10k.json" >/dev/null
python3 tests/viz/make_synthetic.py --events 1000000 "$out/entries1m.json" >/dev/null

render_ms() {  # PAGE FRAGMENT: the page's own render time, as it wrote it into the DOM
  local profile
  profile=$(mktemp -d)
  "$BROWSER" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --user-data-dir="$profile" --window-size=1400,1000 --virtual-time-budget=20000 --dump-dom \
    "file://$1$2" 2>/dev/null | grep -o 'data-render-ms="[0-9]*"' | grep -o '[0-9]*'
  rm -rf "$profile"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

printf '%-44s %10s %12s %12s\n' case "html (s)" "page (MiB)" "render (ms)"
row() {  # NAME INPUT FRAGMENT HTML-ARGS...
  local name=$1 input=$2 fragment=$3 page="$out/page.html" times=() renders=()
  shift 3
  for _ in $(seq "$ROUNDS"); do
    rm -f "$page"
    local start end
    start=$(date +%s.%N)
    "$BIN" html "$input" -o "$page" "$@" 2>/dev/null
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
    renders+=("$(render_ms "$page" "$fragment")")
  done
  printf '%-44s %10.2f %12.2f %12s\n' "$name" \
    "$(printf '%s\n' "${times[@]}" | median)" \
    "$(echo "$(stat -c %s "$page") / 1048576" | bc -l)" \
    "$(printf '%s\n' "${renders[@]}" | median)"
}
row "10,000 steps (step axis)" "$out/steps10k.json" ""
row "1 M entries, whole run" "$out/entries1m.json" ""
row "1 M entries, 100 K-entry window" "$out/entries1m.json" "#axis=event&zoom=0.45,0.55"
row "1 M entries, --buckets 20000" "$out/entries1m.json" "" --buckets 20000
row "1 M entries, --buckets 20000, 100 K window" "$out/entries1m.json" \
  "#axis=event&zoom=0.45,0.55" --buckets 20000
