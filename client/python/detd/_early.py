"""A claim taken ahead of its timing pass, and passed on when the pass
does not come.

Inductor compiles every choice of a max-autotune selection before it asks
for the selection (``lookup``). Asked only then, every process of the job
compiles every choice, though one process will time them and the others
will use its answer. An adapter asks earlier instead, with :func:`ask`,
inside a :class:`Scope`: the call of the tuner in which the pass comes,
or does not. The process designated holds the claim from then on and
compiles; the others learn that another process times the key and skip
the compiles the pass alone needed. When the scope ends and the pass has
not come for a claim it took (the tuner went another way: an error,
every choice failed to compile, another list timed), the claim is passed
on (``detd_claim_pass_on``): the key's oldest waiting process is
designated, as if it had asked first, and nobody is failed.

Nothing is claimed early from a daemon that cannot pass claims on (older
than 0.9): the ask is then a look, which sees a decided key only.
Counted in ``detd.stats()`` (:func:`counts`). docs/inductor.md says what
it changes for Inductor.
"""

import contextlib
import logging
import threading
from typing import Any, Dict, Iterator, NamedTuple, Optional, Tuple

from . import _native, _process

# How long one early ask or one pass-on may take (a daemon restarting);
# the daemon answers an early ask at once unless a cluster claim is due.
ASK_MS = 2000
PASS_ON_MS = 10000

log = logging.getLogger("detd")
_lock = threading.Lock()
_counts = {"early_claims": 0, "early_waits": 0, "early_passed_on": 0, "early_pass_on_errors": 0}
_tl = threading.local()


class Held(NamedTuple):
    """A claim taken early: for which key, and the key as sent."""

    kernel: str
    key: str
    dkey: Any
    claim_id: int


class Scope:
    """One call of a tuner in which a pass asked for early comes, or not.
    ``allowed``: claims may be taken in it (a scope that cannot be sure
    its pass comes inside it takes none). ``later``: what an adapter keeps
    for the pass, by the place asked for (:meth:`keep`, :meth:`kept`)."""

    def __init__(self, allowed: bool):
        self.allowed = allowed
        self.held: Dict[Any, Held] = {}
        self.later: Dict[Any, Any] = {}

    def take(self, where, kernel: str, key: str) -> Optional[Held]:
        """The claim taken early at ``where`` for this very key, now the
        pass has come (it is the pass's from here on), or None."""
        h = self.held.get(where)
        if h is None or (h.kernel, h.key) != (kernel, key):
            return None
        return self.held.pop(where)

    def keep(self, where, value) -> None:
        self.later[where] = value

    def kept(self, where) -> Any:
        return self.later.pop(where, None)

    def end(self) -> None:
        """Pass on every claim whose pass did not come."""
        held, self.held = self.held, {}
        self.later.clear()
        for h in held.values():
            pass_on(h)


def current() -> Optional[Scope]:
    """This thread's innermost scope, or None."""
    return getattr(_tl, "scope", None)


@contextlib.contextmanager
def scope(allowed: bool) -> Iterator[Scope]:
    prev = current()
    sc = _tl.scope = Scope(allowed)
    try:
        yield sc
    finally:
        _tl.scope = prev
        sc.end()


def ask(sc: Optional[Scope], where, kernel: str, key: str, dkey) -> Tuple[str, Any]:
    """Ask for ``dkey`` ahead of its pass: ``("decided", answer)``,
    ``("held", answer)`` (designated: the claim is ``sc``'s until its pass
    takes it or the scope ends), ``("waiting", answer)`` (another process
    times it; with ``share_index`` when it holds the claim on this
    daemon: a share of the pass to help with) or ``("own", answer)``
    (nothing known: do as without detd). Raises what the client raises."""
    client = _process.client()
    early = sc is not None and sc.allowed
    if not (early and client.can_pass_on()):
        ans = client.decide(dkey, True, ASK_MS)  # a look; it attaches
        if ans.outcome == _native.OUTCOME_DECIDED:
            return "decided", ans
        if not (early and client.can_pass_on()):
            return "own", ans
    ans = client.decide(dkey, False, ASK_MS, share=True)
    if ans.outcome == _native.OUTCOME_DECIDED:
        return "decided", ans
    if ans.outcome == _native.OUTCOME_DESIGNATED:
        sc.held[where] = Held(kernel, key, dkey, ans.claim_id)
        _count("early_claims")
        return "held", ans
    if ans.outcome == _native.OUTCOME_TIMEOUT:
        _count("early_waits")
        return "waiting", ans
    return "own", ans


def pass_on(h: Held) -> None:
    """Give ``h`` up untimed: the key's oldest waiter is designated. A
    claim no longer held (decided meanwhile) needs nothing; any other
    failure is counted and said once: the daemon ends the claim at its
    pass deadline, or when this process ends."""
    try:
        _process.client().pass_on(h.claim_id, h.dkey, PASS_ON_MS)
    except _native.DetdError as e:
        if e.code == _native.ESTALE:
            return
        _count("early_pass_on_errors")
        _process.warn_once("pass-on", f"detd: passing on the claim of kernel {h.kernel} key {h.key}, asked for "
                           f"early and not timed here, failed: {e}; the daemon ends it at its pass deadline or "
                           f"when this process ends (counted in detd.stats()['early_pass_on_errors'])")
        return
    except (_native.LibraryNotFound, OSError) as e:
        _count("early_pass_on_errors")
        log.debug("detd: passing on the claim of %s failed: %s", h.kernel, e)
        return
    _count("early_passed_on")
    log.info("detd: kernel %s key %s was asked for early and its pass did not come here: claim passed on to "
             "the next waiting process", h.kernel, h.key)


def _count(name: str) -> None:
    with _lock:
        _counts[name] += 1


def counts() -> dict:
    """For ``detd.stats()``: ``early_claims`` (claims taken ahead of their
    pass), ``early_waits`` (early asks that found another process timing
    the key), ``early_passed_on`` (claims whose pass did not come, passed
    on) and ``early_pass_on_errors``."""
    with _lock:
        return dict(_counts)
