#!/usr/bin/env bash
# The Python bindings' tests: builds the wheel (maturin, the dev profile), installs it, and runs
# pytest (PettingZoo's api and seed tests on every shipped scene, same hashes as the CLI, bad
# input, docs/python.md's examples). Run from anywhere; needs python3 with pip.
#
# EMERGENCE_BIN: the CLI the tests compare with (scripts/test.sh passes the one its build
# made); built here when unset. EMERGENCE_FEATURES: the main crate's features to build the
# wheel with; scripts/test.sh passes the ones its tests were built with (`gui,mpi`), so that
# cargo reuses that build's library and compiles only the bindings (Cargo.toml unifies the
# dependencies' features between the two builds; without that the wheel rebuilt bevy, candle
# and the crate, 4 to 13 minutes). SKIP_PIP=1: the packages are installed already.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SKIP_PIP:-}" ]; then
    python3 -m pip install --quiet --disable-pip-version-check --timeout 60 --retries 2 \
        maturin numpy gymnasium pettingzoo pytest
fi
features=()
if [ -n "${EMERGENCE_FEATURES:-}" ]; then features=(--features "$EMERGENCE_FEATURES"); fi
# Built before the wheel, with the wheel's features, so that both share one library.
if [ -z "${EMERGENCE_BIN:-}" ]; then
    cargo build --locked --quiet --bin emergence "${features[@]}"
    EMERGENCE_BIN="$PWD/target/debug/emergence"
fi
rm -f target/wheels/emergence-*.whl
python3 -m maturin build --locked --quiet -m python/Cargo.toml "${features[@]}"
python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/wheels/emergence-*.whl
EMERGENCE_BIN="$EMERGENCE_BIN" python3 -m pytest -q python/tests
