"""The benchmarks of one timing pass split across the node's GPUs.

A timing pass is one rank benchmarking every candidate of a key while the
ranks waiting for that key sit idle. With the split on
(``DETD_SPLIT_BENCH=1``), a waiting rank on another GPU benchmarks part of
the candidates on its own device, through the daemon's ``Share`` call
(proto/detd.proto, ShareRequest):

* The timing rank (the holder) opens the split by taking its first
  candidate, the **reference**, and benchmarks the candidates from the
  front, taking each from the daemon before it starts it.
* A waiting rank asks for a share with its device; the daemon gives a
  **benchmark share** when that device is neither the holder's nor another
  helper's of this pass (else it gets a compile share, as without the
  split). The helper takes candidates one at a time from the end of the
  list, benchmarks the reference once and each candidate it took on its
  own GPU, and gives each result with its next take.
* Where the two meet, the holder stops taking. It collects what the
  helpers gave and waits for what they are still benchmarking at most
  :data:`WAIT_FACTOR` times its own mean time per candidate (at least
  :data:`WAIT_MIN_S`); what is still missing then it takes back
  (``reclaim``) and benchmarks itself. A helper that dies or stalls
  therefore costs the pass that wait and the candidate it held, never
  more.
* A helper's timings are scaled by the ratio of the reference's medians,
  the holder's over the helper's, so that every figure is on the holder's
  scale; the candidates within the re-measure band are then re-measured
  on the holder's own device (the hook's rule), so the final comparison
  among close candidates is always made on one GPU.

Then the holder reports every candidate in one ``Report``, as without the
split: the committed answer is still one per key, made by the daemon's
winner rule from the reported timings.

The device is the CUDA device's UUID (``gpu-<UUID>``), or
``DETD_BENCH_DEVICE`` when set (for example, where the UUID is not
available). Without a device the split is off for this process. The
device is the client's word: the daemon cannot check it against the
kernel, so a rank that names another's GPU only makes the pass share that
GPU (slower, still one committed answer).

This module is flow only: it never imports ``triton``; the caller hands it
the candidates' canonical strings, the live configs and a ``bench``
callable (``configs -> (timings, errors)``, the tuner's own benchmarker).
"""

from __future__ import annotations

import logging
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

from . import _devlock, _native, _policy, _samples

log = logging.getLogger("detd")

WAIT_FACTOR = 2.0  # the holder waits for helpers this many of its candidate times
WAIT_MIN_S = 0.05
POLL_S = 0.005  # between collects while waiting for helpers


def parse(environ=None) -> bool:
    """``DETD_SPLIT_BENCH`` (0 or 1, default 0); ValueError naming it."""
    return _policy.env_switch(os.environ if environ is None else environ, "DETD_SPLIT_BENCH", False, "0 or 1")


def device(environ=None) -> Optional[str]:
    """The device this process benchmarks on: ``DETD_BENCH_DEVICE``, else
    the CUDA device's UUID (``gpu-<UUID>``), else None (no split here)."""
    env = os.environ if environ is None else environ
    d = str(env.get("DETD_BENCH_DEVICE", "")).strip()
    if d:
        return d
    key = _devlock.device_key("auto")
    return key if key is not None and key.startswith("gpu-") else None


def _sound(t) -> Tuple[List[float], bool]:
    """(the samples as floats, usable): not failed and none negative, as
    the daemon takes a helper's samples."""
    ms, failed = _samples.normalize(t)
    return ms, not failed and min(ms) >= 0


Bench = Callable[[list], Tuple[dict, dict]]


class Outcome:
    """What a split pass did, for the key's record: ``given`` (canonical
    string -> the device it was measured on), ``reclaimed`` (taken back
    from a late helper), ``scale`` (helper index -> the factor applied:
    the helpers that gave), ``waited_s`` for the helpers, of a budget
    of ``budget_s`` (:data:`WAIT_FACTOR` times the holder's own mean time
    per candidate)."""

    __slots__ = ("given", "reclaimed", "scale", "waited_s", "budget_s")

    def __init__(self):
        self.given: Dict[str, str] = {}
        self.reclaimed: List[str] = []
        self.scale: Dict[int, float] = {}
        self.waited_s = 0.0
        self.budget_s = 0.0

    def record(self) -> dict:
        return dict(helpers=sorted(self.scale), given=dict(self.given), reclaimed=list(self.reclaimed),
                    scale={str(k): round(v, 6) for k, v in sorted(self.scale.items())},
                    waited_s=round(self.waited_s, 3), budget_s=round(self.budget_s, 3))


def holder_round(client, dkey, claim_id: int, objs: list, strs: List[str], bench: Bench):
    """The holder's first round of a split pass: every candidate measured
    once, here or by a helper (scaled). Returns ``(timings, errors,
    outcome)`` (``Config -> timing``, ``Config -> exception``), or None
    when the split cannot open (then the caller times as without it)."""
    try:
        a = client.share(dkey, claim_id=claim_id, take=strs[0])
    except _native.DetdError as e:
        log.debug("detd: benchmark split not opened for %s: %s", dkey.key, e)
        return None
    if not a.granted:
        return None
    out = Outcome()
    timings, errors, spent = {}, {}, []

    def run(i):
        t0 = time.monotonic()
        t, e = bench([objs[i]])
        spent.append(time.monotonic() - t0)
        timings.update(t)
        errors.update(e)

    run(0)
    stop = len(objs)
    for i in range(1, len(objs)):
        try:
            got = client.share(dkey, claim_id=claim_id, take=strs[i]).granted
        except _native.DetdError as e:  # the claim is gone: time the rest, the report says
            log.debug("detd: benchmark split of %s ended: %s", dkey.key, e)
            got = True
        if not got:
            stop = i  # every candidate from here on was taken by a helper
            break
        run(i)
    given = {}
    if stop < len(objs):
        out.budget_s = max(WAIT_MIN_S, WAIT_FACTOR * sum(spent) / len(spent))
        t_wait = time.monotonic()
        deadline = t_wait + out.budget_s
        while True:
            try:
                c = client.share(dkey, claim_id=claim_id, collect=True)
            except _native.DetdError as e:
                log.debug("detd: collecting the benchmark split of %s failed: %s", dkey.key, e)
                break
            given = {g.config: g for g in c.given}
            if not c.pending or time.monotonic() >= deadline:
                break
            time.sleep(POLL_S)
        out.waited_s = time.monotonic() - t_wait
    ref_ms, ref_ok = _sound(timings[objs[0]])
    ref_ok = ref_ok and objs[0] not in errors and _samples.median(ref_ms) > 0
    for i in range(stop, len(objs)):
        g = given.get(strs[i])
        g_ref, g_ok = _sound(g.reference_ms) if g is not None else ([], False)
        if g_ok and ref_ok and _samples.median(g_ref) > 0:
            f = _samples.median(ref_ms) / _samples.median(g_ref)
            out.scale[g.helper] = f
            out.given[strs[i]] = g.device
            if g.failed or not _sound(g.ms)[1]:
                timings[objs[i]] = [float("inf")] * 3
                errors.setdefault(objs[i], RuntimeError(f"failed on {g.device} (a benchmark share)"))
            else:
                timings[objs[i]] = [x * f for x in g.ms]
            continue
        # Not given in time (or not comparable): taken back, timed here.
        try:
            client.share(dkey, claim_id=claim_id, take=strs[i], reclaim=True)
        except _native.DetdError as e:
            log.debug("detd: reclaiming %s of %s: %s", strs[i], dkey.key, e)
        out.reclaimed.append(strs[i])
        run(i)
    ordered = {c: timings[c] for c in objs if c in timings}
    return ordered, errors, out


def helper(client, dkey, objs: list, strs: List[str], bench: Bench) -> Dict[str, object]:
    """A benchmark share: take the last free candidate (helpers skip what
    other helpers hold, so the ones taken by helpers stay a suffix of the
    list), time the reference once and each one taken, give each result
    with the next take. Returns what it did (``taken``: canonical strings
    given, ``reference``), for the key's record; never raises for the
    daemon's answers (a pass that ended stops the help)."""
    done: List[str] = []
    reference = None

    def scan(i, a):
        """From answer a to the take of strs[i], down: the index granted, or None."""
        while True:
            if not a.open:
                return None
            if a.granted:
                return i
            i -= 1
            if i < 0 or (reference is not None and strs[i] == reference):
                return None
            a = client.share(dkey, take=strs[i])

    try:
        i = len(objs) - 1
        first = client.share(dkey, take=strs[i])
        reference = first.reference
        i = scan(i, first) if reference else None
    except _native.DetdError as e:
        log.debug("detd: benchmark share of %s refused: %s", dkey.key, e)
        return dict(taken=done)
    if i is None:
        return dict(taken=done, reference=reference)
    ref = next((c for c, s in zip(objs, strs) if s == reference), None)
    ref_ms: List[float] = []
    if ref is not None:
        t, e = bench([ref])
        ref_ms, ok = _sound(t[ref])
        if ref in e or not ok or _samples.median(ref_ms) <= 0:
            ref = None
    if ref is None:
        return dict(taken=done, reference=reference)  # not comparable: the holder takes it back
    while i is not None:
        t, e = bench([objs[i]])
        ms, ok = _sound(t[objs[i]])
        failed = objs[i] in e or not ok
        nxt = i - 1
        take = strs[nxt] if nxt >= 0 and strs[nxt] != reference else None
        try:
            a = client.share(dkey, timings=[(strs[i], ms if not failed else [float("inf")], failed)],
                             reference_ms=ref_ms, take=take)
            done.append(strs[i])
            i = scan(nxt, a) if take is not None else None
        except _native.DetdError as e2:
            log.debug("detd: giving %s of %s failed: %s", strs[i], dkey.key, e2)
            break
    return dict(taken=done, reference=reference)
