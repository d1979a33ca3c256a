#!/usr/bin/env bash
# Data-parallel training's tests: `mpirun -np 2 --oversubscribe` against one process
# (tests/mpi.rs). Installs Open MPI (and libclang, which the `mpi` crate's bindings are
# generated with) from Debian's packages when they are missing, then builds with the `mpi`
# feature. Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v mpirun > /dev/null || ! command -v mpicc > /dev/null || ! ldconfig -p | grep -qE 'libclang(-[0-9.]+)?\.so'; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openmpi-bin libopenmpi-dev libclang-dev > /dev/null
fi
# Open MPI refuses to start as root unless told (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo test --locked --features mpi --test mpi -- --nocapture
