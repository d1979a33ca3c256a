#!/usr/bin/env bash
# A CUDA 13.0 "toolkit" from PyPI's NVIDIA wheels, enough to build `--features cuda` on a
# machine with no GPU and no CUDA install (nvcc compiles candle's kernels to PTX; the binary
# links cuBLAS, cuRAND, NVRTC and the runtime by name, and the driver's libcuda.so.1 through a
# link-time stub). Then, from the repository root:
#
#   source scripts/cuda-from-pypi.sh        # installs once under $CUDAPIP, exports the build's env
#   cargo build --profile bench --features cuda --bin emergence
#   cargo bench --features cuda --no-run --bench inference --bench update
#
# The programs run on a machine with an NVIDIA driver for CUDA 13 (580 or newer) and the same
# libraries (PyTorch's nvidia-* wheels have them); `PREBUILT=DIR scripts/gpu-check.sh` runs the
# GPU check there from them. nvcc stays at 13.0: a newer one writes PTX the 580 driver refuses.
# Settings: CUDAPIP (default /opt/cudapip), CUDA_ROOT_DIR (default /opt/cuda-root),
# CUDA_COMPUTE_CAP (default 90: H100/H200).
P=${CUDAPIP:-/opt/cudapip}
R=${CUDA_ROOT_DIR:-/opt/cuda-root}
# The installation in a subshell, so that sourcing this file leaves the shell's options alone.
(
set -euo pipefail
C=$P/nvidia/cu13
CUDARC=$(ls -d ~/.cargo/registry/src/*/cudarc-0.19.10 | head -1)
# One pip call: a second `pip install --target` with --upgrade replaces the whole nvidia/.
[ -x "$C/bin/nvcc" ] || python3 -m pip install -q --no-deps --target "$P" \
    nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 nvidia-cuda-nvrtc==13.0.88 \
    nvidia-curand==10.4.0.35 nvidia-cublas==13.0.2.14
if [ ! -x "$R/bin/nvcc" ]; then
    rm -rf "$R"
    mkdir -p "$R/lib64/stubs"
    ln -s "$C/bin" "$R/bin"
    ln -s "$C/include" "$R/include"
    ln -s "$C/nvvm" "$R/nvvm"
    for l in cudart.so.13 cublas.so.13 cublasLt.so.13 curand.so.10 nvrtc.so.13; do
        ln -s "$C/lib/lib$l" "$R/lib64/lib$l"
        ln -s "$C/lib/lib$l" "$R/lib64/lib${l%.so.*}.so"
    done
    # The driver at link time only: every cu* function cudarc declares, returning an error.
    grep -oE '^pub unsafe fn cu[A-Za-z0-9_]+' "$CUDARC/src/driver/sys/mod.rs" | awk '{print $4}' \
        | sort -u | awk '{print "int "$1"(void){return 999;}"}' > "$R/lib64/stubs/cuda_stub.c"
    gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$R/lib64/stubs/libcuda.so" "$R/lib64/stubs/cuda_stub.c"
    ln -s libcuda.so "$R/lib64/stubs/libcuda.so.1"
fi
) || return 1 2> /dev/null || exit 1
export PATH="$R/bin:$PATH" CUDA_ROOT="$R" CUDA_HOME="$R"
export CUDA_COMPUTE_CAP=${CUDA_COMPUTE_CAP:-90} CUDARC_CUDA_VERSION=13000
export LIBRARY_PATH="$R/lib64:$R/lib64/stubs${LIBRARY_PATH:+:$LIBRARY_PATH}"
"$R/bin/nvcc" --version | grep release
