"""Phases a test drives by events, not sleeps: a worker announces that it
reached a point (PATH.waiting) and blocks until the test creates PATH."""

import os
import time

# A test that never opens a gate must not hang its worker.
GATE_BOUND_S = 300


def wait_for(path):
    """Announce the point (PATH.waiting) and block until PATH exists; after
    GATE_BOUND_S, exit 8."""
    open(path + ".waiting", "w").close()
    deadline = time.monotonic() + GATE_BOUND_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            os._exit(8)
        time.sleep(0.01)
