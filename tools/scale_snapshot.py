"""Every ``by_scale`` call's smoke and book values, as JSON, to compare two versions.

``python tools/scale_snapshot.py OUT.json`` records the arena's settings (each value
``by_scale`` returns at ``smoke`` and ``book`` scale, in call order, and the run configs
they make) and every chapter's planned run configs at both scales; for the
notebooks, the ``smoke`` and ``book`` arguments of every ``by_scale`` call in their code
cells (evaluated where they can be, else their source).
``python tools/scale_snapshot.py A.json B.json`` compares two such records: a value that
changed or a call that went is a difference; a new call is listed but is not one.
"""
from __future__ import annotations

import ast
import difflib
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from hetfl_core.runtime import config  # noqa: E402

LOG: list = []
_real = config.by_scale


def _logged(scale, **kw):
    """``by_scale``, recording what it returns."""
    value = _real(scale, **kw)
    LOG.append([scale, repr(value)])
    return value


def _plain(value):
    """``value`` with the every-sample marker read as ``None`` (as ``by_scale`` returns it)."""
    return None if value is getattr(config, "ALL", object()) else value


def _configs(made) -> list:
    """The run configs the arena's settings make, as canonical JSON."""
    found = [made] if hasattr(made, "to_dict") else \
        list(made.configs.values()) if hasattr(made, "configs") else \
        [c for c in (getattr(made, "image", None), getattr(made, "text", None)) if c is not None]
    return [json.dumps(c.to_dict(), sort_keys=True, default=str) for c in found] or [repr(made)]


def modules() -> dict:
    """The arena's ``by_scale`` values and configs, and every chapter's planned run configs
    (:func:`hetfl_core.book.plan_chapter`: the chapter runs, its sweeps only record), at
    ``smoke`` and ``book`` scale."""
    from build_book import chapters

    from hetfl_core.book import arena
    from hetfl_core.book import plan_chapter

    config.by_scale = _logged
    out = {}
    for scale in ("smoke", "book"):
        LOG.clear()
        made = arena.settings(scale)
        out[f"arena.settings@{scale}"] = list(LOG)
        out[f"arena.settings@{scale} configs"] = sorted(_configs(made))
    config.by_scale = _real
    for chapter in chapters():
        for scale in ("smoke", "book"):
            records, _ = plan_chapter(chapter, scale)
            out[f"{chapter.stem}@{scale} configs"] = sorted(
                {json.dumps(r["config"], sort_keys=True, default=str) for r in records})
    return out


def notebooks() -> dict:
    """The smoke and book arguments of the notebooks' ``by_scale`` calls, per cell."""
    out = {}
    import jupytext

    for path in sorted((ROOT / "book").glob("*.md")):
        if not path.read_text().startswith("---\njupytext:"):
            continue                      # a plain page, not a chapter
        nb = jupytext.read(path)
        ns: dict = {"ALL": getattr(config, "ALL", None), "__builtins__": __builtins__}
        for cell in nb["cells"]:
            if cell["cell_type"] != "code":
                continue
            try:
                tree = ast.parse("".join(cell["source"]))
            except SyntaxError:
                continue
            for node in tree.body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    try:
                        exec(compile(ast.Module([node], []), "<imports>", "exec"), ns)
                    except Exception:  # an import the snapshot does not need
                        pass
            calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                     and getattr(n.func, "id", None) == "by_scale"]
            rows = out.setdefault(f"{path.name}:{cell.get('id')}", [])
            for call in sorted(calls, key=lambda n: (n.lineno, n.col_offset)):
                row = {}
                for kw in call.keywords:
                    if kw.arg not in ("smoke", "book"):
                        continue
                    try:
                        row[kw.arg] = repr(_plain(eval(compile(ast.Expression(kw.value), "<arg>",
                                                                "eval"), dict(ns))))
                    except Exception:
                        row[kw.arg] = "source: " + ast.unparse(kw.value)
                rows.append(row)
    return out


def main(argv) -> int:
    """Write a snapshot, or compare two."""
    if len(argv) == 2:
        a, b = (json.loads(pathlib.Path(p).read_text()) for p in argv)
        changed = 0
        for key in sorted(set(a) | set(b)):
            old, new = ([json.dumps(x, sort_keys=True) for x in d.get(key, [])] for d in (a, b))
            ops = difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()
            for tag, i1, i2, j1, j2 in ops:
                if tag == "insert":
                    print(f"{key}: new call(s) {new[j1:j2]}")
                elif tag != "equal":
                    changed += 1
                    print(f"{key}: {tag}\n  before: {old[i1:i2]}\n  after:  {new[j1:j2]}")
        print(f"{len(a)} entries before, {len(b)} after; {changed} values changed or removed")
        return 1 if changed else 0
    snap = {**modules(), **notebooks()}
    pathlib.Path(argv[0]).write_text(json.dumps(snap, indent=1, sort_keys=True))
    print(f"{len(snap)} entries written to {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
