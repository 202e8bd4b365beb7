#!/usr/bin/env bash
# Line coverage of detd under its test suite: the C code of daemon/, common/
# and client/src/ (gcov counters, reported by gcovr) and the Python package
# client/python/detd (coverage.py, in every Python process the tests start,
# Triton worker processes included).
#
#   scripts/coverage.sh [--ctest-args ARGS] [--pytest-args ARGS]
#                       [--triton VERSIONS] [--no-ctest] [--no-python]
#                       [--keep-counters]
#
#   --ctest-args ARGS    extra ctest arguments, one shell-quoted string, e.g.
#                        "-R 'test_engine|integration_daemon'" (default: all)
#   --pytest-args ARGS   extra pytest arguments for tests/python/run_matrix.sh
#                        (default: none, every test). It always passes
#                        tests/python, so choose with -k/-m/--deselect, not
#                        file names: "-x -k 'test_canon or test_e2e'"
#   --triton VERSIONS    Triton releases for the Python suite, e.g. "3.6.0"
#                        (default: run_matrix.sh's own default)
#   --no-ctest, --no-python   leave a stage out (said again in the summary)
#   --keep-counters      add to the counters of the previous run instead of
#                        starting from zero (to measure what more tests add)
# The same through the environment: DETD_COV_CTEST_ARGS, DETD_COV_PYTEST_ARGS,
# DETD_TRITON_VERSIONS. DETD_VENV_ROOT, DETD_MATRIX etc. pass through to
# run_matrix.sh and to the integration suites as in scripts/test-all.sh.
#
# What it does:
#  1. installs gcovr (apt) and coverage>=7.10 (pip) where missing;
#  2. builds into build-cov/ with -DDETD_COVERAGE=ON (--coverage -O0 -g,
#     atomic counters) and warnings as errors. Build type RelWithDebInfo,
#     not Debug: the `demo` ctest runs scripts/demo.sh, which reconfigures
#     $DETD_BUILD_DIR as RelWithDebInfo; any other type would rebuild
#     build-cov/ in the middle of the run and orphan the counters gathered
#     so far. (-O0 still wins; the one difference from Debug is NDEBUG:
#     assert() lines are not code.)
#  3. resets the counters (*.gcda, coverage.py data files);
#  4. runs the Python suite (tests/python/run_matrix.sh, DETD_BUILD_DIR=
#     build-cov), then ctest in build-cov/ (unit tests, integration suites),
#     in the order of scripts/test-all.sh. A failing suite does not stop the
#     run: the report is made anyway and the script exits non-zero.
#  5. prints a table of lines hit per folder and where the reports are.
#
# Python processes measure themselves: coverage>=7.10 ships a .pth file that
# starts measuring at interpreter start when COVERAGE_PROCESS_START is set;
# this script installs coverage into every venv under $DETD_VENV_ROOT and
# into the python3 on PATH (ctest's integration suites) and exports it
# (settings: tests/coverage/.coveragerc).
#
# The C figures count every file of those folders that was compiled, the
# never-executed ones too (gcovr reads .gcno files without .gcda). Generated
# protobuf code (build tree) and tests/ are not counted. Not counted either:
# what a process executed before it was killed by a signal it does not
# handle (SIGKILL in the fault campaign, a kill -9 of a daemon): gcov writes
# its counters at exit. The daemon exits normally on SIGTERM/SIGINT.
#
# Whole suite under this script: not yet measured (the plain suite takes
# tens of minutes; -O0 and the tracers add to that).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
JOBS=${DETD_BUILD_JOBS:-2}
BUILD=$REPO/build-cov
OUT=$BUILD/coverage
RCFILE=$REPO/tests/coverage/.coveragerc
VENVS=${DETD_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detd-venvs}
# run_matrix.sh's default when unset.
TRITONS=${DETD_TRITON_VERSIONS:-}
CTEST_ARGS=${DETD_COV_CTEST_ARGS:-}
PYTEST_ARGS=${DETD_COV_PYTEST_ARGS:-}
RUN_CTEST=1
RUN_PYTHON=1
KEEP=0

log() { printf 'coverage: %s\n' "$*" >&2; }
usage() { sed -n '7,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case $1 in
    --ctest-args | --pytest-args | --triton)
        [[ $# -ge 2 ]] || { log "$1 needs a value"; exit 2; } ;;&
    --ctest-args) CTEST_ARGS=$2; shift 2 ;;
    --pytest-args) PYTEST_ARGS=$2; shift 2 ;;
    --triton) TRITONS=$2; shift 2 ;;
    --no-ctest) RUN_CTEST=0; shift ;;
    --no-python) RUN_PYTHON=0; shift ;;
    --keep-counters) KEEP=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) log "unknown argument '$1'"; usage >&2; exit 2 ;;
    esac
done

# Split a shell-quoted string into words (quotes honoured, nothing expanded).
split_words() { # string -> one word per line
    python3 -c 'import shlex, sys; print("\n".join(shlex.split(sys.argv[1])), end="")' "$1"
}
ctest_args=()
pytest_args=()
[[ -n $CTEST_ARGS ]] && mapfile -t ctest_args < <(split_words "$CTEST_ARGS")
[[ -n $PYTEST_ARGS ]] && mapfile -t pytest_args < <(split_words "$PYTEST_ARGS")

# --- 1. tools -----------------------------------------------------------
if ! command -v gcovr >/dev/null; then
    log "installing gcovr (apt)"
    SUDO=""
    [[ $(id -u) -eq 0 ]] || SUDO=sudo
    if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gcovr; then
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gcovr
    fi
fi

# coverage>=7.10: its wheel installs the .pth file that measures subprocesses.
ensure_coverage() { # python interpreter
    if ! "$1" -c 'import sys, coverage; sys.exit(coverage.version_info < (7, 10))' 2>/dev/null; then
        log "installing coverage>=7.10 for $1"
        "$1" -m pip install -q "coverage>=7.10"
    fi
}
ensure_coverage python3

# --- 2. build -----------------------------------------------------------
log "building $BUILD (DETD_COVERAGE=ON)"
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDETD_COVERAGE=ON \
    -DDETD_WERROR=ON >/dev/null
cmake --build "$BUILD" -j "$JOBS"

# --- 3. reset counters ----------------------------------------------------
if [[ $KEEP -eq 0 ]]; then
    find "$BUILD" -name '*.gcda' -delete
    rm -rf "$OUT"
fi
mkdir -p "$OUT/python-data"
export COVERAGE_PROCESS_START=$RCFILE COVERAGE_DETD_DATA=$OUT/python-data
export DETD_VENV_ROOT=$VENVS

# --- 4. suites --------------------------------------------------------------
py_rc=skipped
ctest_rc=skipped
versions=""

if [[ $RUN_PYTHON -eq 1 ]]; then
    # run_matrix.sh makes the venvs ($VENVS/triton-<version>) on first use;
    # make them first, the same way, so that coverage is there before pytest.
    versions=${TRITONS:-$(sed -n 's/^VERSIONS=\${DETD_TRITON_VERSIONS:-"\(.*\)"}$/\1/p' \
        "$REPO/tests/python/run_matrix.sh")}
    if [[ -z $versions ]]; then
        log "cannot read the default Triton releases from tests/python/run_matrix.sh; pass --triton"
        exit 2
    fi
    mkdir -p "$VENVS"
    for v in $versions; do
        if [[ ! -x $VENVS/triton-$v/bin/python ]]; then
            log "creating $VENVS/triton-$v"
            "${PYTHON:-python3}" -m venv "$VENVS/triton-$v"
        fi
        ensure_coverage "$VENVS/triton-$v/bin/python"
    done
    log "Python suite: Triton $versions"
    py_rc=0
    DETD_BUILD_DIR=$BUILD DETD_TRITON_VERSIONS=$versions \
        "$REPO/tests/python/run_matrix.sh" "${pytest_args[@]}" || py_rc=$?
fi

if [[ $RUN_CTEST -eq 1 ]]; then
    # Integration suites that drive real Triton processes take any venv
    # under $VENVS (test_restart.py): all of them measure.
    for py in "$VENVS"/triton-*/bin/python ${DETD_TRITON_PYTHON:+"$DETD_TRITON_PYTHON"}; do
        if [[ -x $py ]]; then ensure_coverage "$py"; fi
    done
    log "ctest ${ctest_args[*]}"
    ctest_rc=0
    # Two at a time, as scripts/test-all.sh runs them (RUN_SERIAL ones alone).
    (cd "$BUILD" && ctest --output-on-failure -j 2 "${ctest_args[@]}") || ctest_rc=$?
fi

# --- 5. reports ---------------------------------------------------------
log "C report (gcovr)"
mkdir -p "$OUT/c-html"
# --gcov-ignore-parse-errors: gcovr 5.2 stops at a negative branch count
# (counters raced before -fprofile-update=atomic); line counts are not
# affected, and the whole run should not be lost to one such line.
gcovr --root "$REPO" --object-directory "$BUILD" -j "$JOBS" --gcov-ignore-parse-errors \
    --filter "$REPO/daemon/" --filter "$REPO/common/" --filter "$REPO/client/src/" \
    --exclude '.*\.pb-c\.[ch]$' --exclude "$REPO/tests/" \
    --json-summary "$OUT/c-summary.json" --html-details "$OUT/c-html/index.html" \
    --txt "$OUT/c.txt" "$BUILD"

log "Python report (coverage.py)"
py_json=""
if ! compgen -G "$OUT/python-data/.coverage.*" >/dev/null; then
    log "no Python coverage data was written (no Python process ran)"
else
    # --keep-counters: add this run's files to the data combined before.
    combine_args=()
    [[ $KEEP -eq 1 ]] && combine_args=(--append)
    python3 -m coverage combine --rcfile="$RCFILE" -q "${combine_args[@]}"
    # Fails with "No data to report" when no process imported detd.
    if python3 -m coverage report --rcfile="$RCFILE" >"$OUT/python.txt" 2>&1; then
        python3 -m coverage html --rcfile="$RCFILE" -q -d "$OUT/python-html"
        python3 -m coverage json --rcfile="$RCFILE" -q -o "$OUT/python.json"
        py_json=$OUT/python.json
    else
        log "coverage report: $(cat "$OUT/python.txt")"
    fi
fi

python3 - "$OUT/c-summary.json" "$py_json" <<'EOF'
import json, sys

c = json.load(open(sys.argv[1]))
groups = {"daemon/": [0, 0, 0], "common/": [0, 0, 0], "client/src/": [0, 0, 0]}
for f in c["files"]:
    for g, acc in groups.items():
        if f["filename"].startswith(g):
            acc[0] += f["line_covered"]
            acc[1] += f["line_total"]
            acc[2] += 1

def row(name, hit, total, files=None):
    pct = f"{100.0 * hit / total:5.1f}" if total else "  n/a"
    extra = f"   ({files} files)" if files is not None else ""
    print(f"{name:<20} {hit:>7} / {total:<7} {pct}%{extra}")

print()
print(f"{'coverage':<20} {'lines hit / total':>17} {'%':>6}")
for g, (hit, total, n) in groups.items():
    row(g, hit, total, n)
row("C total", sum(a[0] for a in groups.values()), sum(a[1] for a in groups.values()))
if sys.argv[2]:
    t = json.load(open(sys.argv[2]))
    row("client/python/detd", t["totals"]["covered_lines"], t["totals"]["num_statements"],
        len(t["files"]))
else:
    print(f"{'client/python/detd':<20} no data (no measured process imported detd)")
EOF

echo
echo "reports:"
echo "  C       $OUT/c-html/index.html  (per file: $OUT/c.txt)"
if [[ -n $py_json ]]; then
    echo "  Python  $OUT/python-html/index.html  (per file: $OUT/python.txt)"
fi
describe() { # rc or "skipped", flag name
    case $1 in
    skipped) echo "not run ($2)" ;;
    0) echo "passed" ;;
    *) echo "FAILED (exit $1): the figures are those of a failing run" ;;
    esac
}
echo "suites:"
echo "  Python suite (run_matrix.sh${versions:+, Triton $versions}${PYTEST_ARGS:+, pytest $PYTEST_ARGS}):" \
    "$(describe "$py_rc" --no-python)"
echo "  ctest (${CTEST_ARGS:-all tests}): $(describe "$ctest_rc" --no-ctest)"
[[ $py_rc == 0 || $py_rc == skipped ]] && [[ $ctest_rc == 0 || $ctest_rc == skipped ]]
