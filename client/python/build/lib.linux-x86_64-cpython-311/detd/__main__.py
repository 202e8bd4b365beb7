"""``python -m detd SCRIPT [args...]``: the same as ``python -m detd.run``."""

import sys

from .run import main

sys.exit(main())
