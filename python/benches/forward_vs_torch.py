"""The language model's forward pass against the same model in PyTorch and against numpy's
sgemm, per instruction set, in one run.

Three contenders on the same shapes and thread count (a batch of 64 prompts of 64 tokens,
logits at every position, as `forward/*` of `cargo bench --bench inference` measures):

- emergence: `emergence model bench --model small` (the packed CPU decoder, its fused kernels
  and gemm), a program given by `--emergence` (per instruction set: `--emergence-avx2` is a
  build without the `avx512` feature, `cargo build --release --no-default-features`, whose
  every kernel stops at AVX2+FMA);
- PyTorch: the same model (the `small` preset's shape: Qwen2, hidden 512, 8 layers of 8
  heads, MLP 2048, vocabulary 4096, untied head) written with `nn.Linear`, `nn.RMSNorm`,
  rotary embeddings and `scaled_dot_product_attention(is_causal=True)`, under
  `torch.inference_mode()`, random weights (speed does not depend on them);
- numpy: the best float32 matrix-product rate of its BLAS over the MLP's shape
  (4096 x 512 x 2048) and 2048 x 2048 x 2048, the machine's sgemm ceiling.

`--isa avx2` holds every contender to AVX2 on a machine that has AVX-512: PyTorch through
`ATEN_CPU_CAPABILITY=avx2`, `MKL_ENABLE_INSTRUCTIONS=AVX2` and `ONEDNN_MAX_CPU_ISA=AVX2`,
numpy's OpenBLAS through `OPENBLAS_CORETYPE=Haswell`, emergence by the AVX2 build; each
child process prints what its libraries report (torch's CPU capability, OpenBLAS's core),
so a setting that did not take is seen. Each (instruction set, threads) pair runs in its own
process (the variables are read at import), the rounds alternating the contenders.

    python python/benches/forward_vs_torch.py --emergence target/release/emergence \\
        --emergence-avx2 target/avx2/release/emergence --isa native avx2 --threads 1 2

Prints, per instruction set and threads: each contender's median tokens/s (GFLOP/s), the
ratios emergence / PyTorch and emergence's forward GFLOP/s over numpy's ceiling. Issue 37's
targets: at least 2x PyTorch and 85% of the ceiling on every x86 kind.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SHAPES = {
    # hidden, layers, heads, MLP, vocabulary (LmConfig::preset)
    "tiny": (128, 4, 4, 512, 160),
    "small": (512, 8, 8, 2048, 4096),
}

AVX2_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "OPENBLAS_CORETYPE": "Haswell",
}


def median_seconds(seconds, f):
    f()
    times = []
    start = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def forward_flops(preset, batch, prompt):
    h, layers, _, inter, vocab = SHAPES[preset]
    n = batch * prompt
    return 2.0 * n * (layers * (4 * h * h + 3 * h * inter) + h * vocab) + layers * 2.0 * batch * prompt * prompt * h


def child(args):
    """Times PyTorch's forward and numpy's sgemm in this process; prints one JSON line."""
    import numpy as np

    try:
        torch_s, capability = torch_forward(args)
    except ImportError:
        torch_s, capability = None, "absent"
    except AttributeError:  # before 2.4: no nn.RMSNorm
        torch_s, capability = None, "too old (needs 2.4 or later)"
    best = 0.0
    h, _, _, inter, _ = SHAPES[args.model]
    for m, k, n in [(args.batch * args.prompt, h, inter), (2048, 2048, 2048)]:
        a = np.ones((m, k), dtype=np.float32)
        b = np.ones((k, n), dtype=np.float32)
        s = median_seconds(args.seconds, lambda: a @ b)
        best = max(best, 2.0 * m * k * n / s / 1e9)
    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        blas = cfg.get("Build Dependencies", {}).get("blas", {}).get("name", "")
    except Exception:  # older numpy: no dicts
        pass
    print(
        json.dumps(
            {
                "torch_seconds": torch_s,
                "numpy_gflops": best,
                "torch_capability": capability,
                "numpy_blas": blas,
                "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(detected)"),
            }
        )
    )


def torch_forward(args):
    """PyTorch's median seconds for one forward of the model, and its CPU capability."""
    import torch
    from torch import nn
    import torch.nn.functional as F

    torch.set_num_threads(args.threads)
    h, layers, heads, inter, vocab = SHAPES[args.model]
    d = h // heads

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
            self.o = nn.Linear(h, h, bias=False)
            self.gate = nn.Linear(h, inter, bias=False)
            self.up = nn.Linear(h, inter, bias=False)
            self.down = nn.Linear(inter, h, bias=False)
            self.n1, self.n2 = nn.RMSNorm(h, eps=1e-6), nn.RMSNorm(h, eps=1e-6)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            y = self.n1(x)
            q, k, v = (p(y).view(b, t, heads, d).transpose(1, 2) for p in (self.q, self.k, self.v))
            q, k = rope(q, cos, sin), rope(k, cos, sin)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.o(a.transpose(1, 2).reshape(b, t, h))
            y = self.n2(x)
            return x + self.down(F.silu(self.gate(y)) * self.up(y))

    def rope(x, cos, sin):
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]
        return x * cos + torch.cat((-x2, x1), dim=-1) * sin

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(vocab, h)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.norm = nn.RMSNorm(h, eps=1e-6)
            self.head = nn.Linear(h, vocab, bias=False)

        def forward(self, ids):
            t = ids.shape[1]
            inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
            ang = torch.outer(torch.arange(t, dtype=torch.float32), inv)
            cos = torch.cat((ang, ang), dim=-1).cos()
            sin = torch.cat((ang, ang), dim=-1).sin()
            x = self.embed(ids)
            for layer in self.layers:
                x = layer(x, cos, sin)
            return self.head(self.norm(x))

    torch.manual_seed(0)
    model = Model().eval()
    ids = (torch.arange(args.batch * args.prompt) * 31 % vocab).reshape(args.batch, args.prompt)
    with torch.inference_mode():
        torch_s = median_seconds(args.seconds, lambda: model(ids))
    return torch_s, torch.backends.cpu.get_cpu_capability()


def emergence(binary, args, threads):
    done = subprocess.run(
        [
            binary, "model", "bench", "--model", args.model, "--batch", str(args.batch),
            "--prompt", str(args.prompt), "--seconds", str(args.seconds), "--threads", str(threads),
        ],
        capture_output=True, text=True,
    )
    if done.returncode != 0:
        sys.exit(f"{binary} model bench failed:\n{done.stderr}")
    out = done.stdout
    fields = {}
    for line in out.splitlines():
        key, _, value = line.partition("  ")
        fields[key.strip()] = value.strip()
    return float(fields["forward seconds"]), fields["vector instructions"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--emergence", default="target/release/emergence", help="the emergence program (native build)")
    p.add_argument("--emergence-avx2", help="an emergence program built without the avx512 feature")
    p.add_argument("--isa", nargs="+", default=["native"], choices=["native", "avx2"])
    p.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    p.add_argument("--model", default="small", choices=sorted(SHAPES))
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=3.0, help="seconds to time each part, 0.1 to 600")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.threads = args.threads[0]
        child(args)
        return
    if not 0.1 <= args.seconds <= 600:
        p.error(f"--seconds {args.seconds}: expected 0.1 to 600")
    for binary in [args.emergence] + ([args.emergence_avx2] if args.emergence_avx2 else []):
        if not os.access(binary, os.X_OK):
            p.error(f"{binary}: not an emergence program (build one with cargo build --release)")
    if "avx2" in args.isa and not args.emergence_avx2:
        p.error("--isa avx2 needs --emergence-avx2 (a build with --no-default-features)")
    flops = forward_flops(args.model, args.batch, args.prompt)
    tokens = args.batch * args.prompt
    print(f"{args.model}: batch {args.batch} x prompt {args.prompt}, {flops / 1e9:.2f} GFLOP a forward; "
          f"{args.rounds} rounds, medians over {args.seconds} s each")
    print("| instructions | threads | emergence tokens/s (GFLOP/s) | PyTorch tokens/s (GFLOP/s) | numpy sgemm GFLOP/s | emergence / PyTorch | emergence / sgemm |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for isa in args.isa:
        binary = args.emergence if isa == "native" else args.emergence_avx2
        env = dict(os.environ)
        if isa == "avx2":
            env.update(AVX2_ENV)
        for threads in args.threads:
            env["OPENBLAS_NUM_THREADS"] = str(threads)
            env["OMP_NUM_THREADS"] = str(threads)
            env["MKL_NUM_THREADS"] = str(threads)
            ours, theirs, ceiling, seen = [], [], [], None
            for _ in range(args.rounds):
                s, instructions = emergence(binary, args, threads)
                ours.append(s)
                out = subprocess.run(
                    [sys.executable, __file__, "--child", "--model", args.model, "--batch", str(args.batch),
                     "--prompt", str(args.prompt), "--seconds", str(args.seconds), "--threads", str(threads)],
                    check=True, capture_output=True, text=True, env=env,
                ).stdout
                r = json.loads(out.strip().splitlines()[-1])
                if r["torch_seconds"] is not None:
                    theirs.append(r["torch_seconds"])
                ceiling.append(r["numpy_gflops"])
                seen = (instructions, r["torch_capability"], r["numpy_blas"], r["openblas_coretype"])
            e, c = statistics.median(ours), statistics.median(ceiling)
            gf = flops / e / 1e9
            if theirs:
                t = statistics.median(theirs)
                torch_cell, ratio = f"{tokens / t:,.0f} ({flops / t / 1e9:.1f})", f"{t / e:.2f}x"
            else:
                torch_cell, ratio = "(torch not installed)", "–"
            print(f"| {isa} (emergence {seen[0]}, torch {seen[1]}, {seen[2]} {seen[3]}) | {threads} "
                  f"| {tokens / e:,.0f} ({gf:.1f}) | {torch_cell} | {c:.1f} | {ratio} | {100 * gf / c:.0f}% |",
                  flush=True)


if __name__ == "__main__":
    main()
