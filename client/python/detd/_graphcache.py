"""Inductor's FX graph cache while detd governs: a compiled graph is saved
with the choices of the selections made while it compiled, and read back
only where each of them is the choice detd answers now (docs/inductor.md,
"Inductor's caches").

A compiled graph (Inductor's ``CompiledFxGraph``) carries the choices of
its max-autotune selections (GEMMs and other templates) in its generated
code, and a cache hit skips ``lookup``: without a check, a graph written
by an ungoverned run, against another store or with a fallback would
bring its own choices back past the daemon. So, once
:func:`install` patched Inductor's ``FxGraphCache``:

* from the cache lookup that missed to the save (a graph's compile),
  every selection the Inductor adapter answers is noted (:func:`met`)
  in every compile then open in the process (a nested or concurrent
  compile's selections count for each: a longer list only means more
  checks when it is read back); a graph whose compile starts while
  another thread compiles the same cache key is not saved, as its list
  could have been cut short (begun again on its own thread, after a
  compile that raised, it starts a new list);
* the save (``_save_graph``) attaches the list to the graph, pickled with
  it (:data:`ATTR`: plain tuples of strings), unless one of them was not
  detd's decision (a fallback, an ungoverned selection): then the graph
  is not saved (``inductor_graph_cache_unsaved``);
* each entry read back (``iterate_over_candidates``, before Inductor's
  guards) is offered only when every selection on its list is the one
  detd answers now (:func:`verdict`: an override, a single candidate,
  or the daemon's decision, asked without ever being designated, waiting
  at most :data:`ASK_MS` for a key being timed; verified choices are
  remembered until the next ``install()``); others are passed over
  (``inductor_graph_cache_refused``,
  logged with the reason), and an entry with no list (written without
  detd) too. On a hit the adapter's ``hit`` records and observes the
  graph's selections as ``lookup`` would have (``inductor_graph_cache_hits``).

A graph passed over is a cache miss: it compiles, and its selections ask
the daemon as without the cache. The key, the guards and the Triton
bundle are Inductor's own. The remote FX graph cache stays off while
detd governs (the adapter's settings).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from . import _native, _process

log = logging.getLogger("detd")

# The attribute of a saved graph holding its selections: a tuple of
# (kernel, name, key, candidates, config), candidates a tuple of strings.
ATTR = "_detd_selections"
_VERIFIED = "_detd_verified"  # on an entry read back: its selections with their sources
# How long the check of a read-back entry waits for one key (a decided
# key is answered at once; one being timed elsewhere is waited for this
# long, then the entry is passed over and the graph compiles).
ASK_MS = 2000

_lock = threading.Lock()
_open: Dict[str, Tuple[int, List[tuple]]] = {}  # cache key -> (thread, selections met since its lookup missed)
_unfit: Dict[str, str] = {}             # cache key -> why its graph must not be saved
_known: Dict[Tuple[str, str], Tuple[str, int]] = {}  # (kernel, key) -> (config, source) verified
_counts = dict(hits=0, refused=0, unsaved=0)
_hooks: Dict[str, Callable] = {}  # "governed" (the adapter's), once installed


def _after_fork_in_child():
    """A child's compiles are its own (and the parent's lock may be held
    by a thread the child does not have)."""
    global _lock
    _lock = threading.Lock()
    _open.clear()
    _unfit.clear()


def _configured():
    """A new install(): what was verified under the old settings (another
    socket, namespace or arch) is asked again."""
    with _lock:
        _known.clear()


_process.at_fork_child(_after_fork_in_child)
_process.at_configure(_configured)


def counts() -> dict:
    """``detd.stats()``'s FX graph cache counters: graphs read back with
    every choice verified (``inductor_graph_cache_hits``), entries passed
    over (``inductor_graph_cache_refused``), graphs not saved because a
    choice in them was not detd's decision (``inductor_graph_cache_unsaved``)."""
    with _lock:
        return {f"inductor_graph_cache_{k}": v for k, v in _counts.items()}


def installed() -> bool:
    return "governed" in _hooks


def met(selection: Optional[tuple], why_unfit: Optional[str] = None) -> None:
    """A selection answered while graphs compile: ``(kernel, name, key,
    candidates, config)``; ``why_unfit``: why a graph holding it must
    not be saved (its choice is not detd's decision), or None."""
    with _lock:
        for k, (_, sels) in _open.items():
            if why_unfit is not None:
                _unfit.setdefault(k, why_unfit)
            elif selection is not None:
                sels.append(selection)


def _well_formed(sels) -> bool:
    if not isinstance(sels, tuple):
        return False
    for s in sels:
        if not (isinstance(s, tuple) and len(s) == 5 and all(isinstance(x, str) for x in (s[0], s[1], s[2], s[4]))
                and isinstance(s[3], tuple) and all(isinstance(c, str) for c in s[3])):
            return False
    return True


def verdict(sels) -> Tuple[Optional[List[Tuple[tuple, int]]], Optional[str]]:
    """``(selections with their sources, None)`` when every selection of a
    read-back graph is the choice detd answers now, else ``(None, why)``."""
    if sels is None:
        return None, "written without detd (no record of its choices)"
    if not _well_formed(sels):
        return None, "its record of choices is unreadable"
    settings, out = _process.settings(), []
    for sel in sels:
        kernel, name, key, cands, config = sel
        with _lock:
            known = _known.get((kernel, key))
        if known is not None and known[0] == config:
            out.append((sel, known[1]))
            continue
        if not _hooks["governed"](name):
            return None, f"{kernel} is not governed"
        override = settings.override_for(name, kernel)
        if override is not None and override in cands:
            want, source = override, _native.SOURCE_OVERRIDE
        elif len(cands) == 1:
            want, source = cands[0], _native.SOURCE_LOCAL
        else:
            dkey = _native.Key(settings.namespace, _process.identity()["arch"], kernel, key, cands)
            try:
                ans = _process.client().decide(dkey, True, ASK_MS, wait_only=True)
            except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
                if getattr(e, "code", None) == _native.ETIMEDOUT:
                    return None, f"{kernel} key {key} is being timed"
                return None, f"{kernel}: the daemon did not answer ({e})"
            if ans.outcome != _native.OUTCOME_DECIDED:
                state = "being timed" if ans.outcome == _native.OUTCOME_TIMEOUT else "not decided"
                return None, f"{kernel} key {key} is {state}"
            want, source = ans.config, ans.source or _native.SOURCE_TIMED
        if want != config:
            return None, f"{kernel} key {key}: the graph has {config!r}, detd answers {want!r}"
        with _lock:
            _known[(kernel, key)] = (want, source)
        out.append((sel, source))
    return out, None


# ---------------------------------------------------------------- the patches

def install(codecache, governed: Callable[[str], bool], hit: Callable[[tuple, int], None],
            governing: Callable[[], bool]) -> Optional[str]:
    """Patch ``codecache.FxGraphCache``; None, or why it cannot be (then
    the adapter turns the FX graph cache off). ``governed(name)``: whether
    a selection of that name is governed now; ``hit(selection, source)``:
    record and observe a selection of a graph read back; ``governing()``:
    whether detd governs (else Inductor's cache works as without detd)."""
    if installed():
        return None
    cls = getattr(codecache, "FxGraphCache", None)
    own = getattr(cls, "__dict__", {})
    need = [m for m in ("_lookup_graph", "_save_graph") if not isinstance(own.get(m), staticmethod)]
    it = getattr(cls, "iterate_over_candidates", None)
    if it is None or getattr(it, "__self__", None) is not cls:  # a classmethod, bound to the class
        need.append("iterate_over_candidates")
    if need:
        return f"Inductor's FxGraphCache lacks {', '.join(need)}"
    lookup, save, iterate = own["_lookup_graph"].__func__, own["_save_graph"].__func__, it.__func__

    def _lookup_graph(key, *args, **kwargs):
        if not governing():
            return lookup(key, *args, **kwargs)
        me = threading.get_ident()
        with _lock:
            if key in _open and _open[key][0] != me:  # the same graph compiling in two threads at once
                _unfit[key] = "the same graph compiled in two threads at once"
            else:  # (a span left open on this thread: its compile raised; begun again)
                _open[key] = (me, [])
                _unfit.pop(key, None)
        try:
            graph, info = lookup(key, *args, **kwargs)
        except BaseException:
            _close(key)
            raise
        if graph is None:
            return graph, info
        verified = getattr(graph, "__dict__", {}).pop(_VERIFIED, None)
        if verified is None:  # read back past the check: compiled instead (the span stays open)
            with _lock:
                _counts["refused"] += 1
            log.info("detd: a graph of Inductor's FX graph cache read back unchecked: compiled instead")
            return None, info
        _close(key)
        for sel, source in verified:
            hit(sel, source)
        with _lock:
            _counts["hits"] += 1
        return graph, info

    def _save_graph(key, compiled_graph, *args, **kwargs):
        if not governing():
            return save(key, compiled_graph, *args, **kwargs)
        sels, why = _close(key)
        if sels is None or why is not None:
            with _lock:
                _counts["unsaved"] += 1
            log.info("detd: compiled graph %s not saved to Inductor's FX graph cache: %s", key,
                     why or "its compile was not seen from its cache lookup")
            return None
        setattr(compiled_graph, ATTR, tuple(sels))
        return save(key, compiled_graph, *args, **kwargs)

    def _iterate(klass, *args, **kwargs):
        for item in iterate(klass, *args, **kwargs):
            if klass is not cls or not governing():
                yield item
                continue
            ok, why = verdict(getattr(item[0], ATTR, None))
            if ok is None:
                with _lock:
                    _counts["refused"] += 1
                log.info("detd: an entry of Inductor's FX graph cache passed over: %s", why)
                continue
            setattr(item[0], _VERIFIED, ok)  # for the hit above, which takes it off
            yield item

    _hooks["governed"] = governed
    cls._lookup_graph = staticmethod(_lookup_graph)
    cls._save_graph = staticmethod(_save_graph)
    cls.iterate_over_candidates = classmethod(_iterate)
    return None


def _close(key: str) -> Tuple[Optional[Sequence[tuple]], Optional[str]]:
    with _lock:
        span = _open.pop(key, None)
        return (span[1] if span is not None else None), _unfit.pop(key, None)
