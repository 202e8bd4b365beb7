"""GPU check of the hook in compiled mode (no interpreter), one process.

    python3 tests/python/gpu_hook_check.py

Checks what the CPU suite cannot: the kernel identity's guard comes from
JITFunction.cache_key, arch is "sm<cc>", Triton's own benchmarker does the
designated timing pass (one pass: one benchmark call per candidate), the
first launch already uses the committed config even when it is not this
process's fastest, and a decided key launches with no benchmark call.
The daemon is replaced by a scripted answerer here (libdetd and detd are
not built on the GPU machine); the agreement across processes is covered
by test_e2e.py against the real daemon. Prints one JSON line; exit 0 when
every check holds.
"""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from detd import _hook, _native, _policy, _process, _triton  # noqa: E402

BLOCKS = (64, 128, 256, 512)


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=4) for b in BLOCKS], key=["N"])
@triton.jit
def row_sum_gpu(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * N + offs, mask=offs < N, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class Scripted:
    def __init__(self, decide, report=None):
        self._decide, self._report = decide, report
        self.decides, self.reports, self.observed = [], [], []

    def decide(self, key, no_claim, timeout_ms, share=False):
        self.decides.append(key)
        return self._decide(key)

    def report(self, claim_id, key, rows, triton_version, timeout_ms, errors=None, timing=None):
        self.reports.append(rows)
        return self._report(key, rows)

    def observe(self, key, config, source, governed, chaos, timeout_ms=0, failed=None, audit=None, differing=(),
                why=None):
        if failed is None and audit is None:
            self.observed.append((config, source))


def answer(outcome, config=None, claim=0):
    return _native.Answer(outcome, config, _native.SOURCE_TIMED, None, claim, 1000, False, False, None, -1, -1, 0)


def main():
    checks = {}
    x = torch.randn(64, 8192, device="cuda") * torch.pow(10.0, torch.randint(-6, 7, (64, 8192), device="cuda"))
    out = torch.empty(64, device="cuda")
    n = x.shape[1]
    key = (n, "torch.float32", "torch.float32")

    def launch():
        row_sum_gpu[(64,)](x, out, n)
        torch.cuda.synchronize()
        return hashlib.sha256(out.cpu().numpy().tobytes()).hexdigest()

    # Reference bytes per config, Triton untouched.
    ref = {}
    for c in row_sum_gpu.configs:
        row_sum_gpu.cache.clear()
        row_sum_gpu.cache[key] = c
        ref[_triton.config_string(c)] = launch()
    checks["configs_change_bits"] = len(set(ref.values())) > 1

    calls = []
    real = row_sum_gpu.do_bench

    def counting(fn, quantiles=None, **kw):
        calls.append(1)
        return real(fn, quantiles=quantiles, **kw)

    row_sum_gpu.__dict__["do_bench"] = counting
    if hasattr(row_sum_gpu, "_do_bench"):
        row_sum_gpu._do_bench = counting

    _hook.patch()
    _process.configure(_policy.parse(environ={}))
    ident = _triton.kernel_identity(row_sum_gpu)
    checks["guard_from_cache_key"] = _triton.code_guard(row_sum_gpu) == hashlib.sha256(
        ("cache_key:" + row_sum_gpu.fn.cache_key).encode()).hexdigest()[:16]
    checks["arch"] = _process.identity()["arch"]
    major, minor = torch.cuda.get_device_capability()
    checks["arch_ok"] = checks["arch"] == f"sm{major}{minor}"

    # Designated: time with Triton's benchmarker, commit a config that is not
    # this process's fastest, launch.
    committed = {}

    def on_report(k, rows):
        fastest = min(rows, key=lambda r: r[1][0])[0]
        other = sorted(r[0] for r in rows if r[0] != fastest)[0]
        committed["fastest"], committed["config"] = fastest, other
        return answer(_native.OUTCOME_DECIDED, other)

    s = Scripted(lambda k: answer(_native.OUTCOME_DESIGNATED, claim=1), on_report)
    _process.client = lambda: s
    row_sum_gpu.cache.clear()
    sha = launch()
    checks["one_pass_bench_calls"] = len(calls)
    checks["one_pass_ok"] = len(calls) == len(BLOCKS) and len(s.reports) == 1
    checks["reported_ms"] = {r[0]: r[1] for r in s.reports[0]}
    checks["first_launch_uses_committed"] = sha == ref[committed["config"]] and \
        _triton.config_string(dict.get(row_sum_gpu.cache, key)) == committed["config"]
    checks["kernel"] = s.decides[0].kernel

    # Decided: no benchmark call.
    calls.clear()
    dec = "BLOCK=128,num_warps=4,num_stages=3,num_ctas=1"
    s2 = Scripted(lambda k: answer(_native.OUTCOME_DECIDED, dec))
    _process.client = lambda: s2
    row_sum_gpu.cache.clear()
    sha = launch()
    checks["decided_no_bench"] = len(calls) == 0 and sha == ref[dec]

    checks["triton"] = triton.__version__
    checks["torch"] = torch.__version__
    checks["device"] = torch.cuda.get_device_name()
    ok = all(v for k, v in checks.items() if k.endswith("_ok") or k in (
        "configs_change_bits", "guard_from_cache_key", "first_launch_uses_committed", "decided_no_bench"))
    checks["ok"] = ok
    print(json.dumps(checks))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
