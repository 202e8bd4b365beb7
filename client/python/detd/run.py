"""Run an unmodified script with detd installed.

    python -m detd.run train.py [args...]
    python -m detd.run -m package.module [args...]
    torchrun --nproc-per-node 8 -m detd.run train.py [args...]
    detd-run train.py [args...]

Settings come from the ``DETD_*`` environment variables (see
:mod:`detd._policy`); invalid ones stop the run before the script starts,
and so does a missing daemon (one line saying what to do) when its first
governed kernel would fail (``on_miss=error``, the default).
The script runs as ``__main__`` with ``sys.argv`` as if started directly.
Every CUDA graph capture of the script (``torch.cuda.graph``,
``make_graphed_callables``, torch.compile's CUDA graph trees) first waits
for the decisions of the keys the process met (``DETD_CAPTURE``: ``wait``,
``warn`` or ``off``; see :mod:`detd._capture`).
With ``DETD_RUN_REPORT=PATH`` the process writes, when it exits, what
:func:`detd.autotuners` says (every autotuner it reached, per key the
config it launched, its source and wait) and :func:`detd.stats` (daemon
outages met, fallbacks) to PATH as JSON, with its pid and rank.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import sys


def _write_report(path: str) -> None:
    import detd

    doc = {"pid": os.getpid(), "rank": os.environ.get("RANK"), "autotuners": detd.autotuners(),
           "stats": detd.stats()}
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, default=str)
    os.replace(tmp, path)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    import detd

    try:
        s = detd.settings()
        if s.mode in ("coordinated", "pinned") and s.on_miss == "error":
            # Its first governed kernel would fail: one line, before the
            # script starts, instead of a traceback there.
            problem = detd.daemon_problem(s.socket)
            if problem:
                print(f"{problem} (detd-run stops before the script: with on_miss=error its first governed "
                      "kernel would fail)", file=sys.stderr)
                return 2
        detd.install()
    except (ValueError, ImportError) as e:
        print(f"detd-run: {e}", file=sys.stderr)
        return 2
    report = os.environ.get("DETD_RUN_REPORT")
    if report:
        atexit.register(_write_report, report)
    if argv[0] == "-m":
        if len(argv) < 2:
            print("detd-run: -m needs a module name", file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        path = argv[0]
        sys.argv = argv
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        runpy.run_path(path, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
