#!/usr/bin/env bash
# The flake hunt: run the timing-sensitive suites ROUNDS times in a row
# (default 5) against the release build while two busy loops keep both CPUs
# loaded, and print a table of passes and failures per suite. Exit 0 only
# if every run of every suite passed.
#
#   tests/flake-hunt.sh [ROUNDS] [ctest regex]
#
# The suites (ctest names): the fault campaign on its CI seeds, cluster,
# integration_restart, leader_kill, integration_tables, integration_share,
# scale_bench, and the suites whose deadlines and waits are their subject:
# integration_promises, integration_trust_claims, trust_wire,
# etcd_adapter, test_wire, test_coord. The release build is made (or brought up to date) in
# $DETD_BUILD_DIR (default <repo>/build) first; integration_restart needs
# the primary Triton venv of tests/python/run_matrix.sh (made if missing).
# Each failing run's output is kept under $DETD_FLAKE_DIR (default
# /tmp/detd-flake-hunt) and named in the table.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${DETD_BUILD_DIR:-$REPO/build}
ROUNDS=${1:-5}
SUITES=${2:-'^(campaign|cluster|integration_restart|leader_kill|integration_tables|integration_share|scale_bench|integration_promises|integration_trust_claims|trust_wire|etcd_adapter|test_wire|test_coord)$'}
OUT=${DETD_FLAKE_DIR:-/tmp/detd-flake-hunt}
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "flake-hunt: ROUNDS must be a positive number, not '$ROUNDS'" >&2; exit 2; }

cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDETD_WERROR=ON >/dev/null
cmake --build "$BUILD" -j "${DETD_BUILD_JOBS:-2}" >/dev/null
venv=${DETD_VENV_ROOT:-${XDG_CACHE_HOME:-$HOME/.cache}/detd-venvs}/triton-${DETD_TRITON_PRIMARY:-3.6.0}
if [[ ! -x $venv/bin/python ]]; then
    DETD_BUILD_DIR=$BUILD DETD_TRITON_VERSIONS=${DETD_TRITON_PRIMARY:-3.6.0} \
        DETD_PYTHON_TESTS=tests/python/test_layers_py.py "$REPO/tests/python/run_matrix.sh" >/dev/null
fi
mkdir -p "$OUT"

# Two busy loops: both CPUs loaded for the whole hunt.
busy=()
for _ in 1 2; do
    (trap 'exit 0' TERM; while :; do :; done) &
    busy+=($!)
done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT

names=$(cd "$BUILD" && ctest -N -R "$SUITES" | sed -n 's/^ *Test *#[0-9]*: //p')
[[ -n $names ]] || { echo "flake-hunt: no ctest suite matches '$SUITES'" >&2; exit 2; }
declare -A PASS FAIL SECS WHERE
status=0
for r in $(seq 1 "$ROUNDS"); do
    for t in $names; do
        log="$OUT/round$r-$t.log"
        start=$(date +%s)
        if (cd "$BUILD" && ctest --output-on-failure -R "^$t\$") >"$log" 2>&1; then
            PASS[$t]=$((${PASS[$t]:-0} + 1))
            rm -f "$log"
            res=passed
        else
            FAIL[$t]=$((${FAIL[$t]:-0} + 1))
            WHERE[$t]="${WHERE[$t]:-}${WHERE[$t]:+ }$log"
            status=1
            res=FAILED
        fi
        s=$(($(date +%s) - start))
        SECS[$t]=$((${SECS[$t]:-0} + s))
        printf 'flake-hunt: round %d/%d %-28s %-6s %4ss\n' "$r" "$ROUNDS" "$t" "$res" "$s"
    done
done

echo
echo "== flake hunt: $ROUNDS rounds, both CPUs busy ($(nproc) CPUs, 2 busy loops)"
printf '%-28s %6s %6s %10s  %s\n' suite passed failed "mean wall" "failing runs' logs"
for t in $names; do
    printf '%-28s %6d %6d %9ss  %s\n' "$t" "${PASS[$t]:-0}" "${FAIL[$t]:-0}" \
        $((${SECS[$t]} / ROUNDS)) "${WHERE[$t]:-}"
done
if [[ $status -eq 0 ]]; then echo "flake hunt passed"; else echo "flake hunt FAILED"; fi
exit $status
