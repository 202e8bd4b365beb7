#!/usr/bin/env bash
# Run every test of detd: what CI runs (.ci/run calls exactly this).
#
#  1. install the build and test dependencies (idempotent);
#  2. check formatting;
#  3. build with warnings as errors; run the Python suite (real Triton in
#     its CPU interpreter, several Triton releases; it makes the venvs the
#     integration suites use for real Triton processes), then the unit tests
#     (ctest), the integration tests (real daemons, real etcd);
#  4. build again with AddressSanitizer + UndefinedBehaviorSanitizer and run
#     the C unit and integration suites once more against that build.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JOBS=${DETD_BUILD_JOBS:-2}

"$REPO/scripts/setup-deps.sh"

echo "== format check"
"$REPO/scripts/check-format.sh"

build() { # dir, extra cmake args...
    local dir=$1
    shift
    cmake -S "$REPO" -B "$dir" -DDETD_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

run_suites() { # build dir, label, ctest args...: unit tests and the integration suites
    local dir=$1 label=$2
    shift 2
    echo "== [$label] ctest: unit, daemon integration, etcd adapter, cluster"
    (cd "$dir" && ctest --output-on-failure "$@")
}

echo "== build (warnings as errors)"
build "$REPO/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo

# First: it also makes the per-release venvs with Triton and torch that the
# integration suites driving real Triton processes use (test_restart.py).
echo "== Python suite (real Triton, interpreter)"
DETD_BUILD_DIR="$REPO/build" "$REPO/tests/python/run_matrix.sh"

# The release run includes the fault campaign (50 short schedules, about
# 4 min); the sanitizer run leaves it out (-LE campaign): its deadlines are
# for an optimized daemon.
run_suites "$REPO/build" release

echo "== build (ASan + UBSan)"
build "$REPO/build-asan" -DCMAKE_BUILD_TYPE=Debug -DDETD_SANITIZE=ON
# Python client processes load the plain libdetd (DETD_CLIENT_BUILD_DIR): an
# ASan library cannot be loaded into an interpreter that was not started with
# the ASan runtime. libdetd itself runs under ASan in test_client/test_wire.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    DETD_CLIENT_BUILD_DIR="$REPO/build" run_suites "$REPO/build-asan" sanitizers -LE campaign

echo "== all suites passed"
