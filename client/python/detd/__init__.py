"""detd: identical Triton (and torch.compile) kernel-config choices on every rank.

Quick start::

    import detd
    detd.install()              # coordinated mode, every autotuner governed
    ...                         # train as usual
    if step % 1000 == 0:
        detd.verify(strict=True)  # all ranks used the same configs

or, for an unmodified script (settings from ``DETD_*`` variables)::

    python -m detd.run train.py --lr 3e-4
    torchrun --nproc-per-node 8 -m detd.run train.py
    detd-run train.py           # the console script, same thing

Settings are documented in :mod:`detd._policy`; the hook's design (one timing
pass per key in the whole cluster, launches always using the committed
config) in :mod:`detd._hook`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
from typing import List, Optional

from . import _policy
from ._loop import MissError, NotFinalError, PassEnvError, PassFailedError
from ._native import DetdError, LibraryNotFound
from ._policy import Settings

__all__ = [
    "install",
    "installed",
    "daemon_problem",
    "settings",
    "autotuners",
    "stats",
    "audit",
    "verify",
    "wait_final",
    "not_final",
    "DivergenceError",
    "MissError",
    "NotFinalError",
    "PassEnvError",
    "PassFailedError",
    "DetdError",
    "LibraryNotFound",
    "Settings",
    "__version__",
]

__version__ = "0.1.0"

_install_lock = threading.Lock()


class DivergenceError(RuntimeError):
    """``verify(strict=True)`` found ranks or decisions that disagree."""

    def __init__(self, result: dict):
        self.result = result
        divs = result.get("divergences") or []
        first = divs[0] if divs else {}
        what = f"{first.get('kernel', '?')} key {first.get('key', '?')}" if first else "?"
        super().__init__(f"detd: configs diverge on {len(divs)} key(s), first: {what}"
                         + (f" ({first.get('reason')})" if first.get("reason") else ""))


def install(mode: Optional[str] = None, scope=None, on_miss: Optional[str] = None, overrides=None,
            socket: Optional[str] = None, **more) -> Settings:
    """Hook Triton's autotuner. Idempotent: calling again re-applies the
    given settings (arguments win over ``DETD_*`` variables) and keeps the
    one patch. Invalid settings raise ValueError naming the setting.
    Other settings: exempt, namespace, arch, chaos, strict, timeout_ms, job,
    megatron (who governs next to ``megatron.core.tuning``: ``detd``, the
    default, or ``megatron``; see :mod:`detd._megatron`), helion (``on``,
    the default, or ``off``; see :mod:`detd._helion`).
    Returns the settings in force."""
    s = _policy.parse(mode=mode, scope=scope, on_miss=on_miss, overrides=overrides, socket=socket, **more)
    from . import _hook, _process

    _process.rank_identity()  # RANK/LOCAL_RANK/WORLD_SIZE must be integers
    if s.mode != "auto":
        from . import _daemon, _native

        _native.load()  # fail now, not at the first kernel
        # The daemon, before the first kernel: the one configured, the
        # node's, or this user's (started now when none answers).
        sock, line = _daemon.check(s.socket)
        if line:
            print(line, file=sys.stderr, flush=True)
        if sock is not None and sock != s.socket:
            s = dataclasses.replace(s, socket=sock)
            os.environ["DETD_SOCKET"] = sock  # the processes it starts (compile workers, detctl) too
    with _install_lock:
        from . import _megatron

        if _megatron.coexist(s) == "megatron":
            _process.stand_down()  # megatron.core.tuning governs
            return s
        from . import _capture

        _capture.options()  # DETD_CAPTURE*: refused before anything is patched
        _hook.patch()
        _process.configure(s)
        from . import _inductor

        _inductor.install()  # torch.compile's autotuners: now, or when Inductor is imported
        _capture.install()  # CUDA graph captures wait for final decisions (detd._capture)
        from . import _timing

        _timing.install()  # benchmarker calls outside every governed tuner, named (detd._timing)
        from . import _audit

        if _audit.enabled():
            from . import _nondet

            _nondet.start()  # the audit's runtime findings (docs/determinism.md)
        if s.helion == "on":
            from . import _helion

            _helion.install()  # Helion's autotuner_fn: now, or when Helion is imported
    return s


def wait_final(timeout_s: Optional[float] = None) -> dict:
    """Wait until every governed key this process met is decided in the
    whole job, at most ``timeout_s`` seconds (None: the ``timeout_ms``
    setting, ``DETD_TIMEOUT_MS``); call it before relying on the configs
    staying as they are (before capturing a CUDA graph: ``detd-run`` and
    ``install()`` make every capture do so, see :mod:`detd._capture`).

    A key is not final while another thread of this process resolves it,
    or when this process launched its ``on_miss`` fallback (its wait ran
    out, the daemon was away). Those keys are waited for, asking the
    daemon without ever timing anything here; a decided key's fallback is
    then replaced by the decision, so its next launch uses it (Triton
    autotuners; an Inductor choice is compiled in: this process keeps its
    fallback, with a warning). A key that nobody times is dropped, so
    that its next launch resolves it again. ``detctl verify`` still
    fails for a process that launched a fallback.

    Returns ``{"waited_s", "replaced", "kept"}`` (the keys whose fallback
    was replaced and those kept, each ``kernel``, ``key``, ``fallback``,
    ``config``). Raises :class:`NotFinalError` naming every key still
    undecided and who times it (its ``keys``). Counted in :func:`stats`
    (``final_*``)."""
    from . import _loop

    return _loop.wait_final(timeout_s)


def not_final() -> List[dict]:
    """The governed keys of this process that are not final now, without
    waiting or asking the daemon: each ``kernel``, ``key``, ``state``
    (``resolving``: being asked for, waited for or timed by a thread of
    this process; ``fallback``: launched with its ``on_miss`` config,
    ``config``) and ``why`` (who times it). Empty: every key this process
    launched is its decision."""
    from . import _loop

    return _loop.not_final()


def daemon_problem(socket: Optional[str] = None) -> str:
    """Whether a daemon serves this process: "" when one answers (at
    ``socket``, else the configured one, the node's, or this user's,
    started now when none answers and starting is allowed), else one line
    saying what to do. What :func:`install` checks before the first
    kernel."""
    from . import _daemon

    return _daemon.check(socket if socket is not None else _policy.parse().socket)[1]


def installed() -> bool:
    from . import _process

    return _process.active()


def settings() -> Settings:
    """The settings in force (defaults from the environment before install)."""
    from . import _process

    if _process.active():
        return _process.settings()
    return _policy.parse()


def _kind(kernel: str) -> str:
    if kernel.startswith("inductor::"):
        return "inductor"
    if kernel.startswith("native::"):
        return "native"
    return "triton"


def autotuners() -> List[dict]:
    """Every autotuner this process reached, governed or not, one dict
    each: ``kind`` (``triton``, ``inductor`` or ``native``, from the
    kernel id: ``inductor::<name>@<guard>`` and ``native::...`` are the
    non-Triton ones), ``kernel`` (identity), ``name``, ``governed``,
    ``why``, ``candidates`` and ``keys``: one dict per key with ``key``,
    ``config`` (the one launched), ``source`` (timed, table, override,
    fallback, local, ...), ``governed``, ``chaos``, ``timed_here``,
    ``candidates`` (the canonical strings of the configs the tuner would
    benchmark for that key: after its own pruning) and, when timed here,
    ``timings`` (ms per candidate) and ``failed`` (candidate -> why, for
    those that failed); ``launch_failed`` (the error's first line) when a
    launch of the key raised (also sent to the daemon, so ``detctl
    verify`` fails); with the audit on, ``audit`` (see :func:`audit`), and
    per kernel ``nondeterministic``: the arguments that differed under a
    fixed config; ``replaced_by``: the decided config that
    :func:`wait_final` put in place of the ``on_miss`` fallback this
    process launched before (``config``, source ``fallback``, as observed).

    Triton autotuners are those reached through ``Autotuner.run``;
    ``Autotuner`` subclasses whose own ``run`` never calls
    ``Autotuner.run`` are listed with ``governed`` False and the reason in
    ``why``; direct ``fn.run`` calls are not seen. Inductor's
    (``torch.compile``: ``CachingAutotuner`` config benchmarking and
    coordinate descent, max-autotune's algorithm selection; see
    :mod:`detd._inductor`) are listed per kernel and key, and once
    ``torch._inductor`` is imported one more entry, ``kernel``
    ``inductor::*``, says whether Inductor is governed: ``status``
    (``governed``, ``ungoverned``, ``refused``), ``why`` (for a refused
    torch release, which one and the releases supported), ``torch`` and
    ``selections`` (max-autotune selections seen, and timed). Helion's
    (``kind`` ``helion``, kernel ``helion::module:qualname@guard``; each
    key's ``config`` is Helion's config JSON, ``string`` the committed
    string; see :mod:`detd._helion`) once a Helion kernel autotuned. Call
    sites that time candidates with ``triton.testing``'s benchmarkers
    outside every tuner detd governs or lists (``kind`` ``timing``, kernel
    ``timing::module:qualname``, ``governed`` False, ``calls``,
    ``benchmarkers``; see :mod:`detd._timing`): their choice is not seen."""
    from . import _helion, _hook, _inductor, _loop, _timing

    out = _hook.records()
    replaced = _loop.replaced()
    for r in out:
        r.setdefault("kind", _kind(r.get("kernel", "")))
        for k in r["keys"]:
            if (r["kernel"], k["key"]) in replaced:  # wait_final() put the decision in its place
                k["replaced_by"] = replaced[(r["kernel"], k["key"])]
    out.extend(_inductor.records())
    out.extend(_helion.records())
    out.extend(_timing.records())
    st = _inductor.status()
    if st["status"] != "not loaded":
        out.append(dict(kind="inductor", kernel="inductor::*", name="inductor::*",
                        governed=st["status"] == "governed", why=st["why"], status=st["status"],
                        torch=st["torch"], selections=st["selections"], graph_cache=st["graph_cache"],
                        candidates=[], keys=[]))
    return out


def stats() -> dict:
    """This process's counters: libdetd's (``outages``: daemon outages
    the process met, one per outage however many calls waited through it;
    ``down_ms``: the current one's length, 0 when the daemon answers;
    ``attaches``; ``claims_renewed``: timing claims taken again after a
    restart; ``reconnect_ms``: the window), empty before the first call;
    and the Triton hook's ``fallbacks`` (``on_miss`` applied) and
    ``claims_lost`` (claims asked for again); :func:`wait_final`'s
    ``final_waits``, ``final_not_final`` (calls that raised),
    ``final_replaced`` (fallbacks replaced by their decision) and
    ``final_kept``; the Inductor adapter's ``inductor_shares`` (choices
    of a max-autotune selection precompiled here while another process
    timed it), ``inductor_share_errors``, ``inductor_failed_here``
    (choices of a governed selection that failed to compile in this
    process), ``inductor_lost_used`` (committed ones among them, used all
    the same), ``inductor_precompiles_skipped`` (choices not precompiled
    because their selection was decided), ``inductor_precompiles_deferred``
    (... because another process times it), ``inductor_deferred_compiled``
    (precompiled after all: its pass came here), and the claims asked for
    ahead of their pass (:mod:`detd._early`): ``early_claims``,
    ``early_waits``, ``early_passed_on``, ``early_pass_on_errors``; the CUDA
    graph captures checked:
    ``capture_checks``, ``capture_warnings``, ``capture_refused``; timing
    outside detd (:mod:`detd._timing`): ``timing_outside`` (benchmarker
    calls), ``timing_sites``, ``timing_send_errors``; the compile workers
    (:mod:`detd._workers`, ``DETD_COMPILE_PROCESSES``):
    ``compile_workers_started``, ``compile_workers_lost``,
    ``compile_workers_off``, ``remote_compiles``,
    ``remote_compile_errors``, ``remote_loaded`` (binaries loaded as a
    worker made them) and ``remote_compiled_here``; the launchers built
    beside a timing pass's compiles (:func:`detd._triton.prepare_launcher`):
    ``launchers_prepared``, ``launcher_errors``; and
    ``phases``: where this process's resolves of new keys spent their wall
    time (compile, benchmark, remeasure, waiting, daemon, other; see
    :mod:`detd._phases`; ``DETD_PHASES=<path>`` also writes it at exit)."""
    from . import _capture, _hook, _inductor, _loop, _measure, _phases, _process, _timing, _workers

    out = dict(_process.client_stats())
    out.update(_workers.counts())
    out.update(_measure.counts())
    out.update(_hook.counts())
    out.update(_inductor.counts())
    out.update(_loop.final_counts())
    out.update(_capture.counts())
    out.update(_timing.counts())
    out["phases"] = _phases.snapshot()
    return out


def audit(enable: bool = True, replays: Optional[int] = None, contention: Optional[bool] = None) -> List[dict]:
    """The determinism audit (also ``DETD_AUDIT=1``; see :mod:`detd._audit`).

    With ``enable`` (the default), from now on the first launch of every
    governed kernel and key (keys already resolved: their next launch) is
    replayed ``replays`` times (default 3, ``DETD_AUDIT_REPLAYS``) on clones
    of its tensor arguments with the config the key resolved to, and every
    tensor argument's bytes are compared; ``contention`` (GPU,
    ``DETD_AUDIT_CONTENTION``) runs each replay beside a busy side stream.
    The audit also turns on ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` (unless deterministic algorithms are on already) and
    reports the ops torch names nondeterministic, the SDPA backend chosen
    and determinism settings to the daemon (:mod:`detd._nondet`,
    docs/determinism.md).
    ``enable=False`` stops auditing (and restores deterministic algorithms
    as they were). Returns the results so far, one dict
    per audited key: ``kernel``, ``name``, ``key``, ``config``, ``replays``,
    ``status`` (``deterministic``, ``nondeterministic`` or ``error``),
    ``differing`` (the tensor arguments whose bytes changed) and ``error``.
    Costs: see :mod:`detd._audit`."""
    from . import _audit, _hook, _nondet

    _audit.enable(enable, replays, contention)
    if enable:
        _hook.leave_direct_all()  # known keys: audited at their next launch
        _nondet.start()  # ops, SDPA backend, settings (docs/determinism.md)
    else:
        _nondet.stop()
    return [r for keys in _audit.results().values() for r in keys.values() if r.get("status") != "running"]


def _detctl() -> str:
    env = os.environ.get("DETD_DETCTL")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    cands = [os.path.join(here, "_lib", "detctl")]
    if os.environ.get("DETD_BUILD_DIR"):
        cands.append(os.path.join(os.environ["DETD_BUILD_DIR"], "client", "detctl"))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    if os.path.isfile(os.path.join(repo, "proto", "detd.proto")):
        cands.append(os.path.join(repo, "build", "client", "detctl"))
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    found = shutil.which("detctl")
    if found:
        return found
    raise FileNotFoundError("detd.verify: detctl not found (set DETD_DETCTL)")


def use_lock(path: str, timeout: float = 120.0) -> str:
    """Start this job warm from a lockfile (docs/lockfile.md): a daemon
    started now for this user gets it (``detd --lock``); a daemon already
    answering gets it through ``detctl lock import`` (the Admin call, under
    its access rules). Either way an entry whose Triton or torch version
    is not this environment's is not used (a miss, which ``detctl
    explain`` names). Sets ``DETD_LOCK`` for the processes this one
    starts. Returns the line saying what was done; raises ValueError
    (no such file) or RuntimeError (no daemon, the import refused)."""
    from . import _daemon

    if not os.path.isfile(path):
        raise ValueError(f"lock {path!r}: no such file")
    path = os.path.abspath(path)
    os.environ["DETD_LOCK"] = path
    s = settings()
    sock, why = _daemon.check(s.socket)
    if sock is None or why:
        raise RuntimeError(why)
    if _daemon.lock_given() == path:
        return f"detd: lock {path}: given to the daemon started at {sock} (detd --lock; its log lists what it stored)"
    cmd = [_detctl(), "--socket", sock, "lock", "import", path]
    cmd += [a for r in _daemon.lock_requirements() for a in ("--require", r)]
    if s.namespace:
        cmd += ["--namespace", s.namespace]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    done = [ln for ln in p.stdout.splitlines() if ln.startswith("imported into ")]
    if p.returncode not in (0, 1) or not done:  # 1: conflicts, kept as stored (listed)
        raise RuntimeError(f"lock {path}: {' '.join(cmd)} exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).strip()[:500]}")
    return f"detd: lock {path}: {done[-1]} of the daemon at {sock}"


def verify(strict: Optional[bool] = None, step: Optional[int] = None, every: Optional[int] = None,
           timeout: float = 60.0, allow_empty: bool = True) -> Optional[dict]:
    """Check through the daemon that every rank launched the same config
    for every governed key, and the decided one.

    Returns the daemon's verify result (``ok``, ``keys_checked``,
    ``observations``, ``divergences``, ``ungoverned``).  With ``strict``
    (default: the ``strict`` setting / DETD_STRICT) a divergence raises
    :class:`DivergenceError`.  In a training loop pass ``step`` and
    ``every``: the check runs only when ``step % every == 0`` and returns
    None otherwise.  A check before any governed launch was observed
    passes (``allow_empty``, the default, as at step 0 of a job); with
    ``allow_empty=False`` it fails like ``detctl verify`` does on nothing.

    The check runs ``detctl verify --json`` (libdetd exposes no admin
    call); ``DETD_DETCTL`` names the binary when it is not on PATH."""
    if every is not None and step is not None and every > 0 and step % every != 0:
        return None
    s = settings()
    if strict is None:
        strict = s.strict
    cmd = [_detctl()]
    sock = s.socket or os.environ.get("DETD_SOCKET")
    if sock:
        cmd += ["--socket", sock]
    cmd += ["verify", "--json"]
    if allow_empty:
        cmd += ["--allow-empty"]
    if s.namespace:
        cmd += ["--namespace", s.namespace]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)
    try:
        result = json.loads(p.stdout) if p.stdout.strip() else None
    except json.JSONDecodeError:
        result = None
    if not isinstance(result, dict) or p.returncode not in (0, 1):
        raise RuntimeError(f"detd.verify: {' '.join(cmd)} exited {p.returncode}: "
                           f"{(p.stderr or p.stdout).strip()[:500]}")
    result.setdefault("ok", p.returncode == 0)
    if strict and (not result["ok"] or p.returncode == 1):
        raise DivergenceError(result)
    return result
