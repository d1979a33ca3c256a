#!/usr/bin/env bash
# The Python bindings' tests: builds the wheel (maturin, the dev profile: it reuses what
# `cargo test` built), installs it with its dependencies, and runs pytest (PettingZoo's api
# and seed tests on every shipped scene, same hashes as the CLI, bad input, docs/python.md's
# examples). Run from anywhere; needs python3 with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip install --quiet --disable-pip-version-check maturin numpy gymnasium pettingzoo pytest
# The CLI the tests compare with: EMERGENCE_BIN when given (scripts/test.sh passes the one
# its `cargo test` built), else built here, before the wheel: maturin's build flags differ
# from cargo's, so building it after the wheel would build the crate a third time.
if [ -z "${EMERGENCE_BIN:-}" ]; then
    cargo build --locked --quiet --bin emergence
    EMERGENCE_BIN="$PWD/target/debug/emergence"
fi
rm -f target/wheels/emergence-*.whl
python3 -m maturin build --locked --quiet -m python/Cargo.toml
python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/emergence-*.whl
EMERGENCE_BIN="$EMERGENCE_BIN" python3 -m pytest -q python/tests
