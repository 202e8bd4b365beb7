"""One process of the Inductor tests: torch.compile on the CPU, real
Inductor-generated Triton kernels run by Triton's interpreter, detd
installed (before torch is imported, as ``python -m detd.run`` does).

    inductor_worker.py OUT.json MODEL

MODEL ``fused``: a pointwise and a reduction kernel, with max-autotune's
pointwise configs and coordinate-descent tuning on; ``fused+wide`` adds a
second graph: a permute + add tiled in three dimensions
(``triton.max_tiles=3``), whose descent can reach more configs than a key
can list (XBLOCK, YBLOCK, ZBLOCK and num_warps: 6 x 6 x 6 x 6 = 1296 >
1024), so its key names the search. MODEL ``gemm``:
max-autotune's algorithm selection for a matmul (ATen and Triton
templates).

What cannot run here, and its stand-in (this machine has no GPU):

* Triton has no driver: ``torch.utils._triton.triton_hash_with_backend``
  (which asks the driver for the backend's name) returns a constant.
* Inductor's ``CachingAutotuner`` compiles each config into a launcher
  with ``triton.compile`` (no target here); under the interpreter it
  never autotunes. Here each tuner gets, per config, a launcher that runs
  the real generated kernel in the interpreter with that config (the
  grid from Inductor's own ``_interpret_args_grid``), and its interpreter
  switch is off, so Inductor's real ``run`` autotunes: its own
  ``benchmark_all_configs`` and ``bench`` (timing on the CPU), its own
  coordinate descent (``_precompile_config`` gives such a launcher).
* max-autotune's Triton templates do not run in the interpreter, so
  ``AlgorithmSelectorCache.autotune`` (the benchmark Inductor passes to
  ``lookup``) is replaced by noisy timings: each call counts as one timing
  pass.
* With ``DETD_TEST_SHARE_MARKS=<dir>`` (the shared pass of a selection):
  Inductor's own eager precompile of every choice before ``lookup``
  (the function ``make_precompile_fn`` returns; Python 3.11.7 skips it
  anyway, cpython issue 106905) is off, so every ``TritonTemplateCaller.precompile`` here is a
  share compiled for the timing process. The real ``precompile`` runs
  (the generated benchmark module loaded, its kernel's precompile: the
  launchers above) and leaves a mark in ``<dir>``; the stand-in benchmark
  of the timing process holds its first pass until every template choice
  but the first has a mark (at most ``DETD_TEST_SHARE_WAIT_S``), as a
  real pass lasts longer than the shares.
* ``DETD_TEST_OLD_GRAPH_CACHE=1``: Inductor's ``FxGraphCache`` lacks what
  detd's check of its FX graph cache wraps, as in a release without it.
* ``DETD_TEST_NO_PASS_ON=1``: the daemon is taken for one that cannot
  pass claims on (older than 0.9): nothing is claimed early.
* ``DETD_TEST_EXTERN_WINS=1``: the stand-in benchmark times ATen's choice
  clearly ahead of every template (a known winner).
* ``DETD_TEST_FAIL_CHOICE=extern|template``: the last choice of that kind
  fails to compile in this process (``mark_failed()`` after the
  precompile, as Inductor marks a compile that raised or timed out);
  ``all``: every choice, once the gate ``DETD_TEST_FAIL_GATE`` opens
  (``gates.wait_for``), so the selection never reaches ``lookup``.

Writes JSON: ``autotuners`` (detd.autotuners()), ``bench_calls`` (runtime
benchmarks run here), ``select_passes`` (algorithm-selection benchmarks
run here), ``descents`` (each coordinate descent run here: its start, the
config it returned, how many configs it timed), ``precompiles`` (template
precompiles run here), ``precompile_fns`` (Inductor's own precompile of
a selection's choices, run here), ``stats`` (``detd.stats()``), ``digest`` (SHA-256
of the outputs' bytes), ``ran``/``error``, ``settings`` (Inductor's cache
options as detd left them), ``fxgraph`` (Inductor's own FX graph cache
counters: ``fxgraph_cache_hit``, ``fxgraph_cache_miss``, ...).
"""

import hashlib
import inspect
import json
import os
import random
import sys
import time

OUT, MODEL = sys.argv[1], sys.argv[2]
os.environ.setdefault("TRITON_INTERPRET", "1")

if os.environ.get("DETD_TEST_NO_PASS_ON") == "1":  # as against a daemon older than 0.9
    from detd import _native

    _native.Client.can_pass_on = lambda self: False

if os.environ.get("DETD_TEST_IMPORT_FIRST") == "1":  # Inductor imported before install()
    import torch._inductor.select_algorithm  # noqa: E402,F401
if os.environ.get("DETD_TEST_OLD_GRAPH_CACHE") == "1":
    # As a torch release whose FxGraphCache has no static _save_graph for
    # detd to wrap (what else Inductor does with it is unchanged).
    from torch._inductor.codecache import FxGraphCache  # noqa: E402

    FxGraphCache._save_graph = FxGraphCache.__dict__["_save_graph"].__func__
import detd  # noqa: E402

detd.install()
import torch  # noqa: E402

if os.environ.get("DETD_TEST_TORCH_VERSION"):  # the refusal test: a release detd does not cover
    torch.__version__ = os.environ["DETD_TEST_TORCH_VERSION"]
import torch.utils._triton as _tu  # noqa: E402

_tu.triton_hash_with_backend = lambda: "cpu-interpreter"

import torch._inductor.config as ic  # noqa: E402
from torch._inductor import select_algorithm as sa  # noqa: E402
from torch._inductor.runtime import triton_heuristics as th  # noqa: E402

ic.cpu_backend = "triton"
ic.compile_threads = 1
counts = {"bench": 0, "select": 0, "precompile": 0}
MARKS = os.environ.get("DETD_TEST_SHARE_MARKS")


def _launcher(tuner, cfg):
    def launcher(*args, stream=None, **kwargs):
        a, grid = tuner._interpret_args_grid(args, cfg)
        return tuner.fn[grid](*a, **kwargs, **cfg.kwargs)

    launcher.config = cfg
    launcher.n_spills = launcher.n_regs = launcher.shared = 0
    launcher.cache_hash = None
    launcher.store_cubin = False
    return launcher


class _Compiled:
    def __init__(self, tuner, cfg):
        self.tuner, self.config = tuner, cfg

    def make_launcher(self):
        return _launcher(self.tuner, self.config)


_init = th.CachingAutotuner.__init__


def _init_standin(self, *a, **kw):
    _init(self, *a, **kw)
    self.triton_interpret = False
    if not hasattr(self.fn, "src"):  # a JITFunction's, which Inductor's descent reads
        self.fn.src = inspect.getsource(self.fn.fn)
    tuner = self

    def precompile(*_a, **_kw):
        tuner.launchers = [_launcher(tuner, c) for c in tuner.configs]

    self.precompile = precompile
    self._precompile_config = lambda cfg: _Compiled(tuner, cfg)


th.CachingAutotuner.__init__ = _init_standin
_bench = th.CachingAutotuner.bench


def _counted_bench(self, *a, **kw):
    counts["bench"] += 1
    return _bench(self, *a, **kw)


th.CachingAutotuner.bench = _counted_bench


def _mark(choice) -> str:
    from detd import _inductor

    return os.path.join(MARKS, hashlib.sha256(_inductor.choice_string(choice).encode()).hexdigest()[:16])


def _hold_for_shares(choices):
    """The first pass waits until every template choice but the first
    was precompiled by a waiting process (its mark), or the bound."""
    want = [_mark(c) for c in choices[1:] if type(c).__name__ != "ExternKernelCaller"]
    end = time.monotonic() + float(os.environ.get("DETD_TEST_SHARE_WAIT_S", "120"))
    while not all(os.path.exists(m) for m in want) and time.monotonic() < end:
        time.sleep(0.01)


def _noisy_autotune(self, name, input_nodes, layout, input_gen_fns, choices, **kw):
    counts["select"] += 1
    if MARKS and counts["select"] == 1:
        _hold_for_shares(choices)
    rng = random.Random(time.time_ns() ^ os.getpid())
    if EXTERN_WINS:  # ATen's choice clearly ahead: no re-measure, a known winner
        return {c: 1.0 if type(c).__name__ == "ExternKernelCaller" else 5.0 + rng.random() for c in choices}
    return {c: 1.0 + rng.random() for c in choices}


EXTERN_WINS = os.environ.get("DETD_TEST_EXTERN_WINS") == "1"
sa.AlgorithmSelectorCache.autotune = _noisy_autotune
from detd import _inductor  # noqa: E402

# Inductor's own precompile of a selection's choices, counted (detd skips
# it for a selection already decided).
_own_precompile_fn = _inductor._orig.get("precompile_fn")
counts["precompile_fn"] = 0


def _counted_precompile_fn(self, *a, **kw):
    counts["precompile_fn"] += 1
    if MARKS:
        return lambda: {}
    return _own_precompile_fn(self, *a, **kw)


if _own_precompile_fn is not None:
    _inductor._orig["precompile_fn"] = _counted_precompile_fn

# DETD_TEST_FAIL_CHOICE=extern|template: after the precompile, the last
# choice of that kind failed to compile in this process (marked failed,
# as Inductor marks a choice whose compile raised or timed out), so
# do_autotuning drops it before lookup.
FAIL = os.environ.get("DETD_TEST_FAIL_CHOICE")
if FAIL:
    _mpf = sa.AlgorithmSelectorCache.make_precompile_fn

    def _failing_mpf(self, choices, *a, **kw):
        fn = _mpf(self, choices, *a, **kw)

        def run():
            out = fn()
            if FAIL == "all":
                from gates import wait_for

                wait_for(os.environ["DETD_TEST_FAIL_GATE"])
                for c in choices:
                    c.mark_failed()
                return out
            kind = [c for c in choices if (type(c).__name__ == "ExternKernelCaller") == (FAIL == "extern")]
            kind[-1].mark_failed()
            return out

        return run

    sa.AlgorithmSelectorCache.make_precompile_fn = _failing_mpf
if MARKS:
    _precompile = sa.TritonTemplateCaller.precompile

    def _marked_precompile(self):
        counts["precompile"] += 1
        _precompile(self)
        open(_mark(self), "w").close()

    sa.TritonTemplateCaller.precompile = _marked_precompile

# What each coordinate descent run here returned, and how many configs it
# timed: the test checks the committed config is the descent's own result.
from detd import _triton  # noqa: E402
from torch._inductor.runtime import coordinate_descent_tuner as cdt  # noqa: E402

_descent = cdt.CoordescTuner.autotune
descents = []


def _recorded_descent(self, func, baseline_config, *a, **kw):
    won = _descent(self, func, baseline_config, *a, **kw)
    descents.append({"start": _triton.config_string(baseline_config), "result": _triton.config_string(won),
                     "timed": len(self.cached_benchmark_results)})
    return won


cdt.CoordescTuner.autotune = _recorded_descent

torch.manual_seed(0)
if MODEL in ("fused", "fused+wide"):
    ic.max_autotune_pointwise = True
    ic.coordinate_descent_tuning = True

    def model(x, y):
        a = torch.sin(x) * y + 1.0
        return a, (a * a).sum(dim=1)

    def wide(x, y):
        return (x.permute(2, 1, 0) + y,)

    inputs = (torch.randn(32, 256), torch.randn(32, 256))
    graphs = [(model, inputs, {})]
    if MODEL == "fused+wide":
        graphs.append((wide, (torch.randn(32, 32, 32), torch.randn(32, 32, 32)),
                       {"triton.max_tiles": 3, "triton.prefer_nd_tiling": True}))
elif MODEL == "gemm":
    ic.max_autotune = True
    ic.max_autotune_gemm_backends = "ATEN,TRITON"

    def model(x, w):
        return (torch.relu(x @ w),)

    inputs = (torch.randn(64, 128), torch.randn(128, 32))
    graphs = [(model, inputs, {})]
else:
    sys.exit(f"unknown model {MODEL!r}")

result = {"pid": os.getpid(), "model": MODEL}
try:
    outs, ref = [], []
    for fn, args, options in graphs:
        with ic.patch(options):
            outs += torch.compile(fn)(*args)
        ref += fn(*args)
    result["ran"] = True
    result["close"] = all(torch.allclose(o, r, atol=1e-3, rtol=1e-3) for o, r in zip(outs, ref))
    result["digest"] = hashlib.sha256(b"".join(o.detach().contiguous().numpy().tobytes() for o in outs)).hexdigest()
except Exception as e:  # noqa: BLE001 - reported, judged by the test
    result["ran"] = False
    result["error"] = f"{type(e).__name__}: {str(e)[:400]}"
result["bench_calls"] = counts["bench"]
result["select_passes"] = counts["select"]
result["descents"] = descents
result["precompiles"] = counts["precompile"]
result["precompile_fns"] = counts["precompile_fn"]
result["stats"] = detd.stats()
result["autotuners"] = detd.autotuners()
result["patched"] = th.CachingAutotuner.autotune_to_one_config.__module__ == "detd._inductor"
result["settings"] = {k: getattr(ic, k, None) for k in ("autotune_local_cache", "autotune_remote_cache",
                                                        "fx_graph_cache", "fx_graph_remote_cache",
                                                        "benchmark_epilogue_fusion")}
from torch._dynamo.utils import counters  # noqa: E402

result["fxgraph"] = {k: v for k, v in counters["inductor"].items() if k.startswith("fxgraph_cache")}
with open(OUT, "w") as f:
    json.dump(result, f, default=str)
