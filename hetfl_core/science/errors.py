"""Errors that carry a one-line message for the user."""


class HetflError(Exception):
    """Base class: the message is one line naming the cause and, where possible, the fix."""


class ConfigError(HetflError, ValueError):
    """A parameter is unknown or out of range (raised before any training starts)."""


class DatasetUnavailable(HetflError):
    """A dataset is neither installed nor downloadable; the message says what to install."""


class DivergenceError(HetflError):
    """Training produced a non-finite loss; the message names the round and suggests a fix."""


class InfeasibleError(HetflError):
    """An optimisation problem has no feasible point."""
