"""The models of the five papers, each scalable in width where the papers scale it.

Every model takes ``in_shape`` (C, H, W) and ``num_classes``; ``width`` multiplies the
number of hidden units (neurons, channels) of every hidden layer, which is how HeteroFL,
FedRolex, FjORD and Heroes build sub-models. :func:`structured_units` lists the layers
whose output units the unit-masking methods (FedLPS, FjORD, OFA-FL) switch on and off.
"""
from __future__ import annotations

import math
from functools import partial

import torch
from torch import nn
import torch.nn.functional as F

from .errors import ConfigError

__all__ = ["MLP", "WholeMapConv2d", "LeNet5", "SmallCNN", "WidthCNN", "PooledCNN", "ResNet", "CharLSTM",
           "EmbeddingBagClassifier", "MODELS", "build_model", "structured_units", "count_parameters",
           "kept_units", "max_pool_2x2"]


def kept_units(n_units: int, fraction: float) -> int:
    """Units a layer of ``n_units`` keeps at width (or unit ratio) ``fraction``: ceil(fraction
    n), at least one. Every width and unit-mask method sizes a layer by it."""
    return max(1, int(math.ceil(n_units * fraction)))


_ATEN = torch.ops.aten
_FAST_POOL_MIN_ELEMENTS = 65_536   # below it, the layout copies cost more than they save


class _ChannelsLastMaxPool(torch.autograd.Function):
    """2x2 max-pooling of a contiguous map whose forward pass runs on a channels-last copy and
    whose backward pass is the one autograd gives ``F.max_pool2d``: the same
    ``max_pool2d_with_indices_backward`` on the same input and the same indices."""

    @staticmethod
    def forward(ctx, x):
        pooled, indices = _ATEN.max_pool2d_with_indices(
            x.contiguous(memory_format=torch.channels_last), [2, 2], [2, 2])
        indices = indices.contiguous()
        ctx.save_for_backward(x, indices)
        ctx.mark_non_differentiable(indices)
        return pooled.contiguous()

    @staticmethod
    def backward(ctx, grad):
        x, indices = ctx.saved_tensors
        return _ATEN.max_pool2d_with_indices_backward(grad.contiguous(), x, [2, 2], [2, 2], [0, 0],
                                                      [1, 1], False, indices)


def max_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    """``F.max_pool2d(x, 2)``, the same numbers and the same gradients, faster on the CPU.

    PyTorch's CPU kernel for a contiguous (NCHW) map is scalar; its channels-last kernel is
    vectorised over the channels and takes a quarter to a third of the time on these
    models' maps (LeNet-5, the CNN, the width CNNs; 100k-element maps and up). Both scan a
    window in the same order and keep its first maximum (its last NaN), so the pooled values
    and the indices of the chosen elements are equal bit for bit; the copy back to the
    contiguous layout lets the next layer see the layout it always saw. Without autograd the
    channels-last copy is pooled directly. With autograd the gradient goes through
    ``max_pool2d_with_indices_backward`` on the contiguous input and those indices, exactly
    as ``F.max_pool2d``'s backward does, so every stored history is unchanged. A map smaller
    than 65,536 elements, one on another device or inside ``torch.func`` keeps
    ``F.max_pool2d`` itself."""
    if (x.dim() != 4 or x.device.type != "cpu" or x.numel() < _FAST_POOL_MIN_ELEMENTS
            or torch._C._functorch.is_functorch_wrapped_tensor(x)):
        return F.max_pool2d(x, 2)
    if not torch.is_grad_enabled() or not x.requires_grad:
        return F.max_pool2d(x.contiguous(memory_format=torch.channels_last), 2).contiguous()
    return _ChannelsLastMaxPool.apply(x.contiguous())


class MLP(nn.Module):
    """Fully connected network; default hidden sizes (200, 200) are FedAvg's "2NN"."""

    def __init__(self, in_shape, num_classes=10, hidden=(200, 200), width=1.0):
        super().__init__()
        sizes = [math.prod(in_shape)] + [kept_units(h, width) for h in hidden]
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.classifier = nn.Linear(sizes[-1], num_classes)

    def forward(self, x):
        x = x.flatten(1)
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.classifier(x)


class WholeMapConv2d(nn.Conv2d):
    """A convolution whose kernel may cover its whole unpadded input map, as LeNet-5's third
    layer does (5x5 over 5x5): one output position, so it is computed as the linear layer it
    is over the flattened map (faster on a CPU), with the same weights, output shape and,
    for :func:`hetfl_core.science.system.profile_model`, the same cost."""

    def forward(self, x):
        if tuple(x.shape[-2:]) == self.kernel_size and self.padding == (0, 0) and self.groups == 1:
            return F.linear(x.flatten(1), self.weight.flatten(1), self.bias)[:, :, None, None]
        return super().forward(x)


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al., 1998) as papers 003 and 004 count it.

    conv1 C->6 5x5 (padding 2 on 28x28 inputs), pool, conv2 6->16 5x5, pool,
    conv3 16->120 5x5, fc1 120->84, fc2 84->10: 61,706 parameters on one input channel,
    62,006 on three.
    """

    def __init__(self, in_shape=(1, 28, 28), num_classes=10, width=1.0):
        super().__init__()
        c, h, _ = in_shape
        if h < 28:
            raise ConfigError(f"LeNet-5 needs inputs of at least 28x28, got {h}x{h}: use --model cnn")
        pad = 2 if h == 28 else 0
        c1, c2, c3, f1 = (kept_units(n, width) for n in (6, 16, 120, 84))
        self.conv1 = nn.Conv2d(c, c1, 5, padding=pad)
        self.conv2 = nn.Conv2d(c1, c2, 5)
        self.conv3 = WholeMapConv2d(c2, c3, 5)   # 5x5 over the 5x5 map of 28x28 inputs
        self.fc1 = nn.Linear(c3, f1)
        self.classifier = nn.Linear(f1, num_classes)

    def forward(self, x):
        x = max_pool_2x2(F.relu(self.conv1(x)))
        x = max_pool_2x2(F.relu(self.conv2(x)))
        x = F.relu(self.conv3(x)).flatten(1)
        return self.classifier(F.relu(self.fc1(x)))


class WidthCNN(nn.Module):
    """Conv blocks (3x3 conv, ReLU, 2x2 max-pool) then global average pooling and a linear head.

    HeteroFL's CNN is ``channels=(64, 128, 256, 512)``; the CPU default is
    ``(16, 32, 64)``. No normalisation layers, so masked or width-sliced sub-networks share
    no running statistics.
    """

    def __init__(self, in_shape, num_classes=10, channels=(16, 32, 64), width=1.0):
        super().__init__()
        sizes = [in_shape[0]] + [kept_units(ch, width) for ch in channels]
        self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1) for a, b in zip(sizes[:-1], sizes[1:]))
        self.classifier = nn.Linear(sizes[-1], num_classes)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i < len(self.convs) - 1 and min(x.shape[-2:]) >= 2:
                x = max_pool_2x2(x)
        return self.classifier(self._pool(x))

    def _pool(self, x):
        return x.mean(dim=(-2, -1))


class PooledCNN(WidthCNN):
    """WidthCNN with its last feature map average-pooled to 2x2 and flattened into the
    classifier instead of globally pooled, and He-initialised convolutions (Heroes' CNN,
    the CPU plan): without normalisation layers it learns much faster than WidthCNN."""

    def __init__(self, in_shape, num_classes=10, channels=(16, 32, 64), width=1.0):
        super().__init__(in_shape, num_classes, channels, width)
        self.classifier = nn.Linear(4 * self.classifier.in_features, num_classes)
        for conv in self.convs:
            nn.init.kaiming_normal_(conv.weight, nonlinearity="relu")
            nn.init.zeros_(conv.bias)

    def _pool(self, x):
        return F.adaptive_avg_pool2d(x, 2).flatten(1)


class SmallCNN(nn.Module):
    """Two 5x5 conv layers and two linear layers (FedAvg's "CNN", FedLPS's MNIST model).

    Default ``channels=(10, 20), hidden=50`` is the FedLPS code's MNIST CNN.
    """

    def __init__(self, in_shape, num_classes=10, channels=(10, 20), hidden=50, width=1.0):
        super().__init__()
        c, h, w = in_shape
        c1, c2, f1 = (kept_units(n, width) for n in (*channels, hidden))
        k, pad = (5, 0) if h >= 20 else (3, 1)
        self.conv1 = nn.Conv2d(c, c1, k, padding=pad)
        self.conv2 = nn.Conv2d(c1, c2, k, padding=pad)
        with torch.no_grad():
            flat = self._features(torch.zeros(1, c, h, w)).shape[1]
        self.fc1 = nn.Linear(flat, f1)
        self.classifier = nn.Linear(f1, num_classes)

    def _features(self, x):
        x = max_pool_2x2(F.relu(self.conv1(x)))
        return max_pool_2x2(F.relu(self.conv2(x))).flatten(1)

    def forward(self, x):
        return self.classifier(F.relu(self.fc1(self._features(x))))


class _BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out, track_running_stats=False)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out, track_running_stats=False)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                          nn.BatchNorm2d(c_out, track_running_stats=False))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    """A small pre-activation-free ResNet: stem, ``blocks`` BasicBlocks per stage, GAP, linear.

    Batch norm uses batch statistics only (HeteroFL's "static BN"), so sub-models need no
    shared running averages. Default ``channels=(16, 32, 64)``, one block per stage.
    """

    def __init__(self, in_shape, num_classes=10, channels=(16, 32, 64), blocks=1, width=1.0):
        super().__init__()
        widths = [kept_units(c, width) for c in channels]
        self.stem = nn.Conv2d(in_shape[0], widths[0], 3, 1, 1, bias=False)
        self.stem_bn = nn.BatchNorm2d(widths[0], track_running_stats=False)
        layers, c = [], widths[0]
        for i, w in enumerate(widths):
            for b in range(blocks):
                layers.append(_BasicBlock(c, w, 2 if (i > 0 and b == 0) else 1))
                c = w
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem(x)))
        return self.classifier(self.layers(x).mean(dim=(-2, -1)))


class CharLSTM(nn.Module):
    """Character-level LSTM for next-character prediction (LEAF's Shakespeare model shape).

    Input: ``(batch, seq)`` int64 character ids; output: logits of the next character.
    """

    def __init__(self, in_shape=(80,), num_classes=80, embed=8, hidden=256, layers=2, width=1.0):
        super().__init__()
        h = kept_units(hidden, width)
        self.embedding = nn.Embedding(num_classes, embed)
        self.lstm = nn.LSTM(embed, h, num_layers=layers, batch_first=True)
        self.classifier = nn.Linear(h, num_classes)

    def forward(self, x):
        out, _ = self.lstm(self.embedding(x))
        return self.classifier(out[:, -1])


class EmbeddingBagClassifier(nn.Module):
    """A fastText-style text classifier: the sum of the token embeddings (``[PAD]``, id 0,
    ignored), one hidden layer, the classifier. Input ``(batch, seq)`` int64 token ids.

    The SRP-pFed paper's AG News model is fastText (an embedding bag and a linear layer);
    the hidden layer gives the personalised splits (body and head) a body to share.
    Embeddings start small (sd 0.1): with plain SGD a summed bag of them learned the
    verse-topic task faster than a mean of unit-variance ones (measured: 66% against 58%
    of test verses after four epochs on 5,000 verses).
    """

    def __init__(self, in_shape=(32,), num_classes=4, vocab=4000, embed=64, hidden=64, width=1.0):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab, kept_units(embed, width), mode="sum", padding_idx=0)
        with torch.no_grad():
            self.embedding.weight.normal_(0.0, 0.1)
            self.embedding.weight[0] = 0.0
        self.fc1 = nn.Linear(kept_units(embed, width), kept_units(hidden, width))
        self.classifier = nn.Linear(kept_units(hidden, width), num_classes)

    def forward(self, x):
        return self.classifier(F.relu(self.fc1(self.embedding(x))))


def _lora_transformer(*args, **kwargs) -> nn.Module:
    """:class:`hetfl_core.science.transformer.LoRATransformer` (imported on use: it loads a pre-trained encoder)."""
    from .transformer import LoRATransformer

    return LoRATransformer(*args, **kwargs)


MODELS = {
    "mlp": MLP,
    "lenet5": LeNet5,
    "cnn": SmallCNN,
    "wcnn": WidthCNN,
    "pcnn": PooledCNN,
    "resnet": ResNet,
    "charlstm": CharLSTM,
    "charlstm-s": partial(CharLSTM, embed=16, hidden=64, layers=1),   # CPU runs, Heroes' Fig. 9 model
    "embbag": EmbeddingBagClassifier,
    "lora-transformer": _lora_transformer,
}


def build_model(name: str, in_shape, num_classes: int, width: float = 1.0, **kwargs) -> nn.Module:
    """Instantiate a registered model by name, e.g. ``build_model("lenet5", (1, 28, 28), 10)``."""
    if name not in MODELS:
        raise ConfigError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    if not 0 < width <= 1:
        raise ConfigError(f"width must be in (0, 1], got {width}")
    return MODELS[name](tuple(in_shape), num_classes, width=width, **kwargs)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable scalars."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def structured_units(model: nn.Module, include_output: bool = False) -> list[tuple[str, nn.Module, int]]:
    """The layers whose output units (conv channels, linear neurons, LSTM hidden units) can be masked.

    Returns ``(name, module, n_units)`` in forward order. The output layer is left out by
    default: its units are the classes (FedLPS masks every layer but the output layer).
    """
    units = {nn.Conv2d: "out_channels", nn.Linear: "out_features", nn.LSTM: "hidden_size"}
    found = [(name, module, getattr(module, attr)) for name, module in model.named_modules()
             for kind, attr in units.items() if isinstance(module, kind)]
    if not include_output and found and isinstance(found[-1][1], nn.Linear):
        found = found[:-1]
    return found
