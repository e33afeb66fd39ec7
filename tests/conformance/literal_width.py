"""Literal reference rounds of the width methods: the authors' code's loops as written there.

:mod:`.width_reference` restates HeteroFL's, FedRolex's and FjORD's rounds as tensor
operations on a state dict; the rounds here restate their *code*:

* HeteroFL (diaoenmao/HeteroFL-...-Heterogeneous-Clients, src/fed.py ``Federation``,
  src/models/conv.py, src/modules/modules.py ``Scaler``, src/train_classifier_fed.py
  ``Local.train``): ``split_model`` walks the global state's keys in order, a weight
  matrix's input indices are the previous layer's output indices and its output indices
  the first ceil(rate n) (all rows for the output layer), a bias takes its weight's output
  indices; ``distribute`` copies ``v[torch.meshgrid(idx)]``; each client builds the model
  at its rate, loads that state, and runs ``SGD(lr, momentum, weight_decay)`` for E passes
  of a shuffling loader without ``drop_last``: zero_grad, label-masked cross-entropy,
  backward, ``clip_grad_norm_(parameters, 1)``, step; ``combine`` sums the clients'
  tensors into a zeroed ``tmp_v`` with a ``count`` per entry (the output layer only on
  the client's ``label_split`` rows) and writes ``tmp_v / count`` where ``count > 0``.
* FedRolex (AIoT-MLSys-Lab/FedRolex, resnet_server.py ``split_model``): the same, with the
  output indices ``torch.roll(torch.arange(n), rounds % n)[:k]`` (``rounds`` counts the
  completed rounds), left unsorted.
* FjORD (adap/flower baselines/fjord, models.py ``train``, od/layers, strategy.py
  ``fjord_average``): one ``SGD`` over the whole network's parameters per visit; each
  batch's forward slices ``weight[:ceil(p n), :in]``; the server writes, for p from the
  widest down, the block at p as sum n_k w_k / sum n_k over the clients with p_max >= p.

The one adaptation: the model is the package's ``SmallCNN`` (two convolutions, one hidden
linear layer, a classifier; channel-major flatten of a 2x2 map into ``fc1``), so ``fc1``'s
input indices are each kept ``conv2`` channel's four flattened positions.
"""
from __future__ import annotations

import copy
import math
from collections import OrderedDict

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from .literal_reference import client_stream, loader_epoch

PIXELS = 4      # conv2's 2x2 map of an 8x8 input per channel, flattened into fc1


class Scaler(nn.Module):
    """modules.py ``Scaler``: the input divided by the rate in training, unchanged in tests."""

    def __init__(self, rate: float):
        super().__init__()
        self.rate = rate

    def forward(self, x):
        return x / self.rate if self.training else x


class Conv(nn.Module):
    """conv.py's ``Conv`` at ``model_rate`` for SmallCNN's layers (norm 'none'): conv ->
    Scaler -> ReLU -> max-pool per block, then fc1 -> Scaler -> ReLU and the classifier;
    with ``label_split`` set, the logits outside it are set to 0 (conv.py's ``mask``)."""

    def __init__(self, sizes: dict, model_rate: float, in_channels: int, classes: int, scale: bool = True):
        super().__init__()
        c1, c2, f1 = (int(np.ceil(model_rate * sizes[n])) for n in ("conv1", "conv2", "fc1"))
        self.conv1 = nn.Conv2d(in_channels, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc1 = nn.Linear(PIXELS * c2, f1)
        self.classifier = nn.Linear(f1, classes)
        self.scaler = Scaler(model_rate if scale else 1.0)
        self.label_split = None

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.scaler(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.scaler(self.conv2(x))), 2).flatten(1)
        out = self.classifier(F.relu(self.scaler(self.fc1(x))))
        if self.label_split is not None:
            label_mask = torch.zeros(out.shape[1], device=out.device)
            label_mask[self.label_split] = 1
            out = out.masked_fill(label_mask == 0, 0)
        return out


def hidden_sizes(global_parameters: dict) -> dict:
    """Units of every hidden layer of the global model."""
    return {n: global_parameters[f"{n}.bias"].shape[0] for n in ("conv1", "conv2", "fc1")}


def first_outputs(k: str, output_size: int, rate: float, rounds: int) -> torch.Tensor:
    """fed.py: ``torch.arange(output_size)[:ceil(output_size * rate)]``."""
    return torch.arange(output_size)[:int(np.ceil(output_size * rate))]


def rolled_outputs(k: str, output_size: int, rate: float, rounds: int) -> torch.Tensor:
    """resnet_server.py: ``torch.roll(torch.arange(output_size), rounds % output_size)[:k]``."""
    return torch.roll(torch.arange(output_size), rounds % output_size)[:int(np.ceil(output_size * rate))]


def split_model(global_parameters: dict, rate: float, rounds: int, outputs=first_outputs) -> OrderedDict:
    """fed.py ``split_model`` ('conv') for one client: per key, (output, input) indices of a
    weight matrix or the indices of a bias; the output layer keeps every row."""
    output_weight_name = [k for k in global_parameters if "weight" in k][-1]
    idx, idx_i = OrderedDict(), None
    for k, v in global_parameters.items():
        if k.endswith("weight"):
            input_size, output_size = v.size(1), v.size(0)
            if idx_i is None:
                idx_i = torch.arange(input_size)
            input_idx = idx_i
            if k.startswith("fc1"):     # the adaptation: each kept channel's flattened pixels
                input_idx = (idx_i[:, None] * PIXELS + torch.arange(PIXELS)).reshape(-1)
            if k == output_weight_name:
                output_idx = torch.arange(output_size)
            else:
                output_idx = outputs(k, output_size, rate, rounds)
            idx[k] = (output_idx, input_idx)
            idx_i = output_idx
        else:
            idx[k] = idx_i
    return idx


def grid(index):
    """``torch.meshgrid`` of a weight's (rows, columns), a bias's rows as they are."""
    return torch.meshgrid(*index, indexing="ij") if isinstance(index, tuple) else index


def distribute(global_parameters: dict, param_idx: OrderedDict) -> OrderedDict:
    """fed.py ``distribute``: each key's sub-tensor, deep-copied."""
    return OrderedDict((k, copy.deepcopy(v[grid(param_idx[k])])) for k, v in global_parameters.items())


def combine(global_parameters: dict, local_parameters: list, param_idx: list, label_split: list) -> None:
    """fed.py ``combine`` ('conv'), in place: per key a zeroed ``tmp_v`` and ``count``, each
    client's tensor added where it sits (the output layer's rows only for its labels), then
    ``tmp_v / count`` written where ``count > 0``."""
    output_weight_name = [k for k in global_parameters if "weight" in k][-1]
    output_bias_name = [k for k in global_parameters if "bias" in k][-1]
    for k, v in global_parameters.items():
        count = v.new_zeros(v.size(), dtype=torch.float32)
        tmp_v = v.new_zeros(v.size(), dtype=torch.float32)
        for m in range(len(local_parameters)):
            index, local = param_idx[m][k], local_parameters[m][k]
            if k == output_weight_name:
                index = (index[0][label_split[m]], index[1])
                local = local[label_split[m]]
            elif k == output_bias_name:
                index, local = index[label_split[m]], local[label_split[m]]
            tmp_v[grid(index)] += local
            count[grid(index)] += 1
        tmp_v[count > 0] = tmp_v[count > 0].div_(count[count > 0])
        v[count > 0] = tmp_v[count > 0].to(v.dtype)


def heterofl_rounds(sim, start: dict, participants, outputs=first_outputs, options: dict | None = None) -> dict:
    """train_classifier_fed.py's rounds over ``participants``: per round ``distribute``, every
    client's ``Local.train`` in turn, then ``combine``. ``options`` (the package's names)
    switch the mask, Scaler and clipping off. Returns the global parameters."""
    options = options or {}
    config, data = sim.config, sim.data
    global_parameters = OrderedDict((k, v.clone()) for k, v in start.items())
    sizes = hidden_sizes(global_parameters)
    channels = global_parameters["conv1.weight"].shape[1]
    for t, user_idx in enumerate(participants, start=1):
        local_parameters, param_idx, label_split = [], [], []
        for m in user_idx:
            rate, client = sim.method.widths[m], data.clients[m]
            idx = split_model(global_parameters, rate, t - 1, outputs)
            model = Conv(sizes, rate, channels, data.num_classes, options.get("scaler", True))
            model.load_state_dict(distribute(global_parameters, idx))
            split = torch.unique(client.y_train)
            if options.get("label_mask", True):
                model.label_split = split
            model.train(True)
            optimizer = torch.optim.SGD(model.parameters(), lr=config.lr, momentum=config.momentum,
                                        weight_decay=config.weight_decay)
            stream = client_stream(config, t, m)
            for _ in range(int(config.local_epochs)):
                for batch in loader_epoch(client.n_train, config.batch_size, stream, drop_last=False):
                    optimizer.zero_grad()
                    loss = F.cross_entropy(model(client.x_train[batch]), client.y_train[batch])
                    loss.backward()
                    if options.get("clip_norm", 1.0) is not None:
                        torch.nn.utils.clip_grad_norm_(model.parameters(), 1)
                    optimizer.step()
            local_parameters.append(model.state_dict())
            param_idx.append(idx)
            label_split.append(split if options.get("label_mask", True) else torch.arange(data.num_classes))
        combine(global_parameters, local_parameters, param_idx, label_split)
    return dict(global_parameters)


class ODConv(nn.Module):
    """FjORD's od/layers for SmallCNN: every layer holds the full weights and its forward
    slices ``weight[:ceil(p n), :in]`` at the batch's p (``self.p``; None: all units)."""

    def __init__(self, global_parameters: dict):
        super().__init__()
        self.w = nn.ParameterDict({k.replace(".", "_"): nn.Parameter(v.clone())
                                   for k, v in global_parameters.items()})
        self.sizes = hidden_sizes(global_parameters)
        self.p = None

    def units(self, name: str) -> int:
        """Output units of a hidden layer at the current p."""
        n = self.sizes[name]
        return n if self.p is None else int(math.ceil(self.p * n))

    def forward(self, x):
        w = self.w
        c1, c2, f1 = self.units("conv1"), self.units("conv2"), self.units("fc1")
        x = F.max_pool2d(F.relu(F.conv2d(x, w["conv1_weight"][:c1], w["conv1_bias"][:c1], padding=1)), 2)
        x = F.conv2d(x, w["conv2_weight"][:c2, :c1], w["conv2_bias"][:c2], padding=1)
        x = F.max_pool2d(F.relu(x), 2).flatten(1)
        x = F.relu(F.linear(x, w["fc1_weight"][:f1, :PIXELS * c2], w["fc1_bias"][:f1]))
        return F.linear(x, w["classifier_weight"][:, :f1], w["classifier_bias"])


def fjord_average(global_parameters: dict, results: list, levels: list) -> None:
    """strategy.py's ``aggregate`` + ``fjord_average``, in place: for p from the widest level
    down, the block of the first units at p is sum n_k w_k / sum n_k over the clients with
    p_max >= p (narrower blocks written later, so they win)."""
    sizes = hidden_sizes(global_parameters)
    for p in sorted(levels, reverse=True):
        group = [(n, params) for p_max, n, params in results if p_max >= p - 1e-9]
        if not group:
            continue
        c1, c2, f1 = (int(math.ceil(p * sizes[n])) for n in ("conv1", "conv2", "fc1"))
        blocks = {"conv1.weight": (slice(0, c1),), "conv1.bias": (slice(0, c1),),
                  "conv2.weight": (slice(0, c2), slice(0, c1)), "conv2.bias": (slice(0, c2),),
                  "fc1.weight": (slice(0, f1), slice(0, PIXELS * c2)), "fc1.bias": (slice(0, f1),),
                  "classifier.weight": (slice(None), slice(0, f1)), "classifier.bias": (slice(None),)}
        total = sum(n for n, _ in group)
        for k, at in blocks.items():
            global_parameters[k][at] = sum(params[k][at] * n for n, params in group) / total


def fjord_rounds(sim, start: dict, participants) -> dict:
    """The Flower baseline's rounds: per client the global network, one SGD over all of its
    parameters, a p drawn per batch among the levels <= p_max, then ``fjord_average``."""
    config, method = sim.config, sim.method
    global_parameters = {k: v.clone() for k, v in start.items()}
    for t, ids in enumerate(participants, start=1):
        results = []
        for k in ids:
            client, p_max = sim.data.clients[k], method.widths[k]
            allowed = [p for p in method.levels if p <= p_max + 1e-9]
            net = ODConv(global_parameters)
            optimizer = torch.optim.SGD(net.parameters(), lr=config.lr, momentum=config.momentum,
                                        weight_decay=config.weight_decay)
            stream = client_stream(config, t, k)
            sampler = torch.Generator().manual_seed(int(torch.randint(2 ** 62, (1,), generator=stream)))
            net.train()
            for _ in range(int(config.local_epochs)):
                for batch in loader_epoch(client.n_train, config.batch_size, stream, drop_last=False):
                    net.p = allowed[int(torch.randint(len(allowed), (1,), generator=sampler))]
                    optimizer.zero_grad()
                    F.cross_entropy(net(client.x_train[batch]), client.y_train[batch]).backward()
                    optimizer.step()
            params = {name.replace("_", ".", 1): v.detach().clone() for name, v in net.w.items()}
            results.append((p_max, client.n_train, params))
        fjord_average(global_parameters, results, method.levels)
    return global_parameters
