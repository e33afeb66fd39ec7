"""A literal port of the FedLPS authors' released client and server loops
(sunnyxuejj/FedLPS: Models.py ``WeightLayer``/``weight_recover``, Hetero_Client.py
``loss``/``update_weights_leanable``, agg/avg.py), written step by step from that code:

* a visit gives every masked layer a fresh ``WeightLayer`` whose ``w`` (n, 1) holds sorted
  N(0, 1) scores, and builds ``SGD(lr lr_decay^round, momentum, wdecay)`` over the
  network's and those scores' parameters;
* per batch of a ``DataLoader(shuffle=True)`` pass (no ``drop_last``), ``local_ep`` passes:
  zero_grad; ``param.data, bias`` <- the ``WeightLayer``'s forward (rows whose
  sigmoid(w) is strictly above the smallest of the top max(int(rate n), 1) kept, the rest
  set aside in ``bias``); the loss is the cross-entropy plus ``wd`` x ``MSELoss(w,
  sigmoid(sum |param.data| per row))`` (the (n, 1) against (n,) broadcast); backward; the
  weights' gradients times the row mask, ``w``'s times its label mask; step;
  ``cur_params`` <- a copy of the state; ``weight_recover`` adds ``bias`` back;
* the upload is ``cur_params - w_server``, both times the last row mask on masked weights;
  the client keeps ``cur_params`` as its model when its rate is above 1/4
  (``mask_rate_list[2]``);
* the server averages w_server + upload over the clients, unweighted, and adds
  N(0, sd^2) to every parameter.

The inputs the port cannot draw the way the code does (the ``WeightLayer`` scores, the
shuffles, the server noise, the rates) are the package's seeded draws, taken from the
same streams.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.science.models import structured_units
from hetfl_core.science.streams import STREAMS

from .literal_reference import client_stream, loader_epoch


class WeightLayer(nn.Module):
    """Models.py ``WeightLayer``: scores ``w`` of shape (n, 1), sorted descending."""

    def __init__(self, scores: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(scores.clone().view(-1, 1))
        self.sigm = nn.Sigmoid()

    def forward(self, weights, mask_rate):
        topk_values, _ = torch.topk(self.sigm(self.w.clone().detach().flatten()),
                                    max(int(mask_rate * self.w.size(0)), 1))
        threshold = float(np.min(topk_values.cpu().detach().numpy()))
        mask = torch.heaviside(nn.Threshold(threshold, 0)(self.sigm(self.w)), torch.tensor([0.0]))
        mask_label = mask.clone()
        for _ in range(2, weights.dim()):
            mask = mask.unsqueeze(dim=1)
        mask_weight = mask.expand_as(weights)
        bias = weights - weights * mask_weight
        return weights * mask_weight.float(), bias.float(), mask_weight.float(), mask_label.float()


def visit(sim, w_server: dict, k: int, t: int, rate: float, lam: float, epochs: int, lr_decay: float):
    """``update_weights_leanable`` for client k in round t: (upload, cur_params)."""
    config, client = sim.config, sim.data.clients[k]
    local_net = copy.deepcopy(sim.method.model)
    local_net.load_state_dict(w_server)
    masked = [f"{name}.weight" for name, _, _ in structured_units(local_net)]
    draws = seeded_generator(config.seed, STREAMS["code_masks"], t, k)
    mask_layer_dict = nn.ModuleDict()
    for name, _, n in structured_units(local_net):
        mask_layer_dict[f"{name}_weight"] = WeightLayer(torch.sort(torch.randn(n, generator=draws),
                                                                   descending=True).values)
    local_net.train()
    optimizer = torch.optim.SGD(list(mask_layer_dict.parameters()) + list(local_net.parameters()),
                                lr=config.lr * (lr_decay ** (t - 1)), momentum=config.momentum,
                                weight_decay=config.weight_decay)
    params = dict(local_net.named_parameters())
    bias_layer_dict, mask_bool_layer_dict, mask_label = {}, {}, {}
    stream = client_stream(config, t, k)
    for _ in range(epochs):
        for batch in loader_epoch(client.n_train, config.batch_size, stream, drop_last=False):
            optimizer.zero_grad()
            for name in masked:
                layer = mask_layer_dict[name.replace(".", "_")]
                params[name].data, bias_layer_dict[name], mask_bool_layer_dict[name], mask_label[name] = \
                    layer(params[name].data, rate)
            out = local_net(client.x_train[batch])
            loss = nn.CrossEntropyLoss()(out, client.y_train[batch])
            for name in masked:
                p = params[name].data
                loss = loss + lam * nn.MSELoss()(mask_layer_dict[name.replace(".", "_")].w,
                                                 torch.sigmoid(torch.sum(torch.abs(p), list(range(1, p.dim())))))
            loss.backward()
            for name in masked:
                params[name].grad.data = params[name].grad.data * mask_bool_layer_dict[name]
                w = mask_layer_dict[name.replace(".", "_")].w
                if w.grad is not None:
                    w.grad.data = w.grad.data * mask_label[name]
            optimizer.step()
            cur_params = copy.deepcopy(local_net.state_dict())
            for name in masked:                                  # weight_recover
                params[name].data = params[name].data + bias_layer_dict[name]
    upload, server = {}, dict(w_server)
    for key in cur_params:
        if key in masked:
            cur_params[key] = cur_params[key] * mask_bool_layer_dict[key].clone().detach()
            server[key] = server[key] * mask_bool_layer_dict[key].clone().detach()
        upload[key] = cur_params[key] - server[key]
    return upload, cur_params


def fedlps_code_rounds(sim, start: dict, participants, rates: dict, lam: float, noise: float,
                       epochs: int, lr_decay: float):
    """The released code's rounds; ``rates[t][k]`` is client k's rate in round t. Returns
    (global state, the kept models)."""
    w_glob = {n: v.clone() for n, v in start.items()}
    kept = {}
    for t, ids in enumerate(participants, start=1):
        local_states = []
        for k in ids:
            upload, cur_params = visit(sim, w_glob, k, t, rates[t][k], lam, epochs, lr_decay)
            local_states.append({n: w_glob[n] + upload[n] for n in w_glob})
            if rates[t][k] > 0.25:
                kept[k] = cur_params
        average = {n: sum(s[n] for s in local_states) / len(local_states) for n in w_glob}
        draws = seeded_generator(sim.config.seed, STREAMS["server_noise"], t)
        w_glob = {n: average[n] + noise * torch.randn(average[n].shape, generator=draws)
                  for n, _ in sim.method.model.named_parameters()}
    return w_glob, kept
