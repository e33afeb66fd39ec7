"""Execute the book's chapters at a scale, then render the book with warnings as errors.

    python tools/build_book.py --scale book                      # make book
    python tools/build_book.py --scale smoke --build-dir _build/smoke   # part of make test

At ``book`` (or ``paper``) scale every chapter listed in ``_toc.yml`` runs through
papermill with ``-p scale SCALE`` (two chapters at a time, the longest first, one torch
thread each) into a staging copy of the sources, which Jupyter Book then renders without
re-executing.
At ``smoke`` scale each chapter runs once under nbval (``pytest --nbval-lax``) with
``scale="smoke"`` injected, its cells' outputs kept, and the book is rendered from those
executed notebooks, so the smoke build checks the chapters as a reader meets them
(figures, tables, ledgers, markup, math, references and exercises) without running twice.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hetfl_core.book.ladder import longer_training_note
from hetfl_core.book.report import NUMBERS_CLASS, load_ledgers, markdown_table, within

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(Path(__file__).resolve().parent))     # the tools beside this file
from print_pdf import toc_files  # noqa: E402  (one reading of _toc.yml for both tools)
from scorecard import scorecard_markdown, verdict_box_markdown  # noqa: E402


def is_chapter(path: Path) -> bool:
    """Whether ``path`` is a chapter: a MyST Markdown notebook, whose front matter names
    jupytext's ``text_representation`` (plain pages such as ``intro.md`` have none)."""
    if not path.exists() or path.suffix != ".md":
        return False
    head = path.read_text().split("\n---", 1)[0]
    return head.startswith("---") and "jupytext:" in head


def chapters() -> list[Path]:
    """The chapters listed in ``_toc.yml`` (in order): the MyST Markdown notebooks ``book/*.md``."""
    return [ROOT / f"{f}.md" for f in toc_files(ROOT) if is_chapter(ROOT / f"{f}.md")]


#: each chapter's wall seconds in a timed cold build, by which the chapters are started
CHAPTER_SECONDS = Path(__file__).resolve().parent / "chapter_seconds.json"


def longest_first(notebooks: list[Path], seconds_file: Path = CHAPTER_SECONDS) -> list[Path]:
    """The chapters in the order they are started: the longest first by the wall seconds
    ``seconds_file`` records (a chapter it does not list first of all, then the table of
    contents' order), so the last chapter to start is a short one and the two chapter
    slots finish close together. A missing or unreadable file keeps the contents' order."""
    try:
        known = {k: float(v) for k, v in json.loads(seconds_file.read_text()).items()
                 if not k.startswith("_")}
    except (OSError, ValueError, TypeError, AttributeError):
        return list(notebooks)
    position = {nb: i for i, nb in enumerate(notebooks)}
    return sorted(notebooks, key=lambda nb: (-known.get(nb.stem, float("inf")), position[nb]))


def staged(staging: Path, chapter: Path) -> Path:
    """Where ``chapter`` (``book/heroes.md``) lies in the staging copy: ``book/heroes.ipynb``,
    the notebook the build executes and renders."""
    return staging / chapter.relative_to(ROOT).with_suffix(".ipynb")


def to_notebook(chapter: Path, target: Path) -> Path:
    """Write the MyST Markdown ``chapter`` as a Jupyter notebook (``.ipynb``) at ``target``."""
    import jupytext

    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(chapter), target, fmt="ipynb")
    return target


MATHJAX = "mathjax@3.2.2"


def local_mathjax(static: Path) -> bool:
    """Put MathJax 3 (from the npm registry, cached) into ``static/mathjax``.

    The rendered pages then show math with no network; without npm they fall back to
    the CDN copy that Sphinx links by default.
    """
    cache = Path(os.environ.get("HETFL_DATA", Path.home() / ".cache" / "hetfl")).expanduser()
    tarball = cache / "mathjax-3.2.2.tgz"
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            return False
        cache.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([npm, "pack", MATHJAX, "--pack-destination", str(cache)], capture_output=True,
                              text=True, timeout=300)
        if proc.returncode != 0 or not tarball.exists():
            return False
    import tarfile

    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith("package/es5/") and "/sre/" not in m.name]
        for m in members:
            m.name = m.name[len("package/es5/"):]
        tar.extractall(static / "mathjax", members=members, filter="data")
    return True


def stage(staging: Path) -> str:
    """Copy the book sources (config, toc, book/) into ``staging``, with a local MathJax,
    the repository settings of :func:`repository_settings` and the library's wheel
    (:func:`build_wheel`, linked from the intro); returns the public repository's URL
    ("" when none is configured)."""
    import yaml

    if staging.exists():
        shutil.rmtree(staging)
    (staging / "book").mkdir(parents=True)
    shutil.copy(ROOT / "_toc.yml", staging / "_toc.yml")
    shutil.copytree(ROOT / "book", staging / "book", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("_build", ".ipynb_checkpoints"))
    shutil.copytree(ROOT / "tools" / "sphinx", staging / "tools" / "sphinx",
                    ignore=shutil.ignore_patterns("__pycache__"))
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    # Not under _static/: Jupyter Book would load every .js file found there on every page.
    if local_mathjax(staging / "_mathjax"):
        sphinx_config = config.setdefault("sphinx", {}).setdefault("config", {})
        sphinx_config["html_static_path"] = ["_mathjax"]
        sphinx_config["mathjax_path"] = "mathjax/tex-chtml.js"
    else:
        print("npm not found: the rendered math will load MathJax from its CDN", file=sys.stderr)
    url = repository_url(config)
    config = repository_settings(config)
    (staging / "_config.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    wheel = build_wheel(staging / "book" / WHEEL_DIR)
    write_install(staging, url, wheel.name, git_commit())
    return url


def repository_url(config: dict) -> str:
    """The public repository configured in ``_config.yml`` (``repository.url``), or ""."""
    return str((config.get("repository") or {}).get("url") or "").strip().rstrip("/")


def repository_settings(config: dict) -> dict:
    """``config`` with the repository's launch buttons and link when a public repository is
    configured, and without any of them when none is (they would lead nowhere). The
    book's path inside the repository is never ``.`` (Colab links would read ``/./``)."""
    config = dict(config)
    url = repository_url(config)
    html = dict(config.get("html") or {})
    if not url:
        config.pop("repository", None)
        config.pop("launch_buttons", None)
        html["use_repository_button"] = False
        html["use_issues_button"] = False
    else:
        repo = dict(config["repository"])
        path = str(repo.get("path_to_book") or "").strip("/")
        repo["path_to_book"] = "" if path in ("", ".") else path
        config["repository"] = repo
    config["html"] = html
    return config


INSTALL_TAG = "install"
WHEEL_DIR = "wheel"           # the staged book's folder for the library's wheel (book/wheel/)
INSTALL_MARK = "<!-- install -->"


def package_version(root: Path = ROOT) -> str:
    """The library's version, as ``pyproject.toml`` declares it."""
    import tomllib

    return tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"]


def wheel_name(version: str | None = None) -> str:
    """The file name of the library's wheel (pure Python, any platform)."""
    return f"hetfl_core-{version or package_version()}-py3-none-any.whl"


def build_wheel(target: Path, root: Path = ROOT) -> Path:
    """Build the library's wheel from ``root``'s sources into ``target``, offline (no
    dependencies fetched, no isolated build environment), from a copy so that the build
    leaves nothing in the checkout; returns its path."""
    import tempfile

    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source"
        shutil.copytree(root / "hetfl_core", source / "hetfl_core",
                        ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (root / name).exists():
                shutil.copy(root / name, source / name)
        done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
                               "--no-build-isolation", "--quiet", "-w", str(target)],
                              capture_output=True, text=True, timeout=600)
    wheel = target / wheel_name(package_version(root))
    if done.returncode != 0 or not wheel.exists():
        raise RuntimeError(f"the library's wheel did not build: {done.stderr.strip()[-500:]}")
    return wheel


def install_markdown(url: str, wheel: str, commit: str) -> str:
    """The intro's paragraph on getting the library: the wheel this build ships (a download
    link), and the public repository when one is configured."""
    text = (f"**Getting the library.** This build ships its library as a wheel built from "
            f"commit `{commit}`: {{download}}`{wheel} <{WHEEL_DIR}/{wheel}>`. Save it in the "
            "folder of a downloaded chapter, and the chapter's first cell installs it "
            f"(`pip install {wheel}`, which also fetches PyTorch and the other requirements)")
    if url:
        text += f"; or install it from the repository: `pip install \"hetfl-core @ git+{url}\"`"
    return text + "."


def install_cell_source(url: str, wheel: str | None = None) -> str:
    """The first cell of a rendered chapter: when the library is missing it installs it from
    the public repository when one is configured, else from the wheel the book ships
    (:func:`wheel_name`), saved beside the notebook."""
    if url:
        return ("# Runs the chapter anywhere: installs the book's library when it is\n"
                "# missing (a downloaded notebook, Colab, Binder).\n"
                "import importlib.util\nimport subprocess\nimport sys\n\n"
                f'SOURCE = "hetfl-core @ git+{url}"\n'
                'if importlib.util.find_spec("hetfl_core") is None:\n'
                '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",\n'
                "                    SOURCE], check=True)\n"
                "    importlib.invalidate_caches()")
    return ("# Runs the chapter anywhere: installs the book's library when it is\n"
            "# missing, from the wheel linked on the book's first page, saved in\n"
            "# this notebook's folder.\n"
            "import importlib.util\nimport subprocess\nimport sys\nfrom pathlib import Path\n\n"
            f'WHEEL = "{wheel or wheel_name()}"\n'
            'if importlib.util.find_spec("hetfl_core") is None:\n'
            "    if not Path(WHEEL).exists():\n"
            "        raise FileNotFoundError(\n"
            '            f"hetfl_core is not installed and {WHEEL} is not here: "\n'
            '            "download it from the book\'s first page into this folder")\n'
            '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",\n'
            "                    WHEEL], check=True)\n"
            "    importlib.invalidate_caches()")


def write_install(staging: Path, url: str, wheel: str, commit: str) -> bool:
    """Put :func:`install_markdown` at the intro's install marker; ``False`` without one."""
    return fill_mark(staging / "book" / "intro.md", INSTALL_MARK,
                     install_markdown(url, wheel, commit))


def set_install_cell(notebook: Path, url: str) -> bool:
    """Give ``notebook``'s cell tagged ``install`` the source for ``url`` (its outputs are
    left alone); returns whether the notebook has such a cell."""
    nb = json.loads(notebook.read_text())
    cells = [c for c in nb["cells"] if INSTALL_TAG in c.get("metadata", {}).get("tags", [])]
    for cell in cells:
        lines = install_cell_source(url).split("\n")
        cell["source"] = [line + "\n" for line in lines[:-1]] + lines[-1:]
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return bool(cells)


LEDGERS: Path | None = None   # where the chapters write their claim ledgers during this build
RUN_LOGS: Path | None = None  # where each chapter's runs are logged (cached or computed)


def env(chapter: str | None = None) -> dict:
    e = dict(os.environ)
    if LEDGERS is not None:
        e["HETFL_LEDGER_DIR"] = str(LEDGERS)
    if RUN_LOGS is not None:
        e["HETFL_RUN_LOG_DIR"] = str(RUN_LOGS)
        if chapter:
            e["HETFL_RUN_LOG"] = str(RUN_LOGS / f"{chapter}.jsonl")
    e["PATH"] = str(BIN) + os.pathsep + e.get("PATH", "")
    e.setdefault("OMP_NUM_THREADS", "1")
    # two chapters with two worker processes each: no more runs train at once than there
    # are cores (hetfl_core.runtime.experiments.training_slot), unless the caller says
    e.setdefault("HETFL_TRAINING_SLOTS", str(usable_cores()))
    return e


def usable_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:                # not Linux
        return os.cpu_count() or 1


def papermill(chapter: Path, src: Path, dst: Path, scale: str,
              prepare_only: bool) -> tuple[Path, float, str]:
    """Run (or with ``prepare_only`` only parameterise) the notebook ``src`` of ``chapter``
    into ``dst``, in the chapter's folder; returns the chapter, the seconds and an error line
    ("" when it ran)."""
    cmd = [str(BIN / "papermill"), str(src), str(dst), "-p", "scale", scale, "-k", "python3",
           "--cwd", str(chapter.parent), "--no-progress-bar"]
    if prepare_only:
        cmd.append("--prepare-only")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env(chapter.stem), capture_output=True, text=True)
    err = "" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["papermill failed"])[-1]
    return chapter, time.perf_counter() - start, err


PROGRESS = re.compile(r"\d+%\|")


def tidy_outputs(notebook: Path) -> None:
    """Drop progress bars from the executed chapter's stderr (rendered, every redraw of a
    bar becomes a line, and the finished bar says nothing the page needs), and hide the
    cell papermill injects with the parameters."""
    import json

    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        outputs = cell.get("outputs", [])
        errs = [o for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        if not errs:
            continue
        text = "".join("".join(o["text"]) if isinstance(o["text"], list) else o["text"] for o in errs)
        lines = [l for l in re.split(r"[\r\n]+", text) if l.strip()]
        kept = [l for l in lines if not PROGRESS.search(l)]
        first = outputs.index(errs[0])
        rest = [o for o in outputs if o not in errs]
        merged = [{"output_type": "stream", "name": "stderr", "text": "\n".join(kept) + "\n"}] if kept else []
        cell["outputs"] = rest[:first] + merged + rest[first:]
    notebook.write_text(json.dumps(nb, indent=1))


def missing_figures(notebook: Path) -> str:
    """An error message if a chapter that draws figures came out with none."""
    import json

    cells = json.loads(notebook.read_text())["cells"]
    draws = any("plt." in "".join(c["source"]) or "plots." in "".join(c["source"])
                for c in cells if c["cell_type"] == "code")
    images = sum("image/png" in o.get("data", {}) for c in cells if c["cell_type"] == "code"
                 for o in c.get("outputs", []))
    return "the chapter draws figures but its executed copy holds none" if draws and not images else ""


RAW_TABLE = re.compile(r"\|\s*(?:-{3}|\u2014|\u2013)\s*\|")   # a table's |---| row, after smart dashes


def raw_tables(html_dir: Path) -> list[str]:
    """Pages where a Markdown table (in the text or printed by a cell) came out as plain text."""
    bad = []
    for page in sorted(html_dir.rglob("*.html")):
        text = re.sub(r"<pre.*?</pre>", "", page.read_text(errors="replace"), flags=re.S)   # code may hold pipes
        if RAW_TABLE.search(text):
            bad.append(str(page.relative_to(html_dir)))
    return bad


VERDICT_TAG = "verdict-box"
SCORECARD_MARK = "<!-- scorecard -->"


def fill_verdicts(staging: Path, notebooks: list[Path], ledgers: dict) -> list[str]:
    """Put each chapter's verdict box (from the ledger it wrote) into its cell tagged
    ``verdict-box``; returns the chapters that have such a cell but wrote no ledger."""
    import json

    missing = []
    for nb in notebooks:
        path = staged(staging, nb)
        book = json.loads(path.read_text())
        cells = [c for c in book["cells"] if VERDICT_TAG in c.get("metadata", {}).get("tags", [])]
        if not cells:
            continue
        if nb.stem not in ledgers:
            missing.append(nb.stem)
            continue
        for cell in cells:
            cell["source"] = verdict_box_markdown(
                ledgers[nb.stem], lambda claim, chapter=nb.stem: longer_training_note(chapter, claim))
        path.write_text(json.dumps(book, indent=1))
    return missing


def fill_mark(page: Path, mark: str, text: str) -> bool:
    """Replace ``mark`` in a staged page with ``text``; ``False`` if there is no such page
    or no such mark in it."""
    if not page.exists() or mark not in page.read_text():
        return False
    page.write_text(page.read_text().replace(mark, text))
    return True


def fill_page(page: Path, mark: str, text: str) -> bool:
    """Replace what follows ``mark`` in a staged page with ``text``; ``False`` if there is no
    such page (a book without it)."""
    if not page.exists():
        return False
    page.write_text(page.read_text().split(mark)[0] + text + "\n")
    return True


TOTALS_MARK = "<!-- totals -->"


def totals_markdown(ledgers: dict, scale: str) -> str:
    """The book's totals for the intro: the counted verdicts of the five papers' claims,
    summed over the chapters' ledgers, and the arena's apart."""
    from hetfl_core.book.report import _counts, counts_sentence

    def summed(names):
        total: dict[str, int] = {}
        for name in names:
            for verdict, n in _counts(ledgers[name]).items():
                total[verdict] = total.get(verdict, 0) + n
        return total

    papers = [name for name in ledgers if name != "arena"]
    text = (f"**The book's totals** (this build, scale `{scale}`): of the five papers' claims, "
            f"{counts_sentence(summed(papers))}")
    if "arena" in ledgers:
        text += f" The arena adds {counts_sentence(summed(['arena']))}"
    return text


def write_totals(staging: Path, ledgers: dict, scale: str) -> bool:
    """Put :func:`totals_markdown` at the intro's totals marker; ``False`` without one."""
    return fill_mark(staging / "book" / "intro.md", TOTALS_MARK, totals_markdown(ledgers, scale))


def write_scorecard(staging: Path, notebooks: list[Path], ledgers: dict) -> bool:
    """Fill the staged ``book/scorecard.md`` below its marker with every chapter's claims,
    in the order of the table of contents; ``False`` if there is no such page."""
    return fill_page(staging / "book" / "scorecard.md", SCORECARD_MARK,
                     scorecard_markdown(ledgers, [nb.stem for nb in notebooks], longer_training_note))


SOLUTION_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution\}")
GATE_OPEN = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution-start\}")
GATE_CLOSE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{solution-end\}")


def _strip(text: str, inside: bool = False) -> tuple[str, int, bool]:
    """``text`` without its solutions, how many began in it, and whether it ends inside a
    gated solution (``{solution-start}`` ... ``{solution-end}``, which may span cells)."""
    kept, fence, removed = [], None, 0
    for line in text.splitlines(keepends=True):
        if fence is not None:
            if line.strip() == fence:
                fence = None
        elif inside:
            closed = GATE_CLOSE.match(line)
            if closed:
                fence, inside = closed["fence"], False
        elif opened := SOLUTION_OPEN.match(line):
            fence, removed = opened["fence"], removed + 1
        elif opened := GATE_OPEN.match(line):
            fence, inside, removed = opened["fence"], True, removed + 1
        else:
            kept.append(line)
    if fence is not None:
        raise ValueError("a {solution} block is never closed")
    return "".join(kept), removed, inside


def strip_solutions(text: str) -> tuple[str, int]:
    """``text`` without its ``{solution}`` blocks (fenced with backticks or colons) and
    gated solutions, and how many were removed."""
    kept, removed, inside = _strip(text)
    if inside:
        raise ValueError("a {solution-start} is never ended")
    return kept, removed


def strip_notebook_solutions(nb: dict) -> int:
    """Remove every solution from notebook ``nb`` in place: ``{solution}`` blocks, and gated
    solutions with the code cells between their start and end; returns how many."""
    cells, removed, inside = [], 0, False
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            source = cell["source"]
            source = "".join(source) if isinstance(source, list) else source
            cell["source"], k, inside = _strip(source, inside)
            removed += k
        elif inside or "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        cells.append(cell)
    if inside:
        raise ValueError("a {solution-start} is never ended")
    nb["cells"] = cells
    return removed


STUDENT_TITLE = "student edition"
STUDENT_NOTE = ("```{note}\nThis is the **student edition** of the book: every exercise is "
                "here, without its solution.\n```\n")


def label_student_edition(target: Path) -> None:
    """Mark a staged copy as the student edition, so that a page or a printed sheet of it
    can be told from the full book: "(student edition)" after the book's title (every
    page's title bar and the navbar) and a note at the top of the intro."""
    import yaml

    settings = target / "_config.yml"
    if settings.exists():
        config = yaml.safe_load(settings.read_text())
        config["title"] = f"{config.get('title', 'hetfl')} ({STUDENT_TITLE})"
        settings.write_text(yaml.safe_dump(config, sort_keys=False))
    intro = target / "book" / "intro.md"
    if intro.exists():
        head, _, rest = intro.read_text().partition("\n")      # after the page's title
        intro.write_text(f"{head}\n\n{STUDENT_NOTE}{rest}")


def student_edition(staging: Path, target: Path) -> int:
    """Copy the staged (executed) book to ``target`` with every exercise's solution removed
    (and the code cells of gated solutions); returns how many solutions were removed."""
    import json

    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(staging, target)
    label_student_edition(target)
    removed = 0
    for page in sorted((target / "book").rglob("*")):
        if page.suffix == ".md":
            text, n = strip_solutions(page.read_text())
            page.write_text(text)
        elif page.suffix == ".ipynb":
            nb = json.loads(page.read_text())
            n = strip_notebook_solutions(nb)
            page.write_text(json.dumps(nb, indent=1))
        else:
            continue
        removed += n
    return removed


def count_class(html_dir: Path, css_class: str) -> int:
    """How many elements of the rendered pages carry ``css_class`` (e.g. ``exercise``)."""
    pattern = re.compile(r'class="(?:[^"]*\s)?' + re.escape(css_class) + r'(?:\s[^"]*)?"')
    return sum(len(pattern.findall(p.read_text(errors="replace"))) for p in html_dir.rglob("*.html"))


# Under nbval every chapter runs in one pytest process: before a chapter's first cell (and
# its kernel's start) point the run log at that chapter's file; a kernel that dies as it
# starts is started again. Each cell's outputs are kept
# in its notebook, written back when the session ends, so the smoke build renders the
# chapters as they ran (figures, tables and ledgers), as the book-scale build does.
NBVAL_CONFTEST = """import os

import nbformat
import nbval.kernel
import pytest

RAN = {}
_start_kernel = nbval.kernel.start_new_kernel


def _start_kernel_again_if_it_dies(*args, **kwargs):
    # A kernel that dies before its first reply is started again, up to three times
    # (two chapters start kernels at once; nbval sends a kernel's stderr to /dev/null,
    # so why one died is not recorded).
    for attempt in range(3):
        try:
            return _start_kernel(*args, **kwargs)
        except RuntimeError:
            if attempt == 2:
                raise


nbval.kernel.start_new_kernel = _start_kernel_again_if_it_dies


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    os.environ["HETFL_RUN_LOG"] = os.path.join(os.environ["HETFL_RUN_LOG_DIR"], item.path.stem + ".jsonl")


def pytest_runtest_makereport(item, call):
    outputs = getattr(item, "test_outputs", None)
    if call.when == "call" and outputs is not None and hasattr(item, "cell"):
        notebook = item.parent
        count = RAN.setdefault(str(notebook.fspath), [notebook.nb, 0])
        count[1] += 1
        item.cell.outputs = [nbformat.from_dict(dict(o)) for o in outputs]
        for out in item.cell.outputs:
            if out.get("output_type") == "execute_result":
                out["execution_count"] = count[1]
        item.cell.execution_count = count[1]


def pytest_sessionfinish(session):
    for path, (nb, _) in RAN.items():
        nbformat.write(nb, path)
"""

EXECUTION_MARK = "<!-- execution-report -->"


def chapter_seconds(junit: Path) -> dict[str, float]:
    """Seconds per notebook from nbval's JUnit report (the sum of its cells)."""
    import xml.etree.ElementTree as ET

    seconds: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        stem = case.get("classname", "").removesuffix(".ipynb").rsplit(".", 1)[-1]   # "book.heroes.ipynb"
        seconds[stem] = seconds.get(stem, 0.0) + float(case.get("time", 0))
    return seconds


def _run_log(chapter: str) -> list[dict]:
    """The runs ``chapter`` logged during this build (one JSON object a line)."""
    import json

    log = RUN_LOGS / f"{chapter}.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()] \
        if log.exists() else []


def _title(book: dict, stem: str) -> str:
    """A chapter's title: its first ``# `` heading."""
    return next((line.lstrip("# ").strip() for c in book["cells"] if c["cell_type"] == "markdown"
                 for line in "".join(c["source"]).splitlines() if line.startswith("# ")), stem)


def wall_seconds(notebook: dict, stem: str, seconds: dict[str, float]) -> float | None:
    """How long an executed chapter took: papermill's record in the notebook, else the
    seconds its cells took under nbval (``seconds``, by chapter), else ``None``."""
    return notebook.get("metadata", {}).get("papermill", {}).get("duration") or seconds.get(stem)


TIMING_MARK = "<!-- timing -->"


def timing_markdown(walls: dict[str, float], scale: str) -> str:
    """The intro's sentence on how long this build's chapters took, from what was
    measured (the execution report's wall times)."""
    if not walls:
        return ""
    low, high = min(walls.values()), max(walls.values())
    return (f"This build ran its {len(walls)} chapters at scale `{scale}`, "
            f"in {low:,.0f} to {high:,.0f} s each (the {{ref}}`execution report "
            "<execution-report>` gives every chapter's time).")


def write_timing(staging: Path, notebooks: list[Path], scale: str,
                 seconds: dict[str, float]) -> bool:
    """Put :func:`timing_markdown` at the intro's timing marker; ``False`` without one."""
    walls = {nb.stem: wall_seconds(json.loads(staged(staging, nb).read_text()), nb.stem, seconds)
             for nb in notebooks}
    walls = {stem: wall for stem, wall in walls.items() if wall is not None}
    return fill_mark(staging / "book" / "intro.md", TIMING_MARK, timing_markdown(walls, scale))


def execution_rows(staging: Path, notebooks: list[Path], scale: str, built: str,
                   seconds: dict[str, float]) -> list[list]:
    """One row per chapter (named by its title's first part, "Heroes"): what papermill
    recorded in the executed notebook and what its runs logged: the seeds, the runs served
    from the cache and computed, and how many distinct cache keys (distinct runs) the
    chapter used."""
    import json

    rows = []
    for nb in notebooks:
        book = json.loads((staged(staging, nb)).read_text())
        meta = book.get("metadata", {}).get("papermill", {})
        params = {k: v for k, v in (meta.get("parameters") or {}).items() if k != "scale"}
        runs = _run_log(nb.stem)
        seeds = sorted({r["seed"] for r in runs})
        wall = wall_seconds(book, nb.stem, seconds)
        keys = {r["key"] for r in runs if r.get("key")}
        rows.append([f"{{doc}}`{_title(book, nb.stem).split(':')[0]} <{nb.stem}>`",
                     (meta.get("start_time") or built)[:16].replace("T", " "),
                     "—" if wall is None else f"{wall:,.0f} s", scale,
                     ", ".join(f"{k}={v}" for k, v in params.items()) or "defaults",
                     ", ".join(map(str, seeds)) or "—",
                     f"{sum(r['cached'] for r in runs)} + {sum(not r['cached'] for r in runs)}",
                     len(keys)])
    return rows


EXECUTION_HEADER = ["chapter", "executed (UTC)", "wall time", "scale", "parameters", "seeds run",
                    "runs: cached + computed", "cache keys"]


def data_rows(staging: Path, notebooks: list[Path]) -> list[list]:
    """One row per chapter and dataset its runs read: the dataset and its fingerprint (the
    first 16 hex digits of a SHA-256 of the arrays the runs trained and tested on, as the
    cache key holds it), "—" for runs logged without one."""
    import json

    rows = []
    for nb in notebooks:
        runs = _run_log(nb.stem)
        if not runs:
            continue
        title = _title(json.loads((staged(staging, nb)).read_text()),
                       nb.stem).split(":")[0]
        seen = dict.fromkeys((r["dataset"], r.get("data") or "—") for r in runs)
        for dataset, digest in sorted(seen):
            rows.append([f"{{doc}}`{title} <{nb.stem}>`", dataset, f"`{digest}`"
                         if digest != "—" else digest])
    return rows


def git_commit(root: Path = ROOT) -> str:
    """The commit the book was built from, and whether tracked files differ from it
    (``"1a2b3c4d5e6f (with uncommitted changes)"``); "unknown" outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=30)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               timeout=30)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if head.returncode != 0:
        return "unknown"
    return head.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")


def versions() -> str:
    """The versions of what computed the book."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"Python {platform.python_version()}"]
    for name in ("hetfl-core", "torch", "numpy", "cvxpy", "jupyter-book", "papermill"):
        try:
            parts.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            parts.append(f"{name} (not installed)")
    return ", ".join(parts) + f"; {platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores"


def write_execution_report(staging: Path, rows: list[list], data: list[list] = (),
                           commit: str | None = None) -> bool:
    """Fill the staged ``book/execution.md`` below its marker: the chapters' rows, the data
    each read (:func:`data_rows`), the commit (:func:`git_commit`) and the versions;
    ``False`` if there is no such page."""
    table = within(markdown_table(rows, EXECUTION_HEADER, ["l", "l", "r", "l", "l", "l", "r", "r"]),
                   NUMBERS_CLASS)
    text = (f"{table}\n\nBuilt from commit `{commit or git_commit()}`, computed with "
            f"{versions()}.")
    if data:
        text += ("\n\n**The data each chapter read**: the fingerprint is the first 16 hex "
                 "digits of a SHA-256 of the arrays its runs trained and tested on, the value "
                 "the runs' cache keys hold.\n\n"
                 + markdown_table(data, ["chapter", "dataset", "fingerprint (SHA-256)"]))
    return fill_page(staging / "book" / "execution.md", EXECUTION_MARK, text)


def render(staging: Path, build_dir: Path) -> int:
    out = build_dir
    cmd = [str(BIN / "jupyter-book"), "build", str(staging), "-W", "-n", "--keep-going",
           "--path-output", str(out)]
    print("rendering:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, env=env()).returncode
    if rc == 0:
        html = out / "_build" / "html"
        final = build_dir / "html"
        if html.exists():
            if final.exists():
                shutil.rmtree(final)
            shutil.move(str(html), str(final))
        bad = raw_tables(final)
        if bad:
            print(f"a Markdown table rendered as text in: {', '.join(bad)}", file=sys.stderr)
            return 1
        print(f"book rendered: {final / 'index.html'}")
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", choices=["smoke", "book", "paper"], default="book")
    parser.add_argument("--build-dir", type=Path, default=ROOT / "_build")
    parser.add_argument("--jobs", type=int, default=2, help="chapters executed at once")
    parser.add_argument("--student", action="store_true",
                        help="also render the student edition (no solutions) into BUILD_DIR/student/html")
    args = parser.parse_args()
    global LEDGERS, RUN_LOGS
    build_dir = args.build_dir if args.build_dir.is_absolute() else ROOT / args.build_dir
    staging = build_dir / "src"
    LEDGERS, RUN_LOGS = build_dir / "ledgers", build_dir / "run-logs"
    for folder in (LEDGERS, RUN_LOGS):
        if folder.exists():
            shutil.rmtree(folder)
        folder.mkdir(parents=True)
    built = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    commit = git_commit()                 # the sources as staged, before any chapter runs
    url = stage(staging)
    notebooks = chapters()
    prepare_only = args.scale == "smoke"
    for nb in notebooks:                  # the stored Markdown is staged as the notebook it holds
        (staging / nb.relative_to(ROOT)).unlink()
    sources = {nb: to_notebook(nb, build_dir / "notebooks" / f"{nb.stem}.ipynb") for nb in notebooks}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        started = longest_first(notebooks) if not prepare_only else notebooks
        finished = dict(zip(started, pool.map(lambda nb: papermill(nb, sources[nb], staged(staging, nb),
                                                                   args.scale, prepare_only), started)))
        done = [finished[nb] for nb in notebooks]
    for nb, _, err in done:
        if not err:
            tidy_outputs(staged(staging, nb))
            set_install_cell(staged(staging, nb), url)
    if not prepare_only:
        done = [(nb, seconds, err or missing_figures(staged(staging, nb))) for nb, seconds, err in done]
    failed = [(nb, err) for nb, _, err in done if err]
    for nb, seconds, err in done:
        print(f"{'FAILED' if err else 'ok    '} {nb.relative_to(ROOT)} ({seconds:.0f} s){': ' + err if err else ''}")
    if failed:
        print(f"{len(failed)} chapter(s) failed at scale {args.scale}", file=sys.stderr)
        return 1
    if prepare_only:
        executed = [str(staged(staging, nb)) for nb in notebooks]
        print(f"executing {len(executed)} chapter(s) at scale smoke under nbval", flush=True)
        # Two chapters at a time; --dist loadscope keeps each chapter's cells in order in one kernel.
        parallel = ["-n", str(min(args.jobs, len(executed))), "--dist", "loadscope"] if args.jobs > 1 and len(executed) > 1 else []
        (staging / "book" / "conftest.py").write_text(NBVAL_CONFTEST)
        junit = build_dir / "nbval.xml"
        rc = subprocess.run([str(BIN / "python"), "-m", "pytest", "-q", "--nbval-lax", "-p", "no:cacheprovider",
                             *parallel, "--rootdir", str(staging), f"--junitxml={junit}", *executed], env=env(),
                            cwd=str(staging / "book")).returncode
        (staging / "book" / "conftest.py").unlink()
        if rc != 0:
            print("a chapter failed at scale smoke", file=sys.stderr)
            return rc
        for nb in notebooks:              # as it ran under nbval
            tidy_outputs(staged(staging, nb))
        failed = [(nb, missing_figures(staged(staging, nb))) for nb in notebooks]
        failed = [(nb, err) for nb, err in failed if err]
        for nb, err in failed:
            print(f"FAILED {nb.relative_to(ROOT)}: {err}", file=sys.stderr)
        if failed:
            return 1
    ledgers = load_ledgers(LEDGERS)
    missing = fill_verdicts(staging, notebooks, ledgers)
    if missing:
        print(f"no claim ledger was written by: {', '.join(missing)}", file=sys.stderr)
        return 1
    write_scorecard(staging, notebooks, ledgers)
    write_totals(staging, ledgers, args.scale)
    seconds = chapter_seconds(build_dir / "nbval.xml") if prepare_only else {}
    write_execution_report(staging, execution_rows(staging, notebooks, args.scale, built, seconds),
                           data_rows(staging, notebooks))
    write_timing(staging, notebooks, args.scale, seconds)
    rc = render(staging, build_dir)
    # what the printed edition's title page states (tools/print_pdf.py, title_facts)
    (build_dir / "build.json").write_text(json.dumps(
        {"scale": args.scale, "commit": commit, "built": built}, indent=1) + "\n")
    if rc or not args.student:
        return rc
    return render_student(staging, build_dir)


def render_student(staging: Path, build_dir: Path) -> int:
    """Render the student edition beside the full book and check it: no solution left,
    every exercise kept."""
    removed = student_edition(staging, build_dir / "student-src")
    rc = render(build_dir / "student-src", build_dir / "student")
    if rc:
        return rc
    full, student = build_dir / "html", build_dir / "student" / "html"
    left, exercises = count_class(student, "solution"), count_class(student, "exercise")
    if left or exercises != count_class(full, "exercise"):
        print(f"student edition: {left} solution(s) left, {exercises} of {count_class(full, 'exercise')} "
              "exercises kept", file=sys.stderr)
        return 1
    print(f"student edition: {exercises} exercises, {removed} solutions removed: {student / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
