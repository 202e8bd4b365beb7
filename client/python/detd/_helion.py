"""The Helion adapter: Helion's autotuner governed, one search per kernel
and key in the whole job (see ``docs/helion.md``).

Helion (PyTorch's kernel DSL) autotunes each kernel per argument
specialization with a search (``LFBOTreeSearch`` by default) that builds
its candidates as it goes, for minutes. Its hook point is the setting
``autotuner_fn(bound_kernel, args, **kwargs)``, which returns the object
whose ``autotune(skip_cache=...)`` searches. :func:`install` makes every
``helion.Settings`` built afterwards (every ``@helion.kernel``) wrap its
``autotuner_fn``, the default one or a user's, in :func:`governed`:

- the key: kernel ``helion::module:qualname@guard`` (the guard hashes the
  kernel's source), key ``spec=<hash>`` (SHA-256 of the specialization key
  Helion computes for its own cache, the extra and compiler-seed results and
  the config-spec fingerprint), the asking process's arch; candidates: the
  start config (Helion's default config) and a search descriptor
  (``search:helion.<search class>;tune=...;effort=...;helion=<version>;
  triton=<version>``): a key that names its search, as Inductor's large
  coordinate descents do (``daemon/core/search.h``);
- a config's string: one part per field of Helion's flat config (its
  ``ConfigGeneration.flatten`` order), ``<name>=<code>``: a power-of-two
  or integer field with a lower bound of at least 1 carries its value, any
  other field (enumerations, booleans, permutations, integers from 0) the
  1-based index of its value in the field's choices; list fields give one
  part per element (``indexing_0``, ``indexing_1``, ...). Fields with one
  choice are not tuned. The daemon checks a reported config's shape
  against the descriptor; every process decodes the committed string
  (:meth:`_Space.config`) and uses it only if Helion's own flatten gives
  the same string back;
- the designated process runs the real search (the wrapped
  ``autotuner_fn``) and reports the config it found with its time; every
  other process waits and uses the committed config; a rerun searches
  nothing (the decision store answers).

A kernel whose config has a field this encoding does not know, or more
tuned fields or a longer descriptor than the daemon takes, is searched as
Helion would (ungoverned, listed with the reason by
:func:`detd.autotuners`, warned once). ``DETD_HELION=off`` leaves Helion
alone.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import itertools
import math
import os
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import _canon, _imports, _loop, _native, _process, _provenance, _triton

__all__ = ["install", "governed", "records", "searches"]

# The daemon's limits on a search key (daemon/core/search.h, limits.h).
MAX_TUNED = 32
MAX_CONFIG_BYTES = 1024
MAX_VALUE = 2**31 - 1
_CHOICES_LIMIT = 1 << 16


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.records: Dict[str, dict] = {}
        self.searches = 0  # searches this process ran (governed or not)
        self.patched = False


_st = _State()


def _same(a, b) -> bool:
    # False == 0 and True == 1 in Python: a choice matches only its own type.
    return type(a) is type(b) and a == b


class _Space:
    """The string form of one bound kernel's configs (module docstring).
    ``ok`` False with ``why`` when a field cannot be encoded."""

    def __init__(self, bound_kernel):
        spec = bound_kernel.config_spec
        self.gen = spec.create_config_generation()
        self.default = spec.default_config()
        names: Dict[int, str] = {}
        for key, (indices, is_seq) in getattr(self.gen, "_key_to_flat_indices", {}).items():
            for k, i in enumerate(indices):
                names[i] = f"{key}_{k}" if is_seq else key
        self.fields: List[Tuple[str, str, Any]] = []  # (part name, kind, choices or (lo, hi))
        self.layout: List[Tuple[int, Optional[int], int]] = []  # per field: flat index, list element, of n
        self.ok, self.why = True, ""
        for i, frag in enumerate(self.gen.flat_spec):
            base = names.get(i, f"f{i}")
            inner, length = (frag.inner, frag.length) if type(frag).__name__ == "ListOf" else (frag, None)
            kind, dom = self._domain(inner)
            if kind is None:
                self.ok, self.why = False, f"field {base} is a {type(inner).__name__}, which detd cannot encode"
                return
            for j in range(length if length is not None else 1):
                self.fields.append((base if length is None else f"{base}_{j}", kind, dom))
                self.layout.append((i, j if length is not None else None, length or 0))
        if len({f[0] for f in self.fields}) != len(self.fields):
            self.fields = [(f"f{n}", k, d) for n, (_, k, d) in enumerate(self.fields)]
        self.start = self.string(self.default)
        tune = [(n, lo, hi) for n, lo, hi in ((n, *self._range(k, d)) for n, k, d in self.fields) if hi > lo]
        self.tune = tune
        if len(tune) > MAX_TUNED:
            self.ok, self.why = False, f"{len(tune)} tuned fields, over the daemon's {MAX_TUNED}"

    @staticmethod
    def _domain(frag):
        name = type(frag).__name__
        if name == "PermutationFragment":
            if math.factorial(frag.length) > MAX_VALUE:
                return None, None
            return "perm", list(itertools.permutations(range(frag.length)))
        low = getattr(frag, "low", None)
        if name in ("PowerOfTwoFragment", "BlockSizeFragment", "NumWarpsFragment", "IntegerFragment") \
                and isinstance(low, int) and low >= 1 and frag.high <= MAX_VALUE:
            return "int", (low, frag.high)
        values = frag.search_values(limit=_CHOICES_LIMIT) if hasattr(frag, "search_values") else None
        if values is None and name == "EnumFragment":
            values = list(frag.choices)
        return ("choice", list(values)) if values else (None, None)

    @staticmethod
    def _range(kind, dom):
        return dom if kind == "int" else (1, len(dom))

    def _code(self, kind, dom, v) -> Optional[int]:
        if kind == "int":
            return v if isinstance(v, int) and not isinstance(v, bool) and dom[0] <= v <= dom[1] else None
        if kind == "perm":
            v = tuple(v) if isinstance(v, list) else None
        for n, c in enumerate(dom):
            if (kind == "perm" and c == v) or (kind == "choice" and _same(c, v)):
                return n + 1
        return None

    def string(self, config) -> Optional[str]:
        """The string of a Helion ``Config``, or None when a value is
        outside its field's domain."""
        flat = self.gen.flatten(config)
        parts = []
        for (name, kind, dom), (i, j, _) in zip(self.fields, self.layout):
            v = flat[i] if j is None else flat[i][j]
            code = self._code(kind, dom, v)
            if code is None:
                return None
            parts.append(f"{name}={code}")
        return ",".join(parts)

    def config(self, string: str):
        """The Helion ``Config`` of a string this space makes, or None."""
        parts = string.split(",")
        if len(parts) != len(self.fields):
            return None
        flat = list(self.gen.flatten(self.default))
        for part, (name, kind, dom), (i, j, n) in zip(parts, self.fields, self.layout):
            pname, _, code = part.partition("=")
            if pname != name or not (code.isascii() and code.isdigit()):
                return None
            c = int(code)
            if kind == "int":
                v = c
            elif 1 <= c <= len(dom):
                v = list(dom[c - 1]) if kind == "perm" else dom[c - 1]
            else:
                return None
            if j is None:
                flat[i] = v
            else:
                flat[i] = list(flat[i])
                flat[i][j] = v
        try:
            cfg = self.gen.unflatten(flat)
        except Exception:  # a value Helion's own rules refuse
            return None
        return cfg if self.string(cfg) == string else None


def _versions() -> Tuple[str, str]:
    try:
        helion_v = importlib.metadata.version("helion")
    except importlib.metadata.PackageNotFoundError:
        helion_v = "unknown"
    return helion_v, _triton.version() or "none"


def _identity(bound_kernel) -> Tuple[str, str]:
    fn = bound_kernel.kernel.fn
    name = _canon.kernel_name(getattr(fn, "__module__", "?"), getattr(fn, "__qualname__", "?"))
    try:
        material = inspect.getsource(fn)
    except (OSError, TypeError):
        material = fn.__code__.co_code.hex()
    return name, "helion::" + _canon.kernel_identity(name, _canon.code_guard("source", material))


def _key(bound_kernel, args, space: _Space) -> str:
    kernel = bound_kernel.kernel
    ck = kernel._create_bound_kernel_cache_key(bound_kernel, tuple(args), kernel._base_specialization_key(args))
    material = repr((ck.specialization_key, getattr(ck, "extra_results", ()),
                     getattr(ck, "compiler_seed_results", ()),
                     bound_kernel.config_spec.cache_fingerprint_hash()))
    return "spec=" + hashlib.sha256(material.encode("utf-8")).hexdigest()[:32]


def _record(kernel: str, name: str, key: str, entry: dict, governed: bool, why: str = ""):
    with _st.lock:
        rec = _st.records.setdefault(kernel, dict(kernel=kernel, name=name, kind="helion", governed=governed,
                                                  why=why, candidates=[], keys={}))
        rec["governed"], rec["why"] = governed, why
        rec["keys"][key] = dict(entry, key=key)


def records() -> List[dict]:
    """One dict per Helion kernel this process reached, as
    :func:`detd.autotuners` lists them (``kind`` ``helion``; ``keys`` a
    list; each key's ``config`` is Helion's config JSON, ``string`` the
    committed string)."""
    with _st.lock:
        return [dict(r, keys=list(r["keys"].values())) for r in _st.records.values()]


def searches() -> int:
    """How many Helion searches this process ran (governed or not)."""
    return _st.searches


def _search_bench(inner, effort) -> Dict[str, Any]:
    """How a Helion search timed, for the decision's provenance: the
    search's class (``module:qualname``; the one a cache wrapper holds in
    ``autotuner``) and its effort. Helion's own benchmarker times each
    config; its warmup and rep are not known here (0)."""
    search = getattr(inner, "autotuner", None) or inner
    t = type(search)
    return {"benchmarker": f"{t.__module__}:{t.__qualname__}",
            "return_mode": f"the best config of Helion's search (autotune_effort={effort})"}


class _Governed:
    """What the wrapped ``autotuner_fn`` returns: ``autotune()`` resolves
    the key through the daemon; the inner search runs only where the
    daemon designates this process."""

    def __init__(self, inner_fn, bound_kernel, args, kwargs):
        self.inner_fn, self.bk, self.args, self.kwargs = inner_fn, bound_kernel, args, kwargs

    def _search(self, skip_cache: bool):
        inner = self.inner_fn(self.bk, self.args, **self.kwargs)
        with _st.lock:
            _st.searches += 1
        return inner, inner.autotune(skip_cache=skip_cache)

    def autotune(self, *, skip_cache: bool = False):
        name, kernel = _identity(self.bk)
        space = _Space(self.bk)
        settings = _process.settings()
        why = space.why if not space.ok else ""
        key = _key(self.bk, self.args, space) if space.ok else "?"
        if space.ok:
            helion_v, triton_v = _versions()
            try:
                desc = _canon.search_descriptor(
                    f"helion.{getattr(self.inner_fn, '__name__', 'autotuner_fn')}", space.tune,
                    algorithm=os.environ.get("HELION_AUTOTUNER") or "default",
                    effort=str(self.bk.settings.autotune_effort), helion=helion_v, triton=triton_v)
            except ValueError as e:
                desc, why = "", str(e)
            if not space.tune or space.start is None:
                why = "no field to tune" if not space.tune else "its default config is outside its own space"
            elif len(desc) > MAX_CONFIG_BYTES or len(space.start) > MAX_CONFIG_BYTES:
                why = why or "the search's descriptor or start config is over the daemon's 1024 bytes"
        if why or not settings.governs_anything:
            why = why or f"mode {settings.mode}"
            _process.warn_once(f"helion:{kernel}", f"detd: Helion kernel {kernel} not governed: {why}; "
                               f"searched as Helion would")
            _inner, cfg = self._search(skip_cache)
            _record(kernel, name, key, dict(config=cfg.to_json(), source="local", governed=False,
                                            timed_here=True), False, why)
            return cfg
        cands = (space.start, desc)
        dkey = _native.Key(settings.namespace, _process.identity()["arch"], kernel, key, cands)
        found: Dict[str, Any] = {}

        def time_pass(_answer):
            with _process.timing_lock() as held:
                inner, cfg = self._search(skip_cache)
            found["config"] = cfg
            found["how"] = _provenance.describe(
                _search_bench(inner, self.bk.settings.autotune_effort), held.locked, name)
            s = space.string(cfg)
            if s is None:
                raise _loop.PassFailedError(kernel, key, f"the config Helion found ({cfg}) is outside its "
                                            "own config space as detd encodes it")
            perf = getattr(inner, "best_perf_so_far", None)
            if perf is None:
                perf = getattr(getattr(inner, "autotuner", None), "best_perf_so_far", math.inf)
            return [(s, [float(perf) if math.isfinite(perf) else 1.0], False)]

        res = _loop.resolve(dkey, kernel, key, triton_v, time_pass, timing=lambda: found.get("how"))
        ans, reason = res.answer, res.reason
        if res.report_error is not None:
            raise _loop.PassFailedError(kernel, key, str(res.report_error)) from res.report_error
        cfg = None
        if ans is not None and ans.outcome == _native.OUTCOME_DECIDED:
            cfg = space.config(ans.config)
            if cfg is None:
                reason = f"the daemon's config {ans.config!r} is not one of this kernel's Helion configs"
        elif ans is not None:
            reason = _loop.no_decision(ans)
        source = (ans.source or _native.SOURCE_TIMED) if cfg is not None else _native.SOURCE_FALLBACK
        string = ans.config if cfg is not None else space.start
        if cfg is None:
            if settings.on_miss == "error":
                _record(kernel, name, key, dict(config=None, source="miss", governed=True, timed_here=False,
                                                note=reason), True)
                raise _loop.MissError(kernel, key, reason or "no answer")
            _process.warn_once(f"miss:{kernel}:{key}", f"detd: no decision for Helion kernel {kernel} key {key}: "
                               f"{reason}; using its default config (on_miss={settings.on_miss})")
            cfg = space.default
            # Not final: detd.wait_final() (and the check before a CUDA
            # graph capture) waits for the decision; the bound kernel keeps
            # the config it compiled, unless the decision is that one.
            _process.note_provisional(_process.Provisional(kernel, key, dkey, string, lambda c: c == string,
                                                           res.wait.fell_back(reason)))
        _record(kernel, name, key, dict(config=cfg.to_json(), string=string,
                                        source=_native.SOURCE_NAMES.get(source, str(source)), governed=True,
                                        timed_here=res.rows is not None, candidates=list(cands)), True)
        try:
            _process.client().observe(dkey, string, source, True, False)
        except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
            _process.warn_once("observe", f"detd: cannot record observations: {e}")
        return cfg


def governed(inner_fn: Callable) -> Callable:
    """An ``autotuner_fn`` for Helion that governs ``inner_fn`` (Helion's
    ``default_autotuner_fn`` or a user's): see the module docstring.
    Idempotent (a governed function is returned as is)."""
    if getattr(inner_fn, "__detd_helion__", False):
        return inner_fn

    def autotuner_fn(bound_kernel, args, **kwargs):
        return _Governed(inner_fn, bound_kernel, args, kwargs)

    autotuner_fn.__detd_helion__ = True
    autotuner_fn.__name__ = getattr(inner_fn, "__name__", "autotuner_fn")
    return autotuner_fn


_SETTINGS = "helion.runtime.settings"


def _patch() -> None:
    hs = sys.modules.get(_SETTINGS)
    with _st.lock:
        if hs is None or _st.patched:
            return
        orig = hs.Settings.__init__

        def __init__(self, **kw):
            orig(self, **kw)
            if _process.active() and _process.settings().helion == "on":
                self.autotuner_fn = governed(self.autotuner_fn)

        hs.Settings.__init__ = __init__
        _st.patched = True


def install() -> None:
    """Called by ``detd.install()`` (after the settings are in force):
    every ``helion.Settings`` built from then on (every ``@helion.kernel``
    defined after it) wraps its ``autotuner_fn`` in :func:`governed`, now
    when Helion is imported, else when it will be. Helion is never
    imported here."""
    _imports.watch((_SETTINGS,), _patch)
    if _imports.loaded(_SETTINGS):
        _patch()
