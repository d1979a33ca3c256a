#!/usr/bin/env bash
# The table of docs/training.md: what each algorithm learns on the iterated
# Prisoner's Dilemma (and MAGRPO on the Stag Hunt), measured the way the learning tests
# (tests/suite/learning.rs) measure it: train with the test's budget, then play the last
# checkpoint against fixed partners on 256 fresh arenas without learning.
#
#   scripts/learning-table.sh                 # seeds 3 4 5, into runs/learning-table/
#   SEEDS="3" OUT=/tmp/t scripts/learning-table.sh
#   ONLY=ippo scripts/learning-table.sh       # the rows whose name contains "ippo"
#
# Prints one line per algorithm and seed: self-play return per round, return per round
# against always_defect, P(C | other C) against tit_for_tat and self, P(C | other D) against
# always_defect and self, first-round cooperation in self-play.
set -euo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-"3 4 5"}
OUT=${OUT:-runs/learning-table}
BIN=${EMERGENCE:-target/release/emergence}
if [ -z "${EMERGENCE:-}" ]; then cargo build --release --quiet; fi
mkdir -p "$OUT"
PD=scenes/dilemma/prisoners_dilemma.scene.ron
SH=scenes/dilemma/stag_hunt.scene.ron
# name | scene | train flags (the tests' budgets)
RUNS=(
  "reinforce|$PD|--algo reinforce --iterations 12 --arenas 16"
  "ippo|$PD|--algo ippo --iterations 12 --arenas 16"
  "advantage-alignment|$PD|--algo advantage-alignment --iterations 50 --arenas 32"
  "magrpo (PD, shared reward)|$PD|--algo magrpo --iterations 10 --arenas 16"
  "magrpo (Stag Hunt, shared reward)|$SH|--algo magrpo --iterations 10 --arenas 16"
)
printf '%-34s %4s %8s %8s %8s %8s %8s %8s %8s\n' algorithm seed self/rnd AD/rnd "C|C tft" "C|C self" "C|D AD" "C|D self" "first C"
for run in "${RUNS[@]}"; do
  IFS='|' read -r name scene flags <<< "$run"
  case "$name" in *"${ONLY:-}"*) ;; *) continue ;; esac
  for s in $SEEDS; do
    dir="$OUT/$(echo "$name" | tr -c 'a-z0-9\n' '_')_s$s"
    rm -rf "$dir" "$dir.json"
    # shellcheck disable=SC2086
    "$BIN" train "$scene" $flags --seed "$s" --threads 2 --out "$dir" --quiet > "$dir.log"
    "$BIN" eval "$dir" --against self,always_defect,tit_for_tat --arenas 256 --threads 2 --json "$dir.json" > /dev/null
    python3 - "$name" "$s" "$dir.json" <<'PY'
import json, sys
name, seed, path = sys.argv[1], sys.argv[2], sys.argv[3]
r = {x["partner"]: x for x in json.load(open(path))}
g = lambda p, k: r[p]["strategy"].get(k, float("nan"))
print("%-34s %4s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f" % (
    name, seed, r["self"]["model_return_per_step"], r["always_defect"]["model_return_per_step"],
    g("tit_for_tat", "coop_after_coop"), g("self", "coop_after_coop"),
    g("always_defect", "coop_after_defect"), g("self", "coop_after_defect"),
    g("self", "first_cooperation")))
PY
  done
done
