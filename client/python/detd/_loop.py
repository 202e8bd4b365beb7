"""The one resolve loop of the package (:func:`resolve`) and its parts:
its bounds, its errors, one Decide (:func:`ask`) and a waiting rank's
state (:class:`Wait`: the slices it asks in, its log
lines, its help with a shared pass).

An adapter resolves a key by calling :func:`resolve` with its key and
its timing pass (and, when its waiting processes can help, a
:class:`Share`): the loop asks the daemon, waits, times when this process
is the designated rank, reports, asks again after a lost claim within
one budget, and hands back a :class:`Resolution`; the adapter applies
the decision or falls back loudly (the ``on_miss`` policy). The Triton
adapter (:mod:`detd._hook`) and the Inductor adapter
(:mod:`detd._inductor`) both use it; the native loop
(``client/src/autotune.c``) follows the same contract,
docs/resolve-contract.md (tests/python/test_conformance.py runs its
table against all three). This module knows no
autotuner: what is timed, compiled or benchmarked comes in as functions.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from . import _canon, _native, _phases, _process, _split

# The package's logger (the one _process warns through): a waiting rank's
# lines.
log = logging.getLogger("detd")

# Decide/Report rounds for one key: a claim can be lost to a daemon restart
# or passed on; each loss costs one more round (bounded by timeout_ms too).
MAX_ASKS = 8

# The noise band of the daemon's winner rule (ENGINE_WINNER_EPSILON in
# daemon/core/engine.h, the same value): ties inside it go to the
# smallest config string.
WINNER_EPSILON = 0.01


class MissError(RuntimeError):
    """No usable decision for a governed kernel and ``on_miss=error``."""

    def __init__(self, kernel: str, key: str, reason: str):
        self.kernel, self.key, self.reason = kernel, key, reason
        super().__init__(f"detd: no decision for kernel {kernel} key {key}: {reason} (on_miss=error)")


class PassFailedError(RuntimeError):
    """Every candidate of a governed key failed in the one timing pass (the
    designated rank compiled or ran none of them). The designated rank
    raises the candidates' own error; every other rank, told by the daemon,
    raises this, whatever ``on_miss`` says: no config would launch."""

    def __init__(self, kernel: str, key: str, reason: str):
        self.kernel, self.key, self.reason = kernel, key, reason
        super().__init__(f"detd: every candidate of kernel {kernel} key {key} failed in the timing pass: {reason}")


class PassEnvError(RuntimeError):
    """The timing pass of a governed key could not run in the timing
    rank's environment (a module missing, no GPU driver): nothing was
    stored, and the key is timed again once that is fixed. The timing
    rank raises the error itself (with a note naming the next step);
    every rank that waited for it raises this, with the timing rank's
    error, whatever ``on_miss`` says."""

    def __init__(self, kernel: str, key: str, reason: str):
        self.kernel, self.key, self.reason = kernel, key, reason
        super().__init__(f"detd: kernel {kernel} key {key} was not timed: {reason}")


# The daemon's reason for a report in which every candidate failed.
NOCAND_TEXT = "no candidate has a valid timing"


def pass_failed(e) -> bool:
    """Whether a libdetd error says the key's timing pass failed for every
    candidate (the reporter's own report, or the reason the daemon sends
    every waiter of that claim and every later asker)."""
    return getattr(e, "code", None) == _native.ENOCAND or NOCAND_TEXT in str(e)


def _failed_reason(e) -> str:
    """The daemon's verdict on a failed pass as its own text (not
    libdetd's code name), always naming it as such."""
    detail = getattr(e, "detail", "") or str(e)
    return detail if NOCAND_TEXT in detail else f"{NOCAND_TEXT}: {detail}"


# Errors that say a process's environment cannot run a timing pass at all
# (nothing about the candidates), by the words of their text, with the
# next step: Triton without a GPU driver, torch without a device or a
# CUDA build, no libcuda.
_ENV_TEXTS = (
    ("0 active drivers", "no GPU driver for Triton: run on a GPU node, or under TRITON_INTERPRET=1 give the "
     "autotuner a do_bench= that times on the CPU (docs/resolve-contract.md)"),
    ("libcuda.so cannot found", "install the NVIDIA driver (libcuda.so), or run on a GPU node"),
    ("Found no NVIDIA driver", "install the NVIDIA driver, or run on a GPU node"),
    ("No CUDA GPUs are available", "no CUDA device is visible: check CUDA_VISIBLE_DEVICES"),
    ("CUDA driver version is insufficient", "update the NVIDIA driver for this CUDA runtime"),
    ("Torch not compiled with CUDA enabled", "install a CUDA build of torch"),
)


def environment_hint(e: BaseException) -> Optional[str]:
    """The next step when ``e`` says this process's environment cannot
    run a timing pass at all (an import failed: ``pip install`` the
    module; no GPU driver or device), else None: an error of a candidate,
    which fails that candidate only."""
    if isinstance(e, ModuleNotFoundError):
        name = (e.name or "").split(".")[0]
        return f"pip install {name}" if name else "install the missing module"
    if isinstance(e, ImportError):
        return "an import failed: a package of this environment is missing or broken"
    text = str(e)
    for words, hint in _ENV_TEXTS:
        if words in text:
            return hint
    return None


def _give_back(dkey, claim_id: int, kernel: str, key_str: str, e: BaseException, hint: str):
    """This process's environment cannot run the pass of claim_id (``e``,
    ``hint``): give the claim back (the daemon stores nothing and tells the
    waiters), and say on ``e`` what happened and what to do."""
    why = f"{error_line(e)} (next step: {hint})"
    try:
        with _phases.phase("daemon"):
            _process.client().release(claim_id, dkey, why, 10_000)
    except (_native.DetdError, OSError):
        # Gone, or the claim already ended: it ends at its deadline.
        _process.client().forget_claim(claim_id)
    note = (f"detd: kernel {kernel} key {key_str} was not timed: this process's environment cannot run its timing "
            f"pass; nothing was stored, the key is timed again on the next run. Next step: {hint}")
    if hasattr(e, "add_note"):
        e.add_note(note)
    else:  # Python 3.10: no notes
        log.error(note)


def error_line(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its
    text (at most 300 characters)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300] if text else ''}".rstrip(": ")


def _say(msg: str) -> None:
    """A line a user sees without configuring anything: a record of the
    ``detd`` logger when the program configured logging to show it, else
    one line on stderr."""
    if log.hasHandlers() and log.isEnabledFor(logging.INFO):
        log.info(msg)
    else:
        import sys

        print(msg, file=sys.stderr, flush=True)


# A timing pass that has run this long says which candidate it is at (at
# most one line per this many seconds).
PASS_SLOW_S = 10.0
_pass_tls = threading.local()


class PassProgress:
    """What a timing rank says: one line when its pass starts (which
    kernel and key, how many candidates), then, once the pass has run
    :data:`PASS_SLOW_S`, ``candidate i of n`` at most once per
    :data:`PASS_SLOW_S` (called by the adapter before each candidate)."""

    def __init__(self, kernel: str, key_str: str, candidates: Sequence[str]):
        n = len(candidates)
        self.kernel, self.key_str, self.n = kernel, key_str, n
        self.t0 = self.last = time.monotonic()
        rank = _process.identity()["rank"]
        who = f"rank {rank}" if rank >= 0 else f"pid {os.getpid()}"
        search = [c for c in candidates if _canon.is_search(c)]
        what = f"{search[0].split(';', 1)[0]} from its start config" if search else f"{n} candidates"
        _say(f"detd: {who} is timing kernel {kernel} key {key_str}: {what}, once for the whole job")

    def __call__(self, i: int) -> None:
        now = time.monotonic()
        if now - self.last >= PASS_SLOW_S:
            self.last = now
            _say(f"detd: timing kernel {self.kernel} key {self.key_str}: candidate {i + 1} of {self.n} "
                 f"({now - self.t0:.0f} s into the pass)")


def progress() -> Callable[[int], None]:
    """The pass this thread is timing (see :class:`PassProgress`), to
    call before each candidate; a no-op outside a pass."""
    return getattr(_pass_tls, "progress", None) or (lambda i: None)


def holder_text(a) -> str:
    """Who times a key, from a TIMEOUT answer (its holder)."""
    if a is None or not a.holder_host:
        return "its timing pass runs on another node (or is passing to another rank)"
    return (f"rank {a.holder_rank} (pid {a.holder_pid} on {a.holder_host}) has been timing it for "
            f"{a.held_ms / 1000:.1f} s")


def early_ms(wait_ms: int) -> int:
    """The Decide deadline at which libdetd lets the daemon answer
    OUTCOME_TIMEOUT after about wait_ms: it answers a tenth early, at
    least 250 ms (half of a deadline under 500 ms), at most 1 s."""
    if wait_ms >= 2250:
        return wait_ms + min(wait_ms // 9 + 1, 1000)
    return wait_ms + 250 if wait_ms >= 250 else 2 * wait_ms


# The slice a waiting rank asks in once a log time has passed without
# an answer from the daemon (see Wait.ask_ms): such a line comes at most
# this much late, and an outage costs about one Decide per this long.
WAIT_MIN_SLICE_MS = 1000


class Wait:
    """A rank's wait for a key another rank times: the slices it asks in,
    the log lines (after ``wait_log_after_s``, then every
    ``wait_log_every_s``: who times which kernel and key, for how long),
    and its help with the pass (``share_pass``: each share the daemon
    gives is one candidate, from the end of the list, compiled here into
    the kernel's compile cache; the timing rank starts at the front and
    never waits for a helper). ``kernel`` and ``key_str`` name the key in
    the log lines."""

    __slots__ = ("kernel", "key_str", "share", "shared", "benched", "t0", "next_log", "logged", "last", "timing")

    def __init__(self, kernel: str, key_str: str, share: bool):
        self.kernel, self.key_str, self.share = kernel, key_str, share
        self.shared: List[str] = []
        self.benched: Optional[dict] = None  # a benchmark share's record (detd._split)
        self.t0 = time.monotonic()
        after, _ = _process.wait_log()
        self.next_log = self.t0 + after if after > 0 else None
        self.logged = False
        self.last = None  # the last TIMEOUT answer (holder)
        self.timing = False  # this process runs the key's timing pass now

    def ask_ms(self, left_ms: int) -> int:
        """How long the next Decide may wait: until the next log line (and
        libdetd's margin), at most left_ms. A log time already past (no
        answer from the daemon came by it: the daemon away or stopped)
        gives a slice of :data:`WAIT_MIN_SLICE_MS`: the line comes with the
        daemon's next answer, and an outage is not asked through in
        Decides of a few ms back to back."""
        if self.share or self.next_log is None:
            return left_ms
        slice_ms = int((self.next_log - time.monotonic()) * 1000)
        return min(left_ms, early_ms(slice_ms if slice_ms > 0 else WAIT_MIN_SLICE_MS))

    def waited_ms(self, answer) -> Optional[int]:
        """How long this rank was held: the daemon's count for one wait,
        the wall time since the first ask when it asked in slices."""
        if self.last is not None:
            return int((time.monotonic() - self.t0) * 1000)
        return answer.waited_ms if answer is not None else None

    def _who(self, a) -> str:
        return holder_text(a)

    def fell_back(self, reason: Optional[str]) -> str:
        """Why a key this wait ended without is not decided, for
        :class:`detd._process.Provisional`: who timed it, else ``reason``."""
        if self.last is None:
            return reason or "no answer"
        return f"{self._who(self.last)} when this process fell back"

    def describe(self) -> str:
        """Who times the key, for :func:`wait_final`'s error."""
        if self.timing:
            return f"this process (pid {os.getpid()}) is timing it"
        if self.last is None:
            return "this process is asking the daemon for it"
        return self._who(self.last)

    def waiting(self, answer):
        """A TIMEOUT answer before the caller's own deadline: log when due."""
        self.share = False
        self.last = answer
        now = time.monotonic()
        if self.next_log is None or now + 0.05 < self.next_log:
            return
        # The first line is seen without any logging configured (stderr);
        # the lines of a wait that goes on are INFO records.
        first = not self.logged
        self.logged = True
        _, every = _process.wait_log()
        self.next_log = now + every if every > 0 else None
        msg = f"detd: waiting {now - self.t0:.1f} s for kernel {self.kernel} key {self.key_str}: {self._who(answer)}"
        if first:
            _say(msg)
        else:
            log.info(msg)

    def help(self, answer, objs: Sequence[Any], candidates: Sequence[str], dkey,
             compile_one: Callable[[Any], Any], bench: Callable[[Sequence[Any]], Any]):
        """Compile the share the daemon gave (:func:`compile_share`, with
        ``compile_one(config)``); a share past the list ends the help. A
        benchmark share (``answer.bench``)
        instead benchmarks candidates on this GPU for the timing rank
        (:func:`detd._split.helper`, with ``bench(configs)``), once.
        ``objs``: the live candidates, ``candidates`` their canonical
        strings, in the same order."""
        self.last = answer
        if answer.bench:
            # A benchmark share: candidates benchmarked on this GPU, under
            # its timing lock (a pass of another key may run on it).
            self.share = False
            with _process.timing_lock(), _phases.phase("benchmark"):
                self.benched = _split.helper(_process.client(), dkey, objs, candidates, bench)
            self.benched["helper"] = answer.share_index
            return
        done = compile_share(compile_one, objs, candidates, answer.share_index, self.kernel)
        if done is None:
            self.share = False
            return
        self.shared.append(done)

    def done(self, answer):
        """After a logged wait, say how it ended."""
        if not self.logged:
            return
        waited = time.monotonic() - self.t0
        if answer is not None and answer.outcome == _native.OUTCOME_DECIDED:
            by = f"rank {answer.decided_by_rank} on {answer.decided_by_host}" if answer.decided_by_host else "the daemon"
            log.info("detd: kernel %s key %s decided by %s after %.1f s of waiting: %s", self.kernel,
                     self.key_str, by, waited, answer.config)
        else:
            log.info("detd: stopped waiting for kernel %s key %s after %.1f s", self.kernel, self.key_str,
                     waited)


def compile_share(compile_one: Callable[[Any], Any], objs: Sequence[Any], candidates: Sequence[str],
                  share_index: int, kernel: str, low_priority: bool = True) -> Optional[str]:
    """Compile share ``share_index`` of another process's pass: candidate
    n-i of ``objs`` (``candidates``: their strings), never the first,
    which the timing rank compiles at once; with ``compile_one(obj)``
    (true when it compiled something), in the ``compile`` phase; with
    ``low_priority``, in the process's low-priority compile thread under
    ``DETD_COMPILE_NICE`` (:func:`detd._process.in_low_priority`;
    ``compile_one`` must then compile for the device it was made on, from
    any thread), else in the calling thread. Returns
    the candidate's string, or None for a share past the list (or none).
    A candidate that fails to compile is the timing rank's to report:
    logged at debug level only."""
    pos = len(objs) - share_index
    if share_index < 1 or pos < 1:
        return None
    obj, candidate = objs[pos], candidates[pos]
    t0 = time.perf_counter()
    try:
        with _phases.phase("compile"):
            did = _process.in_low_priority(lambda: compile_one(obj)) if low_priority else compile_one(obj)
        if did:
            _phases.compiled(time.perf_counter() - t0)
    except Exception as e:  # noqa: BLE001 - the timing rank meets it again
        log.debug("detd: compiling %s of %s for the timing rank failed: %s", candidate, kernel, error_line(e))
    return candidate


def ask(request: tuple, share: bool, bench: bool = True):
    """One Decide (``request``: the arguments of ``Client.decide``): with a
    share asked for while waiting, and a benchmark share offered when
    ``bench`` (the adapter can benchmark a share) and this process can
    split benchmarks. Its wall time is phase ``waiting`` for
    as long as the daemon held it (a TIMEOUT answer: all of it; else the
    answer's ``waited_ms``), ``daemon`` for the rest."""
    t0 = time.perf_counter()
    answer = None
    try:
        if not share:
            answer = _process.client().decide(*request)
        elif bench and _process.split_device() is not None:
            answer = _process.client().decide(*request, share=True, bench=True)
        else:
            answer = _process.client().decide(*request, share=True)
        return answer
    finally:
        took = time.perf_counter() - t0
        if answer is None:
            held = 0.0
        elif answer.outcome == _native.OUTCOME_TIMEOUT and not answer.share_index:
            held = took
        else:
            held = min(took, max(0, answer.waited_ms) / 1000.0)
        _phases.add("waiting", held)
        _phases.add("daemon", took - held)


class Share(NamedTuple):
    """What a waiting rank needs to help a shared pass (see
    :meth:`Wait.help`): the live candidates, their canonical strings in
    the same order, ``compile_one(config)`` and ``bench(configs)`` (None:
    this adapter cannot benchmark a share; only compile shares are asked
    for)."""

    objs: Sequence[Any]
    candidates: Sequence[str]
    compile_one: Callable[[Any], Any]
    bench: Optional[Callable[[Sequence[Any]], Any]]


class Resolution(NamedTuple):
    """How :func:`resolve` ended. ``answer``: the daemon's last answer
    (a decision, from Decide or from the report, has outcome DECIDED), or
    None after a failed request or a refused report; ``reason``: why there
    is no decision, when known; ``rows``: the report rows when this
    process timed the key, else None; ``lost``: claims lost (reports
    refused as stale, asked again); ``wait``: the :class:`Wait`;
    ``report_error``: the error of a report refused for another reason
    than a lost claim, else None."""

    answer: Any
    reason: Optional[str]
    rows: Optional[List[Tuple[str, List[float], bool]]]
    lost: int
    wait: Wait
    report_error: Optional[BaseException]


def resolve(dkey, kernel: str, key_str: str, version: str,
            time_pass: Callable[[Any], List[Tuple[str, List[float], bool]]],
            share: Optional[Share] = None,
            pass_errors: Optional[Callable[[], dict]] = None,
            timing: Optional[Callable[[], Optional[dict]]] = None) -> Resolution:
    """The resolve loop of one governed key, for every adapter: ask the
    daemon; while another rank times the key, wait in slices (logged, see
    :class:`Wait`) and help the pass when ``share`` is given and sharing
    is on; when designated, ``time_pass(answer)`` gives the report rows
    (called once: designated again after a lost claim, the timings of this
    very key and candidate list are still valid) and they are reported;
    a claim lost to a daemon restart is asked for again. One budget of
    ``timeout_ms`` for all of it, the timing pass's own time not counted;
    at most :data:`MAX_ASKS` designations. Never raises for the daemon's
    sake: the adapter applies the decision, or ``on_miss`` with the
    returned reason (its errors: :class:`MissError`,
    :class:`PassFailedError`). ``time_pass`` may raise; that propagates,
    after an environment error (:func:`environment_hint`) has given the
    claim back with a note on the error naming the next step. A wait
    for a pass given back so raises :class:`PassEnvError`.
    ``pass_errors()``: why each failed candidate failed (candidate string
    -> text), sent with the report. ``timing()``: how the pass measured
    (:func:`detd._provenance.describe`), sent with the report."""
    settings = _process.settings()
    pinned = settings.mode == "pinned"
    # The key is not final in this process until the loop ends (see
    # wait_final()).
    wait = Wait(kernel, key_str, share is not None and not pinned and _process.share_pass())
    token = _process.begin_resolving(kernel, key_str, wait.describe)
    try:
        # Its wall time is accounted per phase (detd._phases; inside an
        # adapter's own resolve of the key, as part of it).
        with _phases.phase("other", key={}):
            return _resolve(dkey, kernel, key_str, version, time_pass, share, pass_errors, settings, pinned,
                            wait, timing)
    finally:
        _process.end_resolving(token)


def _resolve(dkey, kernel, key_str, version, time_pass, share, pass_errors, settings, pinned, wait,
             timing) -> Resolution:
    answer, reason, rows, report_error = None, None, None, None
    # libdetd waits for a restarted daemon within what is left of the
    # budget, and a claim lost to a restart is asked for again (see
    # detd/client.h, "Daemon restarts").
    deadline = time.monotonic() + settings.timeout_ms / 1000.0
    lost = rounds = 0
    # The daemon answered this wait, and the outages met when it began: a
    # last slice that ends without its answer, with no outage since, is a
    # daemon slow to answer on a loaded machine, not one that was away.
    heard, outages = False, _process.client_stats().get("outages", 0)
    while True:
        left_ms = int((deadline - time.monotonic()) * 1000)
        if left_ms <= 0:
            answer, reason = None, f"no decision within timeout_ms={settings.timeout_ms}"
            break
        if rounds >= MAX_ASKS:
            answer, reason = None, f"the claim was lost {lost} times: no decision (last {reason})"
            break
        ask_ms = wait.ask_ms(left_ms)
        try:
            answer = ask((dkey, pinned, ask_ms), wait.share,
                         bench=share is not None and share.bench is not None)
        except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
            code = getattr(e, "code", None)
            if code == _native.ETIMEDOUT:
                # The Decide's own deadline (the slice asked for) cut it
                # short: the budget decides, at the top of the loop.
                continue
            if code == _native.EENV:
                wait.done(None)
                raise PassEnvError(kernel, key_str, getattr(e, "detail", "") or str(e)) from None
            reason = _failed_reason(e) if pass_failed(e) else f"daemon request failed: {e}"
            answer = None
            break
        heard = heard or (answer.outcome == _native.OUTCOME_TIMEOUT and not answer.daemon_away)
        # libdetd answers daemon_away once the Decide's own deadline has
        # passed: a Decide given all that was left ends the budget, though
        # its deadline, counted in whole ms, can come a hair before ours.
        ended = answer.daemon_away and ask_ms >= left_ms
        if answer.outcome == _native.OUTCOME_TIMEOUT and not ended and time.monotonic() < deadline:
            if answer.daemon_away:
                # The daemon went away (or just came back): libdetd waits
                # for it within the reconnect window; ask again.
                _process.note_outage()
            elif answer.share_index:
                wait.help(answer, share.objs, share.candidates, dkey, share.compile_one, share.bench)
            else:
                wait.waiting(answer)
            continue
        if answer.outcome != _native.OUTCOME_DESIGNATED:
            if answer.daemon_away and heard:
                st = _process.client_stats()
                if st.get("outages", 0) == outages and st.get("down_ms", 0) <= 0:
                    answer = answer._replace(daemon_away=False)
            break
        rounds += 1
        if rows is None:
            t0 = time.monotonic()
            _pass_tls.progress = PassProgress(kernel, key_str, dkey.candidates)
            wait.timing = True
            try:
                with _phases.phase("benchmark"):  # what the adapter does not name itself
                    rows = time_pass(answer)
            except BaseException as e:
                hint = environment_hint(e)
                if hint is not None:
                    _give_back(dkey, answer.claim_id, kernel, key_str, e, hint)
                else:
                    # Never reported: libdetd must not take it again after
                    # a daemon restart.
                    _process.client().forget_claim(answer.claim_id)
                raise
            finally:
                _pass_tls.progress = None
                wait.timing = False
            deadline += time.monotonic() - t0
        try:
            errs = pass_errors() if pass_errors is not None else None
            how = timing() if timing is not None else None
            extra = dict(({"errors": errs} if errs else {}), **({"timing": how} if how else {}))
            with _phases.phase("daemon"):
                answer = _process.client().report(answer.claim_id, dkey, rows, version,
                                                  max(1, int((deadline - time.monotonic()) * 1000)), **extra)
            answer = answer._replace(outcome=_native.OUTCOME_DECIDED)
            break
        except _native.DetdError as e:
            answer, reason = None, f"report failed: {e}"
            if e.code == _native.ESTALE and not pass_failed(e):
                # The claim moved on or its session ended (a daemon
                # restart): ask again; a decision may exist now. A stale
                # report whose reason is that every candidate failed is
                # the daemon's verdict on the key: it ends here.
                lost += 1
                continue
            report_error = e
            break
    wait.done(answer)
    return Resolution(answer, reason, rows, lost, wait, report_error)


def no_decision(answer) -> str:
    """Why an answer that is not a decision gives no config."""
    if answer.outcome == _native.OUTCOME_TIMEOUT and answer.daemon_away:
        return "the daemon was unreachable (or had just restarted) until the deadline"
    return {_native.OUTCOME_MISS: "no decision stored and none in the tables",
            _native.OUTCOME_TIMEOUT: "timed out waiting for another rank's timing pass"}.get(
                answer.outcome, f"unexpected outcome {answer.outcome}")


# ---------------------------------------------------------------- final decisions

class NotFinalError(RuntimeError):
    """:func:`wait_final` ended with keys of this process still undecided.
    ``keys``: one dict per key, ``kernel``, ``key``, ``state``
    (``resolving``: this process is resolving it; ``fallback``: it
    launches its ``on_miss`` config, ``config``) and ``why`` (who times
    it, or that nobody does); ``waited_s``: how long it waited."""

    def __init__(self, keys: List[dict], waited_s: float):
        self.keys, self.waited_s = keys, waited_s
        shown = "; ".join(f"kernel {k['kernel']} key {k['key']}: {k['why']}" for k in keys[:3])
        more = f"; and {len(keys) - 3} more" if len(keys) > 3 else ""
        super().__init__(f"detd: {len(keys)} key(s) this process met are not decided after {waited_s:.1f} s "
                         f"of waiting: {shown}{more}")


# wait_final(0): the one look at a fallback's key (a Decide that never
# waits server-side) may take this long (a daemon restarting).
NO_WAIT_ASK_MS = 2000

_final_lock = threading.Lock()
_final_counts = {"final_waits": 0, "final_not_final": 0, "final_replaced": 0, "final_kept": 0}
_replaced: Dict[Tuple[str, str], str] = {}  # (kernel, key) -> the decision that replaced its fallback


def replaced() -> Dict[Tuple[str, str], str]:
    """(kernel, key) -> the decided config that :func:`wait_final` put in
    place of the key's fallback in this process."""
    with _final_lock:
        return dict(_replaced)


def final_counts() -> dict:
    """:func:`wait_final`'s counters: ``final_waits`` (calls),
    ``final_not_final`` (calls that raised :class:`NotFinalError`),
    ``final_replaced`` (fallbacks replaced by their decision) and
    ``final_kept`` (decided keys whose fallback this process keeps:
    compiled in)."""
    with _final_lock:
        return dict(_final_counts)


def _count(name: str, n: int = 1) -> None:
    with _final_lock:
        _final_counts[name] += n


def _await_decision(p, deadline: float):
    """Ask for ``p``'s decision without ever being designated until
    ``deadline``: (the answer, or None, why not)."""
    answer = heard = None  # the last answer, and the last one from the daemon
    while True:
        left = deadline - time.monotonic()
        left_ms = int(left * 1000) + 1 if left > 0 else 0  # never short of the deadline
        if left_ms <= 0 and answer is not None:
            # A last ask cut short by its own deadline comes back as
            # daemon_away: the daemon's last word says who times the key.
            if heard is None:
                return None, "the daemon is unreachable (or has just restarted)"
            return None, holder_text(heard)
        try:
            if left_ms <= 0:
                # No time to wait (wait_final(0)): one look, answered at once.
                answer = _process.client().decide(p.dkey, True, NO_WAIT_ASK_MS)
                if answer.outcome == _native.OUTCOME_MISS:
                    return None, f"not decided yet (not waited for); {p.why}" if p.why else "not decided yet"
            else:
                answer = _process.client().decide(p.dkey, False, left_ms, wait_only=True)
        except (_native.DetdError, _native.LibraryNotFound, OSError) as e:
            if getattr(e, "code", None) == _native.ETIMEDOUT and left_ms > 0:
                continue
            if getattr(e, "code", None) == _native.EINVAL:
                return None, f"this libdetd cannot wait without timing (older than 0.8): {e}"
            return None, f"daemon request failed: {e}"
        if not answer.daemon_away:
            heard = answer
        if answer.outcome == _native.OUTCOME_DECIDED:
            return answer, None
        if answer.outcome == _native.OUTCOME_MISS:
            return None, "no decision, and no process is timing it"
        if answer.outcome != _native.OUTCOME_TIMEOUT:
            return None, f"unexpected outcome {answer.outcome}"


def wait_final(timeout_s: Optional[float] = None, forget: bool = True) -> dict:
    """Wait until every governed key this process met is decided, at most
    ``timeout_s`` seconds (None: the ``timeout_ms`` setting): first for
    the keys other threads of this process are resolving, then for each
    key it launched a fallback for (``on_miss``), asking the daemon
    without ever being designated (``DETD_DECIDE_WAIT_ONLY``). A decided
    key's fallback is replaced by the decision (its next launch uses it)
    where the adapter can (a Triton autotuner's; an Inductor choice is
    compiled in and kept, with a warning); with ``forget``, a key that
    nobody times is dropped, so that its next launch resolves it again
    (and times it, when designated). ``timeout_s=0`` waits for nothing:
    one look at each fallback's key. Returns
    ``{"waited_s", "replaced", "kept"}`` (the keys, as dicts); raises
    :class:`NotFinalError` naming every key still undecided and who
    times it. Counted (:func:`final_counts`) and logged."""
    settings = _process.settings()
    budget = settings.timeout_ms / 1000.0 if timeout_s is None else float(timeout_s)
    if budget < 0:
        raise ValueError(f"detd.wait_final: timeout_s={timeout_s!r}: expected seconds >= 0")
    t0 = time.monotonic()
    deadline = t0 + budget
    _count("final_waits")
    missing = [dict(kernel=k, key=key, state="resolving", why=who)
               for k, key, who in _process.wait_resolved(deadline)]
    replaced, kept = [], []
    for p in _process.provisional():
        answer, why = _await_decision(p, deadline)
        if answer is None:
            if forget and why.startswith("no decision, and no process") and p.put(None):
                _process.settle(p.kernel, p.key)
                why += ": its next launch asks again"
            missing.append(dict(kernel=p.kernel, key=p.key, state="fallback", config=p.config, why=why))
            continue
        entry = dict(kernel=p.kernel, key=p.key, fallback=p.config, config=answer.config)
        if p.put(answer.config):
            replaced.append(entry)
            _count("final_replaced")
            with _final_lock:
                _replaced[(p.kernel, p.key)] = answer.config
            log.info("detd: kernel %s key %s: fallback %s replaced by the decision %s", p.kernel, p.key,
                     p.config, answer.config)
        else:
            kept.append(entry)
            _count("final_kept")
            _process.warn_once(f"final-kept:{p.kernel}:{p.key}",
                               f"detd: kernel {p.kernel} key {p.key} is decided ({answer.config}), but this process "
                               f"compiled its fallback {p.config} in and keeps launching it until it compiles again")
        _process.settle(p.kernel, p.key)
    waited = time.monotonic() - t0
    if missing:
        _count("final_not_final")
        err = NotFinalError(missing, waited)
        log.warning("%s", err)
        raise err
    return dict(waited_s=round(waited, 3), replaced=replaced, kept=kept)


def not_final() -> List[dict]:
    """The keys of this process that are not final now, without waiting:
    those being resolved (``state`` ``resolving``, ``why``: who times
    them) and those launched with a fallback (``fallback``)."""
    out = [dict(kernel=k, key=key, state="resolving", why=who) for k, key, who in
           _process.wait_resolved(time.monotonic())]
    out += [dict(kernel=p.kernel, key=p.key, state="fallback", config=p.config,
                 why=f"launched its on_miss fallback; {p.why}" if p.why else "launched its on_miss fallback")
            for p in _process.provisional()]
    return out
