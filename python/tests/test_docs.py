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
            cells = (int(cols[5]) - 69) // 16
            assert cells == int(cols[4]), scene
            checked += 1
    assert checked == len(emergence.list_scenes()), f"the table covers {checked} scenes"
