#!/usr/bin/env bash
# Soak test (not in CI): a training run with language-model teams for a long time, printing
# its resident memory every minute, so a leak shows as a rising curve.
#
#   scripts/soak.sh                      # an hour, into runs/soak/
#   MINUTES=15 OUT=/tmp/soak scripts/soak.sh
#
# Prints "minute iteration rss_mib" lines (also written to OUT.rss.tsv); the run itself goes
# on until MINUTES have passed, then is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES="${MINUTES:-60}"
OUT="${OUT:-runs/soak}"
SCENE="${SCENE:-scenes/dilemma/prisoners_dilemma.scene.ron}"
cargo build --release --quiet
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
./target/release/emergence train "$SCENE" --algo ippo --iterations 1000000 --arenas 16 \
    --checkpoint-every 20 --threads "${THREADS:-1}" --quiet --out "$OUT" > "$OUT.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
printf 'minute\titeration\trss_mib\n' | tee "$OUT.rss.tsv"
for m in $(seq 0 "$MINUTES"); do
    if ! kill -0 "$pid" 2>/dev/null; then
        echo "the run ended early; see $OUT.log" >&2
        exit 1
    fi
    rss=$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
    it=$( (wc -l < "$OUT/metrics.jsonl") 2>/dev/null || echo 0)
    printf '%s\t%s\t%s\n' "$m" "$it" "$rss" | tee -a "$OUT.rss.tsv"
    [ "$m" -lt "$MINUTES" ] && sleep 60
done
