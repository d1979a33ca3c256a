"""The `mlp` learner's PPO update against the same update written in PyTorch, in one process.

Both contenders run one IPPO update of a hide-and-seek iteration's size (64 quadrant arenas:
51,200 decisions, 4 epochs of minibatches of 1024, so 200 gradient steps) on the same shapes:
91 view cells one-hot over 16 codes plus 69 header fields, two tanh layers of 64, 9 actions
with a legal mask, a value head; the clipped PPO loss with a clipped value loss, an entropy
bonus, gradient-norm clipping and Adam. emergence runs its trainer's own update
(`emergence.bench_mlp_update`, the code `emergence train --learner mlp` runs) on a synthetic
batch; PyTorch runs CleanRL's PPO update (ppo.py's loop) twice: with an `EmbeddingBag` first
layer (the cells as a sum of embedding rows, PyTorch's fastest way to read one-hot input) and
with the one-hot input dense (1,525 columns, as a plain `nn.Linear` reads it).

Two kinds of rows (`--rows`, both by default): `uniform`, every cell's code drawn uniformly
from the 16 (the fused step's worst case: it costs a cell nothing when the cell shows the code
most of the minibatch shows there, and uniform cells almost never do), and `quadrant`, the
shipped quadrant scene played by random agents (64 arenas, 200 steps: what an iteration of
`emergence train` on it updates on; about 80% of cells at their usual code). Each contender
gets rows of the kind (emergence records its own with its trainer's features; PyTorch's are
played here through `VectorEnv`), the same shapes either way.

The rounds alternate the contenders on the same thread count and report each one's median
seconds per update and the ratio PyTorch / emergence. Run (after `maturin develop --release`
in python/, or with the wheel installed):

    python python/benches/update_vs_torch.py --threads 1 2 --rounds 5

numpy's OpenBLAS is held to one thread (`OPENBLAS_NUM_THREADS=1`, unless set): its idle
workers spin on the cores after each call, and on a two-core machine they took a core from
whichever contender ran next (emergence's update on 2 threads: 0.252 s with them, 0.194 s
without, in one session). Neither contender uses numpy's BLAS; PyTorch's threads are
`torch.set_num_threads`'.

Without torch installed the PyTorch rows are skipped with a message and emergence's time is
still printed. Issue 35's target: emergence at least 5x faster than the EmbeddingBag update on
the same threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402  (after the thread count above)

CELLS, CODES, DENSE, HIDDEN, ACTIONS = 91, 16, 69, 64, 9


def make_batch(n: int, seed: int) -> dict:
    """A synthetic batch of `n` decisions (the rows do not need to come from a game: both
    contenders do the same arithmetic whatever the values)."""
    rng = np.random.default_rng(seed)
    legal = rng.random((n, ACTIONS)) < 0.7
    actions = rng.integers(0, ACTIONS, size=n)
    legal[np.arange(n), actions] = True
    return {
        "cells": rng.integers(0, CODES, size=(n, CELLS)).astype(np.int64),
        "dense": rng.uniform(-1, 1, size=(n, DENSE)).astype(np.float32),
        "legal": legal,
        "actions": actions.astype(np.int64),
        "logprobs": rng.uniform(-2.5, -1.5, size=n).astype(np.float32),
        "advantages": rng.normal(size=n).astype(np.float32),
        "returns": rng.normal(size=n).astype(np.float32),
        "values": rng.normal(size=n).astype(np.float32) * 0.1,
    }


def quadrant_batch(emergence, n: int, seed: int) -> dict:
    """`n` decisions of the shipped quadrant scene played by random agents (whole episodes of
    200 steps of its 4 agents, as many arenas as that takes): the cells, header fields and
    legal masks as played, the rest as `make_batch` draws it."""
    arenas = -(-n // 800)
    env = emergence.VectorEnv("quadrant", arenas, seed=seed)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset()
    cells, dense, legal = [], [], []
    for _ in range(200):
        cells.append(obs["cells"].reshape(-1, obs["cells"].shape[-1]))
        dense.append(obs["dense"].reshape(-1, obs["dense"].shape[-1]))
        legal.append(obs["action_mask"].reshape(-1, obs["action_mask"].shape[-1]).astype(bool))
        obs, *_ = env.step(env.sample_actions(rng, obs))
    batch = make_batch(n, seed)
    batch["cells"] = np.concatenate(cells)[:n].astype(np.int64)
    batch["dense"] = np.concatenate(dense)[:n].astype(np.float32)
    batch["legal"] = np.concatenate(legal)[:n]
    batch["legal"][np.arange(n), batch["actions"]] = True
    assert batch["cells"].shape == (n, CELLS) and batch["dense"].shape == (n, DENSE)
    return batch


def torch_update(torch, batch: dict, epochs: int, minibatch: int, embedding_bag: bool, seed: int):
    """One PPO update in PyTorch (CleanRL's ppo.py loop, its defaults where emergence's are the
    same: clip 0.2, clipped value loss, value coefficient 0.5, entropy 0.01, Adam;
    emergence's gradient-norm clip 1.0 and advantages as given, normalised over the batch). Returns the seconds the
    update took (the model's construction and the data's conversion are outside)."""
    nn = torch.nn
    torch.manual_seed(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            if embedding_bag:
                self.cells = nn.EmbeddingBag(CELLS * CODES, HIDDEN, mode="sum")
                self.dense = nn.Linear(DENSE, HIDDEN)
            else:
                self.first = nn.Linear(CELLS * CODES + DENSE, HIDDEN)
            self.l2 = nn.Linear(HIDDEN, HIDDEN)
            self.pi = nn.Linear(HIDDEN, ACTIONS)
            self.v = nn.Linear(HIDDEN, 1)

        def forward(self, cells, dense):
            if embedding_bag:
                h = self.cells(cells) + self.dense(dense)
            else:
                one_hot = torch.nn.functional.one_hot(cells, CODES).reshape(cells.shape[0], -1)
                h = self.first(torch.cat([one_hot.float(), dense], dim=1))
            h = torch.tanh(h)
            h = torch.tanh(self.l2(h))
            return self.pi(h), self.v(h).squeeze(1)

    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-8)
    offsets = torch.arange(CELLS, dtype=torch.int64) * CODES
    cells = torch.from_numpy(batch["cells"])
    if embedding_bag:
        cells = cells + offsets  # each cell's codes in their own rows of the table
    dense = torch.from_numpy(batch["dense"])
    legal = torch.from_numpy(batch["legal"])
    actions = torch.from_numpy(batch["actions"])
    old_logprobs = torch.from_numpy(batch["logprobs"])
    advantages = torch.from_numpy(batch["advantages"])
    returns = torch.from_numpy(batch["returns"])
    old_values = torch.from_numpy(batch["values"])
    n = cells.shape[0]
    clip, vf_coef, ent_coef, max_norm = 0.2, 0.5, 0.01, 1.0
    start = time.perf_counter()
    for _ in range(epochs):
        order = torch.randperm(n)
        for s in range(0, n, minibatch):
            mb = order[s : s + minibatch]
            logits, value = net(cells[mb], dense[mb])
            logits = logits.masked_fill(~legal[mb], -1e9)
            logp_all = torch.log_softmax(logits, dim=1)
            logp = logp_all.gather(1, actions[mb].unsqueeze(1)).squeeze(1)
            entropy = -(logp_all.exp() * logp_all).sum(1)
            ratio = (logp - old_logprobs[mb]).exp()
            adv = advantages[mb]
            pg = torch.max(-adv * ratio, -adv * torch.clamp(ratio, 1 - clip, 1 + clip)).mean()
            v_unclipped = (value - returns[mb]) ** 2
            v_clipped = old_values[mb] + torch.clamp(value - old_values[mb], -clip, clip)
            v_loss = 0.5 * torch.max(v_unclipped, (v_clipped - returns[mb]) ** 2).mean()
            loss = pg - ent_coef * entropy.mean() + vf_coef * v_loss
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), max_norm)
            opt.step()
    return time.perf_counter() - start


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=51_200)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatch", type=int, default=1024)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--rows", nargs="+", choices=["uniform", "quadrant"], default=["uniform", "quadrant"])
    args = p.parse_args()

    try:
        import emergence
    except ImportError as e:
        print(f"emergence is not importable ({e}): build it with `maturin develop --release` in python/")
        return 2
    try:
        import torch
    except ImportError:
        torch = None
        print(
            "torch is not installed: the PyTorch contenders are skipped "
            "(pip install torch to compare); emergence's update alone follows."
        )

    print(
        f"one PPO update: {args.samples} decisions x {args.epochs} epochs, minibatches of "
        f"{args.minibatch} ({args.samples * args.epochs // args.minibatch} gradient steps); "
        f"{args.rounds} rounds, contenders alternating; median seconds per update"
    )
    header = f"{'rows':>8}  {'threads':>7}  {'emergence':>10}"
    if torch is not None:
        header += f"  {'torch bag':>10}  {'torch dense':>11}  {'bag/emergence':>13}  {'dense/emergence':>15}"
    print(header)
    for rows in args.rows:
        batch = make_batch(args.samples, seed=0) if rows == "uniform" else quadrant_batch(emergence, args.samples, seed=0)
        for threads in args.threads:
            times = {"emergence": [], "bag": [], "dense": []}
            if torch is not None:
                torch.set_num_threads(threads)
            for r in range(args.rounds):
                times["emergence"].append(
                    emergence.bench_mlp_update(
                        samples=args.samples,
                        epochs=args.epochs,
                        minibatch=args.minibatch,
                        threads=threads,
                        seed=r,
                        rows=rows,
                    )
                )
                if torch is not None:
                    times["bag"].append(torch_update(torch, batch, args.epochs, args.minibatch, True, r))
                    times["dense"].append(torch_update(torch, batch, args.epochs, args.minibatch, False, r))
            e = statistics.median(times["emergence"])
            row = f"{rows:>8}  {threads:>7}  {e:>10.3f}"
            if torch is not None:
                b, d = statistics.median(times["bag"]), statistics.median(times["dense"])
                row += f"  {b:>10.3f}  {d:>11.3f}  {b / e:>12.1f}x  {d / e:>14.1f}x"
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
