"""docs/python.md is tested: every Python block runs, and its table of the shipped scenes'
spaces is the code's."""

import re

import pytest

import emergence
from conftest import ROOT

DOC = (ROOT / "docs" / "python.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", DOC, re.S)


def test_the_page_has_its_examples():
    assert len(BLOCKS) >= 4
    assert any("REINFORCE" in DOC and "theta" in b for b in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_every_python_block_runs(index):
    exec(compile(BLOCKS[index], f"docs/python.md block {index}", "exec"), {"__name__": "docs"})


def test_the_spaces_table_is_the_codes():
    rows = [r for r in DOC.splitlines() if r.startswith("| `")]
    checked = 0
    for row in rows:
        cols = [c.strip() for c in row.strip("|").split("|")]
        if len(cols) != 7:
            continue
        scenes = re.findall(r"`([a-z_]+)`", cols[0])
        agents = [int(x) for x in re.findall(r"\d+", cols[2])]
        for k, scene in enumerate(scenes):
            env = emergence.parallel_env(scene)
            a = env.possible_agents[0]
            assert len(env.possible_agents) == agents[min(k, len(agents) - 1)], scene
            assert len(env.action_names) == int(cols[3]), scene
            assert env.observation_space(a)["features"].shape[0] == int(cols[5]), scene
            # features = 16 x cells + 69 header numbers, and the entity list's 57 where the
            # page says a scene has it (quadrant_game).
            extra = 57 if scene == "quadrant_game" else 0
            assert env._dense == 69 + extra, scene
            cells = (int(cols[5]) - 69 - extra) // 16
            assert cells == int(cols[4]) == env._cells, scene
            checked += 1
    assert checked == len(emergence.list_scenes()), f"the table covers {checked} scenes"


def test_the_actions_per_family_are_the_codes():
    """The page's action lists, in the order Python indexes them, against each family's
    action names (a maze action is a move and a word: its moves are those of the names that
    say nothing, `MOVE silent`, in order)."""
    table = DOC.split("## Spaces per family", 1)[1]
    rows = [r for r in table.splitlines() if r.startswith("| `")]
    scene_of = {
        "CommonsHarvest": "commons_harvest_open",
        "CleanUp": "clean_up",
        "HideAndSeek": "quadrant",
        "Maze": "corridor_pair",
    }
    checked = 0
    for row in rows:
        cols = [c.strip() for c in row.strip("|").split("|")]
        families = re.findall(r"`([A-Za-z]+)`", cols[0])
        listed = re.findall(r"`([a-z_ ]+)`", cols[1])
        for family in families:
            if family not in scene_of:
                continue
            env = emergence.parallel_env(scene_of[family])
            names = list(env.action_names)
            if family == "Maze":
                # "MOVE silent" opens each move's run of words.
                names = [n.split()[0] for n in names if n.endswith(" silent")]
            assert listed and listed[0].split() == names, (family, listed, names)
            checked += 1
    assert checked == 4, f"checked {checked} families"


def test_the_texts_a_language_model_reads_are_the_codes():
    """docs/scenes.md's sample texts, one per family, rendered again: agent 0 of the scene,
    seed 0, at its first step."""
    page = (ROOT / "docs" / "scenes.md").read_text()
    samples = re.findall(
        r"Agent 0 of `([a-z_]+)`, seed 0, at its first step:\n\n```text\n(.*?)```", page, re.S
    )
    assert len(samples) == 5, [s for s, _ in samples]
    for scene, text in samples:
        env = emergence.parallel_env(scene, seed=0)
        obs, _ = env.reset(seed=0)
        got = obs[env.possible_agents[0]]["text"].rstrip("\n")
        assert got == text.rstrip("\n"), scene
