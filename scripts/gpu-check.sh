#!/usr/bin/env bash
# The GPU path, checked in one go on a machine with an NVIDIA GPU, its driver and the CUDA
# toolkit (nvcc on PATH or under /usr/local/cuda). From the repository root (or anywhere):
#
#   scripts/gpu-check.sh
#
# 1. builds the release binary and the benches with `--features cuda`;
# 2. runs the language model on grid scenes on the CPU and on the GPU (issue 37): decisions/s
#    of hide-and-seek's quadrant at 64 arenas, and a corridor-maze IPPO training of 4 arenas
#    (rollout and update seconds per iteration);
# 3. runs the inference and update benches (language model: forward, Decide, one training
#    step) on the GPU and on the CPU;
# 4. trains the coordination scene (IPPO, the embedded tiny model) with the same seed on each,
#    a run with `--device` on `run` (decide) and on `reproduce` (train, then evaluate);
# 5. prints the speed-ups, and how close the GPU's training is to the CPU's: the returns of
#    every iteration and the trained weights (GPU kernels are not bit-identical to the CPU's:
#    sums run in another order, so sampled actions may part after some updates).
#
# Needs no edit. Settings by environment: DEVICE (default cuda:0), GPU_CHECK_SECONDS (each
# benchmark's measurement time, default 3), FEATURES (default cuda; `DEVICE=cpu FEATURES=`
# runs the whole script on the CPU alone, a dry run of the script itself). Everything it
# writes goes under target/gpu-check/ (summary.md is the table it prints).
#
# On a GPU machine without Rust: PREBUILT=DIR takes the three programs from DIR instead of
# building them (`emergence`, and the benches `inference` and `update`, each optionally
# xz-compressed; DIR/source-dir, the folder they were built in), built elsewhere with `--features cuda` (`cargo build --profile bench
# --features cuda --bin emergence`, `cargo bench --features cuda --no-run --bench inference
# --bench update`: the benches are target/release/deps/{inference,update}-HASH); the CUDA
# libraries they link (cuBLAS, cuRAND, NVRTC, the runtime, 13.x) are looked for in the
# machine's Python packages (nvidia-*) and /usr/local/cuda.
set -euo pipefail
cd "$(dirname "$0")/.."
DEVICE=${DEVICE:-cuda:0}
SECS=${GPU_CHECK_SECONDS:-3}
FEATURES=${FEATURES-cuda}
OUT=target/gpu-check
started=$(date +%s)
say() { echo "== $* ($(($(date +%s) - started)) s)"; }

say "what this machine has"
need=(cargo python3)
if [ -n "${PREBUILT:-}" ]; then
    need=(python3)
    mkdir -p target/prebuilt
    for prog in emergence inference update; do
        if [ -f "$PREBUILT/$prog.xz" ]; then
            xz -dc "$PREBUILT/$prog.xz" > "target/prebuilt/$prog"
        elif [ -f "$PREBUILT/$prog" ]; then
            cp "$PREBUILT/$prog" "target/prebuilt/$prog"
        else
            echo "error: $PREBUILT/$prog (or $prog.xz) not found: PREBUILT needs emergence, inference and update"
            exit 1
        fi
        chmod +x "target/prebuilt/$prog"
    done
    # The benches read scenes by the source folder they were built in (DIR/source-dir says
    # which): that path is made to lead here where it is missing.
    if [ -f "$PREBUILT/source-dir" ]; then
        src=$(cat "$PREBUILT/source-dir")
        if [ ! -e "$src" ]; then
            mkdir -p "$(dirname "$src")"
            ln -s "$PWD" "$src"
        fi
    fi
    # The CUDA libraries the programs link, from the Python packages or the toolkit.
    libs=$(python3 - <<'PY'
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
dirs = []
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "*", "lib")):
        if d not in dirs and glob.glob(os.path.join(d, "lib*.so*")):
            dirs.append(d)
print(":".join(dirs))
PY
)
    export LD_LIBRARY_PATH="$libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
    if ldd target/prebuilt/emergence | grep "not found"; then
        echo "error: libraries above not found (LD_LIBRARY_PATH=$LD_LIBRARY_PATH)"
        exit 1
    fi
fi
for tool in "${need[@]}"; do
    if ! command -v "$tool" > /dev/null; then
        echo "error: $tool is not on PATH (the check builds with cargo and summarises with python3)"
        exit 1
    fi
done
[ -n "${PREBUILT:-}" ] || cargo --version
if [ "$DEVICE" != cpu ] && [ -z "${PREBUILT:-}" ]; then
    if ! command -v nvcc > /dev/null; then
        for d in /usr/local/cuda/bin /usr/local/cuda-*/bin /opt/cuda/bin; do
            if [ -x "$d/nvcc" ]; then export PATH="$d:$PATH"; break; fi
        done
    fi
    if ! command -v nvcc > /dev/null; then
        echo "error: nvcc not found (PATH, /usr/local/cuda/bin): the cuda feature compiles candle's kernels with it"
        exit 1
    fi
    nvcc --version | tail -1
    if command -v nvidia-smi > /dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
        # candle's kernels are compiled for this GPU's compute capability.
        if [ -z "${CUDA_COMPUTE_CAP:-}" ]; then
            cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
            export CUDA_COMPUTE_CAP=$cap
        fi
    fi
fi
rm -rf "$OUT"
mkdir -p "$OUT"
feat=()
if [ -n "$FEATURES" ]; then feat=(--features "$FEATURES"); fi

if [ -n "${PREBUILT:-}" ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader || true
    BIN=target/prebuilt/emergence
else
    say "build (release, ${FEATURES:-default features})"
    # The bench profile (release settings): the benches reuse what the binary built.
    cargo build --locked --profile bench "${feat[@]}" --bin emergence
    cargo bench --locked "${feat[@]}" --no-run --bench inference --bench update 2> "$OUT/bench-build.log" \
        || { cat "$OUT/bench-build.log"; exit 1; }
    BIN=target/release/emergence
fi
# Runs bench $1 (inference or update) with criterion's arguments.
run_bench() {
    local name=$1
    shift
    if [ -n "${PREBUILT:-}" ]; then
        "target/prebuilt/$name" --bench "$@"
    else
        cargo bench --locked "${feat[@]}" --bench "$name" -- "$@"
    fi
}

bench() { # DEVICE NAME: the benches on DEVICE, criterion's estimates kept under $OUT/NAME
    local dev=$1 name=$2
    rm -rf target/criterion
    EMERGENCE_BENCH_DEVICE=$dev run_bench inference \
        --warm-up-time 1 --measurement-time "$SECS" \
        '^(forward/(tiny|small)/batch(64|256)|decide/batch64|matmul/4096x512x2048)$' \
        > "$OUT/bench-inference-$name.log" 2>&1 || { tail -30 "$OUT/bench-inference-$name.log"; exit 1; }
    EMERGENCE_BENCH_DEVICE=$dev run_bench update \
        --warm-up-time 1 --measurement-time "$SECS" '^update/(tiny|small)/' \
        > "$OUT/bench-update-$name.log" 2>&1 || { tail -30 "$OUT/bench-update-$name.log"; exit 1; }
    cp -r target/criterion "$OUT/criterion-$name"
}
# Issue 37's figures first (a lease may end before the rest): the language model on grid
# scenes, CPU and GPU in the same run. Deciding: hide-and-seek's quadrant, 64 arenas, 24
# steps an episode; training: the corridor maze (`corridor_pair` with `policy: "lm"`, talk
# on), IPPO, 4 arenas, 3 iterations. A failure here is recorded and the check goes on.
grid() { # DEVICE NAME
    local dev=$1 name=$2
    "$BIN" run scenes/hide_and_seek/quadrant.scene.ron --policy lm --device "$dev" --arenas 64 \
        --episodes 1 --max-steps 24 --text compact --seed 7 --quiet > "$OUT/grid-run-$name.log" 2>&1 \
        || { echo "FAILED: run quadrant on $dev" | tee -a "$OUT/grid-failed.txt"; tail -20 "$OUT/grid-run-$name.log"; }
    "$BIN" train "$OUT/corridor_lm.scene.ron" --algo ippo --arenas 4 --iterations 3 --text compact \
        --seed 3 --device "$dev" --quiet --out "$OUT/grid-train-$name" > "$OUT/grid-train-$name.log" 2>&1 \
        || { echo "FAILED: train corridor on $dev" | tee -a "$OUT/grid-failed.txt"; tail -20 "$OUT/grid-train-$name.log"; }
}
sed 's/policy: "maze_planner"/policy: "lm"/' scenes/maze/corridor_pair.scene.ron > "$OUT/corridor_lm.scene.ron"
grep -q 'policy: "lm"' "$OUT/corridor_lm.scene.ron"
say "grid scenes, language model, on the CPU"
grid cpu cpu
say "grid scenes, language model, on $DEVICE"
grid "$DEVICE" gpu

say "benches on the CPU"
bench cpu cpu
say "benches on $DEVICE"
bench "$DEVICE" gpu

train() { # DEVICE NAME
    "$BIN" train scenes/dilemma/coordination.scene.ron --algo ippo --iterations 6 --arenas 16 \
        --seed 3 --device "$1" --quiet --out "$OUT/train-$2" > "$OUT/train-$2.log" 2>&1 \
        || { tail -30 "$OUT/train-$2.log"; exit 1; }
}
say "training on the CPU"
train cpu cpu
say "training on $DEVICE"
train "$DEVICE" gpu

say "decide (run) and reproduce with --device $DEVICE"
for pair in "cpu cpu" "$DEVICE gpu"; do
    read -r d n <<< "$pair"
    "$BIN" run scenes/dilemma/prisoners_dilemma.scene.ron --policy lm --device "$d" --arenas 64 \
        --episodes 1 --seed 7 --quiet > "$OUT/run-$n.log" 2>&1 || { tail -30 "$OUT/run-$n.log"; exit 1; }
done
"$BIN" reproduce ipd_advantage_alignment --quick --iterations 2 --seeds 1 --device "$DEVICE" --quiet \
    --out "$OUT/reproduce-gpu" > "$OUT/reproduce-gpu.log" 2>&1 || { tail -30 "$OUT/reproduce-gpu.log"; exit 1; }
test -s "$OUT/reproduce-gpu/report.json"

say "summary"
python3 - "$OUT" "$DEVICE" <<'PY' | tee "$OUT/summary.md"
import json, os, re, struct, sys
out, device = sys.argv[1], sys.argv[2]

def estimate(name, group, bench):
    # criterion's folder names: '/' in an id becomes '_'.
    p = os.path.join(out, f"criterion-{name}", group.replace("/", "_"), bench, "new", "estimates.json")
    try:
        return json.load(open(p))["mean"]["point_estimate"] * 1e-9
    except OSError:
        return None

print(f"# GPU check: {device} against the CPU\n")
print("| benchmark | CPU | GPU | speed-up |")
print("|---|---|---|---|")
for group, bench, what in [
    ("forward/tiny", "batch64", "forward tiny, 64 prompts x 64 tokens"),
    ("forward/tiny", "batch256", "forward tiny, 256 x 64"),
    ("forward/small", "batch64", "forward small, 64 x 64"),
    ("forward/small", "batch256", "forward small, 256 x 64"),
    ("decide", "batch64", "Decide, 64 agents (prisoner's dilemma)"),
    ("matmul", "4096x512x2048", "matmul 4096x512x2048 (f32)"),
    ("update/tiny", "batch64x64", "training step tiny, 64 x 64"),
    ("update/small", "batch64x64", "training step small, 64 x 64"),
]:
    c, g = estimate("cpu", group, bench), estimate("gpu", group, bench)
    f = lambda s: "-" if s is None else (f"{s * 1e3:.2f} ms" if s < 1 else f"{s:.2f} s")
    sp = f"{c / g:.1f}x" if c and g else "-"
    print(f"| {what} | {f(c)} | {f(g)} | {sp} |")

def read(path):
    try:
        return open(path).read()
    except OSError:
        return ""

def field(text, name):
    """The number after `name` at the start of a line of a run's printed summary."""
    m = re.search(r"^" + re.escape(name) + r"\s+([0-9.]+)", text, re.M)
    return float(m.group(1)) if m else None

def rows(run):
    """A training run's metrics.jsonl (none where the run left none)."""
    return [json.loads(l) for l in read(os.path.join(out, run, "metrics.jsonl")).splitlines() if l.strip()]

cpu, gpu = rows("train-cpu"), rows("train-gpu")
print("\n## Training: coordination, IPPO, tiny model, 16 arenas, seed 3, 6 iterations\n")
print("| iteration | return CPU | return GPU | update s CPU | update s GPU | iteration s CPU | iteration s GPU |")
print("|---|---|---|---|---|---|---|")
same = 0
for a, b in zip(cpu, gpu):
    ra, rb = json.dumps(a["team_returns"], sort_keys=True), json.dumps(b["team_returns"], sort_keys=True)
    same += ra == rb
    print(f"| {a['iteration']} | {ra} | {rb} | {a.get('update_seconds', 0):.2f} | {b.get('update_seconds', 0):.2f} | {a['seconds']:.2f} | {b['seconds']:.2f} |")
tc, tg = sum(r["seconds"] for r in cpu), sum(r["seconds"] for r in gpu)
print(f"\nReturns equal in {same} of {len(cpu)} iterations; whole run {tc:.1f} s CPU, {tg:.1f} s GPU ({tc / tg:.2f}x).")

def tensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        out[k] = struct.unpack(f"<{(b - a) // 4}f", data[a:b])
    return out

last = max(int(d.split("_")[1]) for d in os.listdir(os.path.join(out, "train-cpu", "checkpoints")) if d.startswith("iter_"))
ck = f"checkpoints/iter_{last}/model.safetensors"
tc_, tg_ = tensors(os.path.join(out, "train-cpu", ck)), tensors(os.path.join(out, "train-gpu", ck))
worst, worst_rel = 0.0, 0.0
for k, x in tc_.items():
    y = tg_[k]
    scale = max(max(abs(v) for v in x), 1e-12)
    d = max(abs(p - q) for p, q in zip(x, y))
    worst, worst_rel = max(worst, d), max(worst_rel, d / scale)
print(f"Trained weights after iteration {last}: largest difference {worst:.3g} "
      f"({worst_rel:.3g} of the tensor's largest entry), over {len(tc_)} tensors.")

def run_line(n):
    v = field(read(os.path.join(out, f"run-{n}.log")), "agent-steps/s")
    return "?" if v is None else f"{v:.0f}"
print(f"\nDecide (`run --policy lm`, prisoner's dilemma, 64 arenas): CPU {run_line('cpu')} agent-steps/s, GPU {run_line('gpu')}.")
print(f"`reproduce ipd_advantage_alignment --quick --iterations 2 --seeds 1 --device {device}`: report written.")

print("\n## Language model on grid scenes (issue 37), same run\n")
print("Deciding: `run scenes/hide_and_seek/quadrant.scene.ron --policy lm --arenas 64 --episodes 1 --max-steps 24 --text compact`.\n")
print("| | CPU | GPU | GPU / CPU |")
print("|---|---|---|---|")
logs = {n: read(os.path.join(out, f"grid-run-{n}.log")) for n in ("cpu", "gpu")}
for name, label in [("lm decisions/s", "decisions/s"), ("lm tokens/s", "tokens/s"),
                    ("lm tokens per decision", "tokens per decision"),
                    ("lm seconds deciding", "seconds deciding"), ("wall time (s)", "wall time (s)"),
                    ("peak memory (MiB)", "peak memory (MiB)")]:
    c, g = field(logs["cpu"], name), field(logs["gpu"], name)
    f = lambda v: "-" if v is None else f"{v:,.1f}"
    r = f"{g / c:.2f}x" if c and g else "-"
    print(f"| {label} | {f(c)} | {f(g)} | {r} |")
print("\nTraining: `train corridor_lm.scene.ron --algo ippo --arenas 4 --iterations 3 --text compact --seed 3` "
      "(the shipped `corridor_pair` with `policy: \"lm\"`), seconds per iteration.\n")
print("| iteration | rollout CPU | rollout GPU | update CPU | update GPU | iteration CPU | iteration GPU | return CPU | return GPU |")
print("|---|---|---|---|---|---|---|---|---|")
gc, gg = rows("grid-train-cpu"), rows("grid-train-gpu")
for i in range(max(len(gc), len(gg))):
    a = gc[i] if i < len(gc) else {}
    b = gg[i] if i < len(gg) else {}
    v = lambda r, k: f"{r[k]:.2f}" if k in r else "-"
    ret = lambda r: json.dumps(r.get("team_returns", "-"), sort_keys=True)
    print(f"| {i + 1} | {v(a, 'rollout_seconds')} | {v(b, 'rollout_seconds')} | {v(a, 'update_seconds')} | "
          f"{v(b, 'update_seconds')} | {v(a, 'seconds')} | {v(b, 'seconds')} | {ret(a)} | {ret(b)} |")
failed = read(os.path.join(out, "grid-failed.txt")).strip()
if failed:
    print("\n" + failed)
PY
say "done"
