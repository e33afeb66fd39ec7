"""The ladder of training budgets behind each headline claim: ``plan``, ``run``, ``status``
and ``ledger`` (``python tools/ladder.py --help``; what each does:
:data:`hetfl_core.book.ladder.COMMAND_LINE`). The same as ``python -m hetfl_core ladder``.
"""
from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hetfl_core.book.ladder import main  # noqa: E402  (after the repository is on the path)

if __name__ == "__main__":
    sys.exit(main())
