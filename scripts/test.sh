#!/usr/bin/env bash
# The README's test command. Installs what the tests use from Debian's packages when it is
# missing (strace: two tests kill a run at a chosen write; Open MPI and libclang: the `mpi`
# feature's bindings), runs every Rust test in one build with the `mpi` feature (the feature
# only adds the MPI transport: without a launcher the binary is the default one, and
# tests/mpi.rs trains with `mpirun -np 2` against one process), then the Python bindings'
# tests against the CLI that build made. Run from anywhere; needs apt (root or sudo) on a
# machine that lacks the packages, and python3 with pip.
#
# Without Open MPI: `cargo test && scripts/test-python.sh` runs everything but tests/mpi.rs.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v strace > /dev/null || missing+=(strace)
command -v mpirun > /dev/null || missing+=(openmpi-bin)
command -v mpicc > /dev/null || missing+=(libopenmpi-dev)
ldconfig -p | grep -qE 'libclang(-[0-9.]+)?\.so' || missing+=(libclang-dev)
if [ ${#missing[@]} -gt 0 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null
fi
# Open MPI refuses to start as root unless told (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo test --locked --features mpi
EMERGENCE_BIN="$PWD/target/debug/emergence" scripts/test-python.sh
