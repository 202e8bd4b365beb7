"""Stand-in for megatron.core.tuning (see ../../../README.md)."""
from megatron.core.tuning.interception import active_policy, calls, choice_log, install, install_from_env

__all__ = ["active_policy", "calls", "choice_log", "install", "install_from_env"]
