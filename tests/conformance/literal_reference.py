"""Literal reference rounds: the reference code's loops as they are written there.

The functional references (:mod:`.pfl_reference`) restate each method's mathematics; the
rounds here restate its *code*: an ``nn.Module`` copied per client, a ``torch.optim.SGD``
built the way the reference code builds it, a ``DataLoader(shuffle=True)``-like pass per
epoch with or without ``drop_last``, and the server's sum in the reference code's order
(PFLlib's ``aggregate_parameters``: a zeroed copy plus w_k n_k / n per client; FedBABU's and
LG-FedAvg's ``main_*.py``: the first client's state plus the others', divided by m). The
federation they run on has unequal clients, a batch size that divides none of them and
one client smaller than a batch (:data:`UNEVEN_SIZES`), so that a misreading shared by the
package and the functional reference (the partial batch, the weighting) shows.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import torch
from torch import nn

from hetfl_core.science.methods.base import seeded_generator

#: total samples per client (a fifth held out): 56, 36, 10 and 72 training samples, so with
#: batch 16 every client has a partial batch and client 2 has nothing but one
UNEVEN_SIZES = [70, 45, 12, 90]


def loader_epoch(n: int, batch_size: int, generator: torch.Generator, drop_last: bool) -> list:
    """One pass of ``DataLoader(shuffle=True, drop_last=drop_last)`` over ``n`` samples: a
    fresh random order, cut into batches; the last partial one dropped if asked. No pass
    at all where ``drop_last`` leaves no batch (the order would never be used)."""
    if drop_last and n < batch_size:
        return []
    order = torch.randperm(n, generator=generator)
    stop = n - n % batch_size if drop_last else n
    return [order[i:i + batch_size] for i in range(0, stop, batch_size)]


def client_stream(config, round_idx: int, client_id: int) -> torch.Generator:
    """The client's shuffling stream in a round (the run's seeded draws)."""
    return seeded_generator(config.seed, round_idx, client_id)


def train_epochs(module: nn.Module, client, batch_size: int, epochs: int, optimizer,
                 generator: torch.Generator, drop_last: bool, extra_loss=None) -> int:
    """``epochs`` passes of the reference code's inner loop: zero_grad, cross-entropy (plus
    ``extra_loss(module)``), backward, step. Returns the steps taken."""
    module.train()
    steps = 0
    for _ in range(epochs):
        for idx in loader_epoch(client.n_train, batch_size, generator, drop_last):
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(module(client.x_train[idx]), client.y_train[idx])
            if extra_loss is not None:
                loss = loss + extra_loss(module)
            loss.backward()
            optimizer.step()
            steps += 1
    return steps


def pfllib_average(global_module: nn.Module, client_modules: list, weights: list, names=None) -> None:
    """PFLlib's ``aggregate_parameters``: the (named) parameters zeroed, then each client's
    added times its weight n_k / n, in upload order."""
    total = float(sum(weights))
    own = dict(global_module.named_parameters())
    chosen = list(own) if names is None else list(names)
    with torch.no_grad():
        for n in chosen:
            own[n].zero_()
        for module, w in zip(client_modules, weights):
            theirs = dict(module.named_parameters())
            for n in chosen:
                own[n] += theirs[n].clone() * (w / total)


def sum_then_divide(states: list[dict], names) -> dict:
    """FedBABU's and LG-FedAvg's server: the first client's state, the others' added key by
    key over ``names``, those keys divided by m."""
    out = copy.deepcopy(states[0])
    for state in states[1:]:
        for k in names:
            out[k] = out[k] + state[k]
    for k in names:
        out[k] = torch.div(out[k], len(states))
    return out


def whole_epochs(epochs: float) -> int:
    """The reference loops run whole epochs only."""
    assert float(epochs).is_integer(), epochs
    return int(epochs)


def max_diff(module_or_params, reference: dict, names=None) -> float:
    """The largest absolute difference over the (named) parameters."""
    mine = dict(module_or_params.named_parameters()) if isinstance(module_or_params, nn.Module) \
        else module_or_params
    keys = list(reference) if names is None else list(names)
    return max(float((mine[k].detach() - reference[k].detach()).abs().max()) for k in keys)


def module_state(module: nn.Module) -> dict:
    """A detached copy of the module's parameters."""
    return {n: p.detach().clone() for n, p in module.named_parameters()}


def steps_per_epoch(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in one ``DataLoader`` pass."""
    return n // batch_size if drop_last else math.ceil(n / batch_size)


def pfllib_split_rounds(sim, start_module: nn.Module, participants, body: list, phases) -> dict:
    """PFLlib's FedPer/FedRep as their code runs: every client holds a model of its own (a
    copy of the initial one); each round the server's body is written into it, each phase
    ``(names, epochs)`` freezes the other parameters and runs ``SGD(lr)`` over ``names``
    for that many passes of the ``drop_last`` loader (one loader, reshuffled per pass), and
    the server sets its body to the zeroed body plus each client's times n_k / n.
    Returns every client's model (server body, own head)."""
    config = sim.config
    glob = copy.deepcopy(start_module)
    own = {k: copy.deepcopy(start_module) for k in range(len(sim.data.clients))}
    for t, ids in enumerate(participants, start=1):
        uploads, weights = [], []
        for k in ids:
            client, local = sim.data.clients[k], own[k]
            with torch.no_grad():
                server = dict(glob.named_parameters())
                for n, p in local.named_parameters():
                    if n in body:
                        p.copy_(server[n])
            stream = client_stream(config, t, k)
            for names, epochs in phases:
                for n, p in local.named_parameters():
                    p.requires_grad_(n in names)
                optimizer = torch.optim.SGD([p for n, p in local.named_parameters() if n in names], lr=config.lr)
                train_epochs(local, client, config.batch_size, whole_epochs(epochs), optimizer, stream, True)
            for p in local.parameters():
                p.requires_grad_(True)
            uploads.append(local)
            weights.append(client.n_train)
        pfllib_average(glob, uploads, weights, names=body)
    server = module_state(glob)
    return {k: {**module_state(m), **{n: server[n] for n in body}} for k, m in own.items()}


def ditto_stream(n: int, batch_size: int, num_iter: int):
    """Ditto's ``gen_batch`` (flearn/utils/model_utils.py) over sample positions: one stream per
    client for the whole run; ``index`` advances by B and, when ``index + B > n``, returns
    to 0 with the data reshuffled under ``np.random.seed(i + 1)``. So a pass yields only
    full batches (the partial one is dropped), and a client smaller than a batch gets all
    its n samples in every iteration."""
    order = np.arange(n)
    index = n
    for i in range(num_iter):
        index += batch_size
        if index + batch_size > n:
            index = 0
            np.random.seed(i + 1)
            np.random.shuffle(order)
        yield torch.as_tensor(order[index:index + batch_size].copy())


def package_batches(config, t: int, k: int, client):
    """The package's batches of client k in round t: E passes of a fresh shuffle, partial
    batch kept (a ``DataLoader(shuffle=True)`` per epoch)."""
    stream = client_stream(config, t, k)
    return [b for _ in range(whole_epochs(config.local_epochs))
            for b in loader_epoch(client.n_train, config.batch_size, stream, drop_last=False)]


def ditto_rounds(sim, start_module: nn.Module, participants, lam: float, batches=package_batches,
                 weighting: str = "samples"):
    """Ditto's ``trainers_MTL/ditto.py`` loop: per sampled client a copy of the global model
    (``w_global_idx``) and its persistent personal model (every v_k starts at w^0); per batch
    first the personal step v <- v - lr (grad F(v) + lam (v - w^t)) written parameter by
    parameter as the code does, then one plain SGD step of the global copy on the same
    batch; the server adds the mean of the diffs w_k - w^t (``weighting="count"``: the
    code's ``simple_average``; ``"samples"``: weighted by n_k) to w^t. ``batches(config, t,
    k, client)`` gives the visit's batches. Returns (global module, personal modules)."""
    config = sim.config
    glob = copy.deepcopy(start_module)
    personal = {k: copy.deepcopy(start_module) for k in range(len(sim.data.clients))}
    for t, ids in enumerate(participants, start=1):
        centre = module_state(glob)
        diffs, weights = [], []
        for k in ids:
            client, v = sim.data.clients[k], personal[k]
            w_global_idx = copy.deepcopy(glob)
            optimizer = torch.optim.SGD(w_global_idx.parameters(), lr=config.lr)
            for idx in batches(config, t, k, client):
                x, y = client.x_train[idx], client.y_train[idx]
                grads = torch.autograd.grad(nn.functional.cross_entropy(v(x), y), list(v.parameters()))
                with torch.no_grad():
                    for (name, p), g in zip(v.named_parameters(), grads):
                        p.copy_(p - config.lr * (g + lam * (p - centre[name])))
                optimizer.zero_grad()
                nn.functional.cross_entropy(w_global_idx(x), y).backward()
                optimizer.step()
            diffs.append({n: p.detach() - centre[n] for n, p in w_global_idx.named_parameters()})
            weights.append(client.n_train if weighting == "samples" else 1.0)
        total = float(sum(weights))
        with torch.no_grad():
            for name, p in glob.named_parameters():
                p += sum(d[name] * (w / total) for d, w in zip(diffs, weights))
    return glob, personal
