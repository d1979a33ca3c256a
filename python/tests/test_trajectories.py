"""Same seed, same trajectory as the command line; the vector env's arenas are independent
and its arena 0 is the parallel env's arena."""

import json
import re
import subprocess

import numpy as np
import pytest

import emergence

SCENES = ["prisoners_dilemma", "commons_harvest_open", "clean_up", "quadrant", "split_view", "generated"]


def cli_run(cli, tmp_path, scene, seed, *extra):
    scene_file = tmp_path / f"{scene}.scene.ron"
    scene_file.write_text(emergence.scene_text(scene))
    hashes = tmp_path / "hashes.txt"
    replay = tmp_path / "run.replay"
    subprocess.run(
        [cli, "run", str(scene_file), "--arenas", "1", "--episodes", "2", "--seed", str(seed),
         "--threads", "1", "--quiet", "--hash-log", str(hashes), "--record", str(replay), *extra],
        check=True, capture_output=True,
    )
    lines = replay.read_text().splitlines()
    frames = [json.loads(line) for line in lines[1:]]
    # The first episode (a run of two: after its last step the arena waits for the next
    # episode, as Python's does, rather than go idle).
    first = [f for f in frames if f["episode"] == 0]
    hashes = [int(h, 16) for h in hashes.read_text().split()]
    assert [int(f["hash"], 16) for f in first] == hashes[: len(first)]
    return hashes[: len(first)], first


@pytest.mark.parametrize("scene", SCENES)
def test_bots_alone_give_the_clis_hashes(cli, tmp_path, scene):
    want, _ = cli_run(cli, tmp_path, scene, 11)
    env = emergence.vector_env(scene, num_arenas=1, seed=11, python_teams=[], hash_steps=True)
    env.reset()
    while True:
        _, _, term, trunc, info = env.step(np.zeros((1, 0), np.int64))
        if info["ended"].all():
            break
    assert env.step_hashes() == want


@pytest.mark.parametrize("scene", SCENES)
def test_python_actions_replayed_give_the_clis_hashes(cli, tmp_path, scene):
    """The CLI's run recorded; Python drives the first team with the recorded actions while
    the other teams keep their scene policies: every step's state hash is the CLI's."""
    want, frames = cli_run(cli, tmp_path, scene, 4)
    first_team = emergence.parallel_env(scene).possible_agents[0].rsplit("_", 1)[0]
    env = emergence.vector_env(scene, num_arenas=1, seed=4, python_teams=[first_team], hash_steps=True)
    env.reset()
    team_index = frames[0]["agents"][0]["team"]
    vocabulary = env.vocabulary
    for frame in frames:
        mine = [a for a in frame["agents"] if a["team"] == team_index]
        acts = [a["action_index"] for a in mine]
        words = [vocabulary.index(a["say"]) + 1 if a.get("say") else 0 for a in mine]
        env.step(np.array([acts], np.int64), np.array([words], np.int64) if vocabulary else None)
    assert env.step_hashes() == want


def test_hashes_are_kept_only_when_asked_and_change_nothing_of_the_trajectory():
    plain = emergence.vector_env("commons_harvest_open", num_arenas=3, seed=8)
    hashed = emergence.vector_env("commons_harvest_open", num_arenas=3, seed=8, hash_steps=True)
    obs_a, obs_b = plain.reset()[0], hashed.reset()[0]
    rng = np.random.default_rng(2)
    for _ in range(40):
        acts = plain.sample_actions(rng, obs_a)
        obs_a, rew_a, *_ = plain.step(acts)
        obs_b, rew_b, *_ = hashed.step(acts)
        for key in obs_a:
            assert np.array_equal(obs_a[key], obs_b[key]), key
        assert np.array_equal(rew_a, rew_b)
    assert len(hashed.step_hashes()) == 40
    with pytest.raises(RuntimeError, match="hash_steps=True"):
        plain.step_hashes()
    with pytest.raises(RuntimeError, match="hash_steps=True"):
        emergence.parallel_env("stag_hunt").step_hashes()


def test_the_text_is_what_the_language_model_read(cli, tmp_path):
    _, frames = cli_run(cli, tmp_path, "prisoners_dilemma", 3, "--policy", "lm")
    env = emergence.vector_env("prisoners_dilemma", num_arenas=1, seed=3)
    env.reset()
    for frame in frames:
        assert env.texts(0) == [a["text"] for a in frame["agents"]]
        env.step(np.array([[a["action_index"] for a in frame["agents"]]], np.int64))


@pytest.mark.parametrize("scene", ["stag_hunt", "clean_up", "two_rooms", "corridor_pair"])
def test_vector_arenas_are_independent_and_arena_0_is_the_parallel_env(scene):
    n, steps = 4, 60
    rng = np.random.default_rng(1)
    a = emergence.vector_env(scene, num_arenas=n, seed=9)
    b = emergence.vector_env(scene, num_arenas=n, seed=9)
    p = emergence.parallel_env(scene, seed=9)
    oa, _ = a.reset()
    ob, _ = b.reset()
    op, infos = p.reset(seed=9)
    # With talk, the parallel env's actions are a move and a word (0: silent) together.
    per_move = len(p.action_names) // len(a.action_names)
    for _ in range(steps):
        acts_a = a.sample_actions(rng, oa)
        # b: the same actions in arena 0, others' actions in the other arenas.
        acts_b = acts_a.copy()
        acts_b[1:] = b.sample_actions(rng, ob)[1:]
        for k, name in enumerate(p.possible_agents):
            moves = op[name]["action_mask"].reshape(-1, per_move)[:, 0]
            assert (moves == oa["action_mask"][0, k]).all()
            assert np.array_equal(op[name]["features"], emergence.features(oa["cells"], oa["dense"])[0, k])
        oa, ra, ta, ua, ia = a.step(acts_a)
        ob, rb, tb, ub, ib = b.step(acts_b)
        if p.agents:
            op, rp, tp, up, infos = p.step(
                {name: int(acts_a[0, k]) * per_move for k, name in enumerate(p.possible_agents)}
            )
            assert [rp[x] for x in p.possible_agents] == list(ra[0])
        else:
            op, infos = p.reset()
        for key in ("cells", "dense", "action_mask"):
            assert np.array_equal(oa[key][0], ob[key][0]), key
        assert np.array_equal(ra[0], rb[0]) and np.array_equal(ta[0], tb[0])


@pytest.mark.parametrize("scene", ["chicken", "commons_harvest_open", "open_field", "generated"])
def test_the_vector_env_equals_n_single_envs_stepped_with_the_same_actions(scene):
    n, steps = 3, 40
    rng = np.random.default_rng(2)
    venv = emergence.vector_env(scene, num_arenas=n, seed=5)
    singles = [emergence.parallel_env(scene, seed=5, arena=i) for i in range(n)]
    obs, _ = venv.reset()
    single_obs = [env.reset(seed=5)[0] for env in singles]
    per_move = len(singles[0].action_names) // len(venv.action_names)
    for _ in range(steps):
        feats = emergence.features(obs["cells"], obs["dense"])
        for i, env in enumerate(singles):
            for k, name in enumerate(env.possible_agents):
                assert np.array_equal(single_obs[i][name]["features"], feats[i, k]), (i, name)
                assert single_obs[i][name]["text"] == venv.texts(i)[k]
        actions = venv.sample_actions(rng, obs)
        obs, rew, term, trunc, info = venv.step(actions)
        for i, env in enumerate(singles):
            if env.agents:
                single_obs[i], r, t, u, _ = env.step(
                    {name: int(actions[i, k]) * per_move for k, name in enumerate(env.possible_agents)}
                )
                assert [r[x] for x in env.possible_agents] == list(rew[i]), i
                assert [t[x] for x in env.possible_agents] == list(term[i]), i
                assert [u[x] for x in env.possible_agents] == list(trunc[i]), i
            else:
                single_obs[i], _ = env.reset()


@pytest.mark.parametrize("scene", ["prisoners_dilemma", "split_view"])
def test_the_text_with_memory_is_the_language_models_whole_context(cli, tmp_path, scene):
    """With memory, ``texts`` is the context the language model read: the scene's constant
    lines, its kept turns (each observation and what it chose, words included), then this
    step's observation; the last `memory` of them, as the model's are."""
    _, frames = cli_run(cli, tmp_path, scene, 3, "--policy", "lm", "--memory", "3")
    env = emergence.vector_env(scene, num_arenas=1, seed=3, memory=3)
    env.reset()
    vocabulary = env.vocabulary
    for frame in frames:
        assert env.texts(0) == [a["text"] for a in frame["agents"]]
        acts = [a["action_index"] for a in frame["agents"]]
        words = [vocabulary.index(a["say"]) + 1 if a.get("say") else 0 for a in frame["agents"]]
        env.step(np.array([acts], np.int64), np.array([words], np.int64) if vocabulary else None)
    with pytest.raises(ValueError, match="memory"):
        emergence.vector_env(scene, num_arenas=1, memory=65)


TAUGHT = ["prisoners_dilemma", "commons_harvest_open", "clean_up", "quadrant", "split_view"]


@pytest.mark.parametrize("scene", TAUGHT)
def test_following_the_teacher_gives_the_clis_hashes(cli, tmp_path, scene):
    """Python drives the first team with its scene policy as the teacher and plays the
    teacher's labels: every step's state hash is the CLI's run of the scene's policies
    (quadrant's fort_builder is an oracle: it reads the whole map while the seat reads its
    view; split_view's talker says its words through the labels too)."""
    want, _ = cli_run(cli, tmp_path, scene, 6)
    first_team = emergence.parallel_env(scene).possible_agents[0].rsplit("_", 1)[0]
    text = emergence.scene_text(scene)
    teacher = re.search(r'name: "%s"[^)]*policy: "([^"]+)"' % first_team, text).group(1)
    env = emergence.vector_env(
        scene, num_arenas=1, seed=6, python_teams=[first_team], hash_steps=True, teacher=teacher
    )
    _, info = env.reset()
    while True:
        labels = info["teacher_actions"]
        assert labels.shape == (1, env.num_agents) and (labels >= 0).all()
        words = info.get("teacher_words")
        _, _, _, _, info = env.step(labels, words)
        if info["ended"].all():
            break
    assert env.step_hashes() == want


def test_the_parallel_envs_teacher_action_is_an_action_of_the_env():
    env = emergence.parallel_env("split_view", seed=2, teacher="maze_talker", python_teams=["talker"])
    obs, infos = env.reset()
    for _ in range(5):
        labels = {a: infos[a]["teacher_action"] for a in env.agents}
        for a, k in labels.items():
            assert obs[a]["action_mask"][k] == 1, env.action_names[k]
        obs, _, _, _, infos = env.step(labels)
    with pytest.raises(ValueError, match='teacher "lm": expected a scripted policy that plays Maze: random, maze_planner'):
        emergence.parallel_env("split_view", teacher="lm")
    with pytest.raises(ValueError, match='teacher "tit_for_tat"'):
        emergence.vector_env("split_view", 2, teacher="tit_for_tat")
