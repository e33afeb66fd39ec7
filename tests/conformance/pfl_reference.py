"""Shared pieces of the reference rounds for FedAvg, FedProx and the personalised methods.

Each conformance test writes its method's round from what the method's reference code
computes (plain minibatch SGD written here with ``torch.autograd.grad``, not the
package's optimiser loop) and feeds it the package's own initial weights, the same
federation (one ``partition="given"`` assignment feeds both sides) and the same minibatch
orders. The package's run must then agree to 1e-5 on the global state and the scores.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.func import functional_call

from hetfl_core import RunConfig
from hetfl_core.science.data import load_dataset
from hetfl_core.runtime.engine import build_simulation
from hetfl_core.science.methods.base import seeded_generator

TOL = 1e-5
#: samples per client class and classes per client of the tiny federation
PER_CLASS, CLASSES_PER_CLIENT = 30, 2


def skewed_assignment(clients: int, sizes=None, seed: int = 0) -> list[list[int]]:
    """Client k holds classes 2k and 2k+1 (mod 10) of digits' training pool:
    ``PER_CLASS`` samples of each, or ``sizes[k]`` samples split over the two (a fifth of
    them are held out for testing)."""
    labels = load_dataset("digits").y_train.numpy()
    rng = np.random.default_rng(seed)
    pools = {c: list(rng.permutation(np.flatnonzero(labels == c))) for c in range(10)}
    out = []
    for k in range(clients):
        total = PER_CLASS * CLASSES_PER_CLIENT if sizes is None else sizes[k]
        mine = []
        for j in range(CLASSES_PER_CLIENT):
            c = (CLASSES_PER_CLIENT * k + j) % 10
            take = total // CLASSES_PER_CLIENT + (j < total % CLASSES_PER_CLIENT)
            mine += [int(i) for i in pools[c][:take]]
            pools[c] = pools[c][take:]
        out.append(mine)
    return out


def tiny_config(method: str, clients: int = 4, rounds: int = 2, sizes=None, **changes) -> RunConfig:
    """A digits federation of ``clients`` skewed clients; with equal sizes each has 48
    training samples, so batch 16 divides it (no partial batch on either side)."""
    settings = dict(method=method, dataset="digits", model="cnn", clients=clients, rounds=rounds,
                    partition="given", given_indices=skewed_assignment(clients, sizes),
                    batch_size=16, lr=0.1, local_epochs=1.0, seed=3)
    return RunConfig(**{**settings, **changes})


def build(config: RunConfig):
    """The package's simulation and a copy of its initial parameters (w^0)."""
    sim = build_simulation(config)
    start = {n: p.detach().clone() for n, p in sim.method.model.named_parameters()}
    return sim, start


def batch_orders(generator: torch.Generator, n: int, batch: int, steps: int) -> list[torch.Tensor]:
    """``steps`` minibatches of ``n`` samples: a fresh random order each epoch, drawn from
    ``generator`` (the draws the package's local SGD makes, so both sides see the same
    batches)."""
    out, order, pos = [], torch.randperm(n, generator=generator), 0
    for _ in range(steps):
        if pos >= n:
            order, pos = torch.randperm(n, generator=generator), 0
        out.append(order[pos:pos + batch])
        pos += batch
    return out


def round_orders(config: RunConfig, round_idx: int, client: int, n: int, steps=None) -> list:
    """The batches client ``client`` trains on in round ``round_idx`` (the run's seeded
    stream): ``steps`` of them, one epoch by default."""
    steps = epoch_steps(n, config.batch_size) if steps is None else steps
    generator = seeded_generator(config.seed, round_idx, client)
    return batch_orders(generator, n, config.batch_size, steps)


def epoch_steps(n: int, batch: int, epochs: float = 1.0) -> int:
    """Steps in ``epochs`` passes when ``batch`` divides ``n``."""
    assert n % batch == 0
    return int(epochs * n // batch)


def sgd(model, params: dict, x, y, batches, lr: float, trainable=None, prox=None,
        momentum: float = 0.0) -> dict:
    """Plain minibatch SGD on ``params`` (name -> tensor) over ``batches``: the update
    w <- w - lr (grad + mu (w - c)) with ``prox = (mu, c)``, and heavy-ball momentum
    buf <- momentum buf + g (buf = g at the first step) when ``momentum`` > 0. Only the
    ``trainable`` names move. Returns new tensors."""
    params = {n: p.detach().clone() for n, p in params.items()}
    names = list(params) if trainable is None else list(trainable)
    buffers = {}
    for idx in batches:
        leaves = {n: params[n].requires_grad_(n in names) for n in params}
        loss = F.cross_entropy(functional_call(model, leaves, (x[idx],)), y[idx])
        grads = torch.autograd.grad(loss, [leaves[n] for n in names])
        with torch.no_grad():
            for n, g in zip(names, grads):
                if prox is not None:
                    g = g + prox[0] * (params[n] - prox[1][n])
                if momentum:
                    buffers[n] = g.clone() if n not in buffers else momentum * buffers[n] + g
                    g = buffers[n]
                params[n] = (params[n] - lr * g).detach()
    return {n: p.detach() for n, p in params.items()}


def weighted_mean(states: list[dict], weights: list[float]) -> dict:
    """sum_k w_k s_k / sum_k w_k for every tensor name."""
    total = float(sum(weights))
    return {n: sum(w * s[n] for s, w in zip(states, weights)) / total for n in states[0]}


@torch.no_grad()
def scores(model, pairs) -> tuple[float, float, list[float]]:
    """Pooled accuracy and mean loss of (params, x, y) triples, and each one's accuracy."""
    correct = total = 0
    loss = 0.0
    each = []
    for params, x, y in pairs:
        out = functional_call(model, params, (x,))
        hits = int((out.argmax(1) == y).sum())
        correct, total = correct + hits, total + len(y)
        loss += float(F.cross_entropy(out, y, reduction="sum"))
        each.append(hits / len(y))
    return correct / total, loss / total, each


def assert_state_close(package_params: dict, reference: dict, names=None) -> None:
    """Every (named) tensor within :data:`TOL` of the reference's."""
    for n in (reference if names is None else names):
        diff = float((package_params[n].detach() - reference[n]).abs().max())
        assert diff <= TOL, f"{n} differs by {diff:.2e}"


def assert_scores_close(row: dict, acc: float, loss: float, each, key: str = "personal") -> None:
    """The package's pooled accuracy, loss and per-client accuracies against the reference's."""
    assert abs(row[f"acc_{key}"] - acc) <= TOL and abs(row[f"loss_{key}"] - loss) <= TOL
    if key == "personal":
        assert np.allclose(row["acc_clients"], each, atol=TOL)


def global_scores(model, params: dict, sim) -> tuple[float, float]:
    """The global model's accuracy and loss on the dataset's test set."""
    acc, loss, _ = scores(model, [(params, sim.data.dataset.x_test, sim.data.dataset.y_test)])
    return acc, loss
