#!/usr/bin/env bash
# Run the Python suite (tests/python) against several Triton releases, each
# in its own virtual environment with torch (CPU build), using real Triton
# in its CPU interpreter and the real detd daemon built from this tree.
#
#   tests/python/run_matrix.sh [pytest args...]
#
# Every test runs on the primary release; on the other releases only the
# tests marked `triton_release` run (those whose outcome depends on how the
# hook meets Triton's Autotuner, Config and benchmark API, which changed
# between releases: tests/README.md says which and why). DETD_MATRIX=full
# runs every test on every release. Pytest arguments apply to every release.
#
# Idempotent: venvs are created once and refreshed (pip install of pinned
# versions is a no-op when they are present); the package is reinstalled
# from client/python every run, bundling the libdetd just built.
#
# Environment:
#   DETD_TRITON_VERSIONS  default "3.3.1 3.6.0 3.9.0" (oldest, 3.6, newest)
#   DETD_TRITON_PRIMARY   default 3.6.0 (the GPU machines' release): the
#                         release that runs every test
#   DETD_MATRIX           "release" (default: the other releases run the
#                         triton_release tests) or "full" (every test on each)
#   DETD_TORCH_VERSION    default 2.13.0 (pip must resolve it to a CPU build:
#                         a local CPU wheel through pip's find-links)
#   DETD_VENV_ROOT        default ${XDG_CACHE_HOME:-$HOME/.cache}/detd-venvs
#   DETD_BUILD_DIR        default <repo>/build (built here if binaries are missing)
#   DETD_PYTHON_TESTS     what pytest collects, default "tests/python" (the
#                         quick tier names the in-process test files)
#   DETD_MATRIX_JOBS      pytest runs at once, default 2 (the suites are
#                         separate processes with their own daemons,
#                         sockets and temporary folders; each run's output
#                         is printed whole when it ends)
#   DETD_PRIMARY_SHARDS   pytest runs the primary release's tests are split
#                         into, default 2 (whole modules, balanced by the
#                         weights in tests/python/conftest.py; DETD_SHARD):
#                         the primary's run is the longest, and alone it
#                         would end long after the other releases'
#   PYTHON                interpreter for the venvs, default python3
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${DETD_BUILD_DIR:-$REPO/build}
VENVS=${DETD_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detd-venvs}
VERSIONS=${DETD_TRITON_VERSIONS:-"3.3.1 3.6.0 3.9.0"}
TORCH=${DETD_TORCH_VERSION:-2.13.0}
PRIMARY=${DETD_TRITON_PRIMARY:-3.6.0}
MATRIX=${DETD_MATRIX:-release}
PY=${PYTHON:-python3}
case $MATRIX in release | full) ;; *)
    echo "run_matrix: DETD_MATRIX must be 'release' or 'full', not '$MATRIX'" >&2
    exit 2
    ;;
esac
JOBS=${DETD_BUILD_JOBS:-2}
MJOBS=${DETD_MATRIX_JOBS:-2}
[[ $MJOBS =~ ^[1-9][0-9]*$ ]] || {
    echo "run_matrix: DETD_MATRIX_JOBS must be a positive integer, not '$MJOBS'" >&2
    exit 2
}
SHARDS=${DETD_PRIMARY_SHARDS:-2}
[[ $SHARDS =~ ^[1-9][0-9]*$ ]] || {
    echo "run_matrix: DETD_PRIMARY_SHARDS must be a positive integer, not '$SHARDS'" >&2
    exit 2
}

log() { printf 'run_matrix: %s\n' "$*" >&2; }

if [[ ! -x $BUILD/daemon/detd || ! -e $BUILD/client/libdetd.so || ! -x $BUILD/client/detctl ]]; then
    log "building detd, libdetd and detctl into $BUILD"
    cmake -S "$REPO" -B "$BUILD" >/dev/null
    cmake --build "$BUILD" -j "$JOBS" --target detd detd_daemon detctl
fi

mkdir -p "$VENVS"
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/detd-matrix.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT
declare -A RESULT PID WHAT
JOBIDS=() # one per pytest run: a release, or a release's shard "3.6.0 shard 1/2"
status=0
running=0
empty=0 # the primary's shards that collected no test
finish_one() { # wait for any pytest run to end, then print its output whole
    local pid="" rc=0 v
    wait -n -p pid "${PID[@]}" || rc=$?
    for v in "${!PID[@]}"; do
        if [[ ${PID[$v]} == "$pid" ]]; then
            log "triton $v: ${WHAT[$v]}"
            cat "$LOGS/triton-${v//[ \/]/_}.log"
            if [[ $rc -eq 5 && $v == *" shard "* ]]; then
                # pytest's "no tests collected": a shard given no module
                # (few files, or -k); an error only if every shard was.
                log "triton $v: no test in this shard"
                rc=0
                empty=$((empty + 1))
            fi
            RESULT[$v]=$rc
            if [[ $rc -ne 0 ]]; then status=1; fi
            unset "PID[$v]"
            running=$((running - 1))
            return
        fi
    done
    log "internal error: wait returned pid '$pid' of no release"
    exit 2
}
# The primary release (every test, the longest run) starts first; the others
# run beside it, DETD_MATRIX_JOBS at a time.
ORDER=$PRIMARY
for v in $VERSIONS; do [[ $v == "$PRIMARY" ]] || ORDER="$ORDER $v"; done
[[ " $VERSIONS " == *" $PRIMARY "* ]] || ORDER=$VERSIONS
for v in $ORDER; do
    venv=$VENVS/triton-$v
    if [[ ! -x $venv/bin/python ]]; then
        log "creating $venv"
        "$PY" -m venv "$venv"
    fi
    log "triton $v: installing torch==$TORCH, triton==$v, pytest, numpy"
    # torch first and pinned: an unpinned torch would pull a CUDA build.
    "$venv/bin/python" -m pip install -q "torch==$TORCH" "setuptools>=61" pytest numpy
    "$venv/bin/python" -m pip install -q --no-deps "triton==$v"
    if [[ $v == "$PRIMARY" ]]; then
        # Helion for tests/python/test_helion.py: its wheel without
        # scikit-learn (only some of its searches import it, lazily).
        "$venv/bin/python" -m pip install -q --no-deps "helion==1.5.1"
        "$venv/bin/python" -m pip install -q filecheck rich psutil typing-extensions
    fi
    if ! "$venv/bin/python" -c 'import sys, torch; sys.exit(0 if torch.version.cuda is None else 1)'; then
        log "warning: torch in $venv is a CUDA build; tests use the CPU only"
    fi
    # The package as users get it: pip install from the repository, with the
    # freshly built libdetd and detctl bundled into detd/_lib/.
    # (DETD_NO_VENDOR: the build tree's libraries use the system's gRPC here;
    # the self-contained wheel is tested by tests/install/test_install.py.)
    DETD_LIBRARY=$BUILD/client/libdetd.so DETD_DETCTL=$BUILD/client/detctl DETD_NO_VENDOR=1 \
        "$venv/bin/python" -m pip install -q --no-deps --no-build-isolation --force-reinstall "$REPO/client/python"
    # The installed package finds its bundled library on its own.
    (cd / && env -u DETD_LIBRARY -u DETD_BUILD_DIR "$venv/bin/python" -c '
import os, sys, detd._native as n
p = n.library_path()
assert p and os.path.dirname(p).endswith(os.path.join("detd", "_lib")), p
print("run_matrix: bundled libdetd", n.version(), file=sys.stderr)')
    select=()
    what="every test"
    if [[ $MATRIX == release && $v != "$PRIMARY" && " $VERSIONS " == *" $PRIMARY "* ]]; then
        select=(-m triton_release)
        what="the triton_release tests"
    fi
    n=1
    [[ $v == "$PRIMARY" ]] && n=$SHARDS
    for s in $(seq 1 "$n"); do
        id=$v
        shard=""
        if [[ $n -gt 1 ]]; then
            id="$v shard $s/$n"
            shard="$s/$n"
        fi
        log "triton $id: running $what (output follows when it ends)"
        WHAT[$id]=$what
        JOBIDS+=("$id")
        (cd "$REPO" && DETD_TEST_INSTALLED=1 DETD_BUILD_DIR=$BUILD TRITON_INTERPRET=1 DETD_SHARD=$shard \
            exec "$venv/bin/python" -m pytest -p no:cacheprovider -q "${select[@]}" ${DETD_PYTHON_TESTS:-tests/python} "$@") \
            >"$LOGS/triton-${id//[ \/]/_}.log" 2>&1 &
        PID[$id]=$!
        running=$((running + 1))
        if [[ $running -ge $MJOBS ]]; then finish_one; fi
    done
done
while [[ $running -gt 0 ]]; do finish_one; done
if [[ $SHARDS -gt 1 && $empty -eq $SHARDS ]]; then
    log "triton $PRIMARY: no test collected in any shard"
    status=1
fi

for v in "${JOBIDS[@]}"; do
    if [[ ${RESULT[$v]} -eq 0 ]]; then log "triton $v: passed"; else log "triton $v: FAILED (pytest exit ${RESULT[$v]})"; fi
done
exit $status
