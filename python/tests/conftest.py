"""Shared helpers: the scenes shipped with emergence and the command-line binary."""

import os
import pathlib

import pytest

import emergence

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCENES = sorted(emergence.list_scenes())


@pytest.fixture(scope="session")
def cli():
    """The `emergence` binary (EMERGENCE_BIN, or the workspace's release build)."""
    path = pathlib.Path(os.environ.get("EMERGENCE_BIN", ROOT / "target" / "release" / "emergence"))
    if not path.exists():
        pytest.fail(f"{path} is missing: build it with `cargo build --release` (or set EMERGENCE_BIN)")
    return str(path)
