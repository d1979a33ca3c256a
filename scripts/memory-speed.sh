#!/usr/bin/env bash
# Memory's cost in training, measured side by side: the corridor maze (scenes/maze/
# corridor_pair.scene.ron, both agents on the language model, compact text) trained with IPPO,
# 4 arenas, 3 iterations, with `--memory 0` and `--memory M` alternated A/B/B/A over ROUNDS
# rounds on one machine (CONVENTIONS.md 27: a comparison alternates). Prints each run's
# training agent-steps/s (after the first iteration), rollout and update seconds an
# iteration, and the ratio of the medians.
#
#   scripts/memory-speed.sh [BINARY] [M] [ROUNDS]      (defaults: target/release/emergence 8 2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-target/release/emergence}
M=${2:-8}
ROUNDS=${3:-2}
[ -x "$BIN" ] || { echo "error: $BIN is not an executable emergence binary (cargo build --release)" >&2; exit 2; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
sed 's/policy: "maze_planner"/policy: "lm"/g' scenes/maze/corridor_pair.scene.ron > "$WORK/corridor_lm.scene.ron"
one() { # MEMORY RUN_NAME
    "$BIN" train "$WORK/corridor_lm.scene.ron" --algo ippo --arenas 4 --iterations 3 --text compact \
        --memory "$1" --seed 3 --threads 2 --quiet --out "$WORK/$2" > /dev/null
    python3 - "$WORK/$2/metrics.jsonl" "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
steps = sum(r["samples"] for r in rows)
secs = sum(r["seconds"] for r in rows)
roll = sum(r["rollout_seconds"] for r in rows) / len(rows)
upd = sum(r["update_seconds"] for r in rows) / len(rows)
print(f"memory {sys.argv[2]:>2}: {steps / secs:7.1f} training agent-steps/s  (rollout {roll:.2f} s, update {upd:.2f} s an iteration)")
with open(sys.argv[1] + ".rate", "w") as f:
    f.write(str(steps / secs))
PY
}
a=() b=()
for r in $(seq "$ROUNDS"); do
    for m in 0 "$M" "$M" 0; do
        n="m$m-$r-$RANDOM"
        one "$m" "$n"
        if [ "$m" = 0 ]; then a+=("$(cat "$WORK/$n/metrics.jsonl.rate")"); else b+=("$(cat "$WORK/$n/metrics.jsonl.rate")"); fi
    done
done
python3 - "${a[*]}" "${b[*]}" "$M" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
print(f"memory 0: {min(a):.1f}-{max(a):.1f}; memory {sys.argv[3]}: {min(b):.1f}-{max(b):.1f} training agent-steps/s")
print(f"ratio of the medians (memory {sys.argv[3]} / memory 0): {statistics.median(b) / statistics.median(a):.2f}")
PY
