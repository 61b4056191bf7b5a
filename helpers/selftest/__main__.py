"""``python -m helpers.selftest``: see :mod:`helpers.selftest.cli` (notebook 00_tpu_self_test)."""

import sys

from helpers.selftest.cli import main

__all__: list[str] = []  # a script, nothing to import

sys.exit(main())
