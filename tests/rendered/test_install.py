"""A reader with nothing but the rendered book: the library's wheel that the intro links,
and a chapter's notebook downloaded from the book, run in a fresh virtual environment
after the install its first cell performs (tools/build_book.py, ``install_cell_source``).

The fresh environment sees the book's requirements (PyTorch and the rest) already
installed, as a reader's machine would after ``pip install`` of the wheel with a network:
a folder of links to this interpreter's packages, less ``hetfl_core`` itself, is put on
its path; ``hetfl_core`` comes only from the wheel.
"""
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

CHAPTER = "foundations"          # a short chapter at smoke scale


def requirements_without_the_library(target: Path) -> Path:
    """A folder of links to this interpreter's installed packages, ``hetfl_core`` (its
    editable install and its metadata) left out."""
    target.mkdir()
    for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "hetfl_core" not in entry.name and not entry.name.endswith(".pth"):
            (target / entry.name).symlink_to(entry)
    return target


def test_a_downloaded_chapter_runs_after_its_first_cell_installs_the_books_wheel(build_dir,
                                                                                  tmp_path):
    html = build_dir / "html"
    wheels = sorted(html.glob("_downloads/*/hetfl_core-*-py3-none-any.whl"))
    assert len(wheels) == 1, wheels
    intro = (html / "book" / "intro.html").read_text()
    link = re.search(r'href="([^"]*' + re.escape(wheels[0].name) + ')"', intro)
    assert link and (html / "book" / link.group(1)).resolve() == wheels[0].resolve()
    notebook = html / "_sources" / "book" / f"{CHAPTER}.ipynb"      # the download button's
    assert notebook.exists()

    reader = tmp_path / "reader"                    # the reader's folder: notebook and wheel
    reader.mkdir()
    (reader / f"{CHAPTER}.ipynb").write_bytes(notebook.read_bytes())
    (reader / wheels[0].name).write_bytes(wheels[0].read_bytes())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (Path(site) / "book-requirements.pth").write_text(
        str(requirements_without_the_library(tmp_path / "requirements")) + "\n")
    missing = subprocess.run([str(python), "-c", "import hetfl_core"], cwd=reader,
                             capture_output=True, text=True)
    assert missing.returncode != 0, "hetfl_core importable before the install"

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1",
               HETFL_CACHE=str(tmp_path / "cache"), MPLBACKEND="Agg")
    done = subprocess.run([str(python), "-m", "papermill", f"{CHAPTER}.ipynb", "out.ipynb",
                           "-p", "scale", "smoke", "-k", "python3", "--no-progress-bar"],
                          cwd=reader, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    installed = subprocess.run([str(python), "-c", "import hetfl_core; print(hetfl_core.__file__)"],
                               cwd=tmp_path, capture_output=True, text=True, check=True).stdout
    assert installed.startswith(str(venv)), installed          # from the wheel, into the venv
