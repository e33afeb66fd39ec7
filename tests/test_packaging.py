"""The package builds as a wheel that carries every subpackage, and the console script."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_every_module(tmp_path):
    source = tmp_path / "source"          # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT / "hetfl_core", source / "hetfl_core", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), "-q"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("hetfl_core-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "hetfl_core").rglob("*.py")}
    assert modules <= names, sorted(modules - names)
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hetfl = hetfl_core.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
