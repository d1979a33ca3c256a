"""emergence's multi-agent environments from Python.

``parallel_env(scene)`` is a PettingZoo ``ParallelEnv`` over one arena of a scene;
``vector_env(scene, num_arenas)`` steps many arenas at once with numpy arrays in and out.
Both run emergence's own simulation (the same scenes, systems and order as the ``emergence``
command line), so a seed gives the same trajectory here as there.

A scene is a shipped scene's name (``"commons_harvest_open"``), a path to a ``.scene.ron``
file, or the RON text itself. See ``docs/python.md``.
"""

from ._native import Sim, bench_mlp_update, policies as _policies
from .env import EmergenceParallelEnv, VectorEnv, _shipped, features, one_hot

__all__ = [
    "EmergenceParallelEnv",
    "Sim",
    "VectorEnv",
    "bench_mlp_update",
    "features",
    "list_scenes",
    "list_policies",
    "one_hot",
    "parallel_env",
    "scene_text",
    "vector_env",
]


def _stem(path):
    return path.rsplit("/", 1)[-1].removesuffix(".scene.ron")


def list_scenes():
    """The shipped scenes, by the name ``parallel_env`` and ``vector_env`` take (the file
    name without ``.scene.ron``), with their family and title."""
    return {_stem(path): (family, title) for title, family, path, _text in _shipped()}


def list_policies():
    """Every policy a scene or ``partners`` may name, with the families it plays."""
    return dict(_policies())


def scene_text(name):
    """The RON text of a shipped scene, by name or by its ``scenes/...`` path."""
    for _title, _family, path, text in _shipped():
        if name in (_stem(path), path):
            return text
    raise KeyError(f"no shipped scene {name!r}; shipped: {', '.join(list_scenes())}")


def parallel_env(scene, seed=0, **kwargs):
    """One arena of ``scene`` as a PettingZoo ``ParallelEnv``.

    Keyword arguments: ``render_mode`` (``"rgb_array"`` or ``"ansi"``), ``python_teams``
    (the teams Python drives; default every team not in ``partners``), ``partners``
    (``{team: policy}``: a bot, ``random``, ``mlp`` or ``lm`` deciding for that team),
    ``illegal_action`` (``"raise"``, the default, or ``"first_legal"``), ``threads``,
    ``memory`` (past turns in ``obs[agent]["text"]``, over the scene's ``memory:``: the whole
    context a language-model agent with memory reads), ``teacher`` (a scripted policy whose
    choice for each agent is ``infos[agent]["teacher_action"]``: demonstrations for behaviour
    cloning).
    """
    return EmergenceParallelEnv(scene, seed=seed, **kwargs)


def vector_env(scene, num_arenas, seed=0, **kwargs):
    """``num_arenas`` arenas of ``scene`` stepped together with numpy arrays; see
    ``VectorEnv``."""
    return VectorEnv(scene, num_arenas=num_arenas, seed=seed, **kwargs)
