"""The Triton hook: one class-level patch of ``Autotuner.run``.

How a decision is made, and why the launch uses it
--------------------------------------------------
Triton's ``Autotuner.run`` (3.3 to 3.9) decides in exactly one place::

    key = tuple(<key= argument values> + [str(t.dtype) for tensor args])
    if key not in self.cache:          # <- the only decision point
        <prune, time every candidate with self._bench, keep the fastest>
    config = self.cache[key]
    <launch with config>

The patched ``run`` (:func:`detd._triton._patched_run`, then
:func:`_full_run`) replaces ``self.cache`` (lazily, keeping its entries)
with :class:`DetdCache`, a dict whose ``__contains__`` is the hook, then
calls the original ``run`` with the call's arguments pushed on a
thread-local stack.  Triton's own key code stays authoritative: the hook
receives the very tuple Triton built.

On a key this process has not resolved yet, ``__contains__`` asks the daemon:

* ``decided``: the answer's canonical config string is matched back to the
  autotuner's **live** ``Config`` (so ``pre_hook`` and every field stay
  Triton's own); it is stored in the dict and ``__contains__`` returns True.
  Triton then skips pruning, timing, its disk cache and its print, and
  launches ``self.cache[key]``, which is that config.
* ``designated``: this process is the one rank that times the key for the
  whole cluster.  The hook runs the timing pass itself, **before** Triton's
  launch, exactly as Triton's ``benchmark()`` would: ``prune_configs``, then
  ``self._bench`` (hence ``do_bench``, Triton's benchmarker or the
  kernel's ``do_bench=``) for every pruned config, sets ``configs_timings``
  and ``bench_time``.  It reports every candidate's timing, receives the
  config the daemon committed (first writer wins, by the winner rule), runs the
  autotuner's ``pre_hook(..., reset_only=True)`` as Triton does after a
  pass, stores the committed live config and returns True.  Triton's
  ``if key not in self.cache`` is therefore False, so Triton times nothing
  more and launches the committed config: one timing pass, and the first
  launch already uses the cluster's config, even when this process's own
  fastest differed.  (Letting Triton time and reading its pick afterwards
  would launch the local winner once before the committed one.)
* anything else (no decision in ``pinned`` mode, a timeout, an unreachable
  daemon, an answer or override naming no live candidate): the ``on_miss``
  policy: ``error`` raises :class:`MissError` naming kernel and key;
  ``first`` takes the autotuner's first config; ``cheapest`` takes the
  config with the smallest product of its integer meta-parameters (the tile
  volume), then fewest ``num_warps``, fewest ``num_stages``, fewest
  ``num_ctas``, then the canonical string: deterministic on every rank.
  An answer never turns into a launch of a config the autotuner does not
  hold.

Autotuners that are not governed (``auto`` and ``record`` modes, outside
``scope``, or ``exempt``) are left to Triton: ``__contains__`` returns
False, Triton times as usual, and after ``run`` returns the hook reads
``self.cache[key]`` and observes it (source ``local``).  In ``record``
mode, for autotuners in ``scope`` and not ``exempt``, the hook also sends
that winner and every candidate's timing from Triton's pass as a vote
(``detd_vote``, with the key in Megatron's ``tuning_key`` form too), for
``detctl table export --votes``; a daemon that cannot be reached costs one
warning.

Every (autotuner, key) reached is observed once per process through the
daemon's ``Observe`` (forked children observe again under their own pid),
and listed by ``detd.autotuners()``.

Threads and fork
----------------
Triton's autotuner is not thread-safe (``self.nargs`` is shared), so calls
into one autotuner are serialized with a lock held by its ``DetdCache``; 8
threads meeting a new key at once make one request and one timing pass,
the others find the resolved key.  Nothing is stored on the autotuner but
the ``DetdCache`` (which pickles as a plain dict).  After ``fork`` the
child renews each cache's lock and its set of observed keys on first use,
and gets a fresh daemon handle.

Cost per launch
---------------
Once a governed tuner has resolved its first key it goes direct
(``_go_direct``): its cache becomes a plain ``dict`` holding the keys this
process resolved and observed, and an instance-level ``run`` bound to
Triton's own shadows the class-level patch.  A launch on such a key then
runs exactly Triton's code on exactly Triton's data types (CPython
specializes lookups in an exact dict, not in a subclass): no detd frame, no
lock, no daemon call.  A new key misses the cache, so Triton's run calls
``prune_configs``; the patched ``prune_configs`` finds the call's
arguments in Triton's run frame, resolves the key under the tuner's lock,
and returns the resolved config as the only candidate (releases that still
time a single candidate get that measurement skipped by the patched
``_bench``).  Other tuners (ungoverned, single-config, or
before their first key) take the patched run: the tuner's lock, a
thread-local call record, and the after-run observations.  After fork
and on a new ``install()`` every tuner goes back to the full path, so a
child observes the keys it launches under its own pid.

Subclasses that override ``run`` without calling ``Autotuner.run`` are
governed when they choose through their cache the way flag-gems'
``LibTuner`` does (``key in self.cache``, then ``self.cache[key]``; the
``cache_tuners`` setting names them, see :func:`_cache_governed`); any
other such subclass is listed and observed as ungoverned, with the config
it reports (:func:`_bypassed`). Not covered: direct ``fn.run`` calls,
and kernels lowered by ``torch.compile`` (Inductor's
``CachingAutotuner``, governed by :mod:`detd._inductor`).

Layers
------
This module is the Triton adapter's flow: ask, time, report, observe, and
the per-autotuner state they share.  It sits beside :mod:`detd._inductor`
(neither imports the other) on :mod:`detd._loop` (the one resolve loop,
its bounds, errors and re-measure rule) and :mod:`detd._process`
(settings, identity, the libdetd handle, fork, warnings), and imports
only their public names (docs/client-layers.md has the table the layers
test checks).  It never imports ``triton`` and reads no attribute of
Triton's objects: :mod:`detd._triton` does (the class-level patches,
which call back into :func:`_full_run` and :func:`_resolve_direct`; the
cache and run slots; config fields; identities; the run-frame lookup;
the timing pass), and live ``Config`` objects and autotuners pass
through here only as opaque handles.  :mod:`detd._canon` makes the
strings from plain values.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import weakref
from typing import Any, Dict, List, Optional

from . import _audit, _canon, _loop, _measure, _native, _phases, _process, _provenance, _samples, _split, _triton
from ._policy import Settings


# ---------------------------------------------------------------- state

class _State:
    """What this adapter recorded in this process (``detd.autotuners()``)."""

    def __init__(self):
        self.records: Dict[str, dict] = {}
        self.records_lock = threading.Lock()
        self.claims_lost = 0   # reports refused as stale: asked again
        self.fallbacks = 0     # on_miss applied (first or cheapest)


_state = _State()
_tls = threading.local()
_observed: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()
_infos: "weakref.WeakKeyDictionary[Any, _TunerInfo]" = weakref.WeakKeyDictionary()
# Bumped in a forked child: per-cache state of another process (its lock,
# the keys it observed) is stale there.
_gen = [0]
# Governed tuners launching through Triton's own run (see _go_direct()).
# tuner -> (lock, generation) of its direct-path misses.
_direct_tuners = _triton.direct_tuners


def counts() -> Dict[str, int]:
    """The adapter's counters: ``fallbacks`` (``on_miss`` applied) and
    ``claims_lost`` (reports refused as stale, asked again)."""
    with _state.records_lock:
        return {"fallbacks": _state.fallbacks, "claims_lost": _state.claims_lost}


def _go_direct(tuner, cache):
    """Let tuner launch without any detd code on a known key.

    The tuner's cache becomes a plain dict holding the keys this process
    resolved and observed, and an instance attribute ``run`` bound to
    Triton's own run shadows the class-level patch, so a launch on a known
    key runs exactly Triton's code. A new key misses the cache, and
    Triton's run calls ``prune_configs``, where the class-level
    :func:`_patched_prune` resolves it through the daemon. Pickling and
    copying keep working: the cache is a dict, and a bound method pickles
    as ``getattr(obj, "run")``, which the copy resolves again."""
    known = {k: dict.__getitem__(cache, k) for k in cache._fast if dict.__contains__(cache, k)}
    _direct_tuners[tuner] = (cache._lock, cache._gen)
    _triton.set_cache(tuner, known)
    _triton.use_original_run(tuner)


def _leave_direct(tuner):
    """Back to the patched run and a :class:`DetdCache` (after fork, a new
    install(), or a tuner no longer governed). Entries are kept; they count
    as observed only within the generation that resolved them."""
    st = _direct_tuners.pop(tuner, None)
    cache = _triton.cache_of(tuner)
    if st is not None and type(cache) is not DetdCache:
        full = DetdCache(dict(cache or {}))
        if st[1] == _gen[0]:
            full._lock = st[0]
            full._fast = set(full)
        _triton.set_cache(tuner, full)
    _triton.use_patched_run(tuner)


def leave_direct_all() -> None:
    """Every tuner on the direct path back to the full path (its known
    keys then meet the hook again at their next launch: the audit)."""
    for tuner in list(_direct_tuners):
        _leave_direct(tuner)


def _after_fork_in_child():
    global _observed
    _gen[0] += 1
    # Keys resolved in the parent are observed again under this process:
    # its tuners take the full path until they resolve a key here.
    for tuner in list(_direct_tuners):
        _leave_direct(tuner)
    _observed = weakref.WeakKeyDictionary()
    _failed_keys.clear()
    _state.records_lock = threading.Lock()


_process.at_fork_child(_after_fork_in_child)

log = logging.getLogger("detd")


# ---------------------------------------------------------------- tuners

class _TunerInfo:
    __slots__ = ("kernel", "name", "governed", "why", "candidates", "live", "configs_sig")

    def __init__(self, tuner, settings: Settings):
        self.name = _triton.kernel_name(tuner)
        self.kernel = _triton.kernel_identity(tuner)
        self.governed = settings.is_governed(self.name)
        if settings.mode not in ("pinned", "coordinated"):
            self.why = f"mode {settings.mode}"
        elif not self.governed:
            self.why = "outside scope or exempt"
        else:
            self.why = f"mode {settings.mode}"
        configs = _triton.configs(tuner)
        self.configs_sig = tuple(id(c) for c in configs)
        self.live: Dict[str, Any] = {}
        for c in configs:
            self.live.setdefault(_triton.config_string(c), c)
        self.candidates = tuple(self.live)


def _info(tuner) -> _TunerInfo:
    info = _infos.get(tuner)
    if info is None or info.configs_sig != _triton.configs_sig(tuner) or \
            info.governed != _process.settings().is_governed(info.name):
        info = _TunerInfo(tuner, _process.settings())
        _infos[tuner] = info
    return info


def _dkey(info: _TunerInfo, key_str: str, table_key: Optional[str] = None, candidates=None) -> _native.Key:
    return _native.Key(_process.settings().namespace, _process.identity()["arch"], info.kernel, key_str,
                       tuple(candidates) if candidates is not None else info.candidates, table_key)


class _Cands:
    """The candidates of one key: the configs Triton would benchmark for
    the call (its ``prune_configs``: ``early_config_prune``, ``perf_model``
    with ``top_k``), as live objects and canonical strings. A pruner may
    build new ``Config`` objects; those are what is timed and launched."""

    __slots__ = ("objs", "live", "candidates")

    def __init__(self, configs):
        self.live: Dict[str, Any] = {}
        for c in configs:
            self.live.setdefault(_triton.config_string(c), c)
        self.objs = list(self.live.values())  # one live object per string, in Triton's order
        self.candidates = tuple(self.live)


def _pruned(ctx: "_Call", info: _TunerInfo) -> _Cands:
    """The key's candidates after the tuner's own pruning (none: its list)."""
    if not _triton.has_pruner(ctx.tuner):
        return _Cands(_triton.configs(ctx.tuner))
    return _Cands(_triton.prune(ctx.tuner, ctx.args, ctx.kw))


# Pruning observations: a companion key per pruned key, so that ranks
# whose pruners kept different sets for the same key disagree in verify.
_PRUNING_SUFFIX = "#pruning"


def _pruning_string(cands: _Cands) -> str:
    fp = hashlib.sha256("\n".join(sorted(cands.candidates)).encode("utf-8")).hexdigest()[:16]
    return f"kept {len(cands.candidates)}: {fp}"


def _record(info: _TunerInfo, key_str: str, config: str, source: str, governed: bool, chaos=False,
            timed_here=False, timings=None, note=None, candidates=None, failed=None, waited_ms=None,
            decided_by=None, shared=None, remeasured=None, lock_waited_s=None, pass_s=None, split=None, phases=None):
    with _state.records_lock:
        rec = _state.records.get(info.kernel)
        if rec is None:
            rec = dict(kernel=info.kernel, name=info.name, governed=governed, why=info.why,
                       candidates=list(info.candidates), keys={})
            _state.records[info.kernel] = rec
        rec["governed"] = governed
        entry = dict(key=key_str, config=config, source=source, governed=governed, chaos=chaos,
                     timed_here=timed_here)
        if timings is not None:
            entry["timings"] = timings
        if note:
            entry["note"] = note
        if candidates is not None:
            entry["candidates"] = list(candidates)
        if failed:
            entry["failed"] = dict(failed)
        if waited_ms:
            entry["waited_ms"] = waited_ms  # held while another rank timed it
        if decided_by is not None:
            entry["decided_by"] = decided_by
        if shared:
            entry["shared"] = list(shared)  # compiled here for the timing rank
        if remeasured:
            entry["remeasured"] = list(remeasured)
        if lock_waited_s is not None:
            entry["timing_lock"] = lock_waited_s  # (waited s, locked)
        if pass_s is not None:
            entry["pass_s"] = pass_s  # {first, recheck}: the pass's wall seconds
        if split:
            entry["split"] = split  # the benchmark split: as holder or as helper
        if phases is not None:
            entry["phases"] = phases  # wall seconds per phase (detd._phases), filled as it goes
        rec["keys"][key_str] = entry


def _observe(tuner, info: _TunerInfo, key, key_str: str, config: str, source: int, governed: bool,
             chaos: bool = False, candidates=None, pruning: Optional[str] = None, failed: Optional[str] = None,
             why: Optional[str] = None):
    seen = _observed.get(tuner)
    if seen is None:
        seen = set()
        _observed[tuner] = seen
    seen.add(key)
    cache = _triton.cache_of(tuner)
    if type(cache) is DetdCache and cache._gen == _gen[0]:
        cache._fast.add(key)
    # A daemon call: phase "daemon" while the key resolves (detd._phases).
    with _phases.phase("daemon"):
        _send_observe(info, key_str, config, source, governed, chaos, candidates, pruning, failed, why)


def _send_observe(info: _TunerInfo, key_str: str, config: str, source: int, governed: bool, chaos: bool,
                  candidates, pruning: Optional[str], failed: Optional[str], why: Optional[str]):
    try:
        _process.client().observe(_dkey(info, key_str, candidates=candidates), config, source, governed, chaos,
                                  failed=failed, why=None if governed else (why or info.why))
        if pruning is not None:
            # The companion key: the unpruned list as candidates, what the
            # pruner kept as the "config". Same key, different pruning:
            # verify reports the ranks disagreeing on kernel K#pruning.
            pk = _native.Key(_process.settings().namespace, _process.identity()["arch"],
                             info.kernel + _PRUNING_SUFFIX, key_str, info.candidates)
            _process.client().observe(pk, pruning, _native.SOURCE_LOCAL, governed, False)
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        _process.warn_once("observe", f"detd: cannot record observations: {e}")


def _cheapest(configs: List[Any]):
    return min(configs, key=_triton.config_cost)


# ---------------------------------------------------------------- the hook

class _Call:
    __slots__ = ("tuner", "args", "kw", "key", "local_key")

    def __init__(self, tuner, args, kw):
        self.tuner, self.args, self.kw = tuner, args, kw
        self.key = None        # the key Triton asked about
        self.local_key = None  # a key left to Triton's own timing


def _current(cache) -> Optional[_Call]:
    """The call being resolved by ``cache``'s tuner on this thread."""
    stack = _tls.__dict__.get("stack")
    if not stack:
        return None
    top = stack[-1]
    if type(top) is _Call:
        return top if _triton.cache_of(top.tuner) is cache else None
    if _triton.cache_of(top[0]) is not cache:
        return None
    ctx = stack[-1] = _Call(*top)
    return ctx


def _contains_slow(cache, key) -> bool:
    if cache._gen != _gen[0]:
        cache._renew()
    ctx = _current(cache)
    if ctx is not None:  # called under the patched run
        ctx.key = key
        if dict.__contains__(cache, key):
            return True
        return _resolve(cache, ctx, key)
    # A direct launch: the caller two frames up is Triton's own run.
    call = _triton.run_frame_call(2) if _process.active() else None
    if call is None or _triton.cache_of(call[0]) is not cache:
        return dict.__contains__(cache, key)
    tuner = call[0]
    ctx = _Call(*call)
    ctx.key = key
    with cache._lock:
        if dict.__contains__(cache, key):
            _after_run(tuner, ctx)  # resolved before fork or install: observe
            return True
        resolved = _resolve(cache, ctx, key)
    return resolved


class DetdCache(dict):
    """``Autotuner.cache`` replacement on the full path; see the module
    docstring.

    ``_fast`` holds the keys this process resolved and observed: a launch
    on one of them costs a set lookup here, nothing else. ``_lock``
    serializes this tuner's misses (Triton's autotuner is not thread-safe).
    Both belong to one process generation (``_gen``, bumped by fork and by
    a new ``install()``) and are renewed when it changes."""

    __slots__ = ("_fast", "_lock", "_gen")

    def __init__(self, *a, **kw):
        dict.__init__(self, *a, **kw)
        self._renew()

    def _renew(self):
        self._fast = set()
        self._lock = threading.RLock()
        self._gen = _gen[0]

    def __contains__(self, key):
        if key in self._fast and self._gen == _gen[0]:
            return True
        return _contains_slow(self, key)

    # Removing entries (Triton never does; tests and users may) keeps
    # _fast a subset of the keys held.
    def __delitem__(self, key):
        dict.__delitem__(self, key)
        self._fast.discard(key)

    def pop(self, key, *default):
        self._fast.discard(key)
        return dict.pop(self, key, *default)

    def popitem(self):
        key, value = dict.popitem(self)
        self._fast.discard(key)
        return key, value

    def clear(self):
        dict.clear(self)
        self._fast.clear()

    def __reduce__(self):
        return (dict, (dict(self),))

    def __reduce_ex__(self, protocol):
        return self.__reduce__()

    def __copy__(self):
        return DetdCache(self)

    def __deepcopy__(self, memo):
        import copy

        return DetdCache({copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()})


def _timing_pass(ctx: _Call, cands: _Cands, split=None):
    """Time every candidate of the key (the pruned live configs) with the
    tuner's own ``_bench`` (Triton's benchmarker or the kernel's
    ``do_bench=``), as Triton's ``benchmark()`` does, each compiled first
    (:class:`detd._measure.Compiler`, ahead in threads with
    ``DETD_COMPILE_AHEAD``); a candidate that raises counts as failed.
    Then the near-best are re-measured (:func:`detd._measure.measure`: the
    rule, its rounds and ``DETD_RECHECK_CLEAR``). ``split``: (claim id,
    decision key) to split the first round's benchmarks with helpers on
    the node's other GPUs (:mod:`detd._split`). Returns (report rows,
    errors: canonical string -> exception, the canonical strings
    re-measured, the device lock: (seconds waited for it, held), the
    pass's wall seconds: {first, recheck}, the split's record or None)."""
    with _process.timing_lock() as held:
        _phases.add("waiting", held.waited_s)
        rows, errors, remeasured, pass_s, done = _timing_pass_locked(ctx, cands, split)
    return rows, errors, remeasured, (round(held.waited_s, 3), held.locked), pass_s, done


def _bench(ctx: _Call, record: bool = True):
    """The tuner's own benchmarker over some configs of the call."""
    return lambda configs: _triton.time_candidates(ctx.tuner, ctx.args, ctx.kw, configs, record=record)


def _timing_pass_locked(ctx: _Call, cands: _Cands, split=None):
    t0, done, comps = time.time(), [], []

    def first():
        got = None
        if split is not None:
            got = _split.holder_round(_process.client(), split[1], split[0], cands.objs, cands.candidates, _bench(ctx))
        if got is not None:
            done.append(got[2].record())
            _triton.set_timings(ctx.tuner, got[0], time.time() - t0)
            return got[0], got[1]
        ahead, pool = _process.compile_ahead(), _process.compile_pool()  # DETD_COMPILE_PROCESSES: the pool
        dev = _triton.current_device() if ahead else None
        comp = _measure.Compiler(cands.objs, lambda c: _triton.compile_only(ctx.tuner, ctx.args, ctx.kw, c, dev),
                                 ahead, _process.compile_overlap(), _loop.progress(),
                                 pool and (lambda c: pool.submit(_triton.remote_spec(ctx.tuner, ctx.args, ctx.kw, c))),
                                 lambda: _triton.prepare_launcher(ctx.tuner, ctx.args, ctx.kw, cands.objs[0], dev))
        comps.append(comp)
        try:
            return _triton.time_candidates(ctx.tuner, ctx.args, ctx.kw, cands.objs, stop=_loop.environment_hint,
                                           each=comp, order=comp.order())
        finally:
            comp.close()

    def again(order):
        return _triton.time_candidates(ctx.tuner, ctx.args, ctx.kw, order, stop=_loop.environment_hint)

    screen = _triton.screening(ctx.tuner) if _process.screen() is not None and split is None else None
    timings, rows, errors, remeasured, pass_s = _measure.measure(
        cands.objs, _triton.config_string, first, again, screen and (lambda: screen(first)),
        lambda: comps[0].contended() if comps else [], screen and (lambda order: screen(lambda: again(order))))
    if remeasured or screen or "contended" in pass_s:
        _triton.set_timings(ctx.tuner, timings, time.time() - t0)
    return rows, errors, remeasured, pass_s, done[0] if done else None


def _miss(ctx: _Call, info: _TunerInfo, key_str: str, reason: str, cands: Optional[_Cands] = None):
    policy = _process.settings().on_miss
    if policy == "error":
        _record(info, key_str, None, "miss", True, note=reason,
                candidates=cands.candidates if cands is not None else None)
        raise _loop.MissError(info.kernel, key_str, reason)
    configs = cands.objs if cands is not None else list(_triton.configs(ctx.tuner))
    chosen = configs[0] if policy == "first" else _cheapest(configs)
    # Never silent: counted, warned once per kernel and key, recorded
    # (source fallback) and observed, so that verify fails.
    with _state.records_lock:
        _state.fallbacks += 1
    _process.warn_once(f"miss:{info.kernel}:{key_str}",
                       f"detd: no decision for kernel {info.kernel} key {key_str}: {reason}; "
                       f"using on_miss={policy}")
    return chosen, _native.SOURCE_FALLBACK, f"{reason}; on_miss={policy}"


def _resolve(cache: DetdCache, ctx: _Call, key) -> bool:
    """Resolve a key this process meets for the first time (see the module
    docstring); its wall time per phase (:mod:`detd._phases`) is recorded
    with the key."""
    spent: Dict[str, float] = {}
    with _phases.phase("other", key=spent):
        return _resolve_key(cache, ctx, key, spent)


def _resolve_key(cache: DetdCache, ctx: _Call, key, spent: Dict[str, float]) -> bool:
    tuner = ctx.tuner
    settings = _process.settings()
    info = _info(tuner)
    if not info.governed:
        ctx.local_key = key
        return False
    key_str = _canon.key_string(key)
    # The Megatron-form key: tables recorded by Megatron-LM answer through it.
    try:
        table_key = _triton.megatron_key(tuner, ctx.args, ctx.kw)
    except Exception:  # an argument whose str() fails: no table alias
        table_key = None
    # The key's candidates are what Triton would benchmark: its pruning's.
    cands = _pruned(ctx, info)
    dkey = _dkey(info, key_str, table_key, cands.candidates)
    note, timed_here, timings_out = None, False, None
    chosen, source = None, None
    failed = None
    answer = None  # the daemon's last answer, if it was asked
    wait = None  # the waiting state, if the daemon was asked
    remeasured = None  # candidates timed twice here (the noise band)
    lock_waited = None  # (s waited for the device's timing lock, locked)
    pass_s = None  # the pass's wall seconds (first round, re-measure)
    split_done = None  # the benchmark split's record, as holder

    override = settings.override_for(info.name, info.kernel)
    if override is not None:
        # An explicit choice may name a config the pruner dropped.
        chosen = cands.live.get(override) or info.live.get(override)
        source = _native.SOURCE_OVERRIDE
        if chosen is None:
            chosen, source, note = _miss(ctx, info, key_str,
                                         f"override {override!r} matches no live candidate", cands)
    elif len(cands.objs) == 1:
        # Pruned to one: nothing to decide (Triton 3.9+ times nothing either).
        chosen, source, note = cands.objs[0], _native.SOURCE_LOCAL, "one candidate after pruning"
    else:
        # The designated rank's pass, and what it measured besides the
        # report rows (errors, re-measured candidates, the lock, the split).
        timed = {}

        def time_pass(answer):
            split = (answer.claim_id, dkey) if _process.split_device() is not None else None
            rows, timed["errors"], timed["remeasured"], timed["lock"], timed["pass_s"], timed["split"] = \
                _timing_pass(ctx, cands, split)
            timed["rows"] = rows
            band = _process.screen() if "screened_out" in timed["pass_s"] else None
            timed["timing"] = _provenance.describe(
                _triton.benchmarker(ctx.tuner, band, timed["pass_s"].get("contended", 0)), timed["lock"][1],
                info.kernel)
            return rows

        # While another rank times the key: ask in slices, so that a long
        # wait is logged (who times it, for how long), and first help the
        # pass when sharing is on (compile a share of the candidates).
        dev = _triton.current_device() if _process.compile_nice() else None  # shares in another thread
        share = _loop.Share(cands.objs, cands.candidates,
                            lambda config: _triton.compile_only(ctx.tuner, ctx.args, ctx.kw, config, dev),
                            _bench(ctx, False))
        def pass_errors():
            # Why each failed candidate failed: its exception, or inf from
            # Triton's own benchmarker (out of resources, a compile-time
            # assertion).
            errs = timed.get("errors") or {}
            return {s: _loop.error_line(errs[s]) if s in errs else _INF_TEXT
                    for s, _, f in timed.get("rows") or () if f}

        res = _loop.resolve(dkey, info.kernel, key_str, _triton.version(), time_pass, share, pass_errors,
                            lambda: timed.get("timing"))
        answer, reason, report_rows, lost, wait = res.answer, res.reason, res.rows, res.lost, res.wait
        if report_rows is not None:
            errors, remeasured, lock_waited = timed["errors"], timed["remeasured"], timed["lock"]
            pass_s, split_done = timed["pass_s"], timed["split"]
            timed_here = True
            timings_out = {s: ms for s, ms, _ in report_rows}
            failed = {s: _loop.error_line(errors[s]) if s in errors else "inf" for s, _, f in report_rows if f}
        if lost:
            note = f"claim lost {lost}x (passed on, or the daemon restarted): asked again"
            with _state.records_lock:
                _state.claims_lost += lost
        if report_rows is not None and len(failed) == len(report_rows):
            # Every candidate failed here: reported as such (the daemon
            # releases the claim and tells every waiter); this process
            # raises the candidates' own error, as plain Triton would.
            _record(info, key_str, None, "failed", True, timed_here=True, timings=timings_out,
                    note=reason, candidates=cands.candidates, failed=failed)
            raise _all_failed(info, key_str, cands, errors)
        if reason is not None and _loop.NOCAND_TEXT in reason:
            # Another rank's pass failed for every candidate: the daemon's
            # reason, at once (no config would launch, whatever on_miss).
            _record(info, key_str, None, "failed", True, note=reason, candidates=cands.candidates)
            raise _loop.PassFailedError(info.kernel, key_str, reason)
        if answer is not None and answer.outcome == _native.OUTCOME_DECIDED:
            chosen = cands.live.get(answer.config or "")
            source = answer.source or _native.SOURCE_TIMED
            if chosen is None:
                reason = f"the daemon's config {answer.config!r} matches no live candidate"
        elif answer is not None:
            reason = _loop.no_decision(answer)
        if chosen is None:
            chosen, source, note = _miss(ctx, info, key_str, reason or "no answer", cands)
            _process.note_provisional(_process.Provisional(info.kernel, key_str, dkey, _triton.config_string(chosen),
                                      _triton.cache_putter(tuner, key, cands.live), wait.fell_back(reason)))
        if timed_here:
            _triton.finish_pass(tuner, key, ctx.kw, chosen)

    chaos = settings.chaos
    if chaos:
        order = sorted(cands.candidates)
        cfg = _triton.config_string(chosen)
        if len(order) > 1 and cfg in cands.live:
            base = order.index(cfg)
            rank = max(_process.identity()["rank"], 0)
            chosen = cands.live[order[(base + 1 + rank) % len(order)]]
            note = "chaos: deliberately not the decided config"

    dict.__setitem__(cache, key, chosen)
    cfg = _triton.config_string(chosen)
    by = None
    if answer is not None and answer.decided_by_host:
        by = dict(host=answer.decided_by_host, rank=answer.decided_by_rank, pid=answer.decided_by_pid)
    _record(info, key_str, cfg, _native.SOURCE_NAMES.get(source, str(source)), True, chaos=chaos,
            timed_here=timed_here, timings=timings_out, note=note, candidates=cands.candidates, failed=failed,
            waited_ms=wait.waited_ms(answer) if wait is not None else None, decided_by=by,
            shared=wait.shared if wait is not None else None, remeasured=remeasured,
            lock_waited_s=lock_waited, pass_s=pass_s, phases=spent,
            split=split_done or (wait.benched if wait is not None else None))
    _observe(tuner, info, key, key_str, cfg, source, True, chaos, candidates=cands.candidates,
             pruning=_pruning_string(cands) if _triton.has_pruner(tuner) else None)
    if _audit.enabled():
        _send_audit(info, key_str, _audit.check(tuner, info.kernel, info.name, key, key_str, chosen, ctx.args,
                                                ctx.kw))
    return True


# A failed candidate without an exception: Triton's benchmarker gave inf.
_INF_TEXT = "inf (out of resources or a compile-time assertion)"


def _all_failed(info: _TunerInfo, key_str: str, cands: _Cands, errors: dict) -> BaseException:
    """The error the designated rank raises when every candidate failed:
    the first candidate's own exception (annotated), or, when Triton's
    benchmarker turned every failure into inf itself, a PassFailedError."""
    for s in cands.candidates:
        e = errors.get(s)
        if e is not None:
            if hasattr(e, "add_note"):
                e.add_note(f"detd: every candidate of {info.kernel} key {key_str} failed in this timing pass "
                           f"({len(cands.candidates)} tried); reported so no other rank times it")
            return e
    return _loop.PassFailedError(info.kernel, key_str, f"all {len(cands.candidates)} candidates failed "
                           "(out of resources or compile-time assertion: inf timings)")


def _after_run(tuner, ctx: _Call):
    """Observations that can only be made once Triton's run returned."""
    configs = _triton.configs(tuner)
    if ctx.key is None and len(configs) > 1:
        return  # a key this process already observed (or no key at all)
    seen = _observed.get(tuner)
    if len(configs) <= 1:
        key = _triton.triton_key(tuner, ctx.args, ctx.kw)
        if seen is not None and key in seen:
            return
        info = _info(tuner)
        key_str = _canon.key_string(key)
        cfg = _triton.config_string(configs[0])
        _record(info, key_str, cfg, "local", False, note="single config: nothing to decide")
        _observe(tuner, info, key, key_str, cfg, _native.SOURCE_LOCAL, False, why="single config: nothing to decide")
        return
    key = ctx.key
    if key is None:
        return
    cache = _triton.cache_of(tuner)
    if seen is not None and key in seen:
        if type(cache) is DetdCache and cache._gen == _gen[0]:
            cache._fast.add(key)
        return
    config = dict.get(cache, key) if isinstance(cache, dict) else None
    if config is None:
        return
    info = _info(tuner)
    key_str = _canon.key_string(key)
    cfg = _triton.config_string(config)
    if ctx.local_key is not None:
        timings = None
        ct = _triton.last_timings(tuner)
        if ct is not None:
            timings = {_triton.config_string(c): _samples.normalize(t)[0] for c, t in ct.items()}
        voted = timings is not None and _process.settings().is_recorded(info.name) and \
            _vote(tuner, info, ctx, key_str, cfg, ct)
        _record(info, key_str, cfg, "local", False, timed_here=timings is not None, timings=timings,
                note="voted" if voted else None)
        _observe(tuner, info, key, key_str, cfg, _native.SOURCE_LOCAL, False)
    else:
        # A key resolved in the parent before fork, or before install():
        # observe it under this process too, with what is known of it.
        rec = _state.records.get(info.kernel, {}).get("keys", {}).get(key_str)
        src = rec["source"] if rec else "local"
        inv = {v: k for k, v in _native.SOURCE_NAMES.items()}
        governed = bool(rec and rec["governed"])
        _observe(tuner, info, key, key_str, cfg, inv.get(src, _native.SOURCE_LOCAL), governed,
                 bool(rec and rec.get("chaos")), candidates=rec.get("candidates") if rec and governed else None)


def _vote(tuner, info: _TunerInfo, ctx: _Call, key_str: str, cfg: str, configs_timings) -> bool:
    """Record mode: send this process's winner and every candidate's timing
    from Triton's own pass as a vote. Best effort: a daemon that is down
    costs one warning, never the training run."""
    rows, seen = [], set()
    for c, t in configs_timings.items():  # the pruned configs Triton timed
        s = _triton.config_string(c)
        if s in seen:
            continue
        seen.add(s)
        ms, failed = _samples.normalize(t)
        rows.append((s, ms, failed))
    try:
        table_key = _triton.megatron_key(tuner, ctx.args, ctx.kw)
    except Exception:  # an argument whose str() fails: vote without it
        table_key = None
    try:
        cands = [r[0] for r in rows] if _triton.has_pruner(tuner) else None
        _process.client().vote(_dkey(info, key_str, candidates=cands), cfg, rows, _triton.version(), table_key,
                               min(_process.settings().timeout_ms, 10_000))
        return True
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        _process.warn_once("vote", f"detd: cannot send record-mode votes: {e}")
        return False


# ---------------------------------------------------------------- entry points

def _full_run(tuner, cache, args, kwargs, run=None):
    """A call of the patched ``Autotuner.run`` that is not on the direct
    path (see :func:`detd._triton._patched_run`), or of a subclass's own
    ``run`` governed through its cache (``run``; see :func:`_cache_governed`).
    The call's arguments are pushed on a thread-local stack as a plain
    tuple, turned into a :class:`_Call` only when the cache has work to
    do, and the run runs under the tuner's lock; its picks are observed
    afterwards."""
    if type(cache) is not DetdCache:
        # Triton's dict is kept; another tuner's own cache (flag-gems'
        # on-disk table) is set aside: it never answers around the daemon.
        cache = DetdCache(cache if isinstance(cache, dict) else {})
        _triton.set_cache(tuner, cache)
    elif cache._gen != _gen[0]:
        cache._renew()
    stack = _tls.__dict__.get("stack")
    if stack is None:
        stack = _tls.stack = []
    with cache._lock:
        if _audit.enabled():
            _audit_known(tuner, cache, args, kwargs)
        stack.append((tuner, args, kwargs))
        try:
            ret = (run or _triton.original_run())(tuner, *args, **kwargs)
        except Exception as e:
            _launch_failed(tuner, stack[-1], e)  # observed as failed, then raised as ever
            raise
        finally:
            top = stack.pop()
        many = len(_triton.configs(tuner)) > 1
        if type(top) is _Call:
            _after_run(tuner, top)
        elif not many:
            _after_run(tuner, _Call(tuner, args, kwargs))
        if many and _triton.cache_of(tuner) is cache and _info(tuner).governed and _triton.run_is_triton(tuner) \
                and not _audit.pending(tuner):
            _go_direct(tuner, cache)
    return ret


def _audit_known(tuner, cache, args, kwargs):
    """Audit on: a governed key resolved before the audit was turned on is
    audited at its next launch (new keys are audited where they resolve)."""
    if len(_triton.configs(tuner)) <= 1:
        return
    info = _info(tuner)
    if not info.governed:
        return
    key = _triton.triton_key(tuner, args, kwargs)
    if not dict.__contains__(cache, key):
        return
    key_str = _canon.key_string(key)
    if not _audit.audited(info.kernel, key_str):
        _send_audit(info, key_str, _audit.check(tuner, info.kernel, info.name, key, key_str,
                                                dict.__getitem__(cache, key), args, kwargs))


def _send_audit(info: _TunerInfo, key_str: str, result: Optional[dict]):
    """Send an audit's result to the daemon (``detctl verify`` lists it per
    key): the key's observation again, as recorded, with the audit."""
    if not result or result.get("status") not in _native.AUDIT_STATUS:
        return
    rec = _state.records.get(info.kernel, {}).get("keys", {}).get(result["key"])
    if rec is None or not rec.get("config"):
        return
    inv = {v: k for k, v in _native.SOURCE_NAMES.items()}
    try:
        _process.client().observe(_dkey(info, key_str, candidates=rec.get("candidates")), rec["config"],
                                  inv.get(rec["source"], _native.SOURCE_UNSPECIFIED), rec["governed"],
                                  bool(rec.get("chaos")), audit=result["status"],
                                  differing=result.get("differing") or ())
    except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
        _process.warn_once("audit-send", f"detd: cannot send audit results to the daemon: {e}")


# tuner -> keys whose launch raised and was observed as failed (this process).
_failed_keys: "weakref.WeakKeyDictionary[Any, set]" = weakref.WeakKeyDictionary()


def _launch_failed(tuner, top, e: BaseException):
    """A launch on the full path raised: observed as failed, once per key
    and process, so that ``detctl verify`` fails and lists it."""
    try:
        ctx = top if type(top) is _Call else _Call(*top)
        key = ctx.key if ctx.key is not None else _triton.triton_key(tuner, ctx.args, ctx.kw)
        done = _failed_keys.setdefault(tuner, set())
        if key in done:
            return
        done.add(key)
        info = _info(tuner)
        key_str = _canon.key_string(key)
        cache = _triton.cache_of(tuner)
        config = dict.get(cache, key) if isinstance(cache, dict) else None
        rec = _state.records.get(info.kernel, {}).get("keys", {}).get(key_str)
        inv = {v: k for k, v in _native.SOURCE_NAMES.items()}
        source = inv.get(rec["source"], _native.SOURCE_UNSPECIFIED) if rec else _native.SOURCE_UNSPECIFIED
        msg = _loop.error_line(e)
        if rec is not None:
            with _state.records_lock:
                rec["launch_failed"] = msg
        governed = info.governed and len(_triton.configs(tuner)) > 1
        _observe(tuner, info, key, key_str, _triton.config_string(config) if config is not None else "", source,
                 governed, candidates=rec.get("candidates") if rec and governed else None, failed=msg)
    except Exception as e2:  # noqa: BLE001 - reporting never hides the launch's own error
        _process.warn_once("launch-failed", f"detd: cannot record a failed launch: {e2}")


def _bypassed(tuner, cls: str, args, kwargs):
    """A call of an ``Autotuner`` subclass whose own ``run`` never reached
    ``Autotuner.run``: nothing of it can be governed. Listed and observed
    (once per key) with source ``ungoverned`` and the config it reports as
    its ``best_config`` when it keeps one: ``verify`` fails when the
    processes that launched the key chose differently."""
    try:
        key = _triton.triton_key(tuner, args, kwargs)
        seen = _observed.get(tuner)
        if seen is not None and key in seen:
            return
        info = _info(tuner)
        info.why = f"{cls} overrides run without calling Autotuner.run: not governed"
        key_str = _canon.key_string(key)
        best = _triton.best_config(tuner)
        cfg = _triton.config_string(best) if _triton.is_config(best) else "unknown (bypasses Autotuner.run)"
        _record(info, key_str, cfg, "ungoverned", False, note="bypasses Autotuner.run")
        _observe(tuner, info, key, key_str, cfg, _native.SOURCE_UNGOVERNED, False)
    except Exception as e:  # noqa: BLE001 - listing never breaks the caller's launch
        _process.warn_once("bypassed", f"detd: cannot list an ungoverned autotuner ({cls}): {e}")


def _cache_governed(tuner) -> bool:
    """Whether ``tuner``, of an ``Autotuner`` subclass whose ``run`` never
    calls ``Autotuner.run``, is governed through its cache: its class, or
    one above it, is named by the ``cache_tuners`` setting (flag-gems'
    ``LibTuner`` by default) and the tuner is governed. Such a ``run``
    asks ``key in self.cache`` before it chooses and launches
    ``self.cache[key]``: the :class:`DetdCache` put in its place answers
    the first from the daemon (its own cache, flag-gems' on-disk table
    included, never answers), and the run's own choosing is never
    reached on a governed key."""
    names = _cache_classes.get(type(tuner))
    if names is None:
        names = _cache_classes[type(tuner)] = frozenset(_triton.class_names(tuner))
    if not names.intersection(_process.settings().cache_tuners):
        return False
    return _info(tuner).governed


_cache_classes: "weakref.WeakKeyDictionary[type, frozenset]" = weakref.WeakKeyDictionary()


def _resolve_direct(tuner, st, cache, key, args, kwargs):
    """A new key of a tuner on the direct path, met in Triton's run (at its
    ``prune_configs``): resolve it under the tuner's lock and return the
    live config to launch, or None when the tuner is no longer governed
    (it goes back to the full path and Triton times the key)."""
    ctx = _Call(tuner, args, kwargs)
    ctx.key = key
    with st[0]:
        if key not in cache and not _resolve(cache, ctx, key):
            _leave_direct(tuner)
            return None
        return cache[key]


def _check_version():
    msg = _triton.version_warning()
    if msg:
        _process.warn_once("version", msg)


def patch():
    """Patch Triton's ``Autotuner`` once (idempotent; see
    :func:`detd._triton.patch`)."""
    if _triton.patch(_process.active, _full_run, _resolve_direct, _bypassed, _cache_governed):
        _check_version()


def _configured():
    """A new install(): caches renew (observed keys reset), and every tuner
    takes the full path again (governance may have changed)."""
    _gen[0] += 1
    _failed_keys.clear()
    for tuner in list(_direct_tuners):
        _leave_direct(tuner)
    _infos.clear()


_process.at_configure(_configured)


def records() -> List[dict]:
    audits = _audit.results()
    with _state.records_lock:
        out = []
        for rec in _state.records.values():
            r = dict(rec)
            r["keys"] = [dict(v) for v in rec["keys"].values()]
            found = audits.get(rec["kernel"], {})
            for k in r["keys"]:
                if k["key"] in found:
                    k["audit"] = found[k["key"]]
            if found:
                r["nondeterministic"] = sorted({a for v in found.values() for a in v.get("differing") or []})
            out.append(r)
        return out
