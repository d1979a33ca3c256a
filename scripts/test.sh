#!/usr/bin/env bash
# The README's test command: every test, in one build.
#
#   1. Installs what the tests use when it is missing: from Debian's packages strace (two tests
#      kill a run at a chosen write), Open MPI and libclang (the `mpi` feature's bindings;
#      tests/suite/mpi.rs trains with `mpirun -np 2` against one process), Xvfb and Mesa's
#      software Vulkan driver (the window's tests draw off-screen); cargo-nextest from crates.io
#      when the toolchain lacks it; maturin, numpy, gymnasium, pettingzoo and pytest from PyPI.
#   2. Builds once with every feature the tests need (`gui,mpi`): the unit tests, the one
#      integration binary (tests/suite/) and the CLI it drives.
#   3. Runs every Rust test with cargo-nextest (one process per test, both cores busy, the
#      longest first: .config/nextest.toml) under a virtual display, then the doctests (which
#      nextest does not run; one merged binary, a minute and a half to compile).
#   4. Builds the Python wheel from the same library (same profile and features, so cargo
#      compiles only the bindings) and runs the Python tests against the CLI of step 2.
#
# Prints each step's time at the end. Run from anywhere; needs apt (root or sudo) on a machine
# that lacks the packages, and python3 with pip. Fails with a message naming what could not be
# had, never waits on a package index for more than a few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

FEATURES=gui,mpi
STEPS=()
step_name=""
step_start=0
# Ends the step under way (recording its time) and starts the next one.
step() {
    local now=$SECONDS
    if [ -n "$step_name" ]; then
        STEPS+=("$(printf '%-50s %5d s  (%d min %02d s)' "$step_name" $((now - step_start)) $(((now - step_start) / 60)) $(((now - step_start) % 60)))")
    fi
    step_name="${1:-}"
    step_start=$now
    if [ -n "$step_name" ]; then echo "== test.sh: $step_name"; fi
}
report() {
    local rc=$?
    step ""
    echo "== test.sh: time per step"
    printf '   %s\n' "${STEPS[@]}"
    echo "   total $SECONDS s ($((SECONDS / 60)) min $((SECONDS % 60)) s)$([ $rc -ne 0 ] && echo ", FAILED with status $rc")"
}
trap report EXIT
fail() {
    echo "error: $*" >&2
    exit 1
}

step "packages (Debian, crates.io, PyPI) when missing"
missing=()
have_deb() { dpkg-query -W -f='${Status}' "$1" 2> /dev/null | grep -q "install ok installed"; }
command -v strace > /dev/null || missing+=(strace)
command -v mpirun > /dev/null || missing+=(openmpi-bin)
command -v mpicc > /dev/null || missing+=(libopenmpi-dev)
ldconfig -p | grep -qE 'libclang(-[0-9.]+)?\.so' || missing+=(libclang-dev)
command -v xvfb-run > /dev/null || missing+=(xvfb)
# The window's run-time libraries: X11 (loaded by winit) and a Vulkan driver (lavapipe).
for p in mesa-vulkan-drivers libvulkan1 libx11-xcb1 libxcursor1 libxi6 libxrandr2 libxkbcommon-x11-0; do
    have_deb "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    command -v apt-get > /dev/null ||
        fail "the tests need ${missing[*]} (Debian package names) and this machine has no apt-get: install them, then rerun"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
    echo "installing ${missing[*]}"
    timeout 600 $SUDO apt-get update -qq ||
        fail "apt-get update failed or took over 10 minutes: the package index cannot be reached"
    DEBIAN_FRONTEND=noninteractive timeout 900 $SUDO apt-get install -y -qq "${missing[@]}" > /dev/null ||
        fail "could not install ${missing[*]} from Debian's packages (apt-get install failed or took over 15 minutes)"
fi
if ! cargo nextest --version > /dev/null 2>&1; then
    echo "installing cargo-nextest from crates.io (builds it: a few minutes)"
    timeout 1200 cargo install --locked cargo-nextest ||
        fail "could not install cargo-nextest (cargo install --locked cargo-nextest)"
fi
timeout 600 python3 -m pip install --quiet --disable-pip-version-check --timeout 60 --retries 2 \
    maturin numpy gymnasium pettingzoo pytest ||
    fail "could not install the Python tests' packages from PyPI (maturin numpy gymnasium pettingzoo pytest)"
# Open MPI refuses to start as root unless told (CI and containers run as root).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

step "build: every test, features $FEATURES"
cargo nextest run --locked --features "$FEATURES" --no-run

step "Rust tests (nextest, virtual display)"
xvfb-run -a -s "-screen 0 1920x1080x24" cargo nextest run --locked --features "$FEATURES"

step "doctests (the family author's API: envs::family)"
# nextest does not run doctests; they compile as one merged binary (edition 2024).
cargo test --doc --locked --features "$FEATURES"

step "Python: wheel from the same build, pytest"
EMERGENCE_BIN="$PWD/target/debug/emergence" EMERGENCE_FEATURES="$FEATURES" SKIP_PIP=1 scripts/test-python.sh
