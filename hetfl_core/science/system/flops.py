"""FLOPs: exact multiply-add counts of a model, dense or under structured (unit) or
unstructured (weight) sparsity.

Convention: a multiply-add is 2 FLOPs; only conv, linear and LSTM matrix products are
counted (activations, pooling, normalisation and bias additions are below 2% for the
models here and are left out, as in the papers). A training step on one sample costs the
forward pass F, the gradient with respect to the weights F, and the gradient with respect
to the layer's input F, except in the first layer, which needs no input gradient.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

__all__ = ["LayerCost", "profile_model", "forward_flops", "training_flops"]

@dataclass(frozen=True)
class LayerCost:
    """Multiply-adds of one layer for one sample, and what feeds it."""

    name: str
    kind: str          # "conv", "linear" or "lstm"
    macs: int          # multiply-adds per sample, forward
    params: int        # trainable scalars of the layer
    in_units: int
    out_units: int
    input_layer: str | None  # the previous unit layer feeding this one, if any


def profile_model(model: nn.Module, in_shape, dtype=torch.float32) -> list[LayerCost]:
    """Per-layer costs of ``model`` on one input of shape ``in_shape`` (forward order).

    Traced with forward hooks on a single sample, so strides, padding and pooling are
    exactly what the model does. For integer inputs (the LSTM) pass ``dtype=torch.long``.
    In a residual network a layer's ``input_layer`` is the unit layer called just before
    it, so structured keep fractions are exact for chains and approximate across skips.
    """
    records: list[LayerCost] = []
    previous: list[str | None] = [None]

    def hook(name):
        def run(module, inputs, output):
            params = sum(p.numel() for p in module.parameters(recurse=False))
            if isinstance(module, nn.Conv2d):
                per_out = module.in_channels // module.groups * math.prod(module.kernel_size)
                macs, n_in, n_out, kind = output[0].numel() * per_out, module.in_channels, module.out_channels, "conv"
            elif isinstance(module, nn.Linear):
                positions = output.numel() // output.shape[-1]
                macs, n_in, n_out, kind = positions * module.in_features * module.out_features, \
                    module.in_features, module.out_features, "linear"
            else:  # nn.LSTM: 4 gates of (input + hidden) x hidden per step and layer
                steps = output[0].shape[1 if module.batch_first else 0]
                h, n_in = module.hidden_size, module.input_size
                macs = steps * 4 * h * ((n_in + h) + (module.num_layers - 1) * 2 * h)
                n_out, kind = h, "lstm"
            records.append(LayerCost(name, kind, int(macs), int(params), n_in, n_out, previous[0]))
            previous[0] = name
        return run

    handles = [m.register_forward_hook(hook(n)) for n, m in model.named_modules()
               if isinstance(m, (nn.Conv2d, nn.Linear, nn.LSTM))]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros((1, *in_shape), dtype=dtype, device=next(model.parameters()).device))
    finally:
        for h in handles:
            h.remove()
        model.train(was_training)
    return records


def _layer_scale(layer: LayerCost, keep: dict | None, density: dict | None) -> float:
    scale = 1.0
    if keep:
        scale *= keep.get(layer.name, 1.0)
        if layer.input_layer is not None:
            scale *= keep.get(layer.input_layer, 1.0)
    if density:
        scale *= density.get(layer.name, 1.0)
    return scale


def forward_flops(costs: list[LayerCost], keep: dict | None = None, density: dict | None = None) -> float:
    """FLOPs of one forward pass on one sample.

    ``keep[name]`` is the fraction of a layer's output units kept (structured sparsity:
    the next layer loses the same fraction of its inputs); ``density[name]`` the fraction
    of a layer's weights kept (unstructured sparsity, charged as an ideal sparse kernel).
    """
    return 2.0 * sum(l.macs * _layer_scale(l, keep, density) for l in costs)


def training_flops(costs: list[LayerCost], n_samples: int, keep: dict | None = None,
                   density: dict | None = None, trainable: set | None = None) -> float:
    """FLOPs of training on ``n_samples`` samples: forward + weight gradient + input gradient.

    Every layer costs its forward pass F. A trainable layer adds its weight gradient (F);
    a layer adds its input gradient (F) when some trainable layer lies before it, since
    the gradient must flow through it. With every layer trainable (``trainable=None``) the
    first layer costs 2F and the others 3F; with only the head trainable, the body costs
    just its forward pass.
    """
    is_trainable = [trainable is None or l.name in trainable for l in costs]
    per_sample = 0.0
    for i, l in enumerate(costs):
        f = 2.0 * l.macs * _layer_scale(l, keep, density)
        per_sample += f * (1 + is_trainable[i] + any(is_trainable[:i]))
    return per_sample * n_samples
