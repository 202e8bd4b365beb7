"""Stand-in for megatron.core.tuning.interception: patches Triton's
Autotuner.run as the real one does (see ../../../README.md)."""
import os
from functools import wraps

_installed = False
_policy = None
_choice_log = {}
calls = []  # one entry per launch policy_run handled (the tests count them)


def active_policy():
    return _policy


def choice_log():
    return dict(_choice_log)


def install(policy=None):
    """Apply the policy ("pinned" or "auto") to Triton's autotuner. Idempotent."""
    global _installed, _policy
    _policy = policy or os.environ.get("MCORE_AUTOTUNE_MODE", "pinned")
    if _installed:
        return True
    from triton.runtime.autotuner import Autotuner

    original_run = Autotuner.run

    @wraps(original_run)
    def policy_run(self, *args, **kwargs):
        calls.append(self)
        if _policy != "pinned" or len(self.configs) <= 1:
            return original_run(self, *args, **kwargs)
        candidates = self.configs
        chosen = min(candidates, key=lambda c: (sorted(c.kwargs.items()), c.num_warps))
        _choice_log[repr(self)] = str(chosen)
        try:
            self.configs = [chosen]  # one candidate: Triton times nothing
            return original_run(self, *args, **kwargs)
        finally:
            self.configs = candidates

    Autotuner.run = policy_run
    _installed = True
    return True


def install_from_env():
    return install(None)
