#!/bin/sh
# nvcc builds examples/native/ (the C program, and the CUDA objects the
# PyTorch extension links) against this build's libdetd. Nothing runs: the
# GPU run is tests/gpu/native_run.sh.
#   nvcc_example.sh REPO BUILD_DIR
# Exit 77 (skipped) without nvcc, unless CI is set: then it fails.
set -eu
REPO=$1
BUILD=$2
NVCC=${NVCC:-$(command -v nvcc || true)}
if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
    NVCC=/usr/local/cuda/bin/nvcc
fi
if [ -z "$NVCC" ]; then
    if [ -n "${CI:-}" ]; then
        echo "nvcc not found (CI is set: a missing requirement is a failure)" >&2
        exit 1
    fi
    echo "nvcc not found: skipped" >&2
    exit 77
fi
OUT=$(mktemp -d /tmp/detd-nvcc-XXXXXX)
trap 'rm -rf "$OUT"' EXIT
make -s -C "$REPO/examples/native" NVCC="$NVCC" O="$OUT" \
    DETD_INCLUDE="$REPO/client/include" DETD_LIB="$BUILD/client" all
# What was built: the program, linked against libdetd (no libcuda: CUDA's
# runtime is linked by nvcc, libdetd loads the driver itself at run time),
# with device code for the H200 (sm_90).
test -x "$OUT/autotune_rowsum"
readelf -d "$OUT/autotune_rowsum" | grep -q 'NEEDED.*libdetd.so.0'
if readelf -d "$BUILD/client/libdetd.so" | grep -q 'NEEDED.*libcud'; then
    echo "libdetd links CUDA at link time" >&2
    exit 1
fi
readelf -S "$OUT/autotune_rowsum" | grep -q '\.nv_fatbin' ||
    { echo "no device code in autotune_rowsum" >&2; exit 1; }
CUOBJDUMP=$(dirname "$(readlink -f "$NVCC")")/cuobjdump
if [ -x "$CUOBJDUMP" ]; then
    "$CUOBJDUMP" --list-elf "$OUT/autotune_rowsum" | grep -q sm_90 ||
        { echo "no sm_90 code in autotune_rowsum" >&2; exit 1; }
fi
# The guard in the kernel id is the kernel source's hash.
GUARD=$(sha256sum "$REPO/examples/native/rowsum_kernels.cu" | cut -c1-12)
strings "$OUT/autotune_rowsum" | grep -q "$GUARD" ||
    { echo "kernel guard $GUARD not compiled in" >&2; exit 1; }
echo "nvcc $("$NVCC" --version | tail -1): built $OUT/autotune_rowsum"
