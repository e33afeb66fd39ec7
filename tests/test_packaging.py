"""The package builds as a wheel that carries every subpackage, and the console script."""
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from build_book import build_wheel  # noqa: E402  (the wheel the book ships, built the same way)


def test_the_wheel_holds_every_module(tmp_path):
    wheel = build_wheel(tmp_path)         # from a copy: the build leaves nothing in the checkout
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "hetfl_core").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hetfl = hetfl_core.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
