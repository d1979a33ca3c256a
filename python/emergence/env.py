"""The Python environments over emergence's native simulation (``emergence._native.Sim``)."""

import os
import string

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

from ._native import Sim, shipped_scenes

#: Characters an observation text may hold (plain ASCII, one fact per line).
TEXT_CHARSET = frozenset(string.printable)
#: The longest observation text the ``text`` space admits.
TEXT_MAX = 1 << 16


_SHIPPED = None


def _shipped():
    """The shipped scenes (parsed once)."""
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = shipped_scenes()
    return _SHIPPED


def _scene_arg(scene):
    """A path that exists, a shipped scene's name or ``scenes/...`` path, or RON text."""
    scene = os.fspath(scene)
    if "\n" in scene or scene.lstrip().startswith("("):
        return scene
    if os.path.exists(scene):
        return scene
    for _title, _family, path, text in _shipped():
        stem = path.rsplit("/", 1)[-1].removesuffix(".scene.ron")
        if scene in (stem, path, path.removeprefix("scenes/")):
            return text
    return scene


def one_hot(cells, codes=16):
    """Cell codes ``uint8 [..., cells]`` as one-hot ``float32 [..., cells * codes]``."""
    cells = np.asarray(cells)
    out = np.zeros(cells.shape + (codes,), dtype=np.float32)
    np.put_along_axis(out, cells[..., None].astype(np.int64), 1.0, axis=-1)
    return out.reshape(cells.shape[:-1] + (cells.shape[-1] * codes,))


def features(cells, dense, codes=16):
    """The ``mlp`` policy's feature rows: one-hot cells, then the header numbers."""
    return np.concatenate([one_hot(cells, codes), np.asarray(dense, np.float32)], axis=-1)


def _build(scene, num_arenas, seed, python_teams, partners, threads, central_state, illegal_action,
           first_arena=0, hash_steps=False, memory=None, teacher=None):
    if illegal_action not in ("raise", "first_legal"):
        raise ValueError(
            f"illegal_action must be 'raise' or 'first_legal', not {illegal_action!r}"
        )
    partners = dict(partners or {})
    return Sim(
        _scene_arg(scene),
        num_arenas,
        seed,
        None if python_teams is None else list(python_teams),
        threads,
        central_state,
        list(partners.items()),
        illegal_action == "first_legal",
        int(first_arena),
        bool(hash_steps),
        None if memory is None else int(memory),
        None if teacher is None else str(teacher),
    )


class EmergenceParallelEnv(ParallelEnv):
    """One arena of a scene, with PettingZoo's parallel API.

    Agents are named ``TEAM_K`` (the K-th agent of team TEAM). An observation is a dict of
    ``features`` (the ``mlp`` policy's feature row), ``text`` (exactly what a language-model
    agent reads) and ``action_mask``; ``infos[agent]["action_mask"]`` holds the mask too.
    All agents of an arena end together (the episode's end), so ``agents`` empties at once.
    In families with talk (the maze) an action is a move and a word together: index
    ``move * (len(vocabulary) + 1) + word``, word 0 being silence and ``k + 1`` the k-th
    word (``action_names`` lists them all; the mask allows every word with a legal move).
    ``state()`` is the family's global state from the first agent's side (what MAPPO's
    critic reads), one-hot like ``features``. ``arena=i`` makes this env arena ``i`` of
    ``vector_env`` (or of ``emergence run``) with the same seed: the same random streams.
    ``text=False`` leaves the text out of the observations (and their space): faster when
    no language model reads them. ``hash_steps=True`` keeps every step's state hash
    (``step_hashes()``, equal to ``emergence run --hash-log``): off by default, it costs
    time on every step. ``teacher="maze_planner"`` (any scripted policy of ``list_policies()``
    that plays the scene's family) puts that policy's choice for each agent's observation in
    ``infos[agent]["teacher_action"]``, as an action of this env: the demonstrations that
    behaviour cloning learns from (``emergence imitate`` does it in Rust). An oracle teacher
    reads the whole map while the agent reads its own view; the teacher draws from the
    agent's own random stream, so following its labels plays what ``emergence run`` plays
    with the teacher in those seats.
    """

    metadata = {"render_modes": ["rgb_array", "ansi"], "name": "emergence_v0", "is_parallelizable": True}

    def __init__(
        self,
        scene,
        seed=0,
        render_mode=None,
        python_teams=None,
        partners=None,
        illegal_action="raise",
        threads=None,
        arena=0,
        text=True,
        hash_steps=False,
        memory=None,
        teacher=None,
    ):
        self._text = bool(text)
        if int(arena) < 0:
            raise ValueError(f"arena must be 0 or more, not {arena}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode must be one of {self.metadata['render_modes']}, not {render_mode!r}"
            )
        self.render_mode = render_mode
        self._seed = seed
        self._resets = 0
        # The global state is written when state() asks for it, not every step.
        self._sim = _build(
            scene, 1, seed, python_teams, partners, threads, False, illegal_action, arena, hash_steps,
            memory, teacher,
        )
        self.possible_agents = list(self._sim.agent_ids)
        self.agents = []
        self._moves = list(self._sim.action_names)
        self._words = len(self._sim.vocabulary) + 1 if self._sim.vocabulary else 1
        if self._words > 1:
            said = ["silent"] + [f"say {w}" for w in self._sim.vocabulary]
            self._names = [f"{m} {w}" for m in self._moves for w in said]
        else:
            self._names = list(self._moves)
        cells, dense = self._sim.observations()
        self._cells, self._dense = cells.shape[2], dense.shape[2]
        n_features = self._cells * self._sim.codes + self._dense
        state_cells, state_dense = self._sim.global_state(0, 0)
        self._state_len = len(state_cells) * self._sim.codes + len(state_dense)
        self.state_space = spaces.Box(-np.inf, np.inf, (self._state_len,), np.float32)
        parts = {"features": spaces.Box(-np.inf, np.inf, (n_features,), np.float32)}
        if self._text:
            parts["text"] = spaces.Text(TEXT_MAX, min_length=0, charset=TEXT_CHARSET)
        parts["action_mask"] = spaces.Box(0, 1, (len(self._names),), np.int8)
        self._obs_space = {a: spaces.Dict(dict(parts)) for a in self.possible_agents}
        self._act_space = {a: spaces.Discrete(len(self._names)) for a in self.possible_agents}
        self._done = True
        self._fresh = True

    def observation_space(self, agent):
        return self._obs_space[agent]

    def action_space(self, agent):
        return self._act_space[agent]

    @property
    def action_names(self):
        """The action words, by index."""
        return list(self._names)

    @property
    def family(self):
        return self._sim.family

    def _observe(self):
        obs, _rew, _term, _trunc, infos = self._sim.parallel_results(
            self.possible_agents, self._words, self._text
        )
        return obs, infos

    def reset(self, seed=None, options=None):
        """Starts an episode. With a seed: a fresh world from it (the same seed, the same
        episode). Without: the next episode of this world once the last one has ended; the
        first reset uses the constructor's seed."""
        if self._fresh and seed in (None, self._seed):
            pass  # the world built for this seed has not stepped yet
        elif seed is not None:
            self._seed = seed
            self._sim.reset(seed)
        elif self._resets == 0:
            self._sim.reset(self._seed)
        elif self._done:
            self._sim.next_episode()
        else:
            # Stopped mid-episode: start over with a seed of its own.
            self._sim.reset(self._seed + 1_000_003 * self._resets)
        self._resets += 1
        self._fresh = False
        self._done = False
        self.agents = list(self.possible_agents)
        return self._observe()

    def step(self, actions):
        if not self.agents:
            raise RuntimeError("step() after the episode ended: call reset() first")
        if not isinstance(actions, dict):
            actions = dict(actions)
        obs, rewards, terminations, truncations, infos, ended = self._sim.parallel_step(
            actions, self.possible_agents, self._words, self._text
        )
        if ended:
            self._done = True
            self.agents = []
        return obs, rewards, terminations, truncations, infos

    def render(self):
        if self.render_mode == "rgb_array":
            return self._sim.render_rgb(0)
        if self.render_mode == "ansi":
            return self._sim.render_ansi(0)
        return None

    def state(self):
        cells, dense = self._sim.global_state(0, 0)
        cells = np.frombuffer(bytes(cells), dtype=np.uint8)
        return features(cells[None], np.asarray(dense, np.float32)[None], self._sim.codes)[0]

    def step_hashes(self):
        """The state hash after every step of this world (``emergence run --hash-log``);
        needs ``hash_steps=True``."""
        return self._sim.step_hashes()

    def close(self):
        pass


class VectorEnv:
    """``num_arenas`` arenas of a scene stepped together, numpy arrays in and out.

    ``reset()`` returns ``(obs, info)`` and ``step(actions)`` returns ``(obs, rewards,
    terminations, truncations, info)``; ``actions`` is an int array ``[arenas, agents]``
    (``agents``: the agents Python drives, in ``agent_ids`` order). ``obs`` is a dict of
    ``cells`` (``uint8 [arenas, agents, cells]``, codes below 16: ``features`` one-hots
    them), ``dense`` (``float32 [arenas, agents, dense]``) and ``action_mask`` (``int8
    [arenas, agents, actions]``).

    Autoreset is Gymnasium's next-step mode (``autoreset_mode = "NextStep"``): the step on
    which an arena's episode ends returns its last observation and the ends; the next step
    ignores that arena's actions, starts its next episode, and returns its first
    observation with zero rewards (``info["reset"]`` marks those arenas; ``info["ended"]``
    the arenas whose episode ended on this step). The stepping runs with the GIL released.
    ``hash_steps=True`` keeps every step's state hash (``step_hashes()``); off by default,
    it costs about a fifth of a many-arena step. ``teacher="hider"`` (a scripted policy that
    plays the scene's family) adds ``info["teacher_actions"]`` (``int64 [arenas, agents]``:
    its move for each agent's observation, -1 in an arena that resets on the next step) and,
    in families with talk, ``info["teacher_words"]``: behaviour cloning's labels.
    """

    autoreset_mode = "NextStep"

    def __init__(
        self,
        scene,
        num_arenas,
        seed=0,
        python_teams=None,
        partners=None,
        illegal_action="raise",
        threads=None,
        central_state=False,
        hash_steps=False,
        memory=None,
        teacher=None,
    ):
        if int(num_arenas) < 1:
            raise ValueError(f"num_arenas must be at least 1, not {num_arenas}")
        self._sim = _build(
            scene, int(num_arenas), seed, python_teams, partners, threads, central_state,
            illegal_action, hash_steps=hash_steps, memory=memory, teacher=teacher,
        )
        self.num_arenas = int(num_arenas)
        self.agent_ids = list(self._sim.agent_ids)
        self.num_agents = len(self.agent_ids)
        self.action_names = list(self._sim.action_names)
        self.single_action_space = spaces.Discrete(len(self.action_names))
        self._seed = seed
        self._started = False
        self._fresh = True

    @property
    def family(self):
        return self._sim.family

    def _obs(self):
        cells, dense = self._sim.observations()
        return {"cells": cells, "dense": dense, "action_mask": self._sim.action_masks()}

    def reset(self, seed=None):
        """A fresh world from ``seed`` (the constructor's when ``None``): every arena at the
        start of its first episode."""
        if not (self._fresh and seed in (None, self._seed)):
            self._seed = self._seed if seed is None else seed
            self._sim.reset(self._seed)
        self._fresh = False
        self._started = True
        return self._obs(), self._taught({"reset": np.ones(self.num_arenas, dtype=bool)})

    def _taught(self, info):
        actions = self._sim.teacher_actions()
        if actions is not None:
            info["teacher_actions"] = actions
            if self._sim.vocabulary:
                info["teacher_words"] = self._sim.teacher_words()
        return info

    @property
    def vocabulary(self):
        """The words agents may say (families with talk); ``step``'s ``words``: 0 is silence,
        ``k + 1`` word ``k``."""
        return list(self._sim.vocabulary)

    def step(self, actions, words=None):
        if not self._started:
            raise RuntimeError("step() before reset()")
        actions = np.asarray(actions)
        if actions.dtype.kind not in "iu":
            raise TypeError(f"actions must be an integer array, not {actions.dtype}")
        want = (self.num_arenas, self.num_agents)
        if actions.shape != want:
            raise ValueError(f"actions has shape {actions.shape}; expected {want} (arenas, agents)")
        if words is not None:
            words = np.asarray(words)
            if words.dtype.kind not in "iu" or words.shape != want:
                raise ValueError(f"words must be an integer array of shape {want}, not {words.dtype} {words.shape}")
            words = np.ascontiguousarray(words, dtype=np.int64)
        resetting = np.asarray(self._sim.resetting(), dtype=bool)
        self._sim.step(np.ascontiguousarray(actions, dtype=np.int64), words)
        return (
            self._obs(),
            self._sim.rewards(),
            self._sim.terminated(),
            self._sim.truncated(),
            self._taught({"reset": resetting, "ended": np.asarray(self._sim.resetting(), dtype=bool)}),
        )

    def sample_actions(self, rng, obs):
        """A uniformly random legal action per arena and agent (numpy ``Generator``)."""
        mask = obs["action_mask"].astype(np.float64)
        u = rng.random(mask.shape) * mask
        return u.argmax(axis=-1)

    def render(self, arena=0, mode="rgb_array"):
        return self._sim.render_rgb(arena) if mode == "rgb_array" else self._sim.render_ansi(arena)

    def texts(self, arena):
        """The observation texts of ``arena``'s agents."""
        return self._sim.texts(arena)

    def step_hashes(self):
        return self._sim.step_hashes()

    def state(self, arena=0, seat=0):
        """MAPPO's global state of ``arena`` from agent ``seat``'s side (the family's true
        state: the whole map drawn from that side, every agent's place and status), as a
        feature row like an observation's (one-hot cells, then numbers). Written every step
        when the env was made with ``central_state=True``; drawn when asked otherwise (the
        same numbers)."""
        cells, dense = self._sim.global_state(int(arena), int(seat))
        cells = np.frombuffer(bytes(cells), dtype=np.uint8)
        return features(cells[None], np.asarray(dense, np.float32)[None], self._sim.codes)[0]

    def close(self):
        pass

