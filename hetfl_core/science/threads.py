"""One torch thread: what every run, and every computation a run's numbers depend on, uses."""
from __future__ import annotations

import torch

__all__ = ["single_thread"]


class single_thread:  # noqa: N801 - used like a function: single_thread()
    """One torch thread for every run (:func:`~hetfl_core.runtime.engine.run`, the command
    line, sweeps' workers) and for what a run reads (a dataset's standardisation, the
    pre-trained text encoder): a different count changes float sums in the 8th digit, and
    the cache key does not hold it.

    ``single_thread()`` sets it for good (a worker process); ``with single_thread():`` gives
    the caller's thread count back afterwards (a run inside a notebook that trains on)."""

    def __init__(self):
        self.previous = torch.get_num_threads()
        torch.set_num_threads(1)

    def __enter__(self) -> "single_thread":
        return self

    def __exit__(self, *exc) -> None:
        torch.set_num_threads(self.previous)
