"""The package's import graph has no cycles, counting imports inside functions, and every
module imports alone in a fresh interpreter."""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "hetfl_core"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _type_checking(node) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _imports(tree):
    """Every import statement, at any depth (functions included), outside ``if TYPE_CHECKING``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if _type_checking(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child
            stack.append(child)


def edges(name: str) -> set[str]:
    """The package modules ``name`` imports (``from .pkg import sub`` counts ``pkg.sub``;
    ``__import__("hetfl_core.x")`` and ``importlib.import_module`` with a literal count too, and
    a package that discovers its modules with ``pkgutil.iter_modules(__path__)`` imports each)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    tree = ast.parse(path.read_text())
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # ``from P import n``: the module P.n if there is one, else P itself
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0] if "." in target else ""
            if target and target != name:
                out.add(target)
    if path.name == "__init__.py" and "pkgutil.iter_modules(__path__)" in path.read_text():
        out |= {m for m in MODULES if m.rpartition(".")[0] == name}     # discovers its modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "__import__", "import_module") and node.args and isinstance(node.args[0], ast.Constant):
            target = str(node.args[0].value)
            if target in MODULES and target != name:
                out.add(target)
    return out


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: edges(m) for m in MODULES}
    # a package's __init__ runs before any of its modules: a module importing its own
    # package's __init__ (directly or not) is not a cycle of ours unless __init__ imports it back
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for m in graph:
        if m not in index:
            visit(m)
    return out


def test_no_import_cycles():
    found = cycles()
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_graph_sees_function_imports():
    """The check would catch a cycle hidden behind an import inside a function."""
    assert any("hetfl_core.science.data" == e or e.startswith("hetfl_core.science.data.") for e in edges("hetfl_core.science.transformer"))


IMPORT_EACH = """
import os, sys, traceback
import numpy, scipy.special, torch          # the heavy third-party imports, once, before forking
failed = []
for name in sys.argv[1:]:
    pid = os.fork()
    if pid == 0:                          # a child with no hetfl_core module loaded yet
        try:
            __import__(name)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
        os._exit(0)
    if os.waitpid(pid, 0)[1] != 0:
        failed.append(name)
print("FAILED:" + ",".join(failed))
"""


@pytest.mark.slow
def test_every_module_imports_alone():
    """Each module imported first, in a fresh process (forked before any hetfl_core import)."""
    names = sorted(m for m in MODULES if not m.endswith("__main__"))
    done = subprocess.run([sys.executable, "-c", IMPORT_EACH, *names], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    failed = done.stdout.strip().rpartition("FAILED:")[2]
    assert not failed, f"these modules fail when imported alone: {failed}\n{done.stderr[-2000:]}"


#: where the package is entered from outside: ``import hetfl_core``, ``python -m hetfl_core``
#: (the command line) and Flower's app loader
ENTRY_POINTS = ("hetfl_core", "hetfl_core.__main__", "hetfl_core.cli", "hetfl_core.runtime.flower_app")
#: the one module whose users are the chapters: what every chapter shares (its parameters,
#: sweeps, captions and ledger)
CHAPTERS_MODULE = "hetfl_core.book"


def reachable(starts) -> set[str]:
    """The modules imported, directly or not, from ``starts`` (a package's ``__init__``
    counts as imported with any of its modules)."""
    seen, todo = set(), list(starts)
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        todo.extend(edges(m))
        parent = m.rpartition(".")[0]
        if parent in MODULES:
            todo.append(parent)
    return seen


def test_no_module_is_imported_only_by_the_chapters():
    """A module of the package serves the package (the library, its command line, its
    Flower app), not one notebook: the chapters hold their own experiments, and what they
    share is the one module :data:`CHAPTERS_MODULE`, which every chapter imports."""
    import re

    from_package = reachable(ENTRY_POINTS)
    only_chapters = sorted(m for m in MODULES if m not in from_package and m != CHAPTERS_MODULE)
    assert not only_chapters, f"modules only the chapters import: {', '.join(only_chapters)}"
    chapters = [p for p in (ROOT.parent / "book").glob("*.md") if p.read_text().startswith("---\njupytext:")]
    assert len(chapters) == 8
    for chapter in chapters:
        assert re.search(r"from hetfl_core\.book import|import hetfl_core\.book|from hetfl_core import book",
                         chapter.read_text()), chapter.name


#: the package's layers, each a subpackage, lowest first: the papers' pieces and the
#: simulation, the run machinery, the book; a module imports from its own layer and those
#: below it, never from one above
LAYERS = ("science", "runtime", "book")


def layer_of(module: str) -> str | None:
    """The layer a package module belongs to, or ``None`` for the entry points beside them."""
    part = module.split(".")[1:2]
    return part[0] if part and part[0] in LAYERS else None


def test_every_module_is_in_a_layer_but_the_entry_points():
    loose = sorted(m for m in MODULES if layer_of(m) is None)
    assert loose == ["hetfl_core", "hetfl_core.__main__", "hetfl_core.cli"]


def test_layers_import_only_downward():
    upward = [f"{m} -> {e}" for m in MODULES for e in edges(m) if layer_of(m) and layer_of(e)
              and LAYERS.index(layer_of(e)) > LAYERS.index(layer_of(m))]
    assert not upward, "imports from a higher layer: " + "; ".join(sorted(upward))
    assert layer_of("hetfl_core.book.report") == "book" and layer_of("hetfl_core.cli") is None


def test_the_old_module_paths_import_the_moved_modules():
    """``hetfl_core.masks`` (a path from before the layers) is ``hetfl_core.science.masks``,
    the same module, by import, by attribute and for pickle; unknown names still fail."""
    import importlib
    import pickle

    import hetfl_core
    from hetfl_core import MOVED

    for old, new in MOVED.items():
        assert importlib.import_module(f"hetfl_core.{old}") is importlib.import_module(f"hetfl_core.{new}")
        assert getattr(hetfl_core, old) is importlib.import_module(f"hetfl_core.{new}")
    from hetfl_core.methods.fedavg import FedAvg
    from hetfl_core.science.methods.fedavg import FedAvg as moved
    assert FedAvg is moved
    old_pickle = pickle.dumps(moved, protocol=0).replace(b"hetfl_core.science.methods.fedavg", b"hetfl_core.methods.fedavg")
    assert b"science" not in old_pickle and pickle.loads(old_pickle) is moved
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("hetfl_core.no_such_module")
    with pytest.raises(AttributeError):
        hetfl_core.no_such_module
