"""Declared values: a method option or a config field, its type, range and one-line help.

:class:`Option` is what a method declares once per option (its default, check and help);
:func:`check_value` and :func:`accepted` serve config fields and options alike.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from dataclasses import dataclass

from .errors import ConfigError

__all__ = ["Option", "accepted", "check_value"]


def _bound(value) -> str:
    """A range's end as a reader writes it: ``2**32`` for a large power of two, else as
    ``1e+09`` or ``0.5``."""
    if isinstance(value, int) and value >= 2 ** 16 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    return f"{value:g}"


def accepted(meta: dict) -> str:
    """The accepted values of a declared field or option, in words (``an integer in [1, 1000000]``)."""
    kind = {int: "an integer", float: "a number", bool: "true or false", str: "a name"}[meta["kind"]]
    low, high = meta.get("low"), meta.get("high")
    if low is not None or high is not None:
        left = "(" if meta.get("low_open") else "["
        right = ")" if meta.get("high_open") else "]"
        ends = "-inf" if low is None else _bound(low), "inf" if high is None else _bound(high)
        interval = f"{left}{ends[0]}, {ends[1]}{right}"
        kind = f"{'an integer ' if meta['kind'] is int else ''}in {interval}"   # a number is implied
    return kind + (" or None" if meta.get("optional") else "")


def check_value(name: str, value, meta: dict):
    """Raise :class:`ConfigError` unless ``value`` has the declared type, is finite and in range."""
    kind = meta["kind"]
    if value is None and meta.get("optional"):
        return
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is str:
        ok = isinstance(value, str)
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        ok = False          # True is an int to Python, never a count or a rate here
    elif kind is int:
        ok = isinstance(value, numbers.Integral)
    else:
        ok = math.isfinite(value)
    if ok and kind in (int, float):
        low, high = meta.get("low"), meta.get("high")
        ok = (low is None or (value > low if meta.get("low_open") else value >= low)) and \
             (high is None or (value < high if meta.get("high_open") else value <= high))
    if not ok:
        raise ConfigError(f"{name} must be {accepted(meta)}, got {value!r}")


@dataclass(frozen=True)
class Option:
    """A method option declared once: its ``default``, one-line ``help`` and accepted values.

    The type is the default's (``kind`` names it where the default is ``None``); a list
    option's items are checked like its default's first item. ``low``/``high`` bound a
    number (open ends where ``low_open``/``high_open``), ``choices`` lists the names a
    string may take, ``optional`` also allows ``None``.
    """

    default: object
    help: str = ""
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    optional: bool = False
    kind: type | None = None

    @property
    def meta(self) -> dict:
        """The declaration as :func:`check_value` reads it."""
        kind = self.kind or type(self.default)
        return {"kind": kind, "low": self.low, "high": self.high, "low_open": self.low_open,
                "high_open": self.high_open, "optional": self.optional or self.default is None}

    def accepted(self) -> str:
        """The values it accepts, in words."""
        if self.choices:
            return "one of: " + ", ".join(map(str, self.choices))
        if isinstance(self.default, (list, tuple)):
            return f"a list like {json.dumps(list(self.default))}"
        if self.default is None and self.kind is None:
            return "see the method's description"
        return accepted(self.meta)

    def check(self, name: str, value) -> None:
        """Raise :class:`ConfigError` unless ``value`` is one this option accepts."""
        if self.choices:
            if value not in self.choices:
                raise ConfigError(f"{name} must be {self.accepted()}; got {value!r}")
        elif isinstance(self.default, (list, tuple)):
            if not isinstance(value, (list, tuple)):
                raise ConfigError(f"{name} must be {self.accepted()}, got {value!r}")
            item = dataclasses.replace(self, default=self.default[0] if self.default else None)
            for v in value:
                item.check(f"each item of {name}", v)
        elif self.default is None and self.kind is None:   # untyped: the method's own check decides
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{name} must be finite or None, got {value!r}")
        else:
            check_value(name, value, self.meta)
