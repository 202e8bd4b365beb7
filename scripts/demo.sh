#!/usr/bin/env bash
# The main job on the embedded default: one standalone detd with its SQLite
# store, 8 client processes (libdetd) racing on 40 undecided keys, then a
# rerun against the same store, then `detctl status` and `detctl verify`.
# Sets up and builds first (idempotent). Exit 0 only if every rank used the
# same config for every key, the first run timed each key exactly once, and
# the rerun timed nothing.
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
echo "== detctl status"
"${DETCTL[@]}" status
echo "== detctl verify"
"${DETCTL[@]}" verify
echo "demo state and logs: $WORK"
