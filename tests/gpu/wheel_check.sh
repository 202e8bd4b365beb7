#!/usr/bin/env bash
# The self-contained wheel on a machine without Debian's gRPC, protobuf-c
# and jansson (the GPU machine: another distribution, Python 3.12): install
# the repaired wheel that tests/gpu/bundle.sh's caller put in .gpu/, check
# that every library it loads resolves inside the package, run its detctl,
# and run a real @triton.autotune kernel on the GPU under its detd-run
# against the bundled daemon. Prints one line per check; exit 0 when all
# pass.
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WHL=$(ls "$REPO"/.gpu/detd-*-manylinux_*.whl | head -n 1)
SITE=$(mktemp -d /tmp/detd-wheel.XXXXXX)
fail=0
check() { # name, command...
    local name=$1
    shift
    if out=$("$@" 2>&1); then echo "ok   $name"; else echo "FAIL $name: ${out: -600}"; fail=1; fi
}
for lib in libgrpc.so libprotobuf-c.so.1 libjansson.so.4; do
    if ldconfig -p | grep -q "$lib"; then echo "note: the system has $lib"; else echo "note: the system has no $lib"; fi
done
check "pip install $(basename "$WHL")" python3 -m pip install -q --no-index --no-deps --target "$SITE" "$WHL"
export PYTHONPATH=$SITE
check "every bundled library resolves inside the package" bash -c "
    for f in '$SITE'/detd/_lib/libdetd.so '$SITE'/detd/_lib/detctl; do
        ldd \"\$f\" | grep -q 'not found' && { ldd \"\$f\" | grep 'not found'; exit 1; }
        ldd \"\$f\" | awk '/=> \\//{print \$1, \$3}' | grep -v -E '^(libc|libm|libstdc\\+\\+|libgcc_s|libpthread|libdl|librt)\\.so' |
            grep -v '$SITE/detd/_lib/' && exit 1
    done; exit 0"
check "detctl --version" "$SITE/bin/detctl" --version
WORK=$(mktemp -d /tmp/detd-wheel-run.XXXXXX)
LD_LIBRARY_PATH=$REPO/.gpu/lib "$REPO/.gpu/bin/detd" --socket "$WORK/d.sock" --state-dir "$WORK/state" \
    >"$WORK/detd.log" 2>&1 &
DAEMON=$!
for _ in $(seq 100); do "$SITE/bin/detctl" --socket "$WORK/d.sock" health >/dev/null 2>&1 && break; sleep 0.05; done
cat >"$WORK/train.py" <<'PY'
import torch, triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (128, 256, 512, 1024)], key=["n"])
@triton.jit
def double(x, y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(y + offs, tl.load(x + offs, mask=m) * 2, mask=m)

x = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
y = torch.empty_like(x)
double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
torch.cuda.synchronize()
assert torch.equal(y, x * 2)
print("kernel ok", double.best_config)
PY
check "a GPU kernel under the wheel's detd-run" env DETD_SOCKET="$WORK/d.sock" "$SITE/bin/detd-run" "$WORK/train.py"
check "the key is decided in the daemon" bash -c "'$SITE/bin/detctl' --socket '$WORK/d.sock' decisions --json | grep -q double"
kill -TERM $DAEMON 2>/dev/null
wait $DAEMON 2>/dev/null
[ $fail -eq 0 ] && echo "wheel check: all passed" || echo "wheel check: FAILED"
exit $fail
