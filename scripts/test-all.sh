#!/usr/bin/env bash
# Run the tests of detd. The full suite is what CI runs (.ci/run calls
# exactly `scripts/test-all.sh`); tests/README.md lists the tiers, what each
# stage runs, where a new test goes and how long each stage takes.
#
#   scripts/test-all.sh           the full suite: every test, then the C
#                                 suites again under ASan + UBSan
#   scripts/test-all.sh --quick   the edit loop: format check, release build,
#                                 unit tests and the fast integration tests
#
# Full suite, in order:
#  1. install the build and test dependencies (idempotent);
#  2. check formatting;
#  3. build with warnings as errors;
#  4. the Python suite (real Triton in its CPU interpreter): every test on the
#     primary Triton release, the tests marked `triton_release` (those whose
#     outcome depends on how the hook meets Triton's API) on the other
#     releases too; it also makes the per-release venvs that the integration
#     suites driving real Triton processes use (test_restart.py);
#  5. ctest against the release build: unit tests, integration (real
#     daemons, real etcd), the fault campaign on its fixed seeds, install,
#     demo, deploy;
#  6. build again with AddressSanitizer + UndefinedBehaviorSanitizer and run
#     the ctest suites labelled `sanitize` (the ones that exercise C code:
#     unit, fuzz corpora, daemon and client integration) against that build.
# It ends with a table of its stages and their wall times, also on failure.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JOBS=${DETD_BUILD_JOBS:-2}

QUICK=0
case "${1:-}" in
"") ;;
--quick) QUICK=1 ;;
-h | --help)
    sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*)
    echo "test-all.sh: unknown argument '$1' (try --quick or --help)" >&2
    exit 2
    ;;
esac

STAGES=()
SECONDS_OF=()
RESULTS=()
CURRENT=""
CURRENT_START=0
SUITE_START=$(date +%s)

summary() {
    local rc=$?
    if [[ -n $CURRENT ]]; then
        STAGES+=("$CURRENT")
        SECONDS_OF+=($(($(date +%s) - CURRENT_START)))
        RESULTS+=("FAILED")
    fi
    echo
    echo "== stages ($([[ $QUICK -eq 1 ]] && echo quick || echo full))"
    printf '%-44s %8s  %s\n' "stage" "wall" "result"
    local i
    for i in "${!STAGES[@]}"; do
        printf '%-44s %7ss  %s\n' "${STAGES[$i]}" "${SECONDS_OF[$i]}" "${RESULTS[$i]}"
    done
    local total=$(($(date +%s) - SUITE_START))
    printf '%-44s %7ss  %s\n' "total" "$total" "$([[ $rc -eq 0 ]] && echo passed || echo "FAILED (exit $rc)")"
}
trap summary EXIT

stage() { # name, command...: run one stage, timed; a failure ends the run
    CURRENT=$1
    shift
    echo "== $CURRENT"
    CURRENT_START=$(date +%s)
    "$@"
    STAGES+=("$CURRENT")
    SECONDS_OF+=($(($(date +%s) - CURRENT_START)))
    RESULTS+=("ok")
    CURRENT=""
}

build() { # dir, extra cmake args...
    local dir=$1
    shift
    cmake -S "$REPO" -B "$dir" -DDETD_WERROR=ON "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

ctest_in() { # build dir, ctest args...
    local dir=$1
    shift
    (cd "$dir" && ctest --output-on-failure "$@")
}

stage "dependencies" "$REPO/scripts/setup-deps.sh"
stage "format check" "$REPO/scripts/check-format.sh"
stage "build (release, warnings as errors)" build "$REPO/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo

if [[ $QUICK -eq 1 ]]; then
    # The fast tier: C unit tests and the integration suites labelled quick
    # (each a few seconds; tests/README.md lists them), two at a time; the
    # Python tests that run in one process, on the primary Triton release
    # (its venv is made on the first run).
    stage "ctest -L quick (release)" ctest_in "$REPO/build" -L quick -j 2
    stage "Python in-process tests (primary Triton)" env DETD_BUILD_DIR="$REPO/build" \
        DETD_TRITON_VERSIONS="${DETD_TRITON_PRIMARY:-3.6.0}" \
        DETD_PYTHON_TESTS="tests/python/test_canon.py tests/python/test_hook_unit.py tests/python/test_layers_py.py tests/python/test_loop.py tests/python/test_daemon_start.py tests/python/test_provenance.py" \
        "$REPO/tests/python/run_matrix.sh"
    echo "== quick tier passed"
    exit 0
fi

stage "Python suite (Triton matrix)" env DETD_BUILD_DIR="$REPO/build" "$REPO/tests/python/run_matrix.sh"

# The release run includes the fault campaign (its fixed seeds); the
# sanitizer run leaves it out: its deadlines are for an optimized daemon.
# Three at a time on two cores: the long suites mostly wait (etcd
# elections, leases, restarts: the cores are about 85% idle under two of
# them), and the tests that time things run alone (RUN_SERIAL,
# tests/CMakeLists.txt) whatever the parallelism.
stage "ctest (release)" ctest_in "$REPO/build" -j "${DETD_CTEST_JOBS:-3}"

stage "build (ASan + UBSan)" build "$REPO/build-asan" -DCMAKE_BUILD_TYPE=Debug -DDETD_SANITIZE=ON
# Python client processes load the plain libdetd (DETD_CLIENT_BUILD_DIR): an
# ASan library cannot be loaded into an interpreter that was not started with
# the ASan runtime. libdetd itself runs under ASan in test_client/test_wire.
# Three at a time, as the release run: the longest suites (cluster,
# etcd_adapter, integration_lockfile) wait on etcd and daemons there too
# (the two cores about 40% idle under three), and the tests that run alone
# in the release run run alone here.
stage "ctest -L sanitize (ASan + UBSan)" env ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    LSAN_OPTIONS="suppressions=$REPO/tests/lsan.supp" \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 DETD_CLIENT_BUILD_DIR="$REPO/build" \
    bash -c 'cd "$1" && ctest --output-on-failure -L sanitize -j "$2"' _ "$REPO/build-asan" \
    "${DETD_SANITIZE_JOBS:-3}"

echo "== all suites passed"
