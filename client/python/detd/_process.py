"""Process-wide state of the client, below every adapter.

One process holds one of each: the settings ``install()`` configured and
whether it is in effect; the process's identity (its place in the job,
read from the launcher's variables, and its device); the libdetd handle
(re-opened in a forked child); the device's timing lock and the benchmark
split's device; the waiting options; and the warnings said once per
process.  The adapters (:mod:`detd._hook` for Triton's ``Autotuner``,
:mod:`detd._inductor` for ``torch.compile``) sit side by side above this
module and read it through the functions below; none of them keeps a copy
of this state.

Fork: this module owns the one ``os.register_at_fork`` hook.  In a forked
child it drops the parent's libdetd handle and identity first, then runs
what the adapters registered with :func:`at_fork_child`, in the order they
registered it.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple, Union

from . import _devlock, _native, _phases, _policy, _split, _triton, _workers
from ._policy import Settings

# A waiting rank's log lines and its help with the pass (environment;
# see wait_options()).
WAIT_LOG_AFTER_S = 5.0
WAIT_LOG_EVERY_S = 30.0
# The timing pass's options (environment; see pass_options()): the lead
# over the runner-up past which the best is not re-measured, and the
# threads compiling ahead of the benchmarks (0: none; None: "auto", the
# default, see compile_ahead(), at most COMPILE_AHEAD_MAX).
RECHECK_CLEAR = 0.02
COMPILE_AHEAD: Optional[int] = None
COMPILE_AHEAD_MAX = 8
# DETD_COMPILE_OVERLAP (see overlap_option()): on by default (measured to
# keep kernel time on the H200: docs/gpu-results.md).
COMPILE_OVERLAP = True
# DETD_COMPILE_NICE (see nice_option()): how much lower detd's compile
# threads run than the process (nice value, 0 to 19; 0: as the process).
# 10 by default where kernels are compiled in threads (measured to cut the
# benchmark phase and keep kernel time on the GPU: docs/gpu-results.md).
COMPILE_NICE = 10
# DETD_COMPILE_PROCESSES (see processes_option()): off by default (on
# the GPU, worker processes made run 1 slower than threads:
# docs/gpu-results.md); on or auto (None): the compiles ahead go to worker
# processes (detd._workers) where Triton's compile can be captured
# (detd._triton.remote_compiles).
COMPILE_PROCESSES: Optional[bool] = False
# DETD_SCREEN (see screen_option()): "auto" by default, SCREEN_AUTO_BAND
# where kernels run on a device (measured to keep kernel time on the GPU:
# docs/gpu-results.md), off under the CPU interpreter; "on" keeps the
# candidates within SCREEN_BAND of the best screening median.
SCREEN: Union[float, str, None] = "auto"
SCREEN_BAND = 0.25
SCREEN_AUTO_BAND = 0.10
# The narrowest band: the re-measure's (detd._measure.RECHECK_BAND, which
# this module cannot import), so that what screening drops is never
# re-measured as near-best.
SCREEN_BAND_MIN = 0.10


class _State:
    def __init__(self):
        self.settings: Settings = Settings()
        self.active = False
        self.client: Optional[_native.Client] = None
        self.client_pid = -1
        self.client_lock = threading.Lock()
        self.identity: Optional[dict] = None
        self.warned = set()
        self.wait_log_after_s = WAIT_LOG_AFTER_S
        self.wait_log_every_s = WAIT_LOG_EVERY_S
        self.share_pass = True
        self.recheck_clear: Optional[float] = RECHECK_CLEAR
        self.compile_ahead = COMPILE_AHEAD
        self.compile_overlap = COMPILE_OVERLAP
        self.compile_nice = COMPILE_NICE
        self.compile_processes = COMPILE_PROCESSES
        self.workers: Optional[Tuple[int, Any]] = None  # (pid, detd._workers.Pool)
        self.nice_pool: Optional[Tuple[int, Any]] = None  # (pid, executor) for compiles at low priority
        self.screen = SCREEN
        self.split_bench = False  # DETD_SPLIT_BENCH (see detd._split)
        self.bench_device: Optional[Tuple[int, Optional[str]]] = None  # (pid, device) for the split
        self.timing_lock = _devlock.Settings()
        self.timing_lock_key: Optional[Tuple[int, Optional[str]]] = None  # (pid, device key)
        # Keys not final in this process (see "keys not final" below).
        self.final = threading.Condition(threading.Lock())
        self.resolving: Dict[int, Tuple[str, str, Callable[[], str], int]] = {}
        self.provisional: Dict[Tuple[str, str], "Provisional"] = {}


_state = _State()
_fork_hooks: List[Callable[[], None]] = []
_configure_hooks: List[Callable[[], None]] = []


# ---------------------------------------------------------------- fork

def at_configure(fn: Callable[[], None]) -> None:
    """Run ``fn()`` in every :func:`configure`, once the new settings are
    in place and before detd is active again: for an adapter's state that
    depends on the settings (what it resolved and observed under the old
    ones)."""
    _configure_hooks.append(fn)


def at_fork_child(fn: Callable[[], None]) -> None:
    """Run ``fn()`` in every forked child of this process, after this
    module dropped the parent's handle and identity. For an adapter's own
    per-process state (its locks, the keys it observed)."""
    _fork_hooks.append(fn)


def _after_fork_in_child():
    _state.client = None
    _state.client_pid = -1
    _state.client_lock = threading.Lock()
    _state.identity = None
    # The parent's resolutions do not run here; its fallbacks are in the
    # child's caches too, and stay provisional.
    _state.final = threading.Condition(threading.Lock())
    _state.resolving = {}
    _state.nice_pool = None  # the parent's thread does not run here
    _state.workers = None  # nor its workers' threads
    _triton.after_fork()  # nor a capture of its threads
    _phases.reset()
    for fn in _fork_hooks:
        fn()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------- warnings

# The package's logger: fallbacks, lost claims and the audit say what
# happened here. Once per tag: a warning always (a script without logging
# still shows it), and a log record when the program configured logging
# (not through logging's last-resort handler, which would print it twice).
log = logging.getLogger("detd")


def warn_once(tag: str, msg: str) -> None:
    """Say ``msg`` once per process and ``tag``: a RuntimeWarning, and a
    record of the ``detd`` logger when the program configured logging."""
    if tag not in _state.warned:
        _state.warned.add(tag)
        if log.hasHandlers():
            log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=4)


# ---------------------------------------------------------------- keys not final

class Provisional(NamedTuple):
    """A governed key this process launched without its decision (the
    ``on_miss`` fallback): ``dkey`` (the daemon's key), ``config`` (the
    fallback's canonical string), ``put(config)``: launch the decided
    ``config`` from now on, or with None drop the fallback so that the
    next launch resolves the key again; True when done, False when the
    adapter cannot (a choice compiled into the code); ``why``: who timed
    the key when this process fell back, or why it fell back."""

    kernel: str
    key: str
    dkey: Any
    config: str
    put: Callable[[Optional[str]], bool]
    why: str = ""


def begin_resolving(kernel: str, key: str, who: Callable[[], str]) -> int:
    """A key is being resolved on this thread (asked, waited for, timed):
    until :func:`end_resolving` with the returned token, it is not final.
    ``who()`` says who times it."""
    with _state.final:
        token = id(who)
        _state.resolving[token] = (kernel, key, who, threading.get_ident())
        return token


def end_resolving(token: int) -> None:
    with _state.final:
        _state.resolving.pop(token, None)
        _state.final.notify_all()


def resolving_here() -> bool:
    """Whether this thread is resolving a key (its timing pass may
    capture CUDA graphs of its own: Triton's ``do_bench_cudagraph``)."""
    me = threading.get_ident()
    with _state.final:
        return any(r[3] == me for r in _state.resolving.values())


def wait_resolved(deadline: float) -> List[Tuple[str, str, str]]:
    """Wait until no other thread of this process resolves a key, at most
    until ``deadline`` (``time.monotonic()``); the (kernel, key, who)
    still being resolved by other threads then, empty when none."""
    me = threading.get_ident()
    with _state.final:
        while True:
            others = [r for r in _state.resolving.values() if r[3] != me]
            left = deadline - time.monotonic()
            if not others or left <= 0:
                return [(k, key, who()) for k, key, who, _ in others]
            _state.final.wait(left)


def note_provisional(p: Provisional) -> None:
    """An adapter launched ``p.config`` for a key without its decision."""
    with _state.final:
        _state.provisional[(p.kernel, p.key)] = p


def provisional() -> List[Provisional]:
    """The keys this process launches a fallback for, oldest first."""
    with _state.final:
        return list(_state.provisional.values())


def settle(kernel: str, key: str) -> None:
    """The key is no longer provisional (decided and applied, or
    forgotten so that its next launch resolves it again)."""
    with _state.final:
        _state.provisional.pop((kernel, key), None)


# ---------------------------------------------------------------- identity

def _env_int(name: str, default: int) -> int:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"detd: invalid {name}={v!r}: expected an integer") from None


# Where launchers put a process's place in the job, in the order read: the
# first launcher whose rank variable is set names all three (torchrun and
# anything setting RANK, then Slurm, Open MPI, PMIx, MPICH's Hydra).
LAUNCHER_VARS = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMIX_RANK", "PMIX_LOCAL_RANK", "PMIX_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
)


def rank_identity() -> Tuple[int, int, int]:
    """(rank, local_rank, world_size) from the first launcher in
    :data:`LAUNCHER_VARS` that set a rank (-1, -1, 0 when none did)."""
    for rank_var, local_var, size_var in LAUNCHER_VARS:
        if os.environ.get(rank_var, "").strip() != "":
            return _env_int(rank_var, -1), _env_int(local_var, -1), _env_int(size_var, 0)
    return -1, -1, 0


def detect_device(settings: Settings) -> Tuple[str, Optional[str], int]:
    """(arch, device_name, sm_count). arch: DETD_ARCH / setting, "cpu"
    under the interpreter or without a GPU, else "sm<major><minor>"
    (CUDA) or the gfx name (ROCm)."""
    if _triton.interpreting():
        return settings.arch or "cpu", None, 0
    try:
        import torch

        if torch.cuda.is_available():
            dev = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(dev)
            if getattr(torch.version, "hip", None):
                arch = getattr(props, "gcnArchName", "rocm").split(":")[0]
            else:
                major, minor = torch.cuda.get_device_capability(dev)
                arch = f"sm{major}{minor}"
            return settings.arch or arch, props.name, int(props.multi_processor_count)
    except Exception:
        pass
    return settings.arch or "cpu", None, 0


def identity() -> dict:
    """This process's identity: rank, local_rank, world_size, arch,
    device_name, sm_count (read once per process and install())."""
    ident = _state.identity
    if ident is None:
        rank, local_rank, world = rank_identity()
        arch, name, sms = detect_device(_state.settings)
        ident = dict(rank=rank, local_rank=local_rank, world_size=world, arch=arch, device_name=name,
                     sm_count=sms)
        _state.identity = ident
    return ident


# ---------------------------------------------------------------- settings

def active() -> bool:
    """Whether ``detd.install()`` is in effect (asked by the adapters)."""
    return _state.active


def settings() -> Settings:
    """The settings ``install()`` configured."""
    return _state.settings


def wait_options(environ=None) -> Tuple[float, float, bool]:
    """(log after s, log every s, share the pass) from
    ``DETD_WAIT_LOG_AFTER_S`` (default 5; 0: never log),
    ``DETD_WAIT_LOG_EVERY_S`` (default 30; 0: only once) and
    ``DETD_SHARE_PASS`` (0 or 1, default 1). Raises ValueError naming a
    bad variable."""
    env = os.environ if environ is None else environ
    after = _policy.env_seconds(env, "DETD_WAIT_LOG_AFTER_S", WAIT_LOG_AFTER_S)
    every = _policy.env_seconds(env, "DETD_WAIT_LOG_EVERY_S", WAIT_LOG_EVERY_S)
    return after, every, _policy.env_switch(env, "DETD_SHARE_PASS", True, "0 or 1")


def pass_options(environ=None) -> Tuple[Optional[float], Optional[int]]:
    """(re-measure lead, compile-ahead threads) from
    ``DETD_RECHECK_CLEAR`` (a fraction >= 0, default 0.02; ``off``: always
    re-measure the near-best, None) and ``DETD_COMPILE_AHEAD`` (threads;
    ``0``: each candidate compiled just before its benchmark; ``auto``,
    the default: None, see :func:`compile_ahead`). Raises ValueError
    naming a bad variable."""
    env = os.environ if environ is None else environ
    v = str(env.get("DETD_RECHECK_CLEAR", "")).strip().lower()
    clear: Optional[float] = RECHECK_CLEAR
    if v in ("off", "none"):
        clear = None
    elif v:
        try:
            clear = float(v)
        except ValueError:
            clear = -1.0
        if not clear >= 0 or clear == float("inf"):
            raise ValueError(f"detd: invalid DETD_RECHECK_CLEAR={v!r}: expected a fraction >= 0 (0.02: 2%) or off")
    ahead = None if str(env.get("DETD_COMPILE_AHEAD", "")).strip().lower() == "auto" else _policy.env_int(
        env, "DETD_COMPILE_AHEAD", COMPILE_AHEAD, 0, 64, "a thread count from 0 to 64 or auto")
    return clear, ahead


def overlap_option(environ=None) -> bool:
    """``DETD_COMPILE_OVERLAP`` (``on``/``1``, ``off``/``0``; default on):
    whether the timing rank benchmarks candidates while its threads still
    compile others (:class:`detd._measure.Compiler`), or only once every
    compile is done. Raises ValueError naming a bad value."""
    return _policy.env_switch(os.environ if environ is None else environ, "DETD_COMPILE_OVERLAP", COMPILE_OVERLAP)


def compile_overlap() -> bool:
    """Whether the timing rank benchmarks while compiles run
    (DETD_COMPILE_OVERLAP)."""
    return _state.compile_overlap


def nice_option(environ=None) -> int:
    """``DETD_COMPILE_NICE``: how many nice levels below the process detd's
    compiles run (0 to 19, default :data:`COMPILE_NICE`; 0: at the
    process's own), see :func:`compile_nice`. Raises ValueError naming a
    bad value."""
    return _policy.env_int(os.environ if environ is None else environ, "DETD_COMPILE_NICE", COMPILE_NICE, 0, 19,
                           "a nice increment from 0 to 19")


def compile_nice() -> int:
    """Nice levels below the process at which detd compiles candidates
    (DETD_COMPILE_NICE): the timing rank's threads compiling ahead
    (:class:`detd._measure.Compiler`) and a waiting rank's shares
    (:func:`in_low_priority`), so that the timing rank's benchmark loop
    and the job's own threads get the cores first; 0 where kernels are
    not compiled in threads (the CPU interpreter, a Triton that cannot),
    as shares then compile in the waiting thread itself."""
    n = _state.compile_nice
    if n and (_triton.interpreting() or not _triton.compiles_in_threads()):
        return 0
    return n


def processes_option(environ=None) -> Optional[bool]:
    """``DETD_COMPILE_PROCESSES`` (``on``/``1``, ``off``/``0``, the
    default, or ``auto``: None): whether the timing rank's compiles ahead
    run in worker processes instead of its threads (:func:`compile_pool`).
    Raises ValueError naming a bad value."""
    env = os.environ if environ is None else environ
    if str(env.get("DETD_COMPILE_PROCESSES", "")).strip().lower() == "auto":
        return None
    return _policy.env_switch(env, "DETD_COMPILE_PROCESSES", COMPILE_PROCESSES, "on, off or auto")


def compile_pool():
    """This process's compile workers (a :class:`detd._workers.Pool` of
    :func:`compile_ahead` processes, :func:`compile_nice` levels down,
    started as the first compiles come; one per process, a forked child
    starts its own), or None: no compiles ahead, ``DETD_COMPILE_PROCESSES``
    off (the default), or a Triton whose compiles cannot be captured
    (:func:`detd._triton.remote_compiles`; ``auto`` then means off, ``on``
    says so once)."""
    n, on = compile_ahead(), _state.compile_processes
    if not n or on is False:
        return None
    if not _triton.remote_compiles():
        if on and not _triton.interpreting():
            warn_once("compile-processes", f"detd: DETD_COMPILE_PROCESSES=on, but Triton {_triton.version()} "
                      "cannot hand its compiles to other processes; compiling in threads")
        return None
    return _per_process("workers", lambda: _workers.Pool(n, compile_nice()))


def _per_process(attr: str, make: Callable[[], Any]) -> Any:
    """``_state.<attr>``'s object, made with ``make()`` the first time this
    process asks (the state holds ``(pid, object)``: a forked child makes
    its own, the parent's threads do not run there)."""
    held = getattr(_state, attr)
    if held is None or held[0] != os.getpid():
        with _state.client_lock:
            held = getattr(_state, attr)
            if held is None or held[0] != os.getpid():
                held = (os.getpid(), make())
                setattr(_state, attr, held)
    return held[1]


def lower_priority() -> None:
    """Make the calling thread's nice value the process's plus
    :func:`compile_nice` (at most 19): Linux keeps a nice value per
    thread, and what the thread starts (a compiler subprocess) inherits
    it. A thread cannot raise its priority back without privilege, so
    only dedicated threads are lowered. Logged once where the system
    refuses."""
    n = compile_nice()
    if not n or not hasattr(os, "setpriority") or not hasattr(threading, "get_native_id"):
        return
    try:
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(19, base + n))
    except OSError as e:
        warn_once("compile-nice", f"detd: cannot lower the priority of a compile thread (DETD_COMPILE_NICE={n}): {e}")


def in_low_priority(fn: Callable[[], Any]) -> Any:
    """``fn()`` in this process's one low-priority compile thread
    (:func:`lower_priority`) when :func:`compile_nice` is on, the caller
    waiting for it (what it raises is raised here); else in the caller's
    own thread. For a waiting rank's share compiles, made in the thread
    that waits, whose priority must stay the job's."""
    if not compile_nice():
        return fn()
    from concurrent.futures import ThreadPoolExecutor

    pool = _per_process("nice_pool", lambda: ThreadPoolExecutor(1, thread_name_prefix="detd-nice-compile",
                                                                 initializer=lower_priority))
    return pool.submit(fn).result()


def screen_option(environ=None) -> Union[float, str, None]:
    """``DETD_SCREEN``: whether a timing pass screens every candidate with
    a short measurement and measures in full only those still in the
    running (:func:`detd._measure.measure`), and the band that keeps them in
    it: ``auto``, the default (see :func:`screen`), ``on``/``1``
    (:data:`SCREEN_BAND`, 25% above the best screening median), a fraction
    (``0.15``: 15%; from the re-measure's band,
    :data:`detd._measure.RECHECK_BAND` (0.1), to 10: a candidate screened out
    is then never among the near-best re-measured), or ``off``/``0``
    (None). Raises ValueError naming a bad value."""
    env = os.environ if environ is None else environ
    v = str(env.get("DETD_SCREEN", "")).strip().lower()
    if not v:
        return SCREEN
    if v == "auto":
        return v
    if v in _policy.SWITCH_OFF:
        return None
    if v in _policy.SWITCH_ON:
        return SCREEN_BAND
    try:
        band = float(v)
    except ValueError:
        band = -1.0
    if not SCREEN_BAND_MIN <= band <= 10:
        raise ValueError(f"detd: invalid DETD_SCREEN={v!r}: expected auto, on, off or a band above the best "
                         f"from {SCREEN_BAND_MIN} (the re-measure's) to 10")
    return band


def screen() -> Optional[float]:
    """The screening band of timing passes (DETD_SCREEN), or None: timing
    passes do not screen. ``auto``, the default: :data:`SCREEN_AUTO_BAND`
    where kernels run on a device, None under the CPU interpreter (where
    the timings are the interpreter's, and screening was never measured)."""
    band = _state.screen
    if band == "auto":
        return None if _triton.interpreting() else SCREEN_AUTO_BAND
    return band


def recheck_clear() -> Optional[float]:
    """The lead past which a clear best is not re-measured
    (DETD_RECHECK_CLEAR; None: always re-measure the near-best)."""
    return _state.recheck_clear


def compile_ahead() -> int:
    """Threads compiling candidates ahead of the benchmarks
    (DETD_COMPILE_AHEAD; 0: off). ``auto``, the default: this process's
    cores, at most :data:`COMPILE_AHEAD_MAX`, where kernels are compiled
    (not the CPU interpreter) and the installed Triton compiles them in
    threads itself (:func:`detd._triton.compiles_in_threads`), else 0."""
    n = _state.compile_ahead
    if n is None:
        threads = not _triton.interpreting() and _triton.compiles_in_threads()
        n = min(COMPILE_AHEAD_MAX, _cores()) if threads else 0
    return n


def _cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def wait_log() -> Tuple[float, float]:
    """(log after s, log every s) of a waiting rank, as configured."""
    return _state.wait_log_after_s, _state.wait_log_every_s


def share_pass() -> bool:
    """Whether a waiting rank helps the timing rank (DETD_SHARE_PASS)."""
    return _state.share_pass


def configure(settings: Settings) -> None:
    """Put ``settings`` in effect for this process (``install()``): the
    waiting options, the timing pass's options, ``DETD_PHASES`` (see
    :mod:`detd._phases`), the benchmark split and the timing lock read again
    from the environment (ValueError naming a bad variable), the libdetd
    handle re-opened when the socket or the job changed, the identity
    read again, then what the adapters registered with
    :func:`at_configure`, then detd is active."""
    _state.wait_log_after_s, _state.wait_log_every_s, _state.share_pass = wait_options()
    _state.recheck_clear, _state.compile_ahead = pass_options()
    _state.compile_overlap = overlap_option()
    _state.compile_nice = nice_option()
    _state.compile_processes = processes_option()
    _state.screen = screen_option()
    _phases.write_at_exit(os.environ.get("DETD_PHASES"))
    _state.split_bench = _split.parse()
    _state.bench_device = None
    _state.timing_lock = _devlock.parse()
    _state.timing_lock_key = None
    old = _state.settings
    if (old.socket, old.job) != (settings.socket, settings.job) and _state.client is not None:
        if _state.client_pid == os.getpid():
            _state.client.close()
        _state.client = None
        _state.client_pid = -1
    _state.settings = settings
    _state.identity = None
    for fn in _configure_hooks:
        fn()
    _state.active = True


def stand_down() -> None:
    """Take detd out of effect (another tuner governs: see
    :mod:`detd._megatron`); the adapters leave every autotuner to its own
    timing."""
    _state.active = False


# ---------------------------------------------------------------- libdetd

def client() -> _native.Client:
    """This process's libdetd handle (re-opened after fork)."""
    c = _state.client
    pid = os.getpid()
    if c is not None and _state.client_pid == pid:
        return c
    with _state.client_lock:
        if _state.client is None or _state.client_pid != pid:
            ident = identity()
            _state.client = _native.Client(
                _state.settings.socket, host=_native.default_host(), rank=ident["rank"],
                local_rank=ident["local_rank"], world_size=ident["world_size"],
                device_name=ident["device_name"], arch=ident["arch"], sm_count=ident["sm_count"],
                job=_state.settings.job)
            _state.client_pid = pid
            _state.bench_device = None  # a new handle: told the device again
        return _state.client


def client_stats() -> dict:
    """libdetd's counters of this process's handle (``Client.stats()``:
    outages, down_ms, attaches, claims_renewed, reconnect_ms); empty when
    this process has not opened one."""
    c = _state.client
    if c is None or _state.client_pid != os.getpid():
        return {}
    return c.stats()


def note_outage() -> None:
    """A Decide's slice ended while the daemon was away (or had just come
    back): say so once per outage (libdetd counts them), with how long the
    process may still wait (the reconnect window)."""
    st = client_stats()
    n = st.get("outages", 0)
    if st.get("down_ms", 0) <= 0:
        return  # back already: the settling after a restart
    warn_once(f"outage:{os.getpid()}:{n}",
              f"detd: the daemon at {_state.settings.socket or os.environ.get('DETD_SOCKET') or 'the default socket'} "
              "is unreachable "
              f"({st['down_ms'] / 1000:.1f} s so far, outage {n} of this process); waiting for it to come "
              f"back within the reconnect window of {st.get('reconnect_ms', 0) / 1000:g} s "
              "(DETD_RECONNECT_MS) and the key's budget (DETD_TIMEOUT_MS)")


def split_device() -> Optional[str]:
    """This process's device for splitting benchmarks (see
    :mod:`detd._split`), when the split is on and libdetd can do it, else
    None. Read when first needed, not at install(): a rank usually picks
    its GPU (``torch.cuda.set_device``) after installing detd."""
    if not _state.split_bench:
        return None
    c = client()
    if not c.can_share_bench():
        return None
    pid = os.getpid()
    if _state.bench_device is None or _state.bench_device[0] != pid:
        dev = _split.device()
        if dev is not None:
            try:
                c.set_device(dev)
            except _native.DetdError as e:
                warn_once("split-device", f"detd: device {dev!r} refused for splitting benchmarks: {e}; "
                           "this process times and helps as without the split")
                dev = None
        _state.bench_device = (pid, dev)
    return _state.bench_device[1]


def timing_lock() -> "_devlock.Held":
    """This device's timing lock (see :mod:`detd._devlock`): one pass at a
    time per GPU, so that a pass is not measured against another."""
    pid = os.getpid()
    if _state.timing_lock_key is None or _state.timing_lock_key[0] != pid:
        _state.timing_lock_key = (pid, _devlock.device_key(_state.timing_lock.mode))
    held = _devlock.acquire(_state.timing_lock, _state.timing_lock_key[1])
    if held.timed_out:
        warn_once("timing-lock", f"detd: waited {held.waited_s:.1f} s for another timing pass on device "
                   f"{held.key} (DETD_TIMING_LOCK_WAIT_S={_state.timing_lock.wait_s:g}); timing without "
                   "the lock: this pass may be measured under contention")
    return held
