#!/usr/bin/env bash
# The main job on the embedded default: one standalone detd with its SQLite
# store, 8 client processes (libdetd) racing on 40 undecided keys, then a
# rerun against the same store; then an unmodified script with real
# @triton.autotune kernels (scripts/demo_train.py) in 4 processes under
# `python -m detd.run` (Triton's CPU interpreter; the GPU where there is
# one), twice; then `detctl status` and `detctl verify`.
# Sets up and builds first (idempotent; the Triton part gets its own venv
# under the build directory, or at $DETD_DEMO_VENV). Exit 0 only if every process used the same
# config for every key, the first runs timed each key exactly once, the
# reruns timed nothing, and every Triton process computed the same bits.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${DETD_BUILD_DIR:-$REPO/build}
PROCS=${DETD_DEMO_PROCS:-8}
KEYS=${DETD_DEMO_KEYS:-40}

"$REPO/scripts/setup-deps.sh"
cmake -S "$REPO" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j "${DETD_BUILD_JOBS:-2}" --target detd_daemon detctl detd_loadgen

WORK=$(mktemp -d /tmp/detd-demo.XXXXXX)
SOCK=$WORK/detd.sock
DETCTL=("$BUILD/client/detctl" --socket "$SOCK")
"$BUILD/daemon/detd" --socket "$SOCK" --state-dir "$WORK/state" >"$WORK/detd.log" 2>&1 &
DAEMON=$!
trap 'kill -TERM $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null || true' EXIT
for _ in $(seq 100); do "${DETCTL[@]}" health >/dev/null 2>&1 && break; sleep 0.05; done

run() { # label
    local pids=()
    for r in $(seq 0 $((PROCS - 1))); do
        "$BUILD/tests/detd_loadgen" --socket "$SOCK" --keys "$KEYS" --kernel "demo.kernels:row_sum@5e1f" \
            --rank "$r" --candidates 6 --sleep-ms 20 --observe --report-json "$WORK/$1-$r.json" &
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

echo "== first run (every key undecided)"
run first
echo "== rerun against the same store"
run rerun
# ---- real Triton kernels, an unmodified script under python -m detd.run
TPROCS=${DETD_DEMO_TRITON_PROCS:-4}
VENV=${DETD_DEMO_VENV:-$BUILD/demo-venv}
if [[ ! -x $VENV/bin/python ]] || ! "$VENV/bin/python" -c 'import torch, triton, detd' 2>/dev/null; then
    echo "== setting up $VENV (torch ${DETD_TORCH_VERSION:-2.13.0} for the CPU, triton ${DETD_DEMO_TRITON:-3.6.0}, detd)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "torch==${DETD_TORCH_VERSION:-2.13.0}" numpy "setuptools>=77" wheel \
        >>"$WORK/setup.log" 2>&1 || { tail -n 20 "$WORK/setup.log"; exit 1; }
    "$VENV/bin/pip" install -q --no-deps "triton==${DETD_DEMO_TRITON:-3.6.0}" \
        >>"$WORK/setup.log" 2>&1 || { tail -n 20 "$WORK/setup.log"; exit 1; }
fi
# The package from this tree, with the libdetd and detctl just built.
DETD_LIBRARY=$BUILD/client/libdetd.so DETD_DETCTL=$BUILD/client/detctl DETD_NO_VENDOR=1 \
    "$VENV/bin/pip" install -q --no-deps --no-build-isolation --force-reinstall "$REPO/client/python" \
    >>"$WORK/setup.log" 2>&1 || { tail -n 20 "$WORK/setup.log"; exit 1; }
if [[ -z ${TRITON_INTERPRET:-} ]] && ! "$VENV/bin/python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    export TRITON_INTERPRET=1 # no GPU: Triton's CPU interpreter
fi

triton_run() { # label
    local pids=()
    for r in $(seq 0 $((TPROCS - 1))); do
        RANK=$r LOCAL_RANK=$r WORLD_SIZE=$TPROCS DETD_SOCKET=$SOCK DETD_RUN_REPORT="$WORK/$1-triton-$r.json" \
            "$VENV/bin/python" -m detd.run "$REPO/scripts/demo_train.py" >"$WORK/$1-triton-$r.out" 2>&1 &
        pids+=($!)
    done
    local rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    if [[ $rc -ne 0 ]]; then
        echo "$1 (triton): a process failed:"
        tail -n 20 "$WORK"/"$1"-triton-*.out
        return 1
    fi
    "${DETCTL[@]}" decisions --json >"$WORK/$1-decisions.json"
    python3 "$REPO/scripts/demo_report.py" "$WORK" "$1" "$TPROCS"
}

echo "== an unmodified script with real @triton.autotune kernels, $TPROCS processes under python -m detd.run"
triton_run triton-first
echo "== the same script again"
triton_run triton-rerun

echo "== detctl status"
"${DETCTL[@]}" status
echo "== detctl verify"
"${DETCTL[@]}" verify
echo "demo state and logs: $WORK"
