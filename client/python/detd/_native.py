"""ctypes binding of libdetd (``detd/client.h``, ``detd/error.h``).

The library is loaded on first use, from the first of:

1. ``$DETD_LIBRARY`` (a path to ``libdetd.so``);
2. ``detd/_lib/libdetd.so`` bundled by ``pip install``;
3. a source checkout: ``$DETD_BUILD_DIR/client`` or ``<repo>/build/client``
   when this package is imported from ``client/python``;
4. the system's ``libdetd`` (``ctypes.util.find_library``).

ctypes releases the GIL around every call, so a thread waiting for another
rank's timing pass does not stall the others.

One handle per process: a forked child gets a fresh handle on first use (the
parent's is left alone, never closed in the child, since closing would act
on a connection the parent still owns).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import socket as _socket
import threading
from typing import List, NamedTuple, Optional, Sequence, Tuple

c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_int32 = ctypes.c_int32
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_int64 = ctypes.c_int64
c_size_t = ctypes.c_size_t

OUTCOME_DECIDED = 1
OUTCOME_DESIGNATED = 2
OUTCOME_MISS = 3
OUTCOME_TIMEOUT = 4
OUTCOME_NAMES = {1: "decided", 2: "designated", 3: "miss", 4: "timeout"}

SOURCE_UNSPECIFIED = 0
SOURCE_TIMED = 1
SOURCE_TABLE = 2
SOURCE_OVERRIDE = 3
SOURCE_IMPORT = 4
SOURCE_FALLBACK = 5
SOURCE_LOCAL = 6
SOURCE_UNGOVERNED = 7  # a tuner detd cannot govern: verify requires agreement
SOURCE_RUNTIME = 8  # a runtime finding no config fixes (libdetd 0.8; detd._nondet)
SOURCE_NAMES = {0: "unspecified", 1: "timed", 2: "table", 3: "override", 4: "import", 5: "fallback",
                6: "local", 7: "ungoverned", 8: "runtime"}

DECIDE_NO_CLAIM = 0x1
DECIDE_SHARE = 0x2
DECIDE_BENCH = 0x4  # libdetd 0.5: with DECIDE_SHARE, a benchmark share
DECIDE_WAIT_ONLY = 0x8  # libdetd 0.8: wait for the decision, never be designated
OBSERVE_GOVERNED = 0x1
OBSERVE_CHAOS = 0x2
OBSERVE_FAILED = 0x4  # libdetd 0.3 (detd_observe_ex)
AUDIT_STATUS = {"deterministic": 1, "nondeterministic": 2, "error": 3}

# From error.h (stable ABI values).
EINVAL = -1000
ECONNECT = -1002
ETIMEDOUT = -1003
ESTALE = -1007
EUNAVAILABLE = -1014
ENOCAND = -1017
EENV = -1019  # libdetd 0.7: a timing pass given back (environment)
EINVAL = -22


class _ObserveExtra(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("error", c_char_p),
        ("audit", c_int),
        ("differing", ctypes.POINTER(c_char_p)),
        ("n_differing", c_size_t),
        ("why", c_char_p),
    ]


class _Identity(ctypes.Structure):
    _fields_ = [
        ("host", c_char_p),
        ("rank", c_int32),
        ("local_rank", c_int32),
        ("world_size", c_int32),
        ("device_name", c_char_p),
        ("arch", c_char_p),
        ("sm_count", c_int32),
        ("job", c_char_p),
    ]


class _Key(ctypes.Structure):
    _fields_ = [
        ("namespace_", c_char_p),
        ("arch", c_char_p),
        ("kernel", c_char_p),
        ("key", c_char_p),
        ("candidates", ctypes.POINTER(c_char_p)),
        ("n_candidates", c_size_t),
        ("table_key", c_char_p),
    ]


class _Timing(ctypes.Structure):
    _fields_ = [
        ("config", c_char_p),
        ("ms", ctypes.POINTER(ctypes.c_double)),
        ("n_ms", c_size_t),
        ("failed", c_int),
    ]


class _TimingInfo(ctypes.Structure):  # libdetd 0.8: struct detd_timing_info
    _fields_ = [
        ("benchmarker", c_char_p),
        ("warmup", ctypes.c_double),
        ("rep", ctypes.c_double),
        ("return_mode", c_char_p),
        ("cuda_graphs", c_int),
        ("timing_lock", c_int),
        ("torch_version", c_char_p),
        ("cuda_version", c_char_p),
        ("driver", c_char_p),
        ("package", c_char_p),
        ("package_version", c_char_p),
    ]


class _ReportExtra(ctypes.Structure):  # libdetd 0.7; timing: 0.8
    _fields_ = [
        ("size", c_size_t),
        ("errors", ctypes.POINTER(c_char_p)),
        ("timing", ctypes.POINTER(_TimingInfo)),
    ]


# The size of a 0.7 struct detd_report_extra (no timing member).
_EXTRA_07 = _ReportExtra.timing.offset
_TIMING_FIELDS = frozenset(name for name, _ in _TimingInfo._fields_)


class _Answer(ctypes.Structure):
    _fields_ = [
        ("outcome", c_int),
        ("config", c_char_p),
        ("source", c_int),
        ("decision_id", c_char_p),
        ("claim_id", c_uint64),
        ("lease_ms", c_uint32),
        ("takeover", c_int),
        ("superseded", c_int),
        ("decided_by_host", c_char_p),
        ("decided_by_rank", c_int32),
        ("decided_by_pid", c_int32),
        ("waited_ms", c_uint32),
        ("holder_host", c_char_p),
        ("holder_rank", c_int32),
        ("holder_pid", c_int32),
        ("held_ms", c_uint32),
        ("share_index", c_uint32),
        ("bench", c_int),  # libdetd 0.5
        ("daemon_away", c_int),  # libdetd 0.6
    ]


class _Stats(ctypes.Structure):
    _fields_ = [
        ("size", c_size_t),
        ("outages", c_uint64),
        ("down_ms", c_int64),
        ("attaches", c_uint64),
        ("claims_renewed", c_uint64),
        ("reconnect_ms", c_uint32),
    ]


class _Share(ctypes.Structure):
    _fields_ = [
        ("claim_id", c_uint64),
        ("take", c_char_p),
        ("reclaim", c_int),
        ("timings", ctypes.POINTER(_Timing)),
        ("n_timings", c_size_t),
        ("reference_ms", ctypes.POINTER(ctypes.c_double)),
        ("n_reference_ms", c_size_t),
        ("collect", c_int),
    ]


class _ShareTiming(ctypes.Structure):
    _fields_ = [
        ("config", c_char_p),
        ("ms", ctypes.POINTER(ctypes.c_double)),
        ("n_ms", c_size_t),
        ("failed", c_int),
        ("device", c_char_p),
        ("reference_ms", ctypes.POINTER(ctypes.c_double)),
        ("n_reference_ms", c_size_t),
        ("helper", c_uint32),
    ]


class _ShareAnswer(ctypes.Structure):
    _fields_ = [
        ("open", c_int),
        ("granted", c_int),
        ("reference", c_char_p),
        ("given", ctypes.POINTER(_ShareTiming)),
        ("n_given", c_size_t),
        ("pending", ctypes.POINTER(c_char_p)),
        ("n_pending", c_size_t),
    ]


class Answer(NamedTuple):
    outcome: int
    config: Optional[str]
    source: int
    decision_id: Optional[str]
    claim_id: int
    lease_ms: int
    takeover: bool
    superseded: bool
    decided_by_host: Optional[str]
    decided_by_rank: int
    decided_by_pid: int
    waited_ms: int
    # OUTCOME_TIMEOUT: who holds the claim on the daemon, for how long,
    # and the share of its pass given (DECIDE_SHARE; 0: none).
    holder_host: Optional[str] = None
    holder_rank: int = -1
    holder_pid: int = 0
    held_ms: int = 0
    share_index: int = 0
    bench: bool = False  # a benchmark share (DECIDE_BENCH; libdetd 0.5)
    # OUTCOME_TIMEOUT: the deadline came while the daemon was away or had
    # just come back (libdetd 0.6): nothing was decided, ask again.
    daemon_away: bool = False


class Given(NamedTuple):
    """A helper's result in a split pass (``Client.share(collect=True)``)."""
    config: str
    ms: Tuple[float, ...]
    failed: bool
    device: str
    reference_ms: Tuple[float, ...]
    helper: int


class ShareAnswer(NamedTuple):
    open: bool  # the split is live; False: the pass is over
    granted: bool  # take: this caller benchmarks it
    reference: Optional[str]  # the candidate every helper benchmarks first
    given: Tuple[Given, ...] = ()  # collect
    pending: Tuple[str, ...] = ()  # collect: taken by helpers, not given


class DetdError(RuntimeError):
    """A libdetd call failed. ``code`` is the negative DETD_E*/-errno."""

    def __init__(self, call: str, code: int, name: str, message: str, detail: str = ""):
        self.call, self.code, self.name, self.detail = call, code, name, detail
        text = f"{call}: {name}: {message}"
        if detail and detail != message:
            text += f" ({detail})"
        super().__init__(text)


class LibraryNotFound(ImportError):
    pass


_lib = None
_lib_lock = threading.Lock()


def _candidates() -> List[str]:
    out = []
    env = os.environ.get("DETD_LIBRARY")
    if env:
        out.append(env)
    here = os.path.dirname(os.path.abspath(__file__))
    out.append(os.path.join(here, "_lib", "libdetd.so"))
    build = os.environ.get("DETD_BUILD_DIR")
    if build:
        out.append(os.path.join(build, "client", "libdetd.so"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(repo, "proto", "detd.proto")):
        out.append(os.path.join(repo, "build", "client", "libdetd.so"))
    return out


def library_path() -> Optional[str]:
    """The path libdetd would be loaded from, or None."""
    for p in _candidates():
        if os.path.isfile(p):
            return p
    return ctypes.util.find_library("detd")


def _bind(lib):
    P = ctypes.POINTER
    lib.detd_client_open.argtypes = [c_char_p, P(_Identity), P(ctypes.c_void_p)]
    lib.detd_client_open.restype = c_int
    lib.detd_client_close.argtypes = [ctypes.c_void_p]
    lib.detd_client_close.restype = None
    lib.detd_client_connect.argtypes = [ctypes.c_void_p, c_int64]
    lib.detd_client_connect.restype = c_int
    lib.detd_decide.argtypes = [ctypes.c_void_p, P(_Key), c_int, c_int64, P(P(_Answer))]
    lib.detd_decide.restype = c_int
    lib.detd_report.argtypes = [ctypes.c_void_p, c_uint64, P(_Key), P(_Timing), c_size_t, c_char_p, c_int64,
                                P(P(_Answer))]
    lib.detd_report.restype = c_int
    lib.detd_observe.argtypes = [ctypes.c_void_p, P(_Key), c_char_p, c_int, c_int, c_int64]
    lib.detd_observe.restype = c_int
    if hasattr(lib, "detd_observe_ex"):  # libdetd 0.3
        lib.detd_observe_ex.argtypes = [ctypes.c_void_p, P(_Key), c_char_p, c_int, c_int, P(_ObserveExtra),
                                        c_int64]
        lib.detd_observe_ex.restype = c_int
    if hasattr(lib, "detd_vote"):  # libdetd 0.2
        lib.detd_vote.argtypes = [ctypes.c_void_p, P(_Key), c_char_p, P(_Timing), c_size_t, c_char_p, c_char_p,
                                  c_int64]
        lib.detd_vote.restype = c_int
    lib.detd_answer_free.argtypes = [P(_Answer)]
    lib.detd_answer_free.restype = None
    lib.detd_version.argtypes = []
    lib.detd_version.restype = c_char_p
    lib.detd_strerror.argtypes = [c_int]
    lib.detd_strerror.restype = c_char_p
    lib.detd_err_name.argtypes = [c_int]
    lib.detd_err_name.restype = c_char_p
    if hasattr(lib, "detd_client_last_error"):
        lib.detd_client_last_error.argtypes = []
        lib.detd_client_last_error.restype = c_char_p
    if hasattr(lib, "detd_share"):  # libdetd 0.5
        lib.detd_client_set_device.argtypes = [ctypes.c_void_p, c_char_p]
        lib.detd_client_set_device.restype = c_int
        lib.detd_share.argtypes = [ctypes.c_void_p, P(_Key), P(_Share), c_int64, P(P(_ShareAnswer))]
        lib.detd_share.restype = c_int
        lib.detd_share_answer_free.argtypes = [P(_ShareAnswer)]
        lib.detd_share_answer_free.restype = None
    if hasattr(lib, "detd_report_ex"):  # libdetd 0.7
        lib.detd_report_ex.argtypes = [ctypes.c_void_p, c_uint64, P(_Key), P(_Timing), c_size_t, P(_ReportExtra),
                                       c_char_p, c_int64, P(P(_Answer))]
        lib.detd_report_ex.restype = c_int
        lib.detd_claim_release.argtypes = [ctypes.c_void_p, c_uint64, P(_Key), c_char_p, c_int64]
        lib.detd_claim_release.restype = c_int
    if hasattr(lib, "detd_claim_pass_on"):  # libdetd 0.9
        lib.detd_claim_pass_on.argtypes = [ctypes.c_void_p, c_uint64, P(_Key), c_int64]
        lib.detd_claim_pass_on.restype = c_int
        lib.detd_client_can_pass_on.argtypes = [ctypes.c_void_p]
        lib.detd_client_can_pass_on.restype = c_int
    if hasattr(lib, "detd_client_stats"):  # libdetd 0.6
        lib.detd_client_stats.argtypes = [ctypes.c_void_p, P(_Stats)]
        lib.detd_client_stats.restype = c_int
        lib.detd_claim_forget.argtypes = [ctypes.c_void_p, c_uint64]
        lib.detd_claim_forget.restype = c_int


def load():
    """Load and bind libdetd once; raise LibraryNotFound if absent."""
    global _lib
    if _lib is not None:
        return _lib
    with _lib_lock:
        if _lib is None:
            path = library_path()
            if path is None:
                raise LibraryNotFound(
                    "detd: libdetd not found (set DETD_LIBRARY, or install the package with its bundled library)")
            lib = ctypes.CDLL(path)
            _bind(lib)
            _lib = lib
    return _lib


def _s(b) -> Optional[str]:
    return None if b is None else b.decode("utf-8", "replace")


def _b(s) -> Optional[bytes]:
    return None if s is None else s.encode("utf-8")


def _b_text(s) -> Optional[bytes]:
    """A message for the daemon: UTF-8 whatever it holds (libdetd cuts it
    to DETD_MAX_ERROR_BYTES)."""
    return None if s is None else str(s).encode("utf-8", "replace")


def _check(lib, call: str, rc: int):
    if rc == 0:
        return
    detail = ""
    if hasattr(lib, "detd_client_last_error"):
        detail = _s(lib.detd_client_last_error()) or ""
    raise DetdError(call, rc, _s(lib.detd_err_name(rc)) or str(rc), _s(lib.detd_strerror(rc)) or "", detail)


class Key(NamedTuple):
    namespace: Optional[str]
    arch: str
    kernel: str
    key: str
    candidates: Tuple[str, ...]
    table_key: Optional[str] = None  # Megatron-form key: table lookup only


class _CKey:
    """A detd_key whose buffers live as long as this object."""

    def __init__(self, key: Key):
        self._strs = [_b(c) for c in key.candidates]
        self._arr = (c_char_p * max(1, len(self._strs)))(*self._strs)
        self.s = _Key(_b(key.namespace), _b(key.arch), _b(key.kernel), _b(key.key),
                      ctypes.cast(self._arr, ctypes.POINTER(c_char_p)), len(self._strs), _b(key.table_key))


def _answer(lib, p) -> Answer:
    a = p.contents
    try:
        return Answer(a.outcome, _s(a.config), a.source, _s(a.decision_id), a.claim_id, a.lease_ms,
                      bool(a.takeover), bool(a.superseded), _s(a.decided_by_host), a.decided_by_rank,
                      a.decided_by_pid, a.waited_ms, _s(a.holder_host), a.holder_rank, a.holder_pid, a.held_ms,
                      a.share_index, bool(a.bench) if _has_share(lib) else False,
                      bool(a.daemon_away) if hasattr(lib, "detd_client_stats") else False)
    finally:
        lib.detd_answer_free(p)


def _has_share(lib) -> bool:
    """Whether lib is libdetd 0.5 or later (the split of a pass's
    benchmarks: ``detd_share``, and ``detd_answer.bench``)."""
    return hasattr(lib, "detd_share")


def _timings_array(timings: Sequence[Tuple[str, Sequence[float], bool]]):
    """(array of detd_timing, the buffers it points into: keep them alive)."""
    keep = []
    arr = (_Timing * max(1, len(timings)))()
    for i, (cfg, ms, failed) in enumerate(timings):
        buf = (ctypes.c_double * max(1, len(ms)))(*ms)
        cb = _b(cfg)
        keep.append((buf, cb))
        arr[i] = _Timing(cb, ctypes.cast(buf, ctypes.POINTER(ctypes.c_double)), len(ms), 1 if failed else 0)
    return arr, keep


def _doubles(p, n) -> Tuple[float, ...]:
    return tuple(float(p[i]) for i in range(n)) if n else ()


class Client:
    """One libdetd handle."""

    def __init__(self, socket_path: Optional[str], host=None, rank=-1, local_rank=-1, world_size=0,
                 device_name=None, arch=None, sm_count=0, job=None):
        self._lib = lib = load()
        self._keep = [_b(host), _b(device_name), _b(arch), _b(job)]
        ident = _Identity(self._keep[0], rank, local_rank, world_size, self._keep[1], self._keep[2], sm_count,
                          self._keep[3])
        h = ctypes.c_void_p()
        _check(lib, "detd_client_open", lib.detd_client_open(_b(socket_path), ctypes.byref(ident),
                                                             ctypes.byref(h)))
        self._h = h
        self.pid = os.getpid()

    def stats(self) -> dict:
        """``detd_client_stats``: ``outages`` (daemon outages this handle
        met in this process, one per outage), ``down_ms`` (the current
        one's length; 0: none), ``attaches``, ``claims_renewed`` (claims
        taken again after a restart) and ``reconnect_ms`` (the window);
        empty with a libdetd older than 0.6."""
        if not hasattr(self._lib, "detd_client_stats"):
            return {}
        st = _Stats(ctypes.sizeof(_Stats))
        _check(self._lib, "detd_client_stats", self._lib.detd_client_stats(self._h, ctypes.byref(st)))
        return {name: int(getattr(st, name)) for name, _ in _Stats._fields_ if name != "size"}

    def forget_claim(self, claim_id: int) -> None:
        """``detd_claim_forget``: this process gives up ``claim_id``
        without reporting; it is not taken again after a daemon restart
        (a no-op with a libdetd older than 0.6)."""
        if hasattr(self._lib, "detd_claim_forget"):
            _check(self._lib, "detd_claim_forget", self._lib.detd_claim_forget(self._h, claim_id))

    def connect(self, timeout_ms: int = 5000):
        _check(self._lib, "detd_client_connect", self._lib.detd_client_connect(self._h, timeout_ms))

    def decide(self, key: Key, no_claim: bool, timeout_ms: int, share: bool = False, bench: bool = False,
               wait_only: bool = False) -> Answer:
        """``detd_decide``; ``share``: ask for a share of a timing pass in
        progress (answered at once, see ``DETD_DECIDE_SHARE``); ``bench``:
        offer to benchmark it on this process's device (``set_device``;
        ``DETD_DECIDE_BENCH``, libdetd 0.5); ``wait_only``: wait for the
        decision, never be designated (``DETD_DECIDE_WAIT_ONLY``, libdetd
        0.8: OUTCOME_MISS when nothing is decided and no pass runs)."""
        ck = _CKey(key)
        p = ctypes.POINTER(_Answer)()
        flags = (DECIDE_NO_CLAIM if no_claim else 0) | (DECIDE_SHARE if share else 0)
        if wait_only:
            flags = DECIDE_WAIT_ONLY
        if share and bench and _has_share(self._lib):
            flags |= DECIDE_BENCH
        rc = self._lib.detd_decide(self._h, ctypes.byref(ck.s), flags, timeout_ms, ctypes.byref(p))
        _check(self._lib, "detd_decide", rc)
        return _answer(self._lib, p)

    def report(self, claim_id: int, key: Key, timings: Sequence[Tuple[str, Sequence[float], bool]],
               triton_version: str, timeout_ms: int, errors: Optional[dict] = None,
               timing: Optional[dict] = None) -> Answer:
        """``detd_report``; ``errors``: candidate string -> why it failed,
        sent with the timings (``detd_report_ex``, libdetd 0.7; ignored
        with an older one): the daemon keeps the first with a pass in
        which every candidate failed. ``timing``: how the pass measured
        (the members of ``struct detd_timing_info``; libdetd 0.8, left out
        with an older one), stored with the decision."""
        ck = _CKey(key)
        arr, _keep = _timings_array(timings)
        p = ctypes.POINTER(_Answer)()
        if (errors or timing) and hasattr(self._lib, "detd_report_ex"):
            earr = None
            if errors:
                texts = [_b_text(errors.get(cfg)) for cfg, _, _ in timings]
                earr = (c_char_p * max(1, len(texts)))(*texts)
            ex = _ReportExtra(ctypes.sizeof(_ReportExtra), ctypes.cast(earr, ctypes.POINTER(c_char_p)))
            if timing:
                info = _TimingInfo(**{k: (_b_text(v) if isinstance(v, str) else v)
                                      for k, v in timing.items() if k in _TIMING_FIELDS})
                ex.timing = ctypes.pointer(info)
            rc = self._lib.detd_report_ex(self._h, claim_id, ctypes.byref(ck.s), arr, len(timings), ctypes.byref(ex),
                                          _b(triton_version), timeout_ms, ctypes.byref(p))
            if rc == EINVAL and "extra->size" in (_s(self._lib.detd_client_last_error()) or ""):
                # A libdetd older than 0.8: the same report without timing.
                ex.size, ex.timing = _EXTRA_07, None
                rc = self._lib.detd_report_ex(self._h, claim_id, ctypes.byref(ck.s), arr, len(timings),
                                              ctypes.byref(ex), _b(triton_version), timeout_ms, ctypes.byref(p))
        else:
            rc = self._lib.detd_report(self._h, claim_id, ctypes.byref(ck.s), arr, len(timings), _b(triton_version),
                                       timeout_ms, ctypes.byref(p))
        _check(self._lib, "detd_report", rc)
        return _answer(self._lib, p)

    def can_pass_on(self) -> bool:
        """``detd_client_can_pass_on``: whether the daemon this process is
        attached to passes claims on (False with a libdetd older than
        0.9, an older daemon, or none attached yet)."""
        return hasattr(self._lib, "detd_client_can_pass_on") and self._lib.detd_client_can_pass_on(self._h) == 1

    def pass_on(self, claim_id: int, key: Key, timeout_ms: int) -> None:
        """``detd_claim_pass_on``: give ``claim_id`` up untimed, with
        nothing wrong: the key's oldest waiting process is designated, or
        the claim is dropped. Raises DetdError (DETD_ESTALE: no longer
        held; DETD_EUNIMPL: the daemon cannot, see :meth:`can_pass_on`)."""
        ck = _CKey(key)
        _check(self._lib, "detd_claim_pass_on",
               self._lib.detd_claim_pass_on(self._h, claim_id, ctypes.byref(ck.s), timeout_ms))

    def release(self, claim_id: int, key: Key, why: str, timeout_ms: int) -> bool:
        """``detd_claim_release``: give ``claim_id`` back because this
        process's environment cannot run its timing pass (``why``); the
        daemon stores nothing and tells the key's waiters. False with a
        libdetd older than 0.7 (the claim is only forgotten then, and
        ends at its pass deadline). Raises DetdError (DETD_ESTALE: the
        claim was no longer held)."""
        if not hasattr(self._lib, "detd_claim_release"):
            self.forget_claim(claim_id)
            return False
        ck = _CKey(key)
        _check(self._lib, "detd_claim_release",
               self._lib.detd_claim_release(self._h, claim_id, ctypes.byref(ck.s), _b_text(why), timeout_ms))
        return True

    def observe(self, key: Key, config: str, source: int, governed: bool, chaos: bool, timeout_ms: int = 10_000,
                failed: Optional[str] = None, audit: Optional[str] = None, differing: Sequence[str] = (),
                why: Optional[str] = None):
        """Record the config this process launched for ``key``. ``failed``:
        the launch raised (the message); ``audit``: the determinism audit's
        status (``deterministic``, ``nondeterministic``, ``error``) with the
        ``differing`` arguments; ``why``: why an ungoverned tuner is not
        governed. These need libdetd 0.3 (``detd_observe_ex``)."""
        ck = _CKey(key)
        flags = (OBSERVE_GOVERNED if governed else 0) | (OBSERVE_CHAOS if chaos else 0)
        if failed is None and audit is None and (not why or not hasattr(self._lib, "detd_observe_ex")):
            _check(self._lib, "detd_observe",
                   self._lib.detd_observe(self._h, ctypes.byref(ck.s), _b(config), source, flags, timeout_ms))
            return
        if not hasattr(self._lib, "detd_observe_ex"):
            raise DetdError("detd_observe_ex", -1, "ENOSYS", "this libdetd has no detd_observe_ex (older than 0.3)")
        if failed is not None:
            flags |= OBSERVE_FAILED
        names = [_b(n) for n in differing]
        arr = (c_char_p * max(1, len(names)))(*names)
        ex = _ObserveExtra(ctypes.sizeof(_ObserveExtra), _b(failed or ""), AUDIT_STATUS.get(audit or "", 0),
                           ctypes.cast(arr, ctypes.POINTER(c_char_p)), len(names), _b(why or ""))
        _check(self._lib, "detd_observe_ex",
               self._lib.detd_observe_ex(self._h, ctypes.byref(ck.s), _b(config), source, flags, ctypes.byref(ex),
                                         timeout_ms))

    def vote(self, key: Key, config: str, timings: Sequence[Tuple[str, Sequence[float], bool]],
             triton_version: str, table_key: Optional[str], timeout_ms: int = 10_000):
        """Record mode: vote for ``config``, this process's own winner for
        ``key``, with every candidate's timings (``detd_vote``)."""
        if not hasattr(self._lib, "detd_vote"):
            raise DetdError("detd_vote", -1, "ENOSYS", "this libdetd has no detd_vote (older than 0.2)")
        ck = _CKey(key)
        arr, _keep = _timings_array(timings)
        _check(self._lib, "detd_vote",
               self._lib.detd_vote(self._h, ctypes.byref(ck.s), _b(config), arr, len(timings), _b(triton_version),
                                   _b(table_key), timeout_ms))

    def can_share_bench(self) -> bool:
        """Whether this libdetd can split a pass's benchmarks (0.5+)."""
        return _has_share(self._lib)

    def set_device(self, device: Optional[str]):
        """``detd_client_set_device``: the device this process benchmarks
        on (``gpu-<UUID>``), sent with benchmark-share asks and a holder's
        first ``share`` call."""
        if not _has_share(self._lib):
            raise DetdError("detd_client_set_device", -1, "ENOSYS", "this libdetd has no benchmark split (older than 0.5)")
        _check(self._lib, "detd_client_set_device", self._lib.detd_client_set_device(self._h, _b(device)))

    def share(self, key: Key, claim_id: int = 0, take: Optional[str] = None, reclaim: bool = False,
              timings: Sequence[Tuple[str, Sequence[float], bool]] = (), reference_ms: Sequence[float] = (),
              collect: bool = False, timeout_ms: int = 10_000) -> ShareAnswer:
        """``detd_share``: one call of a split pass (see ShareRequest in
        proto/detd.proto). The holder passes its ``claim_id``; a helper 0."""
        if not _has_share(self._lib):
            raise DetdError("detd_share", -1, "ENOSYS", "this libdetd has no benchmark split (older than 0.5)")
        ck = _CKey(key)
        arr, _keep = _timings_array(timings)
        ref = (ctypes.c_double * max(1, len(reference_ms)))(*reference_ms)
        req = _Share(claim_id, _b(take), 1 if reclaim else 0, arr if timings else None, len(timings),
                     ctypes.cast(ref, ctypes.POINTER(ctypes.c_double)) if reference_ms else None, len(reference_ms),
                     1 if collect else 0)
        p = ctypes.POINTER(_ShareAnswer)()
        _check(self._lib, "detd_share", self._lib.detd_share(self._h, ctypes.byref(ck.s), ctypes.byref(req),
                                                             timeout_ms, ctypes.byref(p)))
        try:
            a = p.contents
            given = tuple(Given(_s(g.config) or "", _doubles(g.ms, g.n_ms), bool(g.failed), _s(g.device) or "",
                                _doubles(g.reference_ms, g.n_reference_ms), int(g.helper))
                          for g in (a.given[i] for i in range(a.n_given)))
            pending = tuple(_s(a.pending[i]) or "" for i in range(a.n_pending))
            return ShareAnswer(bool(a.open), bool(a.granted), _s(a.reference), given, pending)
        finally:
            self._lib.detd_share_answer_free(p)

    def close(self):
        if self._h and self.pid == os.getpid():
            self._lib.detd_client_close(self._h)
        self._h = None


def version() -> str:
    return _s(load().detd_version()) or ""


def default_host() -> str:
    return _socket.gethostname()
