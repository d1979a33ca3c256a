"""Bad input gets a clear Python exception, never a crash of the interpreter."""

import numpy as np
import pytest

import emergence


def test_an_illegal_action_is_refused_naming_the_agent_and_the_legal_ones():
    env = emergence.parallel_env("quadrant", seed=1)
    obs, infos = env.reset(seed=1)
    agent = env.agents[0]
    illegal = [i for i, ok in enumerate(infos[agent]["action_mask"]) if not ok]
    assert illegal, "quadrant masks some action at the start"
    acts = {a: int(np.flatnonzero(infos[a]["action_mask"])[0]) for a in env.agents}
    acts[agent] = illegal[0]
    with pytest.raises(ValueError, match=f"{agent}: action {illegal[0]} is not legal now"):
        env.step(acts)
    with pytest.raises(ValueError, match="not legal"):
        env.step({**acts, agent: 99})
    # The refused step changed nothing: the legal one goes through.
    acts[agent] = int(np.flatnonzero(infos[agent]["action_mask"])[0])
    env.step(acts)


def test_unknown_agents_missing_agents_and_non_integer_actions():
    env = emergence.parallel_env("prisoners_dilemma")
    env.reset(seed=0)
    acts = {a: 0 for a in env.agents}
    with pytest.raises(KeyError, match="unknown agent id"):
        env.step({**acts, "nobody_0": 0})
    with pytest.raises(ValueError, match="no action for"):
        env.step({env.agents[0]: 0})
    with pytest.raises(TypeError, match="int index"):
        env.step({**acts, env.agents[0]: 0.5})
    with pytest.raises(TypeError, match="int index"):
        env.step({**acts, env.agents[0]: "cooperate"})


def test_stepping_after_the_end_is_refused():
    env = emergence.parallel_env("stag_hunt")
    env.reset(seed=0)
    while env.agents:
        env.step({a: 0 for a in env.agents})
    with pytest.raises(RuntimeError, match="after the episode ended"):
        env.step({a: 0 for a in env.possible_agents})
    env.reset()
    assert env.agents


def test_vector_actions_of_the_wrong_shape_or_dtype():
    venv = emergence.vector_env("prisoners_dilemma", num_arenas=3)
    with pytest.raises(RuntimeError, match="before reset"):
        venv.step(np.zeros((3, 2), np.int64))
    venv.reset()
    with pytest.raises(ValueError, match=r"shape \(2, 2\); expected \(3, 2\)"):
        venv.step(np.zeros((2, 2), np.int64))
    with pytest.raises(TypeError, match="integer array"):
        venv.step(np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="not legal"):
        venv.step(np.full((3, 2), 7, np.int64))
    venv.step(np.zeros((3, 2), np.uint8))


def test_scene_errors_carry_their_position():
    with pytest.raises(ValueError, match=r"<string>:1:\d+"):
        emergence.parallel_env('(name: "x", family: Matrix(rounds: -1))')
    with pytest.raises(ValueError, match="no_such.scene.ron"):
        emergence.parallel_env("no_such.scene.ron")


def test_bad_partners_and_teams():
    with pytest.raises(ValueError, match="no policy"):
        emergence.parallel_env("prisoners_dilemma", partners={"column": "nonsense"})
    with pytest.raises(ValueError, match="plays"):
        emergence.parallel_env("prisoners_dilemma", partners={"column": "fort_builder"})
    with pytest.raises(ValueError, match="no team"):
        emergence.parallel_env("prisoners_dilemma", python_teams=["zzz"])
    with pytest.raises(ValueError, match="illegal_action"):
        emergence.parallel_env("prisoners_dilemma", illegal_action="ignore")
    with pytest.raises(ValueError, match="num_arenas"):
        emergence.vector_env("prisoners_dilemma", num_arenas=0)


def test_partners_decide_for_their_team():
    env = emergence.parallel_env("prisoners_dilemma", partners={"column": "always_defect"})
    assert env.possible_agents == ["row_0"]
    obs, infos = env.reset(seed=2)
    for _ in range(3):
        obs, rew, term, trunc, infos = env.step({"row_0": 0})
    # Cooperating against always_defect: the other defected in all three rounds.
    assert "other so far cooperate 0 defect 3" in obs["row_0"]["text"]
    assert rew["row_0"] == 0.0


def test_a_language_model_and_an_mlp_can_be_partners():
    for policy in ("lm", "mlp"):
        env = emergence.parallel_env("stag_hunt", partners={"hunter_b": policy}, seed=1)
        assert env.possible_agents == ["hunter_a_0"]
        obs, infos = env.reset(seed=1)
        steps = 0
        while env.agents:
            obs, rew, term, trunc, infos = env.step({"hunter_a_0": 0})
            steps += 1
        assert steps >= 2


def test_the_update_bench_times_an_update_and_refuses_empty_settings():
    seconds = emergence.bench_mlp_update(samples=1600, epochs=1, minibatch=512, threads=1)
    assert 0.0 < seconds < 60.0
    for bad in ({"samples": 0}, {"epochs": 0}, {"minibatch": 0}, {"threads": 0}):
        with pytest.raises(ValueError, match="must be positive"):
            emergence.bench_mlp_update(**bad)
