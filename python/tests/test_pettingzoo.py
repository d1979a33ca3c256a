"""PettingZoo's own API and seeding tests, on every shipped scene."""

import numpy as np
import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

import emergence
from conftest import SCENES


def test_every_shipped_scene_is_listed():
    assert len(SCENES) >= 13
    families = {family for family, _title in emergence.list_scenes().values()}
    assert families == {"Matrix", "CommonsHarvest", "CleanUp", "HideAndSeek", "Maze"}


@pytest.mark.parametrize("scene", SCENES)
def test_parallel_api(scene):
    env = emergence.parallel_env(scene, seed=3)
    parallel_api_test(env, num_cycles=300)


@pytest.mark.parametrize("scene", SCENES)
def test_parallel_seed(scene):
    # PettingZoo's seed test samples actions without the mask: an illegal one becomes the
    # first legal action (emergence's own rule for policies) instead of an error.
    parallel_seed_test(
        lambda: emergence.parallel_env(scene, illegal_action="first_legal"), num_cycles=100
    )


@pytest.mark.parametrize("scene", ["prisoners_dilemma", "commons_harvest_open", "quadrant", "split_view"])
def test_observations_are_in_their_spaces_and_masks_agree(scene):
    env = emergence.parallel_env(scene, seed=5)
    obs, infos = env.reset(seed=5)
    rng = np.random.default_rng(0)
    for _ in range(30):
        if not env.agents:
            break
        for a in env.agents:
            assert env.observation_space(a).contains(obs[a]), a
            assert (obs[a]["action_mask"] == infos[a]["action_mask"]).all()
            assert obs[a]["action_mask"].any(), "some action is always legal"
            assert obs[a]["text"].splitlines()[-1].startswith(("actions", "say"))
        acts = {a: env.action_space(a).sample(infos[a]["action_mask"]) for a in env.agents}
        obs, rew, term, trunc, infos = env.step(acts)
    state = env.state()
    assert env.state_space.contains(state.astype(np.float32))


def test_render_modes():
    env = emergence.parallel_env("commons_harvest_open", render_mode="rgb_array")
    env.reset(seed=1)
    img = env.render()
    assert img.dtype == np.uint8 and img.ndim == 3 and img.shape[2] == 3
    # Team colours appear: the first team's red.
    assert ((img == np.array([230, 57, 70], np.uint8)).all(axis=2)).any()
    env = emergence.parallel_env("prisoners_dilemma", render_mode="ansi")
    env.reset(seed=1)
    text = env.render()
    assert "step 0" in text and "agent 1" in text
    # An env over arena 2 of a run draws that arena (its own map of the run's streams).
    env = emergence.parallel_env("commons_harvest_open", render_mode="rgb_array", arena=2)
    env.reset(seed=1)
    other = env.render()
    assert other.shape == img.shape


def test_without_text_the_observations_hold_features_and_masks_only():
    env = emergence.parallel_env("clean_up", text=False)
    parallel_api_test(env, num_cycles=50)
    obs, infos = env.reset(seed=1)
    a = env.possible_agents[0]
    assert set(obs[a]) == {"features", "action_mask"}
    full = emergence.parallel_env("clean_up")
    obs_full, _ = full.reset(seed=1)
    assert np.array_equal(obs[a]["features"], obs_full[a]["features"])


@pytest.mark.parametrize("scene", ["prisoners_dilemma", "commons_harvest_open", "clean_up", "quadrant", "split_view"])
def test_the_state_written_when_asked_equals_the_state_written_every_step(scene):
    # The parallel env writes the global state only when state() asks (GlobalStateSchedule);
    # a Sim with central_state=True writes it on every step, as MAPPO's training does.
    # Same values, and asking changes nothing of the trajectory (same state hashes).
    from emergence._native import Sim
    from emergence.env import _scene_arg, features

    env = emergence.parallel_env(scene, seed=4, hash_steps=True)
    every = Sim(_scene_arg(scene), 1, 4, None, None, True, [], False, 0, True)
    obs, infos = env.reset(seed=4)
    rng = np.random.default_rng(1)
    per_move = env._words
    for step in range(60):
        if not env.agents:
            break
        if step % 3 == 0:
            cells, dense = every.global_state(0, 0)
            cells = np.frombuffer(bytes(cells), dtype=np.uint8)
            want = features(cells[None], np.asarray(dense, np.float32)[None], every.codes)[0]
            assert np.array_equal(env.state(), want), step
        acts = {a: int(rng.choice(np.flatnonzero(infos[a]["action_mask"]))) for a in env.agents}
        row = np.array([[acts[a] for a in env.possible_agents]], dtype=np.int64)
        every.step(row // per_move, row % per_move if per_move > 1 else None)
        obs, rew, term, trunc, infos = env.step(acts)
    assert env.step_hashes() == every.step_hashes()
