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

import torch
from torch import nn

from hetfl_core.methods.base import seeded_generator

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
