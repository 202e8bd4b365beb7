"""Small kernels written for the autotuner-pattern tests: each uses one
feature of ``triton.autotune`` the way packages do (a pruner that builds
new configs, ``perf_model`` + ``top_k``, hooks, ``reset_to_zero`` /
``restore_value``, stacked heuristics, ``cache_results``, candidates that
fail, subclasses), plus two kernels for the determinism audit.

Timings come from :func:`bench` (the interpreter has no GPU benchmarker):
it runs the candidate once and returns a timing that depends only on the
config's BLOCK, rotated by ``$PATTERN_ROTATE`` so a test can make processes
that time on their own disagree. Every call is counted in :data:`CALLS`.
"""

import os

import torch
import triton
import triton.language as tl
from triton.runtime import autotuner as _at

CALLS = []            # (kernel tag, BLOCK) per do_bench call
HOOKS = []            # (hook name, kernel tag) per hook call
_current = [None]


def _rotate():
    return int(os.environ.get("PATTERN_ROTATE", "0"))


def bench_for(tag):
    def bench(kernel_call, quantiles=None, **kw):
        kernel_call()
        block = _current[0]
        CALLS.append((tag, block))
        blocks = (8, 16, 32, 64, 128)
        idx = blocks.index(block) if block in blocks else 0
        ms = 1.0 + ((idx + _rotate()) % len(blocks))
        return [ms, ms, ms] if quantiles else ms
    return bench


def note(nargs):
    _current[0] = nargs.get("BLOCK")


def cfgs(blocks, **kw):
    return [triton.Config({"BLOCK": b}, num_warps=4, num_stages=1, pre_hook=note, **kw) for b in blocks]


# ------------------------------------------------ a pruner building new configs

def prune_new(configs, nargs, **kwargs):
    """Like gemlite's early_config_prune: NEW Config objects with extra
    meta-parameters and changed fields; drops BLOCK > N. With
    $PATTERN_PRUNE_MAX it keeps only BLOCKs up to that (a rank whose
    pruning differs)."""
    n = nargs["N"]
    limit = int(os.environ.get("PATTERN_PRUNE_MAX", "100000"))
    out = []
    for c in configs:
        b = c.kwargs["BLOCK"]
        if b > n or b > limit:
            continue
        out.append(triton.Config({"BLOCK": b, "EVEN": n % b == 0, "NUM_STAGES": 2}, num_warps=2, num_stages=2,
                                 pre_hook=note))
    return out


@triton.autotune(configs=cfgs((16, 32, 64, 128)), key=["N"], prune_configs_by={"early_config_prune": prune_new},
                 do_bench=bench_for("pruned"))
@triton.jit
def scale_pruned(x_ptr, out_ptr, N, BLOCK: tl.constexpr, EVEN: tl.constexpr, NUM_STAGES: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    else:
        m = offs < N
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_pruned(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_pruned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ perf_model + top_k

def perf_model(**kw):
    return {16: 4.0, 32: 1.0, 64: 2.0, 128: 3.0}[kw["BLOCK"]]


@triton.autotune(configs=cfgs((16, 32, 64, 128)), key=["N"],
                 prune_configs_by={"perf_model": perf_model, "top_k": 2}, do_bench=bench_for("perf"))
@triton.jit
def scale_perf(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_perf(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_perf[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ hooks, reset_to_zero, restore_value

def tuner_pre(nargs, reset_only=False):
    HOOKS.append(("pre_reset" if reset_only else "pre", "hooks"))


def tuner_post(nargs, exception=None):
    HOOKS.append(("post", "hooks"))


@triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], reset_to_zero=["acc_ptr"], restore_value=["inplace_ptr"],
                 do_bench=bench_for("hooks"))
@triton.jit
def accumulate(x_ptr, acc_ptr, inplace_ptr, N, BLOCK: tl.constexpr):
    """acc += x (needs reset_to_zero while timing); inplace = inplace * 3
    (needs restore_value while timing)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=m) + x, mask=m)
    tl.store(inplace_ptr + offs, tl.load(inplace_ptr + offs, mask=m) * 3.0, mask=m)


def run_accumulate(x, inplace):
    acc = torch.zeros_like(x)
    n = x.numel()
    accumulate[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, acc, inplace, n)
    return acc


@triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], pre_hook=tuner_pre, post_hook=tuner_post,
                 do_bench=bench_for("userhooks"))
@triton.jit
def scale_hooks(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_hooks(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_hooks[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ stacked heuristics

@triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], do_bench=bench_for("heur"))
@triton.heuristics({"EVEN_N": lambda a: a["N"] % a["BLOCK"] == 0})
@triton.jit
def scale_heur(x_ptr, out_ptr, N, BLOCK: tl.constexpr, EVEN_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN_N:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) * 2.0)
    else:
        m = offs < N
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_heur(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_heur[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ cache_results (3.4+)

_cache_kw = {"cache_results": True} if "cache_results" in _at.autotune.__code__.co_varnames else {}


@triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], do_bench=bench_for("cached"), **_cache_kw)
@triton.jit
def scale_cached(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_cached(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_cached[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ failing candidates

@triton.autotune(configs=cfgs((12, 16, 32)), key=["N"], do_bench=bench_for("somefail"))
@triton.jit
def scale_somefail(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """BLOCK=12 cannot compile (tl.arange needs a power of two)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def run_somefail(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_somefail[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


@triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], do_bench=bench_for("allfail"))
@triton.jit
def scale_allfail(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Calls an API no Triton has: every candidate fails, like a package
    written for another Triton release."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.no_such_api_in_any_triton(tl.load(x_ptr + offs, mask=m)), mask=m)


def run_allfail(x):
    out = torch.empty_like(x)
    n = x.numel()
    scale_allfail[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


# ------------------------------------------------ subclasses

class FirstConfigTuner(_at.Autotuner):
    """Overrides run and never calls Autotuner.run: launches its first
    config directly. Cannot be governed."""

    def run(self, *args, **kwargs):
        config = self.configs[0]
        self.best_config = config
        return self.fn.run(*args, **kwargs, **config.all_kwargs())


class CountingTuner(_at.Autotuner):
    """Overrides run but calls Autotuner.run: governed like any tuner."""

    calls = 0

    def run(self, *args, **kwargs):
        type(self).calls += 1
        return super().run(*args, **kwargs)


@triton.jit
def scale_bypass(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


@triton.jit
def scale_super(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < N
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


def make_subclass_tuner(cls, fn, tag):
    return cls(fn, fn.arg_names, cfgs((16, 32, 64)), ["N"], None, None, do_bench=bench_for(tag))


def run_tuner(tuner, x):
    out = torch.empty_like(x)
    n = x.numel()
    tuner[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n)
    return out


def make_late_tuner():
    """A tuner decorated after install()."""

    @triton.autotune(configs=cfgs((16, 32, 64)), key=["N"], do_bench=bench_for("late"))
    @triton.jit
    def scale_late(x_ptr, out_ptr, N, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < N
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    return scale_late


# ------------------------------------------------ the audit's kernels

def random_order(nargs):
    """Stands for the hardware's scheduling: each launch adds the values in
    an order nobody controls (a seed drawn from the OS)."""
    note(nargs)
    nargs["seed_ptr"].fill_(int.from_bytes(os.urandom(4), "little") % 1_000_003)


@triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=4, num_stages=1, pre_hook=random_order)
                          for b in (16, 32)], key=["N"], do_bench=bench_for("atomic"))
@triton.jit
def atomic_sum(x_ptr, seed_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """out[0] += x[i] over every i, one program per element, in an order
    permuted by the seed: float atomics whose order varies per launch."""
    pid = tl.program_id(0)
    seed = tl.load(seed_ptr)
    i = (pid * (2 * seed + 1) + seed) % N  # an odd multiplier: a permutation of 0..N-1 (N a power of two)
    tl.atomic_add(out_ptr, tl.load(x_ptr + i))


def run_atomic(x):
    seed = torch.zeros(1, dtype=torch.int32)
    out = torch.zeros(1, dtype=torch.float32)
    atomic_sum[(x.numel(),)](x, seed, out, x.numel())
    return out


@triton.autotune(configs=cfgs((16, 32)), key=["N"], do_bench=bench_for("detsum"))
@triton.jit
def det_sum(x_ptr, out_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.sum(tl.load(x_ptr + offs, mask=offs < N, other=0.0), axis=0)
    tl.store(out_ptr, acc)


def run_det(x):
    out = torch.zeros(1, dtype=torch.float32)
    det_sum[(1,)](x, out, x.numel())
    return out


def spread_values(n=64, seed=0):
    """Values across four magnitudes: their float sum depends on the order.
    With seed 0 and the 2,048 orders atomic_sum can take, the sum has 34
    distinct values, none more likely than 9.4% (spread wider, 1e-4 to 1e7,
    it had 5, one of them 34% likely: four launches agreed 2.7% of the
    time)."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.pow(10.0, torch.randint(0, 4, (n,), generator=g).float())
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0)
    return (torch.rand(n, generator=g) * mag * sign).float().contiguous()
