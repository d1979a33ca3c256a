"""Agent-steps per second from Python, with random legal actions, measured side by side:

1. emergence.vector_env: 256 arenas of Commons Harvest (7 agents each), numpy in and out;
2. emergence.parallel_env: one arena of Commons Harvest through PettingZoo's API (dicts
   per agent, the observation text included);
3. a pure-Python PettingZoo ParallelEnv of the same size (a 24 x 16 grid, 7 agents, 7 x 7
   egocentric views, apples that regrow near apples), written the way PettingZoo's
   custom-environment tutorial writes one (PettingZoo ships no grid env without extra
   dependencies: its butterfly, sisl and atari envs need pygame, pymunk or the ALE);
4. the native runner (`emergence run --policy random`), when the binary is built.

The contenders run in alternating slices (this machine's speed drifts): see `interleaved`.

Usage: python python/benches/bench.py [--seconds S] [--threads N] [--json FILE]
"""

import argparse
import json
import os
import pathlib
import re
import subprocess
import time

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

import emergence

ROOT = pathlib.Path(__file__).resolve().parents[2]


class PyGridHarvest(ParallelEnv):
    """A pure-Python grid harvest game of Commons Harvest's size."""

    metadata = {"name": "py_grid_harvest_v0"}

    def __init__(self, width=24, height=16, n_agents=7, view=3, max_steps=1000):
        self.w, self.h, self.view, self.max_steps = width, height, view, max_steps
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        side = 2 * view + 1
        self._obs_space = spaces.Box(0, 4, (side * side,), np.int8)
        self._act_space = spaces.Discrete(5)

    def observation_space(self, agent):
        return self._obs_space

    def action_space(self, agent):
        return self._act_space

    def reset(self, seed=None, options=None):
        self.rng = np.random.default_rng(seed)
        self.apples = {(x, y) for x in range(1, self.w - 1) for y in range(1, self.h - 1)
                       if self.rng.random() < 0.15}
        self.pos = {a: (int(self.rng.integers(1, self.w - 1)), int(self.rng.integers(1, self.h - 1)))
                    for a in self.possible_agents}
        self.t = 0
        self.agents = list(self.possible_agents)
        return {a: self._observe(a) for a in self.agents}, {a: {} for a in self.agents}

    def _observe(self, agent):
        x0, y0 = self.pos[agent]
        others = set(self.pos.values())
        out = []
        for dy in range(-self.view, self.view + 1):
            for dx in range(-self.view, self.view + 1):
                x, y = x0 + dx, y0 + dy
                if not (0 < x < self.w - 1 and 0 < y < self.h - 1):
                    out.append(1)
                elif (x, y) in others:
                    out.append(3)
                elif (x, y) in self.apples:
                    out.append(2)
                else:
                    out.append(0)
        return np.array(out, dtype=np.int8)

    def step(self, actions):
        moves = {0: (0, 0), 1: (0, -1), 2: (0, 1), 3: (-1, 0), 4: (1, 0)}
        rewards = {}
        for a, act in actions.items():
            dx, dy = moves[int(act)]
            x, y = self.pos[a]
            nx, ny = min(max(x + dx, 1), self.w - 2), min(max(y + dy, 1), self.h - 2)
            self.pos[a] = (nx, ny)
            rewards[a] = 1.0 if (nx, ny) in self.apples else 0.0
            self.apples.discard((nx, ny))
        grow = []
        for x in range(1, self.w - 1):
            for y in range(1, self.h - 1):
                if (x, y) not in self.apples:
                    near = sum((x + i, y + j) in self.apples for i in (-1, 0, 1) for j in (-1, 0, 1))
                    if near and self.rng.random() < 0.01 * near:
                        grow.append((x, y))
        self.apples.update(grow)
        self.t += 1
        trunc = self.t >= self.max_steps
        obs = {a: self._observe(a) for a in self.agents}
        terms = {a: False for a in self.agents}
        truncs = {a: trunc for a in self.agents}
        infos = {a: {} for a in self.agents}
        if trunc:
            self.agents = []
        return obs, rewards, terms, truncs, infos


def interleaved(contenders, seconds, slice_seconds=0.25):
    """Runs every contender's `step` (returning agent-steps done) in turn, `slice_seconds`
    at a time, until each has run `seconds`. This machine's speed drifts by 20% and more
    within a minute, so contenders measured one after the other are not comparable; taken
    in alternating slices, each round's ratios are measured over the same stretch of time.
    Returns the rates (agent-steps/s over all rounds) and the rates of each round."""
    done = {k: 0 for k in contenders}
    spent = {k: 0.0 for k in contenders}
    rounds = []
    while min(spent.values()) < seconds:
        this = {}
        for name, step in contenders.items():
            n, start = 0, time.perf_counter()
            while time.perf_counter() - start < slice_seconds:
                n += step()
            dt = time.perf_counter() - start
            done[name] += n
            spent[name] += dt
            this[name] = n / dt
        rounds.append(this)
    return {k: done[k] / spent[k] for k in contenders}, rounds


def vector_stepper(threads):
    env = emergence.vector_env("commons_harvest_open", num_arenas=256, seed=0, threads=threads)
    rng = np.random.default_rng(0)
    state = {"obs": env.reset()[0]}

    def step():
        state["obs"] = env.step(env.sample_actions(rng, state["obs"]))[0]
        return env.num_arenas * env.num_agents

    return step


def parallel_stepper(env, masked, per_agent=False):
    """Random actions for every agent: a legal one uniformly (`masked`: the masks stacked,
    the largest of uniform numbers on the legal actions), any of the actions (False: the
    pure-Python env has no illegal actions; one `rng.integers` for all agents), or action 0,
    always legal (None: the env's own cost alone), drawn for all agents at once. With
    `per_agent`, each agent's action is drawn by its own numpy calls (`flatnonzero` and
    `integers`, or `integers` alone), about 3 us a call: more, for 7 agents, than a step of
    the emergence env."""
    state = {"infos": env.reset(seed=0)[1]}
    rng = np.random.default_rng(0)

    def step():
        if not env.agents:
            state["infos"] = env.reset()[1]
        agents = env.agents
        n = len(agents)
        if masked is None:
            acts = {a: 0 for a in agents}
        elif per_agent and masked:
            acts = {}
            for a in agents:
                legal = np.flatnonzero(state["infos"][a]["action_mask"])
                acts[a] = int(legal[rng.integers(len(legal))])
        elif per_agent:
            acts = {a: int(rng.integers(env.action_space(a).n)) for a in agents}
        elif masked:
            masks = np.array([state["infos"][a]["action_mask"] for a in agents])
            acts = dict(zip(agents, (rng.random(masks.shape) * masks).argmax(axis=1).tolist()))
        else:
            acts = dict(zip(agents, rng.integers(env.action_space(agents[0]).n, size=n).tolist()))
        state["infos"] = env.step(acts)[4]
        return n

    return step


def bench_native(threads):
    binary = pathlib.Path(os.environ.get("EMERGENCE_BIN", ROOT / "target" / "release" / "emergence"))
    if not binary.exists():
        return None
    cmd = [str(binary), "run", str(ROOT / "scenes/dilemma/commons_harvest_open.scene.ron"),
           "--arenas", "256", "--policy", "random", "--quiet"]
    if threads:
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"^agent-steps/s\s+([\d.]+)", out, re.M)
    return float(m.group(1)) if m else None


def spread(rounds, a, b):
    """The ratio a / b per round: (min, median, max)."""
    r = sorted(x[a] / x[b] for x in rounds)
    return r[0], r[len(r) // 2], r[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0, help="each contender's running time")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()

    def par(**kw):
        return emergence.parallel_env("commons_harvest_open", threads=args.threads, **kw)

    names = {
        "vec": "vector_env (256 arenas, numpy)",
        "par": "parallel_env (1 arena, PettingZoo API)",
        "par_notext": "parallel_env, text=False",
        "py": "pure-Python PettingZoo grid env (same size)",
        "par_each": "parallel_env, each agent's action drawn apart",
        "py_each": "pure-Python env, each agent's action drawn apart",
        "par_alone": "parallel_env, the step alone",
        "py_alone": "pure-Python env, the step alone",
    }
    contenders = {
        "vec": vector_stepper(args.threads),
        "par": parallel_stepper(par(), True),
        "par_notext": parallel_stepper(par(text=False), True),
        "py": parallel_stepper(PyGridHarvest(), False),
        "par_each": parallel_stepper(par(), True, per_agent=True),
        "py_each": parallel_stepper(PyGridHarvest(), False, per_agent=True),
        "par_alone": parallel_stepper(par(), None),
        "py_alone": parallel_stepper(PyGridHarvest(), None),
    }
    rates, rounds = interleaved(contenders, args.seconds)
    results = {names[k]: v for k, v in rates.items()}
    native = bench_native(args.threads)
    if native is not None:
        results["native runner (emergence run, 256 arenas)"] = native
    width = max(map(len, results))
    print(f"agent-steps/s, {len(rounds)} interleaved rounds of {args.seconds / len(rounds):.2f} s per contender:")
    for name, rate in results.items():
        print(f"  {name:<{width}}  {rate / 1e6:8.3f}M")
    print("ratios over the whole run (per round: min / median / max):")
    for label, a, b in [
        ("parallel_env / pure Python, random legal actions", "par", "py"),
        ("parallel_env without text / pure Python", "par_notext", "py"),
        ("parallel_env / pure Python, the step alone", "par_alone", "py_alone"),
        ("the same, each agent's action drawn apart", "par_each", "py_each"),
        ("vector_env / pure Python", "vec", "py"),
    ]:
        lo, mid, hi = spread(rounds, a, b)
        print(f"  {label:<50} {rates[a] / rates[b]:6.1f}x  ({lo:.1f} / {mid:.1f} / {hi:.1f})")
        results[f"ratio: {label}"] = rates[a] / rates[b]
    if native is not None:
        print(f"  vector_env / native runner: {rates['vec'] / native:.0%} of the native speed kept")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
