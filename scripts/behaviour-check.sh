#!/usr/bin/env bash
# Behaviour check for a change that must not change behaviour (a refactor): runs two builds of
# `emergence` on the same work and compares what they wrote, byte for byte.
#
#   scripts/behaviour-check.sh OLD_BINARY NEW_BINARY [WORK_DIR]
#
# Build the two first, e.g. `git worktree add /tmp/before <commit>` and `cargo build --release`
# in each (or `cargo build --features gui,mpi`, the tests' profile), then pass the two
# `target/.../emergence` files. Compared:
#   1. every shipped scene (scenes/**/*.scene.ron): `run --arenas 8 --episodes 2 --seed 1
#      --hash-log`, the per-step state hashes, and `--record` replays of arenas 0 and 3;
#   2. a training run of each algorithm (the language model on the coordination game, the
#      `mlp` on the corridor pair, the `gru` on the memory corridor): `metrics.jsonl` without
#      its timing fields (seconds, per-second rates, memory) and every file of the last
#      checkpoint (weights, optimizer, trainer state);
#   3. an A/B timing of both binaries (`run` agent-steps/s, `train` agent-steps/s), printed,
#      never judged: the machine's speed varies by 20% or more.
# Prints each comparison and exits 1 if any differs. WORK_DIR (default: a temporary folder) keeps
# both sides' outputs for a look at a difference.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || {
    echo "usage: $0 OLD_BINARY NEW_BINARY [WORK_DIR]" >&2
    exit 2
}
OLD=$(realpath "$1")
NEW=$(realpath "$2")
for b in "$OLD" "$NEW"; do
    [ -x "$b" ] || {
        echo "error: $b is not an executable emergence binary" >&2
        exit 2
    }
done
WORK=${3:-$(mktemp -d)}
mkdir -p "$WORK/old" "$WORK/new"
failed=0
same() { # LABEL FILE_OLD FILE_NEW
    if cmp -s "$2" "$3"; then
        echo "same     $1"
    else
        echo "DIFFERS  $1 ($2 vs $3)"
        failed=1
    fi
}
# metrics.jsonl without the fields that time things.
strip_timing() {
    python3 -c '
import json, sys, re
timing = re.compile(r"seconds|per_sec|memory|mib|_s$")
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if not timing.search(k)}
    return v
for line in open(sys.argv[1]):
    print(json.dumps(clean(json.loads(line)), sort_keys=True))
' "$1"
}

echo "== every shipped scene: state hashes and replays"
for scene in scenes/*/*.scene.ron; do
    name=$(basename "$scene" .scene.ron)
    for side in old new; do
        bin=$OLD
        [ $side = new ] && bin=$NEW
        "$bin" run "$scene" --arenas 8 --episodes 2 --seed 1 --threads 2 \
            --hash-log "$WORK/$side/$name.hash" --record "$WORK/$side/$name.replay" \
            --record-arenas 0,3 --force > /dev/null
    done
    same "$name hash log" "$WORK/old/$name.hash" "$WORK/new/$name.hash"
    same "$name replay" "$WORK/old/$name.replay" "$WORK/new/$name.replay"
done

echo "== a training run of each algorithm: metrics (timing aside) and the last checkpoint"
train_case() { # NAME SCENE ARGS...
    local name=$1 scene=$2
    shift 2
    for side in old new; do
        bin=$OLD
        [ $side = new ] && bin=$NEW
        rm -rf "$WORK/$side/train-$name"
        "$bin" train "$scene" --out "$WORK/$side/train-$name" --seed 3 --threads 2 --quiet "$@" \
            > /dev/null
        strip_timing "$WORK/$side/train-$name/metrics.jsonl" > "$WORK/$side/train-$name.metrics"
    done
    same "train $name metrics" "$WORK/old/train-$name.metrics" "$WORK/new/train-$name.metrics"
    local last
    last=$(ls -d "$WORK/new/train-$name"/checkpoints/iter_* | sort -t_ -k2 -n | tail -1)
    last=$(basename "$last")
    for f in "$WORK/new/train-$name/checkpoints/$last"/*; do
        [ -f "$f" ] || continue
        same "train $name $last/$(basename "$f")" \
            "$WORK/old/train-$name/checkpoints/$last/$(basename "$f")" "$f"
    done
}
COORD=scenes/dilemma/coordination.scene.ron
for algo in reinforce ippo mappo magrpo advantage-alignment cory; do
    train_case "lm-$algo" $COORD --algo $algo --iterations 2 --arenas 8
done
train_case mlp-ippo scenes/maze/corridor_pair.scene.ron --learner mlp --algo ippo --iterations 3 --arenas 8
train_case mlp-mappo scenes/maze/corridor_pair.scene.ron --learner mlp --algo mappo --iterations 3 --arenas 8
train_case gru-ippo scenes/maze/memory_corridor.scene.ron --learner gru --algo ippo --iterations 3 --arenas 16

echo "== A/B timing (printed, not judged)"
rate() { sed -n "s|^$1 *||p" | head -1; }
for round in 1 2; do
    for side in old new; do
        bin=$OLD
        [ $side = new ] && bin=$NEW
        r=$("$bin" run scenes/hide_and_seek/quadrant.scene.ron --arenas 256 --episodes 2 --seed 1 \
            --threads 2 | rate agent-steps/s)
        rm -rf "$WORK/$side/ab-train"
        "$bin" train scenes/hide_and_seek/quadrant.scene.ron --learner mlp --algo ippo \
            --iterations 6 --arenas 64 --threads 2 --out "$WORK/$side/ab-train" --quiet > /dev/null
        t=$(python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(round(sum(r["agent_steps_per_sec"] for r in rows) / len(rows)))
' "$WORK/$side/ab-train/metrics.jsonl")
        echo "round $round $side: run $r agent-steps/s, train $t agent-steps/s"
    done
done

if [ $failed -ne 0 ]; then
    echo "behaviour-check: something differs (outputs kept in $WORK)"
    exit 1
fi
echo "behaviour-check: every output the same (in $WORK)"
