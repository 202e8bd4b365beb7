"""The adapter to Triton: the only module of the package that imports
``triton`` or reads and writes attributes of Triton's objects.

Everything Triton-specific the hook relies on lives here: the class-level
patches of ``Autotuner.run``, ``prune_configs`` and ``_bench``; the
``Config`` fields turned into plain data; the innermost JIT function, its
``cache_key`` and the code guard; Triton's key rebuilt from a call's
arguments; the lookup of the call's arguments in Triton's run frame; the
timing pass done the way Triton's ``benchmark()`` does it; the version
checks and what differs between the releases covered (3.3 to 3.9).  The
flow (ask, time, report, observe) is :mod:`detd._hook`'s, and the strings
are :mod:`detd._canon`'s, made from the plain values handed over here.

Triton is imported lazily (in :func:`patch`, :func:`version` and the
listener call): ``import detd`` works without it.  Live ``Config`` objects
and autotuners leave this module only as opaque handles: the hook stores
them in an autotuner's cache and hands them back, never reads them.

The patched methods are installed as they are, with no wrapper frame, and
a tuner on the direct path (see :func:`use_original_run`) launches through
Triton's own ``run`` bound to it, on a plain ``dict`` cache: no code of
this package runs on a known key.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
import threading
import time
import weakref
from typing import Any, List, Optional, Tuple

from . import _canon

__all__ = [
    "SUPPORTED", "version", "version_warning", "benchmarker", "interpreting", "patch", "config_string", "config_cost",
    "is_config", "kernel_name", "kernel_identity", "code_guard", "jit_function", "triton_key", "megatron_key",
    "configs", "configs_sig", "last_timings", "cache_of", "set_cache", "use_original_run", "use_patched_run",
    "original_run", "run_frame_call", "prune", "has_pruner", "time_candidates", "set_timings", "compile_only",
    "remote_compiles", "after_fork", "remote_spec", "compile_spec", "prepare_launcher", "current_device", "finish_pass",
    "direct_tuners", "run_is_triton", "best_config", "named_args", "replay", "ungoverned_classes", "class_names",
    "TESTING", "wrap_benchmarkers", "call_site",
]

SUPPORTED = ((3, 3), (3, 9))  # oldest and newest minor release checked

_MISSING = object()


# ---------------------------------------------------------------- version

def version() -> str:
    """``triton.__version__``, or "" when Triton cannot be imported."""
    try:
        import triton

        return str(triton.__version__)
    except Exception:
        return ""


def version_warning() -> Optional[str]:
    """A message when the installed Triton is outside :data:`SUPPORTED`,
    else None (also when the version cannot be parsed)."""
    v = version()
    try:
        major, minor = (int(x) for x in v.split(".")[:2])
    except ValueError:
        return None
    if (major, minor) < SUPPORTED[0] or (major, minor) > SUPPORTED[1]:
        return (f"detd: Triton {v} is outside the checked range "
                f"{SUPPORTED[0][0]}.{SUPPORTED[0][1]} to {SUPPORTED[1][0]}.{SUPPORTED[1][1]}")
    return None


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET``)."""
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


# ---------------------------------------------------------------- configs

def _fields(config) -> dict:
    fields = {}
    for name in _canon.FIELDS:
        v = getattr(config, name, _MISSING)
        if v is not _MISSING:
            fields[name] = v
    for name, _ in _canon.EXTRA_FIELDS:
        v = getattr(config, name, _MISSING)
        if v is not _MISSING:
            fields[name] = v
    return fields


def config_string(config) -> str:
    """The canonical string of a ``triton.Config`` of any supported release
    (or any object with its ``kwargs`` and fields)."""
    return _canon.config_string(dict(config.kwargs), _fields(config))


def config_cost(config) -> tuple:
    """The ``cheapest`` rule's sort key of a ``triton.Config``."""
    return _canon.config_cost(config.kwargs, config.num_warps, config.num_stages, getattr(config, "num_ctas", 1),
                              config_string(config))


def is_config(v) -> bool:
    """Whether ``v`` looks like a ``triton.Config`` (has its fields)."""
    return hasattr(v, "kwargs") and hasattr(v, "num_warps")


def configs(tuner) -> List[Any]:
    """The autotuner's live ``Config`` objects, in order (Triton's list:
    read it, do not change it)."""
    return tuner.configs


def configs_sig(tuner) -> tuple:
    """Identities of the live configs: changes when the list is replaced."""
    return tuple(id(c) for c in tuner.configs)


def last_timings(tuner) -> Optional[dict]:
    """``Config -> timing`` of the autotuner's last timing pass, or None."""
    ct = getattr(tuner, "configs_timings", None)
    return ct if isinstance(ct, dict) else None


# ---------------------------------------------------------------- identity

def kernel_name(tuner) -> str:
    """``module:qualname`` of the innermost Python function."""
    fn = tuner.base_fn
    return _canon.kernel_name(fn.__module__, fn.__qualname__)


def jit_function(tuner):
    """The JIT (or interpreted) function under the autotuner's decorator
    stack (heuristics and the like wrap it in turn), or None."""
    fn = tuner.fn
    seen = 0
    while hasattr(fn, "fn") and not inspect.isfunction(fn) and seen < 32:
        if hasattr(fn, "cache_key") or type(fn).__name__ in ("JITFunction", "InterpretedFunction"):
            return fn
        fn = fn.fn
        seen += 1
    return None


def code_guard(tuner) -> str:
    """16 hex digits that change when the kernel's code changes: over the
    JIT function's ``cache_key`` (compiled mode), else over its source."""
    jit = jit_function(tuner)
    if jit is not None and type(jit).__name__ != "InterpretedFunction":
        try:
            ck = jit.cache_key
        except Exception:  # dependencies that cannot be resolved yet
            ck = None
        if isinstance(ck, str) and ck:
            return _canon.code_guard("cache_key", ck)
    src = getattr(jit, "src", None) if jit is not None else None
    if not isinstance(src, str):
        try:
            src = inspect.getsource(tuner.base_fn)
        except (OSError, TypeError):
            src = getattr(tuner.base_fn.__code__, "co_code", b"").hex()
    return _canon.code_guard("source", src)


def kernel_identity(tuner) -> str:
    """``module:qualname@guard`` (see :mod:`detd._canon`)."""
    return _canon.kernel_identity(kernel_name(tuner), code_guard(tuner))


# ---------------------------------------------------------------- keys

def triton_key(tuner, args, kwargs) -> tuple:
    """Triton's own autotune key, rebuilt the way ``Autotuner.run`` does
    (3.3 to 3.9). Used only where Triton computes none (single-config
    tuners) so that they can still be listed."""
    nargs = dict(zip(tuner.arg_names, args))
    all_args = {**nargs, **kwargs}
    _args = {k: v for (k, v) in all_args.items() if k in tuner.arg_names}
    key = [_args[k] for k in tuner.keys if k in _args]
    for _, arg in _args.items():
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key)


def megatron_key(tuner, args, kwargs) -> str:
    """The call's key in Megatron-LM's ``tuning_key`` form (see
    :func:`detd._canon.megatron_key`). Raises whatever ``str()`` of an
    argument raises."""
    named = dict(zip(tuner.arg_names, args))
    named.update(kwargs)
    return _canon.megatron_key([(n, named[n]) for n in tuner.keys if n in named],
                               [str(v.dtype) for v in named.values() if hasattr(v, "dtype")])


# ---------------------------------------------------------------- cache and run slots

# Governed tuners launching through Triton's own run (see
# use_original_run()): tuner -> the hook's state for their misses.
direct_tuners: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()


def cache_of(tuner):
    """The autotuner's ``cache`` as it is (None when it has none)."""
    return tuner.__dict__.get("cache")


def set_cache(tuner, cache):
    """Replace the autotuner's ``cache`` (Triton's run reads it on every call)."""
    tuner.__dict__["cache"] = cache


def cache_putter(tuner, key, live: dict):
    """``put(config)`` for the tuner's ``key`` (see
    :class:`detd._process.Provisional`): the live config of the canonical
    string ``config`` (one of ``live``) becomes the key's entry in the
    tuner's cache, or None drops the entry (the cache's own ``pop``). The
    tuner is held weakly: once it is gone, every put is done."""
    ref = weakref.ref(tuner)

    def put(config) -> bool:
        t = ref()
        cache = t.__dict__.get("cache") if t is not None else None
        if t is None or not isinstance(cache, dict) or (config is not None and config not in live):
            return t is None
        if config is None:
            cache.pop(key, None)
        else:
            dict.__setitem__(cache, key, live[config])
        return True

    return put


def use_original_run(tuner):
    """Shadow the class-level patched run with Triton's own, bound to the
    tuner: a launch runs exactly Triton's code. A bound method pickles as
    ``getattr(obj, "run")``, which a copy resolves again."""
    tuner.__dict__["run"] = _original_run.__get__(tuner, type(tuner))


def use_patched_run(tuner):
    """Undo :func:`use_original_run` (no-op when not shadowed)."""
    if tuner.__dict__.get("run") is not None:
        del tuner.__dict__["run"]


def original_run():
    """Triton's own ``Autotuner.run``, the function under detd's patch
    (None before :func:`patch`): called as ``original_run()(tuner, *args,
    **kwargs)``, it runs Triton's code with no frame of detd between."""
    return _original_run


def run_frame_call(depth: int):
    """``(tuner, args, kwargs)`` of Triton's ``Autotuner.run`` when it is
    the frame ``depth`` levels above the caller (1: the caller's caller),
    else None."""
    if _original_run is None:
        return None
    frame = sys._getframe(depth + 1)
    if frame.f_code is not _original_run.__code__:
        return None
    loc = frame.f_locals
    tuner = loc.get("self")
    if tuner is None:
        return None
    return tuner, loc.get("args", ()), loc.get("kwargs", {})


# ---------------------------------------------------------------- timing

def has_pruner(tuner) -> bool:
    """Whether the autotuner prunes its configs per call
    (``early_config_prune`` or ``perf_model``, the two halves of
    ``prune_configs_by``)."""
    return bool(getattr(tuner, "early_config_prune", None) or getattr(tuner, "perf_model", None))


def prune(tuner, args, kwargs) -> List[Any]:
    """The configs Triton would benchmark for this call: the tuner's own
    ``prune_configs`` (``early_config_prune``, then ``perf_model`` with its
    ``top_k``), run as Triton's ``run`` runs it (``nargs`` set first). The
    list may hold objects that are not in ``tuner.configs`` (pruners that
    build new ``Config`` objects): those are the live candidates. Raises
    whatever the pruner raises."""
    tuner.nargs = dict(zip(tuner.arg_names, args))
    _tls.skip = None
    return list(_original_prune(tuner, kwargs))


def time_candidates(tuner, args, kwargs, pruned, record: bool = True, stop=None, each=None, order=None) -> tuple:
    """Time each config of ``pruned`` (the list :func:`prune` returned) with
    the tuner's own ``_bench`` (Triton's benchmarker or the kernel's
    ``do_bench=``), as Triton's ``benchmark()`` does, and set
    ``configs_timings`` and ``bench_time``.

    Triton's ``_bench`` turns out-of-resources and compile-time assertion
    failures into ``inf`` itself; any other exception a candidate raises
    while compiling or running (a compile error, an API the installed
    Triton lacks) is caught here, the candidate counts as failed (``inf``,
    as Triton's benchmarker treats the ones it knows), and the exception is
    returned so the caller can raise it when every candidate failed.
    ``record`` False leaves ``configs_timings`` and ``bench_time`` as they
    were (a rank benchmarking a share of another rank's pass). ``stop(e)``
    true raises ``e`` at once (an error of the process, not of the
    candidate); ``each(i)`` is called before candidate ``i``; ``order``:
    the indices of ``pruned`` in the order to measure them (default: list
    order). Returns ``(timings, errors)``: ``Config -> timing`` (a float
    or a list of them), in the order of ``pruned`` whatever the order of
    measuring, and ``Config -> exception``."""
    tuner.nargs = dict(zip(tuner.arg_names, args))
    _tls.skip = None
    start = time.time()
    timings, errors = {}, {}
    for i in order if order is not None else range(len(pruned)):
        config = pruned[i]
        if each is not None:
            each(i)
        try:
            timings[config] = tuner._bench(*args, config=config, **kwargs)
        except Exception as e:  # noqa: BLE001 - every failure counts, as inf
            if stop is not None and stop(e):
                raise
            errors[config] = e
            timings[config] = [float("inf"), float("inf"), float("inf")]
        tuner.nargs = dict(zip(tuner.arg_names, args))  # a hook may have cleared it
    timings = {c: timings[c] for c in pruned if c in timings}
    if record:
        tuner.bench_time = time.time() - start
        tuner.configs_timings = timings
    return timings, errors


# How Autotuner._bench asks its benchmarker for a candidate (3.3 to 3.9).
_RETURN_MODE = "quantiles=0.5,0.2,0.8"


def _callable_name(fn) -> str:
    """``module.qualname`` of a benchmarker (a partial: of its function)."""
    fn = getattr(fn, "func", fn)
    mod, name = getattr(fn, "__module__", None) or "", getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{mod}.{name}" if mod in ("triton.testing",) else f"{mod}:{name}" if mod else name


# The short measurement of screening (DETD_SCREEN, detd._measure.measure):
# the tuner's own benchmarker with this warmup and rep (ms).
SCREEN_WARMUP_MS = 2
SCREEN_REP_MS = 10


def screening(tuner):
    """``run(fn)``: ``fn()`` called with the tuner's benchmarker set to
    its short screening measurement (the same benchmarker with
    :data:`SCREEN_WARMUP_MS` and :data:`SCREEN_REP_MS`), restored after;
    or None where the benchmarker takes no ``warmup`` and ``rep`` (CUDA
    graphs, the deprecated ``warmup``/``rep`` arguments, a ``do_bench=``
    without them): such a tuner is measured in full."""
    try:
        fn = tuner.do_bench  # 3.6+: a property (the driver's benchmarker when unset)
        params = inspect.signature(getattr(fn, "func", fn)).parameters
    except Exception:  # noqa: BLE001 - no active driver, an odd callable: not screened
        return None
    if "warmup" not in params or "rep" not in params:
        return None
    short = functools.partial(fn, warmup=SCREEN_WARMUP_MS, rep=SCREEN_REP_MS)

    def run(fn_):
        # The instance's own do_bench: 3.3's attribute, 3.6+'s
        # cached_property value (the instance's entry wins over it).
        had = "do_bench" in vars(tuner)
        old = vars(tuner).get("do_bench")
        tuner.do_bench = short
        try:
            return fn_()
        finally:
            if had:
                tuner.do_bench = old
            else:
                del tuner.do_bench
    return run


def benchmarker(tuner, screened: Optional[float] = None, contended: int = 0) -> dict:
    """The benchmarker this tuner's ``_bench`` uses and its settings, for
    the decision's provenance: ``do_bench_cudagraph`` (``use_cuda_graph``)
    or ``do_bench`` with the tuner's ``warmup``/``rep`` (the deprecated
    arguments), else its ``do_bench`` (the kernel's ``do_bench=``, or the
    driver's benchmarker) with the warmup and rep its signature or partial
    gives (0: unknown). ``screened``: the band of a pass that screened
    (DETD_SCREEN), said in ``return_mode``; ``contended``: how many
    candidates were measured again once compiling ended
    (DETD_COMPILE_OVERLAP), said there too."""
    got = _benchmarker(tuner)
    if screened is not None:
        got["return_mode"] += (f"; screened with warmup {SCREEN_WARMUP_MS} ms, rep {SCREEN_REP_MS} ms, "
                               f"those within {screened:.0%} of the best measured in full")
    if contended:
        got["return_mode"] += f"; {contended} measured while compiling, measured again after"
    return got


def _benchmarker(tuner) -> dict:
    reps = getattr(tuner, "num_reps", None)
    warm = getattr(tuner, "num_warmups", None)
    if getattr(tuner, "use_cuda_graph", False):
        return dict(benchmarker="triton.testing.do_bench_cudagraph", rep=reps or 100, cuda_graphs=True,
                    return_mode=_RETURN_MODE)
    if warm is not None or reps is not None:
        return dict(benchmarker="triton.testing.do_bench", warmup=warm or 25, rep=reps or 100,
                    return_mode=_RETURN_MODE)
    try:
        fn = tuner.do_bench  # 3.6+: a property (the driver's benchmarker when unset)
    except Exception:  # noqa: BLE001 - no active driver: not known
        return dict(return_mode=_RETURN_MODE)
    settings = {}
    try:
        target = getattr(fn, "func", fn)
        for p in inspect.signature(target).parameters.values():
            if p.name in ("warmup", "rep") and isinstance(p.default, (int, float)):
                settings[p.name] = p.default
        settings.update({k: v for k, v in (getattr(fn, "keywords", None) or {}).items() if k in ("warmup", "rep")})
    except (TypeError, ValueError):  # a builtin or an odd callable: not known
        pass
    return dict(benchmarker=_callable_name(fn), return_mode=_RETURN_MODE, **settings)


def set_timings(tuner, timings, seconds):
    """Set ``configs_timings`` and ``bench_time`` as Triton's
    ``benchmark()`` leaves them (after a re-measure merged into a pass)."""
    tuner.configs_timings = timings
    tuner.bench_time = seconds


def compile_only(tuner, args, kwargs, config, device=None) -> bool:
    """Compile ``config`` of the call into Triton's caches without
    launching anything: ``warmup`` of the function under the autotuner
    (``JITFunction.warmup(*args, grid=..., **meta)`` in 3.3 to 3.9, also
    through ``heuristics``), with the meta-parameters the tuner's
    ``_bench`` would launch it with. The on-disk cache then holds the
    binary, and the process that times the key loads it instead of
    compiling (the specialization is the call's: same arguments, same
    key). ``device`` (:func:`current_device` of the thread that will
    launch it): made this thread's current device first, for a compile
    in another thread (CUDA's current device is per thread). Returns
    False when there is nothing to compile (the CPU interpreter) or no
    ``warmup``, else the binary's hash (its cache key; True where the
    release returns none); raises what compiling raises."""
    if interpreting():
        return False
    warm = getattr(tuner.fn, "warmup", None)
    if warm is None:
        return False
    if device is not None:
        from triton.runtime import driver

        if driver.active.get_current_device() != device:
            driver.active.set_current_device(device)
    # The call's kwargs as Autotuner.run received them: fn[grid](...) puts
    # grid= and warmup= there (run's own arguments, not the kernel's).
    meta = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
    kernel = warm(*args, grid=(1,), **dict(meta, **config.all_kwargs()))
    return getattr(kernel, "hash", None) or True  # the binary's cache key: the one a worker made, when loaded


@functools.lru_cache(maxsize=1)
def remote_compiles() -> bool:
    """Whether candidates can be compiled in other processes
    (:mod:`detd._workers`): kernels are compiled (not the CPU interpreter),
    by a Triton that compiles in threads itself (:func:`compiles_in_threads`:
    3.6 and 3.9) and calls ``knobs.runtime.jit_cache_hook`` before each
    compile, which :func:`remote_spec` captures the compile from."""
    if interpreting() or not compiles_in_threads():
        return False
    try:
        from triton import knobs

        return hasattr(knobs.runtime, "jit_cache_hook")
    except Exception:  # noqa: BLE001 - no knobs: no capture
        return False


_capture = threading.local()
_capture_lock = threading.Lock()


def _captured(tuner, args, kwargs, config, device=None) -> Optional[dict]:
    """What ``knobs.runtime.jit_cache_hook`` is told of ``config``'s compile
    (``fn``: the kernel's info, ``compile``: Triton's compile arguments)
    during a ``warmup`` that compiles nothing, or None (the binary is in
    this process already). Another thread's compile meanwhile goes to the
    hook that was there (the hook is set for the capture alone)."""
    from triton import knobs

    got = []

    def hook(**kw):
        if getattr(_capture, "on", False):
            got.append(kw)
            return True  # compile nothing
        return prev(**kw) if prev is not None else None

    with _capture_lock:
        prev = hook.detd_prev = knobs.runtime.jit_cache_hook  # detd_prev: after_fork() puts it back
        knobs.runtime.jit_cache_hook, _capture.on = hook, True
        try:
            compile_only(tuner, args, kwargs, config, device)
        finally:
            knobs.runtime.jit_cache_hook, _capture.on = prev, False
    return got[0] if len(got) == 1 else None


def after_fork() -> None:
    """In a forked child: the capture's lock anew (a thread of the parent
    may have held it at the fork), and Triton's compile hook as it was
    before a capture the fork cut short."""
    global _capture_lock
    _capture_lock = threading.Lock()
    runtime = getattr(getattr(sys.modules.get("triton"), "knobs", None), "runtime", None)
    hook = getattr(runtime, "jit_cache_hook", None)
    if hasattr(hook, "detd_prev"):
        runtime.jit_cache_hook = hook.detd_prev


def remote_spec(tuner, args, kwargs, config) -> Optional[dict]:
    """What a compile worker needs to compile ``config`` of the call the
    way this process would (:func:`compile_spec`): Triton's own compile
    arguments (signature, constants, attributes, options, target), captured
    without compiling (:func:`_captured`), and the kernel's module, name and
    source hash (``cache_key``), by which the worker finds it. None when
    there is nothing to compile (the binary is in this process already) or
    the worker could not find the kernel by name (defined in ``__main__``
    or inside a function, a kernel passed as a constant)."""
    got = _captured(tuner, args, kwargs, config)
    if got is None:
        return None
    info, comp = got["fn"], got["compile"]
    if info.module == "__main__" or "<" in info.name:
        return None
    if any(type(v).__name__ == "JITFunction" for v in comp["constants"].values()):
        return None
    import json

    from triton.runtime import driver

    t = driver.active.get_current_target()
    return dict(module=info.module, qualname=info.name, source=info.jit_function.cache_key,
                signature=comp["signature"], constants=comp["constants"], attrs=comp["configs"][0],
                options=json.loads(comp["specialization_data"])["options"], target=(t.backend, t.arch, t.warp_size))


def compile_spec(spec: dict) -> str:
    """Compile a :func:`remote_spec` into Triton's caches (a compile
    worker's side): the kernel found by module and name (through the
    autotuner or heuristics bound to the name), checked to have the same
    source hash as where the spec was made, compiled for the spec's target
    with its options. Returns the binary's cache key. Raises LookupError
    for a kernel not found or with other source here, and what compiling
    raises."""
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import JITFunction

    fn: Any = importlib.import_module(spec["module"])
    for part in spec["qualname"].split("."):
        fn = getattr(fn, part, None)
    if not isinstance(fn, JITFunction):
        fn = jit_function(fn) if hasattr(fn, "fn") else None  # under the autotuner or heuristics bound to the name
    where = f"{spec['module']}.{spec['qualname']}"
    if not isinstance(fn, JITFunction):
        raise LookupError(f"{where} is not a Triton kernel here")
    if fn.cache_key != spec["source"]:
        raise LookupError(f"{where} has other source here than where it was asked for")
    target = GPUTarget(*spec["target"])
    options = make_backend(target).parse_options(
        {k: tuple(v) if isinstance(v, list) else v for k, v in spec["options"].items()})
    src = triton.compiler.ASTSource(fn, spec["signature"], spec["constants"], spec["attrs"])
    return triton.compile(src, target=target, options=options.__dict__).hash


class _NoMetadata:
    def __getattr__(self, name):  # what a launcher reads of a binary's metadata after building: unknown
        return None


def prepare_launcher(tuner, args, kwargs, config, device=None) -> bool:
    """Build into Triton's cache the launcher of ``config``'s call (the C
    stub 3.3 to 3.6 compile with the C compiler when a kernel of a new
    signature first launches, ``make_launcher``; 3.9 has one for all) from
    its compile arguments captured without compiling (3.6): the timing
    pass's first benchmark finds it built. It depends on the signature, not
    the meta-parameters (a binary that changes it, with tensor descriptors,
    builds its own at launch). Returns whether one was built or found."""
    if interpreting() or not remote_compiles():
        return False
    from triton.compiler import ASTSource
    from triton.runtime import driver

    launcher = driver.active.launcher_cls
    if getattr(sys.modules.get(launcher.__module__), "make_launcher", None) is None:
        return False  # 3.9+: nothing built per signature
    got = _captured(tuner, args, kwargs, config, device)
    if got is None:
        return False
    comp = got["compile"]
    launcher(ASTSource(got["fn"].jit_function, comp["signature"], comp["constants"], comp["configs"][0]),
             _NoMetadata())
    return True


@functools.lru_cache(maxsize=1)
def compiles_in_threads() -> bool:
    """Whether the installed Triton compiles kernels in threads itself
    (``triton.AsyncCompileMode``: ``warmup`` in a thread pool, module
    ``triton.runtime._async_compile``; 3.6 and 3.9 have it, 3.3 not):
    there, detd's threads compiling ahead (``compile_only`` in a pool) do
    what Triton supports (``DETD_COMPILE_AHEAD=auto`` uses them). Looked
    up once per process (a process has one Triton)."""
    try:
        import importlib.util

        return importlib.util.find_spec("triton.runtime._async_compile") is not None
    except Exception:  # noqa: BLE001 - no Triton, or a broken one: no threads
        return False


def current_device():
    """The active Triton driver's current device of this thread, or None
    (the CPU interpreter, or no driver)."""
    if interpreting():
        return None
    try:
        from triton.runtime import driver

        return driver.active.get_current_device()
    except Exception:  # noqa: BLE001 - no driver: no device to carry over
        return None


def finish_pass(tuner, key, kwargs, chosen):
    """What Triton does after a timing pass, for ``chosen``: the autotuner's
    ``pre_hook(..., reset_only=True)``, then (3.9+) the
    ``knobs.autotuning.listener``."""
    full_nargs = {**tuner.nargs, **kwargs, **chosen.all_kwargs()}
    tuner.pre_hook(full_nargs, reset_only=True)
    try:
        from triton import knobs

        listener = getattr(getattr(knobs, "autotuning", None), "listener", None)
    except ImportError:
        return
    if listener is None:
        return
    listener(fn=jit_function(tuner) or tuner.fn, key=key, best_config=chosen,
             configs_timings=getattr(tuner, "configs_timings", None), duration=getattr(tuner, "bench_time", None),
             cache_hit=False)


def best_config(tuner):
    """``tuner.best_config`` (the config of its last launch), or None."""
    return getattr(tuner, "best_config", None)


def named_args(tuner, args, kwargs) -> dict:
    """The call's arguments by name (positional ones by ``arg_names``),
    the way Triton's ``run`` builds ``nargs``, plus the keyword ones."""
    return {**dict(zip(tuner.arg_names, args)), **kwargs}


def replay(tuner, config, args, kwargs):
    """Launch the kernel once with ``config`` the way Triton's ``run``
    launches a resolved key: the config's ``pre_hook`` on the call's named
    arguments, then the function under the autotuner (heuristics and all)
    with the config's meta-parameters. No timing, no cache, no autotuner
    hooks (Triton runs those only while benchmarking)."""
    nargs = dict(zip(tuner.arg_names, args))
    if config.pre_hook is not None:
        config.pre_hook({**nargs, **kwargs, **config.all_kwargs()})
    return tuner.fn.run(*args, **kwargs, **config.all_kwargs())


# ---------------------------------------------------------------- coverage

def run_is_triton(tuner) -> bool:
    """Whether the tuner's class uses ``Autotuner.run`` itself (no subclass
    override): only such tuners may launch through Triton's own run bound
    to the instance (an instance-level ``run`` would skip the override)."""
    return getattr(type(tuner), "run", None) is _patched_run


def _subclasses(cls):
    out, todo = [], list(cls.__subclasses__())
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


def ungoverned_classes() -> List[str]:
    """``module.qualname`` of every ``Autotuner`` subclass that overrides
    ``run`` (watched: a call of theirs that never reaches ``Autotuner.run``
    is reported as ungoverned)."""
    from triton.runtime import autotuner as at

    return sorted(f"{c.__module__}.{c.__qualname__}" for c in _subclasses(at.Autotuner) if "run" in c.__dict__)


def class_names(tuner) -> Tuple[str, ...]:
    """``module.qualname`` of the tuner's class and of every class above it."""
    return tuple(f"{c.__module__}.{c.__qualname__}" for c in type(tuner).__mro__)


def _watch_subclass(cls):
    """Wrap the ``run`` a subclass defines: a call that returns without
    having reached the patched ``Autotuner.run`` (the subclass does its own
    thing) is handed to the hook's ``bypassed`` callback, so the tuner is
    listed and observed as ungoverned instead of being missed silently."""
    orig = cls.__dict__.get("run")
    if orig is None or getattr(orig, "__detd_original__", None) is not None or not callable(orig):
        return

    def run(self, *args, **kwargs):
        prev = _tls.__dict__.get("reached")
        if _active is not None and _active() and _cache_governed is not None and _cache_governed(self):
            # A tuner that asks its cache before choosing (flag-gems'
            # LibTuner): its own run, under the hook's full path.
            _tls.reached = True
            return _full_run(self, self.__dict__.get("cache"), args, kwargs, orig)
        _tls.reached = False
        try:
            return orig(self, *args, **kwargs)
        finally:
            reached = _tls.__dict__.get("reached")
            _tls.reached = bool(prev) or bool(reached)  # an enclosing watched run reached it too
            if not reached and _active is not None and _active() and _bypassed is not None:
                _bypassed(self, cls.__module__ + "." + cls.__qualname__, args, kwargs)

    run.__detd_original__ = orig
    run.__name__, run.__qualname__, run.__doc__ = orig.__name__, orig.__qualname__, orig.__doc__
    run.__wrapped__ = orig
    setattr(cls, "run", run)


def _on_subclass(cls, **kw):
    super(_autotuner_class, cls).__init_subclass__(**kw)
    _watch_subclass(cls)


_autotuner_class = None


# ---------------------------------------------------------------- the patches

_original_run = None
_original_prune = None
_original_bench = None
# Whether Triton's run still times a single pruned candidate (before 3.9);
# set by patch().
_single_config_benched = True
_tls = threading.local()
# Set by patch(): whether the hook is on (a function), its full-path run
# and its resolver of a direct tuner's new key.
_active = None
_full_run = None
_resolve_direct = None
_bypassed = None
_cache_governed = None


def _patched_run(self, *args, **kwargs):
    """``Autotuner.run`` once patched (installed as is: no extra frame).

    Inactive, or a tuner on the direct path called through the class:
    Triton's run. Otherwise the hook's full path, given the tuner's cache.
    Marks the call as reached for a watched subclass's ``run``."""
    _tls.reached = True
    if not _active() or self in direct_tuners:
        return _original_run(self, *args, **kwargs)
    return _full_run(self, self.__dict__.get("cache"), args, kwargs)


def _patched_prune(self, kwargs, *rest, **kw):
    """``Autotuner.prune_configs`` once patched. Triton's run calls it only
    when a key misses its cache; for a tuner on the direct path that is
    where a new key is resolved through the daemon. Returns the resolved
    config as the only candidate, so Triton's run stores it and launches
    it; Triton releases that still time a single candidate get the
    measurement skipped (:func:`_patched_bench`). Every other caller
    (``warmup``, the timing pass, tuners on the full path) gets Triton's
    own pruning."""
    _tls.skip = None
    st = direct_tuners.get(self) if _active() else None
    cache = self.__dict__.get("cache")
    if st is None or type(cache) is not dict:
        return _original_prune(self, kwargs, *rest, **kw)
    # Triton's run is the caller, or a few frames up when something (a
    # profiler, a counting wrapper) wraps prune_configs in turn.
    frame = sys._getframe(1)
    for _ in range(4):
        if frame is None or (frame.f_code is _original_run.__code__ and frame.f_locals.get("self") is self):
            break
        frame = frame.f_back
    if frame is None or frame.f_code is not _original_run.__code__:
        return _original_prune(self, kwargs, *rest, **kw)
    key = frame.f_locals.get("key")
    args = frame.f_locals.get("args", ())
    del frame
    chosen = _resolve_direct(self, st, cache, key, args, kwargs)
    if chosen is None:  # no longer governed: Triton times it, the full path observes
        return _original_prune(self, kwargs, *rest, **kw)
    if _single_config_benched:
        timed = getattr(self, "configs_timings", None)
        _tls.skip = (self, chosen, timed.get(chosen, 0.0) if isinstance(timed, dict) else 0.0)
    return [chosen]


def _patched_bench(self, *args, config, **meta):
    """``Autotuner._bench`` once patched: the one measurement a Triton run
    asks for right after :func:`_patched_prune` resolved the key returns
    the resolved config's own timing (when this process timed it) instead
    of launching; everything else is Triton's benchmark."""
    skip = _tls.__dict__.get("skip")
    if skip is not None and skip[0] is self and skip[1] is config:
        _tls.skip = None
        return skip[2]
    return _original_bench(self, *args, config=config, **meta)


def restore_run(module: str) -> bool:
    """Undo another package's patch of ``Autotuner.run`` (see
    :mod:`detd._megatron`): when the method in place, or the one detd's
    patch runs underneath, is a function of ``module`` (e.g.
    ``megatron.core.tuning.interception``'s ``policy_run``), put back the
    function it wraps: its ``__wrapped__`` (``functools.wraps``), else its
    closure's ``original_run``. Returns True when a patch was undone."""
    global _original_run
    from triton.runtime import autotuner as at

    def under(f):
        # Its module as its globals say: functools.wraps copies __module__.
        if f is None or (getattr(f, "__globals__", None) or {}).get("__name__") != module:
            return None
        inner = getattr(f, "__wrapped__", None)
        code, cells = getattr(f, "__code__", None), getattr(f, "__closure__", None) or ()
        if inner is None and code is not None:
            inner = dict(zip(code.co_freevars, (c.cell_contents for c in cells))).get("original_run")
        return inner if callable(inner) else None

    current = at.Autotuner.run
    inner = under(current)
    if inner is not None:
        at.Autotuner.run = inner
        return True
    inner = under(getattr(current, "__detd_original__", None))
    if inner is not None:  # detd's patch sits on top of it
        _patched_run.__detd_original__ = inner
        _original_run = inner
        return True
    return False


def patch(active, full_run, resolve_direct, bypassed=None, cache_governed=None) -> bool:
    """Patch ``Autotuner.run``, ``prune_configs`` and ``_bench`` of
    ``triton.runtime.autotuner`` once (idempotent).

    ``active()`` says whether the hook is on; ``full_run(tuner, cache,
    args, kwargs)`` runs a call that is not on the direct path and returns
    what Triton's run returns; ``resolve_direct(tuner, st, cache, key,
    args, kwargs)`` (``st``: the tuner's value in :data:`direct_tuners`)
    resolves a new key of a direct tuner and returns the live config to
    launch, or None to leave it to Triton; ``bypassed(tuner, cls, args,
    kwargs)`` is told of a call of an ``Autotuner`` subclass whose own
    ``run`` never reached ``Autotuner.run`` (subclasses defined before and
    after this call are watched); ``cache_governed(tuner)`` says whether
    such a subclass's ``run`` is governed through its ``cache`` (it asks
    ``key in self.cache`` before choosing and launches ``self.cache[key]``):
    its calls then go to ``full_run(tuner, cache, args, kwargs, run)`` with
    its own ``run``. Returns True when this call patched the class, False
    when it was patched already."""
    global _original_run, _original_prune, _original_bench, _single_config_benched
    global _active, _full_run, _resolve_direct, _bypassed, _autotuner_class, _cache_governed
    from triton.runtime import autotuner as at

    _active, _full_run, _resolve_direct, _bypassed = active, full_run, resolve_direct, bypassed
    _cache_governed = cache_governed
    _autotuner_class = at.Autotuner
    for c in _subclasses(at.Autotuner):
        _watch_subclass(c)
    current = at.Autotuner.run
    if getattr(current, "__detd_original__", None) is not None:
        _original_run = current.__detd_original__
        _original_prune = at.Autotuner.prune_configs.__detd_original__
        _original_bench = at.Autotuner._bench.__detd_original__
        return False

    _original_run, _original_prune, _original_bench = current, at.Autotuner.prune_configs, at.Autotuner._bench
    try:
        _single_config_benched = "len(pruned_configs) == 1" not in inspect.getsource(current)
    except (OSError, TypeError):
        _single_config_benched = True  # a stale skip is cleared by the next prune
    _patched_run.__detd_original__ = current
    _patched_prune.__detd_original__ = _original_prune
    _patched_bench.__detd_original__ = _original_bench
    at.Autotuner.prune_configs = _patched_prune
    at.Autotuner._bench = _patched_bench
    at.Autotuner.run = _patched_run
    if "__init_subclass__" not in at.Autotuner.__dict__:
        at.Autotuner.__init_subclass__ = classmethod(_on_subclass)
    return True


# ---------------------------------------------------------------- benchmarkers

TESTING = "triton.testing"  # the module of Triton's benchmarkers
_BENCHMARKERS = ("do_bench", "do_bench_cudagraph")


def wrap_benchmarkers(on_call) -> List[str]:
    """Wrap ``triton.testing``'s ``do_bench`` and ``do_bench_cudagraph``
    (once per process; the module must be imported): each call first runs
    ``on_call(name, frame)`` with the benchmarker's name and its caller's
    frame (for :func:`call_site`), then Triton's function. Returns the
    names wrapped now."""
    mod = sys.modules.get(TESTING)
    done = []
    for name in _BENCHMARKERS:
        fn = getattr(mod, name, None)
        if not callable(fn) or getattr(fn, "__detd_original__", None) is not None:
            continue
        setattr(mod, name, _watched(name, fn, on_call))
        done.append(name)
    return done


def _watched(name: str, fn, on_call):
    def wrapper(*args, **kwargs):
        on_call(name, sys._getframe(1))
        return fn(*args, **kwargs)

    functools.update_wrapper(wrapper, fn)
    wrapper.__detd_original__ = fn
    return wrapper


def _under(module: str, prefixes) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def call_site(frame, listed, library, max_frames: int) -> Optional[str]:
    """The call site (``module:qualname``) of a call made from ``frame``:
    the first frame, walking out, whose module is not under ``library``;
    None when a frame of a module under ``listed`` is among the first
    ``max_frames``, or no call site was found there."""
    site = None
    n = 0
    while frame is not None and n < max_frames:
        module = str(frame.f_globals.get("__name__", "?"))
        if _under(module, listed):
            return None
        if site is None and not _under(module, library):
            code = frame.f_code
            site = f"{module}:{getattr(code, 'co_qualname', code.co_name)}"
        frame, n = frame.f_back, n + 1
    return site
