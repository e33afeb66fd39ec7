"""Bits: what a message costs on the wire, dense or sparse with its index code."""
from __future__ import annotations

import math

import numpy as np

from ..errors import ConfigError

__all__ = ["FLOAT_BITS", "dense_bits", "index_bits", "sparse_bits", "topk_upload_bits"]

FLOAT_BITS = 32


def dense_bits(n_values: int, value_bits: int = FLOAT_BITS) -> float:
    """Bits of ``n_values`` dense values."""
    return float(n_values) * value_bits


def index_bits(nnz: int, total: int, coding: str = "min") -> float:
    """Bits that tell the receiver *which* ``nnz`` of ``total`` positions are sent.

    ``"position"``: each index in ceil(log2 total) bits; ``"bitmap"``: one bit per
    position; ``"min"``: the cheaper of the two (what an encoder would pick);
    ``"binomial"``: log2 C(total, nnz), the information-theoretic minimum (Tan et al. 2025, Eq. 8).
    """
    if nnz < 0 or nnz > total:
        raise ConfigError(f"cannot send {nnz} of {total} values")
    if nnz in (0, total):
        return 0.0
    position = nnz * math.ceil(math.log2(total))
    if coding == "position":
        return float(position)
    if coding == "bitmap":
        return float(total)
    if coding == "min":
        return float(min(position, total))
    if coding == "binomial":
        return (math.lgamma(total + 1) - math.lgamma(nnz + 1) - math.lgamma(total - nnz + 1)) / math.log(2)
    raise ConfigError(f"unknown index coding {coding!r}; choose position, bitmap, min or binomial")


def sparse_bits(nnz: int, total: int, value_bits: int = FLOAT_BITS, coding: str = "min") -> float:
    """Bits of a sparse message: ``nnz`` values plus their positions among ``total``."""
    return dense_bits(nnz, value_bits) + index_bits(nnz, total, coding)


def topk_upload_bits(k, d_base: int, value_bits: int = FLOAT_BITS):
    """Tan et al. 2025, Eq. (9): S(k) = k d_B (log2(1/k) + FPP + 1) bits for a top-k share k
    of d_B values (vectorised over ``k``)."""
    k = np.asarray(k, float)
    return k * d_base * (-np.log2(np.clip(k, 1e-300, None)) + value_bits + 1)
