"""The Inductor adapter: ``torch.compile``'s autotuners ask detd.

Inductor chooses by timing in three places, and each becomes one detd
decision per key, made by one timing pass in the whole job:

``configs``
    ``CachingAutotuner.autotune_to_one_config`` (runtime, first launch of
    a pointwise, reduction or template kernel with several configs): the
    candidates are the canonical strings of its launchers' configs (what
    Inductor would benchmark, after its own precompile dropped the configs
    that do not compile). The designated process times them with
    Inductor's own ``benchmark_all_configs``; every process then keeps the
    launcher of the committed config.
``coordesc``
    ``CachingAutotuner.coordinate_descent_tuning`` (with
    ``coordinate_descent_tuning`` on): the candidates are every config the
    descent can reach from its start (the committed ``configs`` choice),
    filtered by ``is_valid_config`` (:func:`detd._coordesc.space`); over
    ``DETD_MAX_CANDIDATES`` (1024) the key names the search instead
    (:class:`detd._coordesc.Search`, docs/inductor.md "Large searches"). The designated
    process runs Inductor's own descent and reports the config it returned
    (the daemon's tie band is not applied to a descent's single-sample
    timings); every process checks the committed config against its own
    tuner before it compiles and launches it.
``select``
    ``AlgorithmSelectorCache.lookup`` (compile time, max-autotune: GEMM,
    convolution and other template choices): the candidates are the
    canonical strings of the ``ChoiceCaller`` objects, the whole list as
    ``make_precompile_fn`` saw it, before Inductor dropped those that
    failed to compile in this process, so every process meets the same
    key. The designated process benchmarks them with the function Inductor
    passed in (its own ``autotune``; a choice lost here reports as
    failed); every process gets timings in which the committed choice is
    1.0 and every other +inf, so Inductor's own pick is the committed
    choice (one lost here included: the precompile only served
    benchmarking). A decided selection skips that precompile. While one
    process times a selection, a waiting process precompiles shares of its
    choices as on the Triton path (``DETD_SHARE_PASS``,
    :class:`_SelectShare`); a share never changes the answer.

Identities, candidate strings, Inductor's own caches
    docs/inductor.md, "Keys" and "Inductor's caches": kernel
    ``inductor::<name>@<guard>`` (SHA-256 over the kernel's Triton source,
    or over a selection's sorted choice strings, :func:`choice_string`),
    a type-tagged key with ``torch`` and ``triton`` versions and nothing
    of the process, device index or cache path; while detd governs,
    ``install()`` turns off every Inductor cache (:data:`CACHE_OPTIONS`)
    that could hand a process a choice that is not the committed one; the
    local FX graph cache stays on, each entry read back checked against
    the daemon's decisions (:mod:`detd._graphcache`).

Releases
    torch 2.11 to 2.13 (the versions tested: 2.11 with Triton 3.6 on the
    GPU, 2.13 in the CPU interpreter). Any other release, or one lacking a
    patched method, is refused: a warning, ``detd.autotuners()`` lists the
    Inductor entry with ``status`` ``refused`` and the reason, and Inductor
    autotunes exactly as without detd.

The patches are made when ``torch._inductor`` is imported (at once, when
it already was at ``install()``): ``python -m detd.run`` installs before
the script imports torch. This module, its descent's space
(:mod:`detd._coordesc`), its graph cache check (:mod:`detd._graphcache`)
and :mod:`detd._triton` are the only ones reading attributes of Triton's
or Inductor's objects. This adapter
sits beside the Triton one (:mod:`detd._hook`), never on it: the daemon
handle, settings, identity and warnings are :mod:`detd._process`'s, the
resolve loop (ask, wait, report, retry) and its errors :mod:`detd._loop`'s.
"""

from __future__ import annotations

import collections
import hashlib
import inspect
import logging
import math
import sys
import threading
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import _canon, _coordesc, _early, _graphcache, _imports, _loop, _measure, _native, _process, _provenance, _triton

# Releases whose patched methods were tested (major, minor), inclusive.
SUPPORTED = ((2, 11), (2, 13))
PREFIX = "inductor::"
# The value every process reads for the committed choice of a selection.
_CHOSEN_MS = 1.0

_HEURISTICS = "torch._inductor.runtime.triton_heuristics"
_SELECT = "torch._inductor.select_algorithm"
_CONFIG = "torch._inductor.config"
_AOT_CONFIG = "torch._functorch.config"
_CODECACHE = "torch._inductor.codecache"

# Set False while detd governs; the names Inductor reads them by. The
# local FX graph cache stays on, checked (detd._graphcache), unless its
# patch cannot be made.
CACHE_OPTIONS = ("autotune_local_cache", "autotune_remote_cache", "bundled_autotune_remote_cache",
                 "fx_graph_remote_cache", "benchmark_epilogue_fusion")


class _Status:
    def __init__(self):
        self.status = "not loaded"   # governed, ungoverned, refused, not loaded
        self.why = "torch._inductor not imported"
        self.torch = None
        self.patched = False
        self.lock = threading.RLock()
        self.records: Dict[str, dict] = {}
        self.key_locks: Dict[Tuple[str, str], threading.Lock] = {}
        # max-autotune selections that reached lookup(): all of them, and
        # those with a benchmark (the ones a timing pass can answer).
        self.lookups = self.lookups_timed = 0
        # Choices a waiting process precompiled for a selection's timing
        # process (its shares), and those whose precompile raised.
        self.shares = self.share_errors = 0
        # Each selection's whole list of choices, noted before Inductor
        # precompiles them (make_precompile_fn), by (op, inputs key): its
        # strings, each with a weak reference to the choice.
        self.full: "collections.OrderedDict[Tuple[str, str], tuple]" = collections.OrderedDict()
        # Choices that failed to compile here (a selection keyed by the
        # whole list all the same), committed ones among them, used all the
        # same; choices not precompiled: decided, another process times
        # them; and those precompiled after all (the pass came here).
        self.failed_here = self.lost_used = self.precompiles_skipped = 0
        self.precompiles_deferred = self.deferred_compiled = 0
        self.graph_cache_off: Optional[str] = None  # why, when detd._graphcache cannot check it


_st = _Status()
_orig: Dict[str, Any] = {}
log = logging.getLogger("detd")


# ---------------------------------------------------------------- versions

def torch_version() -> str:
    mod = sys.modules.get("torch")
    return str(getattr(mod, "__version__", "")) if mod is not None else ""


def _parse(v: str) -> Optional[Tuple[int, int]]:
    try:
        major, minor = v.split("+", 1)[0].split(".")[:2]
        return int(major), int(minor)
    except (ValueError, IndexError):
        return None


def refusal(version: str, heuristics=None, select=None) -> Optional[str]:
    """Why this torch release is not governed, or None when it is."""
    mm = _parse(version)
    lo, hi = SUPPORTED
    if mm is None or not lo <= mm <= hi:
        return (f"torch {version or '?'} is not supported (detd governs Inductor of torch "
                f"{lo[0]}.{lo[1]} to {hi[0]}.{hi[1]})")
    need = []
    if heuristics is not None:
        cls = getattr(heuristics, "CachingAutotuner", None)
        for m in ("autotune_to_one_config", "benchmark_all_configs", "coordinate_descent_tuning",
                  "_precompile_config"):
            if cls is None or not hasattr(cls, m):
                need.append(f"CachingAutotuner.{m}")
        if not hasattr(heuristics, "check_autotune_cache"):
            need.append("check_autotune_cache")
    if select is not None:
        cls = getattr(select, "AlgorithmSelectorCache", None)
        if cls is None or not hasattr(cls, "lookup"):
            need.append("AlgorithmSelectorCache.lookup")
    if need:
        return f"torch {version}: Inductor lacks {', '.join(need)}"
    return None


def status() -> dict:
    """The Inductor entry of ``detd.autotuners()``'s status: ``status``
    (governed, ungoverned, refused, not loaded), ``why``, ``torch``, and
    ``selections``: how many max-autotune selections reached Inductor's
    ``lookup`` (``seen``) and how many of them could be timed (``timed``:
    they came with a benchmark; the others only read a cache); and
    ``graph_cache``: Inductor's FX graph cache under detd (``checked``,
    ``off: <why>``, ``not loaded``)."""
    off, on = _st.graph_cache_off, _graphcache.installed()
    return dict(status=_st.status, why=_st.why, torch=_st.torch,
                selections=dict(seen=_st.lookups, timed=_st.lookups_timed),
                graph_cache=f"off: {off}" if off else "checked" if on else "not loaded")


def counts() -> dict:
    """This process's selection counters for ``detd.stats()``:
    ``inductor_shares`` (choices precompiled here for another process's
    pass), ``inductor_share_errors`` (those whose precompile raised;
    logged once), ``inductor_failed_here`` (choices of governed selections
    that failed to compile here; logged once), ``inductor_lost_used``
    (committed choices among those, used all the same; logged once),
    ``inductor_precompiles_skipped`` (choices not precompiled: decided),
    ``inductor_precompiles_deferred`` (not precompiled: another process
    times them), ``inductor_deferred_compiled`` (those precompiled after
    all: the pass came here), :func:`detd._early.counts` and
    :func:`detd._graphcache.counts`."""
    with _st.lock:
        return dict(inductor_shares=_st.shares, inductor_share_errors=_st.share_errors,
                    inductor_failed_here=_st.failed_here, inductor_lost_used=_st.lost_used,
                    inductor_precompiles_skipped=_st.precompiles_skipped,
                    inductor_precompiles_deferred=_st.precompiles_deferred,
                    inductor_deferred_compiled=_st.deferred_compiled, **_early.counts(),
                    **_graphcache.counts())


# ---------------------------------------------------------------- install

def _mode_governs() -> bool:  # by the settings; the patches may not be made yet
    return _process.active() and _process.settings().mode in ("pinned", "coordinated")


def _apply_settings():
    """Cache options off while governing (see the module docstring); as
    soon as Inductor's config module is imported, before any compile can
    read a cache, unless this torch release is refused."""
    if _st.status == "refused":
        return
    settings = _process.settings()
    if not _mode_governs():
        if _st.patched:
            _st.status, _st.why = "ungoverned", f"mode {settings.mode}"
        return
    if refusal(torch_version()) is not None:
        return  # refused with its warning once the runtime module is imported
    cfg = sys.modules.get(_CONFIG)
    if cfg is not None:
        for name in CACHE_OPTIONS + (("fx_graph_cache",) if _st.graph_cache_off else ()):
            if hasattr(cfg, name):
                setattr(cfg, name, False)
        if hasattr(cfg, "pipeline_max_autotune_gemm"):  # bypasses lookup()
            cfg.pipeline_max_autotune_gemm = False
    aot = sys.modules.get(_AOT_CONFIG)
    if aot is not None and hasattr(aot, "enable_autograd_cache"):
        aot.enable_autograd_cache = False
    if _st.patched:
        _st.status, _st.why = "governed", f"mode {settings.mode}"


_WATCH = (_HEURISTICS, _SELECT, _CONFIG, _AOT_CONFIG, _CODECACHE)


def _try_patch():
    """Patch the runtime autotuner once its module is imported; refuse
    unsupported releases."""
    heur = sys.modules.get(_HEURISTICS) if _imports.loaded(_HEURISTICS) else None
    if heur is None or _st.patched or _st.status == "refused":
        return
    with _st.lock:
        if _st.patched or _st.status == "refused":
            return
        _st.torch = torch_version()
        why = refusal(_st.torch, heur)
        if why is not None:
            _st.status, _st.why = "refused", why
            _process.warn_once("inductor-version", f"detd: {why}: torch.compile's autotuning is not governed")
            return
        cls = heur.CachingAutotuner
        _orig["a2o"] = cls.autotune_to_one_config
        _orig["coordesc"] = cls.coordinate_descent_tuning
        _orig["check_cache"] = heur.check_autotune_cache
        cls.autotune_to_one_config = _patched_a2o
        cls.coordinate_descent_tuning = _patched_coordesc
        heur.check_autotune_cache = _patched_check_cache
        _st.patched = True
    _patch_select()
    _apply_settings()


def _patch_select():
    sel = sys.modules.get(_SELECT) if _imports.loaded(_SELECT) else None
    if sel is None or "lookup" in _orig or not _st.patched:
        return
    with _st.lock:
        if "lookup" not in _orig:
            why = refusal(_st.torch or torch_version(), None, sel)
            if why is not None:
                _unpatch()
                _st.status, _st.why = "refused", why
                _process.warn_once("inductor-version", f"detd: {why}: torch.compile's autotuning is not governed")
                return
            cls = sel.AlgorithmSelectorCache
            _orig["lookup"] = cls.lookup
            cls.lookup = _patched_lookup
            if callable(getattr(cls, "make_precompile_fn", None)):
                _orig["precompile_fn"] = cls.make_precompile_fn
                cls.make_precompile_fn = _patched_precompile_fn
            pos = _multi_position(cls.__call__)
            if pos is not None:
                _orig["call"], _orig["multi_pos"] = cls.__call__, pos
                cls.__call__ = _patched_call


def _unpatch():
    """Inductor's own methods back (a release refused half-way)."""
    heur = sys.modules.get(_HEURISTICS)
    if heur is not None and _st.patched:
        heur.CachingAutotuner.autotune_to_one_config = _orig.pop("a2o")
        heur.CachingAutotuner.coordinate_descent_tuning = _orig.pop("coordesc")
        heur.check_autotune_cache = _orig.pop("check_cache")
    _st.patched = False


def _patch_graph_cache():
    """Check Inductor's FX graph cache (detd._graphcache) once its module is
    imported, before a compile reads it (also before the autotuners are
    patched), else turn it off; a graph read back: its selections _finish."""
    cc = sys.modules.get(_CODECACHE) if _imports.loaded(_CODECACHE) else None
    if cc is None or _graphcache.installed() or _st.graph_cache_off or refusal(torch_version()) is not None:
        return
    _st.graph_cache_off = _graphcache.install(cc, governed, lambda sel, source: _finish(
        *sel[:4], Outcome(sel[4], source, note="from Inductor's FX graph cache")),
        lambda: _st.status != "refused" and _mode_governs())


def _on_import():
    try:
        _try_patch()
        _patch_select()
        _patch_graph_cache()
        _apply_settings()
    except Exception as e:  # noqa: BLE001 - never break the user's import of torch
        _st.status, _st.why = "refused", f"patching Inductor failed: {type(e).__name__}: {e}"
        _process.warn_once("inductor-patch", f"detd: {_st.why}")


def install():
    """Called by ``detd.install()`` (after the settings are in force):
    patch Inductor now when it is imported, else when it will be."""
    _imports.watch(_WATCH, _on_import)
    if "torch" in sys.modules and not _imports.loaded(_HEURISTICS):
        _st.torch = torch_version()
    _on_import()  # what is imported already: patched now; the settings in force


# ---------------------------------------------------------------- strings

def _kernel_source(fn) -> str:
    """The Triton source of an Inductor kernel: the JIT function's ``src``,
    or under the interpreter the source of the Python function."""
    src = getattr(fn, "src", None)
    if isinstance(src, str) and src:
        return src
    import inspect
    import textwrap

    inner = getattr(fn, "fn", None)
    try:
        text = textwrap.dedent(inspect.getsource(inner))
    except (OSError, TypeError):
        code = getattr(inner, "__code__", None)
        return code.co_code.hex() if code is not None else repr(fn)
    at = text.find("def ")
    return text[at:] if at >= 0 else text


def _versions() -> Tuple[str, str]:
    return "torch " + (_st.torch or torch_version()), "triton " + _triton.version()


def _hints(size_hints) -> tuple:
    if isinstance(size_hints, dict):
        return tuple(sorted((str(k), v) for k, v in size_hints.items()))
    if size_hints is None:
        return ()
    return tuple(size_hints)


def tuner_identity(tuner) -> Tuple[str, str]:
    """(name, kernel id) of a CachingAutotuner (module docstring)."""
    meta = tuner.inductor_meta or {}
    base = str(meta.get("kernel_name") or getattr(tuner.fn, "__name__", "kernel"))
    name = PREFIX + base
    guard = _canon.code_guard("source", _kernel_source(tuner.fn))
    return name, _canon.kernel_identity(name, guard)


def tuner_key(tuner, stage: str, *extra) -> str:
    heuristic = getattr(tuner.heuristic_type, "name", str(tuner.heuristic_type)).lower()
    return _canon.key_string((stage, heuristic, _hints(tuner.size_hints), *extra, *_versions()))


def _digest(text: str, n: int = 12) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:n]


def choice_string(choice) -> str:
    """The canonical string of a ``ChoiceCaller`` (module docstring)."""
    try:
        hk = str(choice.hash_key())
    except Exception:  # noqa: BLE001 - a choice without one: its str()
        hk = str(choice)
    kind = type(choice).__name__
    desc = str(getattr(choice, "description", "") or "").replace(", ", ",")
    if kind == "ExternKernelCaller":
        inner = getattr(choice, "choice", None)
        label = "extern:" + str(getattr(inner, "name", None) or hk.split("-", 1)[0])
        digest = _digest(hk)
    elif desc:
        # A template's hash key holds the hash of its generated module,
        # whose source names the device index: ranks on different GPUs
        # would differ. Its family and description (every parameter of
        # the config) identify it within one selection.
        label, digest = f"{hk.split('-', 1)[0] if '-' in hk else kind}:{desc}", None
    else:
        label, digest = f"{kind}:{hk.split('-', 1)[0]}", _digest(hk)
    label = " ".join(label.split())  # no newline, one space
    if len(label) > 900:
        label = label[:880] + "~" + _digest(label, 16)
    return f"{label}@{digest}" if digest else label


# ---------------------------------------------------------------- records

def _record(kernel: str, name: str, candidates, key: str, entry: dict):
    with _st.lock:
        rec = _st.records.get(kernel)
        if rec is None:
            rec = dict(kernel=kernel, name=name, kind="inductor", governed=entry["governed"],
                       why=_st.why if entry["governed"] else "not governed", candidates=list(candidates), keys={})
            _st.records[kernel] = rec
        rec["governed"] = entry["governed"]
        rec["keys"][key] = dict(entry, key=key)


def records() -> List[dict]:
    """One dict per Inductor autotuner reached (detd.autotuners() form)."""
    with _st.lock:
        out = []
        for rec in _st.records.values():
            r = dict(rec)
            r["keys"] = [dict(v) for v in rec["keys"].values()]
            out.append(r)
        return out


def _key_lock(kernel: str, key: str) -> threading.Lock:
    with _st.lock:
        lk = _st.key_locks.get((kernel, key))
        if lk is None:
            lk = _st.key_locks[(kernel, key)] = threading.Lock()
        return lk


# ---------------------------------------------------------------- the flow

class Outcome:
    __slots__ = ("config", "source", "timed_here", "timings", "note", "governed", "shared")

    def __init__(self, config, source, timed_here=False, timings=None, note=None, governed=True):
        self.config, self.source, self.timed_here = config, source, timed_here
        self.timings, self.note, self.governed = timings, note, governed
        self.shared: List[str] = []


def governed(name: str) -> bool:
    return _st.patched and _mode_governs() and _process.settings().is_governed(name)


def _bench() -> Dict[str, Any]:
    """Inductor's benchmarker, for provenance: the class of torch's
    ``benchmarker`` (``module:qualname``), with Inductor's own settings."""
    b = getattr(sys.modules.get("torch._inductor.runtime.benchmarking"), "benchmarker", None)
    name = "inductor" if b is None else f"{type(b).__module__}:{type(b).__qualname__}"
    return {"benchmarker": name, "return_mode": "torch.compile's autotuning, with Inductor's own settings"}


def decide(kernel: str, name: str, key: str, candidates: Sequence[str],
           time_pass: Callable[[], List[Tuple[str, List[float], bool]]],
           cheapest: Callable[[Sequence[str]], str],
           searched: Optional[Callable[[str], bool]] = None,
           share: Optional[_loop.Share] = None, prepare: Optional[Callable[[], None]] = None) -> Outcome:
    """Resolve one governed key: override, a single candidate, or the
    daemon through the package's one resolve loop (:func:`detd._loop.resolve`;
    designated, ``time_pass()`` gives the report rows, each a candidate
    string with its timings), then ``on_miss``. Observed once and
    recorded; raises MissError or PassFailedError as the Triton hook
    does. A key that names a search (its candidates: the start config and
    the search's descriptor) takes ``searched(config)``: whether a config
    outside the candidates is one the search can reach in this process
    (the report's rows, the answer and an override must be). ``share``:
    how a waiting process helps the pass (:class:`_SelectShare`); what it
    compiled is recorded (``shared``). ``prepare()``: run when designated,
    before the device's timing lock is taken (compiles)."""
    settings = _process.settings()
    cands = tuple(candidates)
    configs = tuple(c for c in cands if not _canon.is_search(c))

    def usable(config: str) -> bool:
        return config in configs or (searched is not None and searched(config))

    dkey = _native.Key(settings.namespace, _process.identity()["arch"], kernel, key, cands)
    out: Optional[Outcome] = None
    override = settings.override_for(name, kernel)
    if override is not None and usable(override):
        out = Outcome(override, _native.SOURCE_OVERRIDE)
    elif len(cands) == 1:
        out = Outcome(cands[0], _native.SOURCE_LOCAL, note="one candidate")
    reason = f"override {override!r} matches no candidate" if override is not None and out is None else None
    asked = False
    if out is None and reason is None:
        timings, how = None, None

        def timed_pass(_answer):
            nonlocal timings, how
            if prepare is not None:
                prepare()
            with _process.timing_lock() as held:  # one pass at a time per GPU, as Triton's
                rows = [r for r in time_pass() if usable(r[0])]
            how = _provenance.describe(_bench(), held.locked, kernel)
            timings = {s: ms[0] if len(ms) == 1 else ms for s, ms, _ in rows}
            if not rows or all(f for _, _, f in rows):
                rows = rows or [(configs[0], [float("inf")], True)]
            return rows

        asked = True
        res = _loop.resolve(dkey, kernel, key, _triton.version(), timed_pass, share, timing=lambda: how)
        ans, reason = res.answer, res.reason
        if res.report_error is not None and _loop.pass_failed(res.report_error):
            raise _loop.PassFailedError(kernel, key, str(res.report_error)) from res.report_error
        note = f"claim lost {res.lost}x (passed on, or the daemon restarted): asked again" if res.lost else None
        if ans is not None and ans.outcome == _native.OUTCOME_DECIDED:
            if usable(ans.config):
                out = Outcome(ans.config, ans.source or _native.SOURCE_TIMED, timed_here=res.rows is not None,
                              timings=timings, note=note)
            else:
                reason = (f"the daemon's config {ans.config!r} is not one this process's search can reach"
                          if searched is not None else f"the daemon's config {ans.config!r} matches no candidate")
        elif ans is not None:
            reason = _loop.no_decision(ans)
        if out is None and reason is not None and _loop.NOCAND_TEXT in reason:
            raise _loop.PassFailedError(kernel, key, reason)
    if out is None:
        policy = settings.on_miss
        if policy == "error":
            _record(kernel, name, cands, key, dict(config=None, source="miss", governed=True, timed_here=False,
                                                   note=reason, candidates=list(cands)))
            raise _loop.MissError(kernel, key, reason or "no answer")
        chosen = configs[0] if policy == "first" else cheapest(configs)
        _process.warn_once(f"miss:{kernel}:{key}", f"detd: no decision for kernel {kernel} key {key}: {reason}; "
                           f"using on_miss={policy}")
        out = Outcome(chosen, _native.SOURCE_FALLBACK, note=f"{reason}; on_miss={policy}")
        if asked:
            # Compiled in: detd.wait_final() waits for the decision, but
            # this process keeps its fallback (unless they are the same).
            _process.note_provisional(_process.Provisional(kernel, key, dkey, chosen, lambda c: c == chosen,
                                                           res.wait.fell_back(reason)))
    if share is not None:
        out.shared = list(getattr(share.compile_one, "done", ()))
    _finish(kernel, name, key, cands, out)
    return out


def _finish(kernel, name, key, cands, out: Outcome):
    entry = dict(config=out.config, source=_native.SOURCE_NAMES.get(out.source, str(out.source)),
                 governed=out.governed, chaos=False, timed_here=out.timed_here, candidates=list(cands))
    if out.timings is not None:
        entry["timings"] = out.timings
    if out.note:
        entry["note"] = out.note
    if out.shared:
        entry["shared"] = list(out.shared)  # precompiled here for the timing process
    _record(kernel, name, cands, key, entry)
    try:
        settings = _process.settings()
        dkey = _native.Key(settings.namespace, _process.identity()["arch"], kernel, key, tuple(cands))
        _process.client().observe(dkey, out.config, out.source, out.governed, False)
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        _process.warn_once("observe", f"detd: cannot record observations: {e}")


def _observe_local(kernel, name, key, cands, config, timed=None):
    """An ungoverned choice: listed and observed as Inductor's own."""
    if not _process.active():
        return
    _finish(kernel, name, key, cands, Outcome(config, _native.SOURCE_LOCAL, timed_here=bool(timed),
                                              governed=False))


def _cheapest_config(by_string: Dict[str, Any]) -> Callable[[Sequence[str]], str]:
    return lambda cands: min(cands, key=lambda s: _triton.config_cost(by_string[s]))


# ---------------------------------------------------------------- CachingAutotuner

def _finalize_launcher(tuner, chosen):
    """Keep ``chosen`` as the tuner's one launcher, as Inductor's
    ``autotune_to_one_config`` does after its own pick."""
    release = getattr(tuner, "_release_static_launchers_except", None)
    if release is not None:
        release(chosen)
    tuner.launchers = [chosen]
    prune = getattr(tuner, "_prune_compile_results_to_launcher", None)
    if prune is not None:
        prune(chosen)
    _put_winner(chosen)


def _put_winner(launcher):
    h = getattr(launcher, "cache_hash", None)
    if h is None:
        return
    try:
        from torch._inductor.triton_bundler import TritonBundler

        TritonBundler.put_winner(h)
    except (ImportError, AttributeError):
        pass


def _compile_launcher(tuner, config):
    """A launcher for ``config`` (Inductor's own compile path, as its
    coordinate descent builds one)."""
    ensure = getattr(tuner, "_ensure_kernel_loaded", None)
    if ensure is not None:
        ensure()
    elif getattr(getattr(tuner, "fn", None), "fn", True) is None and callable(getattr(tuner, "_reload_kernel", None)):
        # Releases before _ensure_kernel_loaded (torch 2.11): compiled in a
        # worker, the function was dropped for the pickle; Inductor's own
        # coordinate descent reloads it the same way before compiling.
        tuner.fn = tuner._reload_kernel().fn
    with tuner.lock:
        result = tuner._precompile_config(config)
        launcher = result.make_launcher()
    results = getattr(tuner, "compile_results", None)
    if isinstance(results, list):
        tuner.compile_results = [result]
    return launcher


def _patched_a2o(self, *args, **kwargs):
    name, kernel = tuner_identity(self)
    key = tuner_key(self, "configs")
    live: Dict[str, Any] = {}
    for launcher in self.launchers:
        live.setdefault(_triton.config_string(launcher.config), launcher)
    cands = tuple(live)
    if not governed(name):
        _orig["a2o"](self, *args, **kwargs)  # Inductor times on its own
        _observe_local(kernel, name, key, cands, _triton.config_string(self.launchers[0].config), timed=True)
        return None
    local_best = []

    def time_pass():
        timings = self.benchmark_all_configs(*args, **kwargs)  # Inductor's own benchmarking
        if timings:
            local_best.append(min(timings, key=timings.get))
        return _measure.timing_rows((_triton.config_string(l.config), t) for l, t in timings.items())

    with _key_lock(kernel, key):
        out = decide(kernel, name, key, cands, time_pass,
                     _cheapest_config({s: l.config for s, l in live.items()}))
    chosen = live[out.config]
    if local_best and local_best[0] is not chosen and getattr(chosen, "_is_static", False):
        # Inductor closes the losers of its own pass; the committed config
        # may be one of them here: build its launcher again.
        chosen = _compile_launcher(self, chosen.config)
    _finalize_launcher(self, chosen)
    return None


def _patched_coordesc(self, launcher, *args, **kwargs):
    name, kernel = tuner_identity(self)
    if not _coordesc.eligible(self):
        return _orig["coordesc"](self, launcher, *args, **kwargs)
    start = launcher.config
    start_s = _triton.config_string(start)
    key = tuner_key(self, "coordesc", start_s)
    space = _coordesc.space(self, start)
    if not governed(name):
        winner = _orig["coordesc"](self, launcher, *args, **kwargs)  # Inductor times on its own
        won = _triton.config_string(winner.config)
        cands = tuple(space) if space is not None and won in space else tuple(dict.fromkeys((start_s, won)))
        _observe_local(kernel, name, key, cands, won, timed=True)
        return winner
    search = _coordesc.Search(self, start) if space is None else None
    if search is not None:
        # Too many configs to list: the key names the search, the daemon
        # checks a reported config's shape, this process its reach.
        cands, config_of = (start_s, search.descriptor), search.config
    else:
        space.setdefault(start_s, start)
        cands, config_of = tuple(space), space.get
    found = {}

    def time_pass():
        from torch._inductor.runtime.runtime_utils import triton_config_to_hashable

        winner = _orig["coordesc"](self, launcher, *args, **kwargs)  # Inductor's own descent
        found["launcher"] = winner
        # The report is the descent's result, not every config it timed:
        # its timings are one sample each, and the daemon's tie band could
        # otherwise commit a config the descent judged no better (the
        # search's own rule chose; docs/inductor.md, "Large searches").
        won = _triton.config_string(winner.config)
        ms = self.coordesc_tuner.cached_benchmark_results.get(triton_config_to_hashable(winner.config), 0.0)
        if config_of(won) is None:
            won, ms = start_s, 0.0  # outside what detd can name: the start, as the descent began
        return _measure.timing_rows([(won, ms if _ms(ms) < float("inf") else 0.0)])

    with _key_lock(kernel, key):
        out = decide(kernel, name, key, cands, time_pass, lambda cands: start_s,
                     searched=None if search is None else (lambda c: search.config(c) is not None))
    if out.config == start_s:
        chosen = launcher
    elif "launcher" in found and _triton.config_string(found["launcher"].config) == out.config:
        chosen = found["launcher"]
    else:
        chosen = _compile_launcher(self, config_of(out.config))
    chosen.config.found_by_coordesc = True
    _put_winner(chosen)
    return chosen


def _ms(t) -> float:
    try:
        v = float(t)
    except (TypeError, ValueError):
        return float("inf")
    return v if math.isfinite(v) else float("inf")


def _patched_check_cache(configs, filename, inductor_meta):
    if _st.patched and _mode_governs():
        inductor_meta = dict(inductor_meta or {}, force_disable_caches=True)
    return _orig["check_cache"](configs, filename, inductor_meta)


# ---------------------------------------------------------------- select_algorithm

class _SelectShare:
    """``compile_one`` of a selection's :class:`detd._loop.Share`: a
    waiting process precompiles the choice it was given with the choice's
    own ``precompile()``, into the node's Triton cache, where the timing
    process's compile finds it. An extern (ATen) choice, one without
    ``precompile`` or one lost here (None): False. An error is counted and
    logged (a warning once, then debug), never raised: the timing process
    meets that choice again. ``done``: the choices compiled here. It runs
    in the waiting thread, not under ``DETD_COMPILE_NICE``: not every torch
    release's ``precompile()`` loads on the kernel's device from another."""

    def __init__(self, kernel: str):
        self.kernel = kernel
        self.done: List[str] = []

    def __call__(self, choice) -> bool:
        pre = getattr(choice, "precompile", None)
        if type(choice).__name__ == "ExternKernelCaller" or not callable(pre):
            return False
        try:
            pre()
        except Exception as e:  # noqa: BLE001 - a share never fails the waiting process
            with _st.lock:
                _st.share_errors += 1
                first = _st.share_errors == 1
            (log.warning if first else log.debug)(
                "detd: precompiling choice %s of %s for the timing process failed: %s (counted in "
                "detd.stats()['inductor_share_errors']; the timing process reports it)",
                choice_string(choice), self.kernel, _loop.error_line(e))
            return True
        with _st.lock:
            _st.shares += 1
        self.done.append(choice_string(choice))
        return True


# Selections whose whole list is remembered for lookup(); a compile keeps
# far fewer alive at once (the oldest is dropped first).
FULL_LISTS_MAX = 1024


def _select_ids(op, inputs, hint_override, cands) -> Tuple[str, str]:
    """A selection's kernel identity and key (module docstring)."""
    import torch

    kernel = _canon.kernel_identity(PREFIX + str(op), _canon.code_guard("choices", "\n".join(sorted(cands))))
    key = _canon.key_string(("select", str(inputs), hint_override, torch.get_float32_matmul_precision(),
                             *_versions()))
    return kernel, key


def _multi_position(call) -> Optional[int]:
    """Where ``AlgorithmSelectorCache.__call__`` takes
    ``return_multi_template`` among its positional arguments (self not
    counted), or None when it has none (an unknown release: nothing is
    claimed early)."""
    try:
        names = list(inspect.signature(call).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("return_multi_template") - 1 if "return_multi_template" in names else None


def _patched_call(self, *args, **kwargs):
    """``AlgorithmSelectorCache.__call__``: the scope of a selection's
    early claim (:mod:`detd._early`). Its precompile and its ``lookup``
    come within it, unless it returns a multi-template buffer, whose
    timings come later: then nothing is claimed early. A claim whose pass
    did not come by its end is passed on."""
    pos = _orig["multi_pos"]
    multi = args[pos] if len(args) > pos else kwargs.get("return_multi_template", False)
    with _early.scope(allowed=not multi):
        return _orig["call"](self, *args, **kwargs)


def _patched_precompile_fn(self, choices, name, inputs_key, *args, **kwargs):
    """Inductor's ``make_precompile_fn``, which gets a selection's whole
    list of choices and starts compiling them: the list is noted for
    :func:`_patched_lookup`, and the selection asked for early
    (:func:`_before_precompile`). Nothing is compiled here when it is
    decided already (a rerun, or another process timed it), or when
    another process times it: a precompile only serves benchmarking, and
    the chosen choice is generated into the compiled graph as without it.
    Whatever goes wrong here leaves Inductor's precompile as it is (logged
    once)."""
    try:
        if _before_precompile(self, choices, name, inputs_key, args, kwargs):
            return lambda: {}
    except Exception as e:  # noqa: BLE001 - never fails Inductor's compile
        _process.warn_once(f"precompile-note:{name}", f"detd: noting the choices of selection {name} before "
                           f"Inductor's precompile failed ({_loop.error_line(e)}); it precompiles them as "
                           f"without detd, and the selection is keyed by the choices that compile")
    return _orig["precompile_fn"](self, choices, name, inputs_key, *args, **kwargs)


def _before_precompile(owner, choices, name, inputs_key, args, kwargs) -> bool:
    """Note a selection's whole list (:func:`_patched_precompile_fn`) and
    ask for it early; True when nothing needs precompiling here. Asked
    for early, this process may be designated: it holds the claim and
    precompiles for its pass. When another process times the selection,
    this one compiles only the share of it the daemon gave, and keeps
    Inductor's precompile for its own ``lookup``, should the pass come
    here after all (passed on, or taken over)."""
    noted: Dict[str, Any] = {}
    objs: List[Any] = []
    for c in choices:
        s = choice_string(c)
        if s not in noted:
            objs.append(c)
        try:
            noted.setdefault(s, weakref.ref(c))
        except TypeError:  # a choice without weak references: never taken for a lost one
            noted.setdefault(s, None)
    full = tuple(noted)
    where = (str(name), str(inputs_key))
    with _st.lock:
        _st.full[where] = tuple(noted.items())
        _st.full.move_to_end(where)
        while len(_st.full) > FULL_LISTS_MAX:
            _st.full.popitem(last=False)
    if len(full) < 2 or not _process.active() or not governed(PREFIX + str(name)):
        return False
    kernel, key = _select_ids(name, inputs_key, None, full)
    settings = _process.settings()
    sc = _early.current()
    try:
        dkey = _native.Key(settings.namespace, _process.identity()["arch"], kernel, key, full)
        how, ans = _early.ask(sc, where, kernel, key, dkey)
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        log.debug("detd: cannot ask for %s before precompiling: %s", kernel, e)
        return False
    if how == "decided" and ans.config in full:
        with _st.lock:
            _st.precompiles_skipped += len(full)
        return True
    if how != "waiting" or sc is None:
        return False
    share = _SelectShare(kernel)
    sc.keep(where, (share, lambda: _orig["precompile_fn"](owner, choices, name, inputs_key, *args, **kwargs)()))
    with _st.lock:
        _st.precompiles_deferred += len(full)
    if _process.share_pass():
        _loop.compile_share(share, objs, full, ans.share_index, kernel, low_priority=False)  # see _SelectShare
    return True


def _full_list(op, inputs, choices) -> Tuple[Tuple[str, ...], Dict[str, Any], Dict[str, Any]]:
    """The selection's whole list of choices as ``make_precompile_fn``
    saw it, the live ``choices`` by string (a choice noted there keeps the
    string computed then), and the choices Inductor dropped from the list
    because they failed to compile here (string -> choice); when the live
    ones are not that list less choices marked failed (another subset,
    such as a prescreening pass's), the live ones and none."""
    with _st.lock:
        noted = _st.full.get((str(op), str(inputs)))
    named = {}  # id -> string of the noted choices alive now (held by choices: an equal id is the same)
    for string, ref in noted or ():
        c = ref() if ref is not None else None
        if c is not None:
            named[id(c)] = string
    live: Dict[str, Any] = {}
    for c in choices:
        live.setdefault(named.get(id(c)) or choice_string(c), c)
    if noted is None:
        return tuple(live), live, {}
    lost: Dict[str, Any] = {}
    for string, ref in noted:
        if string in live:
            continue
        c = ref() if ref is not None else None
        if c is None or getattr(c, "failed", False) is not True:
            return tuple(live), live, {}
        lost[string] = c
    if not set(live) <= {string for string, _ in noted}:
        return tuple(live), live, {}
    return tuple(string for string, _ in noted), live, lost


def _patched_lookup(self, choices, op, inputs, benchmark, hint_override=None):
    name = PREFIX + str(op)
    _st.lookups += 1
    _st.lookups_timed += benchmark is not None and len(choices) > 0
    if benchmark is None or len(choices) == 0 or not _process.active():
        return _orig["lookup"](self, choices, op, inputs, benchmark, hint_override)
    # Keyed by the whole list: a choice that failed to compile in this
    # process only (an error, the precompile timeout) must not give it a
    # selection of its own, timed alone and compared with no one.
    cands, live, lost = _full_list(op, inputs, choices)
    kernel, key = _select_ids(op, inputs, hint_override, cands)
    if lost and governed(name):
        with _st.lock:
            _st.failed_here += len(lost)
        shown = list(lost)[:3]
        _process.warn_once(f"failed-here:{kernel}:{key}",
                           f"detd: {len(lost)} of {len(cands)} choices of {kernel} failed to compile in this "
                           f"process ({', '.join(shown)}{', ...' if len(lost) > 3 else ''}); the selection is "
                           f"still keyed by all {len(cands)} (counted in detd.stats()['inductor_failed_here'])")

    if not governed(name):
        ran = []

        def counted(cs):
            ran.append(1)
            return benchmark(cs)

        timings = _orig["lookup"](self, choices, op, inputs, counted, hint_override)  # Inductor's own
        _graphcache.met(None, f"{kernel} is not governed")
        if timings:
            best = min(timings, key=timings.get)
            _observe_local(kernel, name, key, cands, choice_string(best), timed=True if ran else None)
        return timings

    # Asked for early: a claim taken then is this pass's now; a precompile
    # skipped then (another process timed it) runs if the pass comes here.
    sc, where = _early.current(), (str(op), str(inputs))
    if sc is not None:
        sc.take(where, kernel, key)
    early_share, deferred = (sc.kept(where) if sc is not None else None) or (None, None)

    def compile_deferred():
        # The precompile skipped when another process held the pass; not
        # under the device's timing lock. What fails to compile now is
        # lost here, as if Inductor had dropped it before lookup.
        deferred()
        with _st.lock:
            _st.deferred_compiled += len(live)
        for s, c in list(live.items()):
            if getattr(c, "failed", False) is True:
                lost[s] = live.pop(s)

    def time_pass():
        # A choice that failed to compile here is reported as failed.
        timings = benchmark(list(live.values()))  # Inductor's own (self.autotune)
        rows = _measure.timing_rows((s, timings.get(live[s], float("inf")) if s in live else float("inf"))
                                    for s in cands)
        return _measure.recheck_rows(rows, lambda strings: benchmark([live[x] for x in strings]),
                                     lambda t, x: t.get(live[x], float("inf")))

    def cheapest(strings):
        ext = [s for s in strings if s.startswith("extern:")]
        return ext[0] if ext else strings[0]

    # Waiting for another process's pass: precompile a share of the choices
    # (one that failed here has no object: nothing to compile).
    share = _loop.Share([live.get(s) for s in cands], cands, early_share or _SelectShare(kernel), None)
    with _key_lock(kernel, key):
        out = decide(kernel, name, key, cands, time_pass, cheapest, share=share,
                     prepare=compile_deferred if deferred is not None else None)
    _graphcache.met((kernel, name, key, cands, out.config),
                    "a fallback choice" if out.source == _native.SOURCE_FALLBACK else None)
    chosen = live.get(out.config)
    if chosen is None:
        # The committed choice is one this process lost: used all the same.
        # Its precompile only served benchmarking; its code is generated
        # into the compiled graph and compiled there, where an error that
        # is not this process's load fails the compile, loudly.
        chosen = lost[out.config]
        with _st.lock:
            _st.lost_used += 1
        _process.warn_once(f"lost-used:{kernel}:{key}",
                           f"detd: the committed choice {out.config} of {kernel} failed its precompile in this "
                           f"process; it is used all the same (compiled with the graph; counted in "
                           f"detd.stats()['inductor_lost_used'])")
    timings = {c: float("inf") for c in choices}
    timings[chosen] = _CHOSEN_MS
    return timings
