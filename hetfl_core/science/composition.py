"""Neural composition: layer weights built from a shared basis and coefficient blocks.

Heroes (Yan et al.), Eq. (4): a layer of width p (p input groups of ``I`` channels,
p output groups of ``O`` channels, kernel k) has the weight

    W_p  =  v . u_p,     v in R^{R x I x k x k} (the basis, shared by every client),
                         u_p = p^2 coefficient blocks u^i in R^{O x R},

where block ``i`` contributes ``W^(i) = u^i v`` (an ``O x I x k x k`` piece). A client with
the sorted block list ``S = (s_0 < s_1 < ...)`` places block ``s_j`` at input group
``a = j // p`` and output group ``b = j % p`` of its ``pO x pI`` weight (the paper does not say; this book's choice); the full
model (p = P, S = 0..P^2-1) puts block ``i`` at ``(i // P, i % P)``.

The first layer (fixed input channels) and the classifier (fixed outputs) are not
factorised: the first layer has ``P`` output groups and the classifier ``P``
input groups, and a width-p client gets p of them. Factorised layers carry no bias and
there is no normalisation; the classifier bias is shared.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .errors import ConfigError
from .models import max_pool_2x2

__all__ = ["Selection", "ComposedConv2d", "GroupConv2d", "GroupLinear", "ComposedNet", "ComposedCNN",
           "ComposedResNet", "ComposedLSTM", "COMPOSED_MODELS", "build_composed", "default_rank", "least_trained",
           "subgrid_selection", "width_blocks", "flanc_block_count", "aggregate_blocks"]


def default_rank(base_in: int, base_out: int, kernel: int) -> int:
    """Spec A3: R = O for k x k kernels (k > 1), R = ceil(I / 2) for 1 x 1 (else no compression)."""
    return base_out if kernel > 1 else max(1, math.ceil(base_in / 2))


@dataclass(frozen=True)
class Selection:
    """What a width-``p`` client trains: ``p^2`` coefficient blocks and ``p`` groups of the
    first layer (``head``) and of the classifier (``cls``), each a sorted index tuple."""

    p: int
    blocks: tuple
    head: tuple
    cls: tuple

    @classmethod
    def full(cls, P: int) -> "Selection":
        """The full model: every block at its own grid position."""
        return cls(P, tuple(range(P * P)), tuple(range(P)), tuple(range(P)))


# --------------------------------------------------------------------------- layers

class ComposedConv2d(nn.Module):
    """A conv (or, with k = 1 on 1x1 maps, a linear) layer whose weight is v . u (Eq. 4).

    ``v``: ``(R, I, k, k)``; ``u``: ``(n_blocks, O, R)``, block ``i`` being ``u[i]``.
    """

    def __init__(self, base_in: int, base_out: int, kernel: int, n_blocks: int, rank: int | None = None,
                 stride: int = 1, max_width: int = 4):
        super().__init__()
        self.base_in, self.base_out, self.kernel, self.stride = base_in, base_out, kernel, stride
        self.rank = rank or default_rank(base_in, base_out, kernel)
        fan_in = max_width * base_in * kernel * kernel  # of the full composed layer
        # Var(W) = R Var(v) Var(u) = 2 / fan_in: He initialisation, as the dense twin ``pcnn``
        self.v = nn.Parameter(torch.randn(self.rank, base_in, kernel, kernel) / math.sqrt(self.rank))
        self.u = nn.Parameter(torch.randn(n_blocks, base_out, self.rank) * math.sqrt(2.0 / fan_in))

    def weight(self, blocks, p: int) -> torch.Tensor:
        """W_p of shape ``(pO, pI, k, k)``: block ``blocks[j]`` at input group j // p, output group j % p."""
        idx = torch.as_tensor(blocks, dtype=torch.long)
        pieces = torch.einsum("mor,rikl->moikl", self.u[idx], self.v)     # one u^i v per block
        O, I, k = self.base_out, self.base_in, self.kernel
        grid = pieces.reshape(p, p, O, I, k, k)                            # (a: input, b: output, ...)
        return grid.permute(1, 2, 0, 3, 4, 5).reshape(p * O, p * I, k, k)

    def forward(self, x, sel: Selection):
        return F.conv2d(x, self.weight(sel.blocks, sel.p), stride=self.stride, padding=self.kernel // 2)

    def composition_macs(self, p: int) -> int:
        """Multiply-adds of composing W_p: p^2 products (O x R)(R x I k^2)."""
        return p * p * self.base_out * self.rank * self.base_in * self.kernel ** 2


class GroupConv2d(nn.Module):
    """The first layer: ``P`` output groups ``weight[j]`` of shape ``(O, C_in, k, k)``."""

    def __init__(self, in_channels: int, base_out: int, kernel: int, max_width: int, stride: int = 1):
        super().__init__()
        self.kernel, self.stride = kernel, stride
        std = math.sqrt(2.0 / (in_channels * kernel * kernel))   # He initialisation
        self.weight = nn.Parameter(torch.randn(max_width, base_out, in_channels, kernel, kernel) * std)

    def forward(self, x, groups):
        w = self.weight[torch.as_tensor(groups, dtype=torch.long)]
        return F.conv2d(x, w.flatten(0, 1), stride=self.stride, padding=self.kernel // 2)


class GroupLinear(nn.Module):
    """The classifier: ``P`` input groups ``weight[j]`` of shape ``(C, D)``, a shared bias."""

    def __init__(self, base_in: int, out_features: int, max_width: int):
        super().__init__()
        bound = 1.0 / math.sqrt(max_width * base_in)            # torch's default init
        self.weight = nn.Parameter(torch.empty(max_width, out_features, base_in).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(out_features).uniform_(-bound, bound))

    def forward(self, x, groups):
        w = self.weight[torch.as_tensor(groups, dtype=torch.long)]        # (p, C, D)
        return F.linear(x, w.permute(1, 0, 2).flatten(1), self.bias)


# --------------------------------------------------------------------------- networks

class ComposedNet(nn.Module):
    """A network of composed layers; ``selection`` says which blocks and groups it runs with.

    Its dense twin in ``hetfl_core.science.models`` (:data:`COMPOSED_MODELS`) has the same layer
    shapes: the twin's width-p/P instance has exactly the composed width-p model's FLOPs.
    """

    def __init__(self, max_width: int, n_blocks: int):
        super().__init__()
        self.max_width, self.n_blocks = max_width, n_blocks
        self.selection = Selection.full(max_width)

    def composed_layers(self) -> list[tuple[str, ComposedConv2d]]:
        return [(n, m) for n, m in self.named_modules() if isinstance(m, ComposedConv2d)]

    def block_names(self) -> list[str]:
        """Parameters indexed by block along dim 0 (the coefficients u)."""
        return [f"{n}.u" for n, _ in self.composed_layers()]

    def group_names(self) -> dict[str, str]:
        """Parameters indexed by group along dim 0, and which counter they follow."""
        return {"head.weight": "head", "classifier.weight": "cls"}

    def upload_numel(self, sel: Selection) -> int:
        """Values a width-p client exchanges: |v| + p^2 |u^i| per layer, p head and classifier
        groups, and what every client holds whole (classifier bias, embedding) (Sec. III,
        Eq. 18's E(v) + E(u))."""
        layers = self.composed_layers()
        per_client = {*self.group_names(), *self.block_names(), *(f"{n}.v" for n, _ in layers)}
        shared = sum(p.numel() for n, p in self.named_parameters() if n not in per_client)
        composed = sum(layer.v.numel() + len(sel.blocks) * layer.u[0].numel() for _, layer in layers)
        heads = len(sel.head) * self.head.weight[0].numel()
        return composed + heads + len(sel.cls) * self.classifier.weight[0].numel() + shared

    def composition_macs(self, p: int) -> int:
        """Multiply-adds of composing every factorised weight at width p (once per step)."""
        return sum(layer.composition_macs(p) for _, layer in self.composed_layers())

    def forward(self, x):
        return self.run(x, self.selection)


class ComposedCNN(ComposedNet):
    """Twin of ``models.WidthCNN``: 3x3 convs with ReLU and 2x2 max-pool, global average
    pooling, linear classifier. ``channels`` are the full widths (P x base). With
    ``pooled=True`` the twin of ``models.PooledCNN`` (last map pooled to 2x2, flattened)."""

    def __init__(self, in_shape, num_classes=10, channels=(16, 32, 64), max_width=4, n_blocks=None, rank=None,
                 pooled=False):
        super().__init__(max_width, n_blocks or max_width ** 2)
        base = [c // max_width for c in channels]
        self.pooled = pooled
        self.head = GroupConv2d(in_shape[0], base[0], 3, max_width)
        self.convs = nn.ModuleList(ComposedConv2d(a, b, 3, self.n_blocks, rank, max_width=max_width)
                                   for a, b in zip(base[:-1], base[1:]))
        self.classifier = GroupLinear(base[-1] * (4 if pooled else 1), num_classes, max_width)

    def run(self, x, sel):
        x = F.relu(self.head(x, sel.head))
        for conv in self.convs:
            if min(x.shape[-2:]) >= 2:
                x = max_pool_2x2(x)
            x = F.relu(conv(x, sel))
        x = F.adaptive_avg_pool2d(x, 2).flatten(1) if self.pooled else x.mean(dim=(-2, -1))
        return self.classifier(x, sel.cls)


class _ComposedBlock(nn.Module):
    def __init__(self, base_in, base_out, stride, n_blocks, rank, max_width):
        super().__init__()
        self.conv1 = ComposedConv2d(base_in, base_out, 3, n_blocks, rank, stride, max_width)
        self.conv2 = ComposedConv2d(base_out, base_out, 3, n_blocks, rank, 1, max_width)
        self.shortcut = None
        if stride != 1 or base_in != base_out:
            self.shortcut = ComposedConv2d(base_in, base_out, 1, n_blocks, None, stride, max_width)

    def forward(self, x, sel):
        out = self.conv2(F.relu(self.conv1(x, sel)), sel)
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x, sel)))


class ComposedResNet(ComposedNet):
    """Twin of ``models.ResNet`` (one BasicBlock per stage) without batch norm: a grouped
    stem, composed 3x3 convs and 1x1 shortcuts, global average pooling, grouped classifier."""

    def __init__(self, in_shape, num_classes=10, channels=(16, 32, 64), max_width=4, n_blocks=None, rank=None):
        super().__init__(max_width, n_blocks or max_width ** 2)
        base = [c // max_width for c in channels]
        self.head = GroupConv2d(in_shape[0], base[0], 3, max_width)
        self.layers = nn.ModuleList(_ComposedBlock(c, w, 2 if i > 0 else 1, self.n_blocks, rank, max_width)
                                    for i, (c, w) in enumerate(zip(base[:1] + base[:-1], base)))
        self.classifier = GroupLinear(base[-1], num_classes, max_width)

    def run(self, x, sel):
        x = F.relu(self.head(x, sel.head))
        for block in self.layers:
            x = block(x, sel)
        return self.classifier(x.mean(dim=(-2, -1)), sel.cls)


class ComposedLSTM(ComposedNet):
    """Twin of ``models.CharLSTM`` with one layer (``charlstm-s``): a shared embedding; the
    input weight W_ih in P output groups (the ``head`` groups, each all four gates of H0
    units); the recurrent weight W_hh composed from a basis and blocks (k = 1, each block
    holding the four gates' rows of its output group); a grouped classifier.
    Runs ``nn.LSTM`` through ``torch.func.functional_call`` with the composed weights."""

    def __init__(self, in_shape, num_classes=80, embed=16, hidden=64, max_width=4, n_blocks=None, rank=None):
        super().__init__(max_width, n_blocks or max_width ** 2)
        self.H0 = H0 = hidden // max_width
        self.embedding = nn.Embedding(num_classes, embed)
        self.head = nn.Module()
        self.head.weight = nn.Parameter(torch.randn(max_width, 4 * H0, embed) / math.sqrt(embed))
        self.recurrent = ComposedConv2d(H0, 4 * H0, 1, self.n_blocks, rank, max_width=max_width)
        self.classifier = GroupLinear(H0, num_classes, max_width)
        # the recurrence only, run with composed weights: kept out of the module's parameters
        self.__dict__["lstm"] = nn.LSTM(embed, H0, batch_first=True, bias=False)

    def run(self, x, sel):
        p, H0 = sel.p, self.H0
        gates = lambda w: w.reshape(p, 4, H0, *w.shape[1:]).transpose(0, 1).reshape(4 * p * H0, *w.shape[1:])  # noqa: E731
        w_ih = gates(self.head.weight[torch.as_tensor(sel.head, dtype=torch.long)].flatten(0, 1))
        w_hh = gates(self.recurrent.weight(sel.blocks, p)[..., 0, 0])      # (p 4H0, p H0), rows by group
        self.lstm.hidden_size = p * H0
        out, _ = torch.func.functional_call(self.lstm, {"weight_ih_l0": w_ih, "weight_hh_l0": w_hh},
                                            (self.embedding(x),))
        return self.classifier(out[:, -1], sel.cls)


#: dense model name (``hetfl_core.science.models``) -> its composed twin
COMPOSED_MODELS = {"wcnn": ComposedCNN, "pcnn": partial(ComposedCNN, pooled=True), "resnet": ComposedResNet,
                   "charlstm-s": ComposedLSTM}


def build_composed(name: str, in_shape, num_classes: int, max_width: int = 4, n_blocks: int | None = None):
    """The composed twin of the dense model ``name`` (a key of :data:`COMPOSED_MODELS`)."""
    if name not in COMPOSED_MODELS:
        raise ConfigError(f"neural composition supports models {', '.join(COMPOSED_MODELS)}, not {name!r}")
    return COMPOSED_MODELS[name](tuple(in_shape), num_classes, max_width=max_width, n_blocks=n_blocks)


# --------------------------------------------------------------------------- block choice

def least_trained(counts, m: int) -> tuple:
    """Enhanced composition (Sec. II-B, Fig. 1): the ``m`` entries with the fewest updates,
    ties to the lower index, returned sorted by index."""
    counts = np.asarray(counts)
    order = np.lexsort((np.arange(len(counts)), counts))   # by count, then index
    return tuple(sorted(int(i) for i in order[:m]))


def subgrid_selection(counts, P: int, p: int) -> tuple:
    """Ablation (not in the paper): one group set A (|A| = p) minimising the summed counts of its
    p^2 blocks a P + b, (a, b) in A^2, so the client model is an exact sub-network."""
    counts = np.asarray(counts).reshape(P, P)
    return min(itertools.combinations(range(P), p), key=lambda A: (counts[np.ix_(A, A)].sum(), A))


def flanc_block_count(P: int) -> int:
    """Flanc keeps one coefficient per width p = 1..P: sum_p p^2 blocks."""
    return sum(q * q for q in range(1, P + 1))


def width_blocks(p: int) -> tuple:
    """Flanc (original composition): width p always trains its own coefficient, the p^2
    blocks after those of the narrower widths."""
    offset = flanc_block_count(p - 1)
    return tuple(range(offset, offset + p * p))


# --------------------------------------------------------------------------- aggregation

@torch.no_grad()
def aggregate_blocks(model: ComposedNet, updates: list[tuple[Selection, dict]]) -> dict:
    """Eq. (5): the basis (and every shared tensor) is the plain mean over all participants;
    block i of every coefficient is the mean over the clients that trained it,
    u^{h+1,i} = (1/|N_i|) sum_{n in N_i} u_n^i, and keeps its value if nobody did (a case Eq. 5 leaves open).
    Head and classifier groups are averaged the same way. Returns how many clients
    trained each block (``{"blocks": ..., "head": ..., "cls": ...}``)."""
    params = dict(model.named_parameters())
    blocks, groups = set(model.block_names()), model.group_names()
    trainers = {"blocks": torch.zeros(model.n_blocks), "head": torch.zeros(model.max_width),
                "cls": torch.zeros(model.max_width)}
    for sel, _ in updates:
        for key, count in trainers.items():     # the keys are Selection's fields
            count[list(getattr(sel, key))] += 1
    for name, p in params.items():
        if name in blocks or name in groups:
            key = "blocks" if name in blocks else groups[name]
            total = torch.zeros_like(p)
            for sel, state in updates:
                idx = list(getattr(sel, key))
                total[idx] += state[name][idx]
            count = trainers[key].view(-1, *([1] * (p.dim() - 1)))
            p.copy_(torch.where(count > 0, total / count.clamp_min(1), p))
        else:
            p.copy_(sum(state[name] for _, state in updates) / len(updates))
    return trainers
