#!/usr/bin/env bash
# The problem and the fix, on the embedded default (one standalone detd with
# its SQLite store):
#   1. 8 client processes (libdetd) racing on 40 undecided keys, then a rerun
#      against the same store;
#   2. the control: an unmodified script with a real @triton.autotune kernel
#      whose candidates are near-tied (scripts/demo_train.py) in 4 processes
#      WITHOUT detd: each process's own autotuning picks its own winners, and
#      their output bits differ;
#   3. the same script in 4 processes under `python -m detd.run`, twice: one
#      timing pass per key, every process launches the same config, the same
#      bits; the rerun times nothing;
#   4. `detctl status` and `detctl verify --all-jobs` (every run of the demo).
# Triton's CPU interpreter here, the GPU where there is one. Sets up and
# builds first (idempotent; the Triton part gets its own venv under the build
# directory, or at $DETD_DEMO_VENV). Package, build and pip output goes to a
# log (its path is printed; its last lines on a failure), one line per stage.
# Exit 0 only if, under detd, every process used the same config for every
# key, the first runs timed each key exactly once, the reruns timed nothing,
# and every process computed the same bits. The control's disagreement is the
# problem being shown, not a failure.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${DETD_BUILD_DIR:-$REPO/build}
PROCS=${DETD_DEMO_PROCS:-8}
KEYS=${DETD_DEMO_KEYS:-40}
TPROCS=${DETD_DEMO_TRITON_PROCS:-4}
VENV=${DETD_DEMO_VENV:-$BUILD/demo-venv}

WORK=$(mktemp -d /tmp/detd-demo.XXXXXX)
LOG=$WORK/demo.log
SOCK=$WORK/detd.sock
DETCTL=("$BUILD/client/detctl" --socket "$SOCK")
DAEMON=
cleanup() { [[ -z $DAEMON ]] || { kill -TERM "$DAEMON" 2>/dev/null; wait "$DAEMON" 2>/dev/null || true; }; }
trap cleanup EXIT
echo "demo log: $LOG"

stage() { # what, command...: the command's output goes to the log
    local what=$1 t0=$SECONDS
    shift
    printf '%s ... ' "$what"
    if "$@" >>"$LOG" 2>&1; then
        echo "ok ($((SECONDS - t0)) s)"
    else
        echo "FAILED"
        echo "last lines of $LOG:"
        tail -n 30 "$LOG"
        exit 1
    fi
}

stage "Debian packages (scripts/setup-deps.sh)" "$REPO/scripts/setup-deps.sh"
stage "configure ($BUILD)" cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo
stage "build detd, detctl, the load generator" \
    cmake --build "$BUILD" -j "${DETD_BUILD_JOBS:-2}" --target detd_daemon detctl detd_loadgen

"$BUILD/daemon/detd" --socket "$SOCK" --state-dir "$WORK/state" >"$WORK/detd.log" 2>&1 &
DAEMON=$!
daemon_up() { # 100 tries 50 ms apart: 5 s for a daemon that opens an empty store
    for _ in $(seq 100); do "${DETCTL[@]}" health >/dev/null 2>&1 && return 0; sleep 0.05; done
    return 1
}
stage "start detd (socket $SOCK, store $WORK/state)" daemon_up

run() { # label
    local pids=()
    for r in $(seq 0 $((PROCS - 1))); do
        "$BUILD/tests/detd_loadgen" --socket "$SOCK" --keys "$KEYS" --kernel "demo.kernels:row_sum@5e1f" \
            --rank "$r" --candidates 6 --sleep-ms 20 --observe --report-json "$WORK/$1-$r.json" >>"$LOG" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    python3 - "$WORK" "$1" "$PROCS" <<'PY'
import json, sys, glob
work, label, procs = sys.argv[1], sys.argv[2], int(sys.argv[3])
res = [json.load(open(f)) for f in sorted(glob.glob(f"{work}/{label}-*.json"))]
keys = res[0]["keys"]
timed = sum(1 for r in res for k in r["keys"] if k.get("timed"))
configs = {}
for r in res:
    for k in r["keys"]:
        configs.setdefault(k["key"], set()).add(k["config"])
agree = all(len(v) == 1 for v in configs.values())
print(f"{label}: {procs} processes x {len(keys)} keys: {timed} timing passes, "
      f"{'every process used the same config for every key' if agree else 'DISAGREEMENT'}")
want = len(keys) if label == "first" else 0
if timed != want:
    print(f"{label}: expected {want} timing passes, saw {timed}")
sys.exit(0 if agree and timed == want else 1)
PY
}

echo "== $PROCS libdetd processes racing on $KEYS undecided keys"
run first
echo "== rerun against the same store"
run rerun

# ---- real Triton kernels: an unmodified script, without and with detd
venv_setup() {
    if [[ -x $VENV/bin/python ]] && "$VENV/bin/python" -c 'import torch, triton, detd' 2>/dev/null; then
        echo "$VENV is ready"
    else
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install "torch==${DETD_TORCH_VERSION:-2.13.0}" numpy "setuptools>=77" wheel
        "$VENV/bin/pip" install --no-deps "triton==${DETD_DEMO_TRITON:-3.6.0}"
    fi
    # The package from this tree, with the libdetd and detctl just built.
    DETD_LIBRARY=$BUILD/client/libdetd.so DETD_DETCTL=$BUILD/client/detctl DETD_NO_VENDOR=1 \
        "$VENV/bin/pip" install --no-deps --no-build-isolation --force-reinstall "$REPO/client/python"
}
stage "Python venv $VENV (torch ${DETD_TORCH_VERSION:-2.13.0} for the CPU, triton ${DETD_DEMO_TRITON:-3.6.0}, detd)" \
    venv_setup
if [[ -z ${TRITON_INTERPRET:-} ]] && ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    export TRITON_INTERPRET=1 # no GPU: Triton's CPU interpreter
fi

triton_run() { # label, then the launcher before the script (none: the control)
    local label=$1 pids=()
    shift
    for r in $(seq 0 $((TPROCS - 1))); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$TPROCS DETD_SOCKET=$SOCK DETD_RUN_REPORT="$WORK/$label-triton-$r.json" \
            "$VENV/bin/python" "$@" "$REPO/scripts/demo_train.py" >"$WORK/$label-triton-$r.out" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    if [[ $rc -ne 0 ]]; then
        echo "$label (triton): a process failed:"
        tail -n 20 "$WORK"/"$label"-triton-*.out
        return 1
    fi
    if [[ $label == control ]]; then
        python3 "$REPO/scripts/demo_report.py" --control "$WORK" "$label" "$TPROCS"
    else
        "${DETCTL[@]}" decisions --json >"$WORK/$label-decisions.json"
        python3 "$REPO/scripts/demo_report.py" "$WORK" "$label" "$TPROCS"
    fi
}

echo "== the problem: an unmodified script with a real @triton.autotune kernel, $TPROCS processes, WITHOUT detd"
triton_run control
echo "== the fix: the same script, $TPROCS processes under python -m detd.run"
triton_run triton-first -m detd.run
echo "== the same script again under detd"
triton_run triton-rerun -m detd.run

echo "== detctl status (in full in the log)"
"${DETCTL[@]}" status >"$WORK/status.txt"
cat "$WORK/status.txt" >>"$LOG"
awk '/^detd |^  (backend|store|decisions) / || /^  (timing_passes|waits|observes) / { print }' "$WORK/status.txt"
echo "== detctl verify"
"${DETCTL[@]}" verify --all-jobs
echo "demo state and logs: $WORK"
