"""The ``detctl`` console script: runs the detctl binary bundled in the
package (``detd/_lib/detctl``), or ``$DETD_DETCTL``, with the arguments it
was given. The binary finds its libraries next to itself (RUNPATH
``$ORIGIN``), so it needs nothing from the distribution but glibc.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional


def binary() -> Optional[str]:
    """The detctl binary this package runs, or None when none is bundled."""
    env = os.environ.get("DETD_DETCTL")
    if env:
        return env
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", "detctl")
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def detctl(argv: Optional[List[str]] = None) -> int:
    """Replace this process with detctl (argv: its arguments, default
    ``sys.argv[1:]``). Returns 2 only when no binary is there to run."""
    path = binary()
    if path is None:
        print("detctl: this detd package bundles no detctl binary (it was built without one); "
              "set DETD_DETCTL or reinstall from the repository", file=sys.stderr)
        return 2
    args = sys.argv[1:] if argv is None else list(argv)
    os.execv(path, [path] + args)
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(detctl())
