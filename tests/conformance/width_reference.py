"""Reference rounds of the width methods (HeteroFL, FedRolex, FjORD), written from what the
authors' code computes, independently of ``hetfl_core``'s sub-model code.

Each takes the package's initial global state, its clients' data and the exact minibatch
orders (and, for FjORD, the sampled widths), and returns the global state after the
rounds and the scores. The model is ``cnn`` (SmallCNN) on 8x8 inputs, written out here
as tensor operations on a state dict:

    conv1 3x3 -> [Scaler] -> ReLU -> max-pool 2 -> conv2 3x3 -> [Scaler] -> ReLU ->
    max-pool 2 -> flatten (channel-major, 2x2 per channel) -> fc1 -> [Scaler] -> ReLU ->
    classifier

Semantics (per method):

* HeteroFL: a client of rate r trains the first ceil(r n) units of every hidden layer;
  the Scaler divides each hidden layer's output by r while training; the logits of labels
  absent from the client's training data are set to 0 before the cross-entropy; the
  gradients are clipped to global norm 1 before every SGD step (one optimiser for the
  local epochs); the server sets every entry to the plain mean over the clients holding
  it, a client holding only its own labels' classifier rows; the score is the global
  model (no Scaler) on the whole test set and, label-masked, on every client's test
  split, pooled over samples.
* FedRolex: HeteroFL with, in round t, the units of ``roll(arange(n), t - 1)[:k]``; its
  server weights the biases and the classifier by running update counts (``rolex_counts``).
* FjORD: the client trains the whole global tensors with one optimiser; each batch runs
  through the first ceil(p n) units of every hidden layer (slices), p given per batch; the
  server averages each nested block over the clients whose p_max covers it, weighted by
  their data sizes; the personal score is the global model at the client's p_max.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from hetfl_core.science.methods.base import seeded_generator

HIDDEN = ("conv1", "conv2", "fc1")
PIXELS_PER_CHANNEL = 4          # conv2's 2x2 output map of an 8x8 input, flattened into fc1


def forward(state: dict, x: torch.Tensor, rate: float = 1.0,
            units: dict | None = None) -> torch.Tensor:
    """SmallCNN's logits from ``state``; ``rate`` is the Scaler's divisor, ``units`` the
    number of leading units of each hidden layer to use (all when None)."""
    k = units or {name: state[f"{name}.bias"].shape[0] for name in HIDDEN}
    c1, c2, f1 = k["conv1"], k["conv2"], k["fc1"]
    h = F.conv2d(x, state["conv1.weight"][:c1], state["conv1.bias"][:c1], padding=1) / rate
    h = F.max_pool2d(F.relu(h), 2)
    h = F.conv2d(h, state["conv2.weight"][:c2, :c1], state["conv2.bias"][:c2], padding=1) / rate
    h = F.max_pool2d(F.relu(h), 2).flatten(1)
    fc1 = state["fc1.weight"][:f1, :PIXELS_PER_CHANNEL * c2]
    h = F.linear(h, fc1, state["fc1.bias"][:f1]) / rate
    return F.linear(F.relu(h), state["classifier.weight"][:, :f1], state["classifier.bias"])


def kept(n: int, rate: float) -> int:
    """ceil(rate n), at least one."""
    return max(1, math.ceil(n * rate))


def positions(global_state: dict, unit_index: dict) -> dict:
    """Per tensor, the (rows, columns) of the global tensor a sub-model holds, from each
    hidden layer's kept unit indices (columns None for vectors)."""
    pixels = torch.arange(PIXELS_PER_CHANNEL)
    fc1_cols = (unit_index["conv2"][:, None] * PIXELS_PER_CHANNEL + pixels).reshape(-1)
    inputs = {"conv1": torch.arange(global_state["conv1.weight"].shape[1]),
              "conv2": unit_index["conv1"], "fc1": fc1_cols, "classifier": unit_index["fc1"]}
    rows = {**unit_index, "classifier": torch.arange(global_state["classifier.bias"].shape[0])}
    out = {}
    for layer in (*HIDDEN, "classifier"):
        out[f"{layer}.weight"] = (rows[layer], inputs[layer])
        out[f"{layer}.bias"] = (rows[layer], None)
    return out


def cut(tensor: torch.Tensor, rows, cols) -> torch.Tensor:
    """``tensor[rows][:, cols]`` (all trailing dimensions kept)."""
    t = tensor[rows]
    return t if cols is None else t[:, cols]


def batch_orders(seed: int, round_idx: int, client_id: int, n: int, batch: int, epochs: int,
                 width_draw: bool = False):
    """The client's minibatches in the package's run: one permutation per epoch from the
    client's round generator; with ``width_draw`` FjORD's width-generator seed is drawn
    from it first. Returns (batches, width generator or None)."""
    g = seeded_generator(seed, round_idx, client_id)
    widths = None
    if width_draw:
        widths = torch.Generator().manual_seed(int(torch.randint(2 ** 62, (1,), generator=g)))
    batches = []
    for _ in range(epochs):
        order = torch.randperm(n, generator=g)
        batches += [order[i:i + batch] for i in range(0, n, batch)]
    return batches, widths


def sgd(params, cfg):
    """The local optimiser: SGD with the run's lr, momentum and weight decay."""
    return torch.optim.SGD(params, lr=cfg["lr"], momentum=cfg["momentum"],
                           weight_decay=cfg["weight_decay"])


def present_mask(y_train: torch.Tensor, classes: int) -> torch.Tensor:
    """Boolean vector of the labels in a client's training data."""
    mask = torch.zeros(classes, dtype=torch.bool)
    mask[y_train.unique()] = True
    return mask


def heterofl_rounds(init: dict, clients, widths: dict, participants: list[list[int]], cfg: dict,
                    window=None, rolex_counts: bool = False) -> dict:
    """The authors' HeteroFL (``window`` None: first units) or FedRolex (``window(n, k, t)``:
    the unit indices of round t) for ``len(participants)`` rounds; the global state."""
    state = {k: v.clone() for k, v in init.items()}
    classes = state["classifier.bias"].shape[0]
    update_counts = {k: torch.ones_like(v) for k, v in state.items()}
    for t, ids in enumerate(participants, start=1):
        trained = []
        for k in ids:
            c, rate = clients[k], widths[k]
            sizes = {name: state[f"{name}.bias"].shape[0] for name in HIDDEN}
            units = {name: torch.arange(kept(n, rate)) if window is None
                     else window(n, kept(n, rate), t) for name, n in sizes.items()}
            where = positions(state, units)
            local = {name: cut(state[name], *where[name]).clone().requires_grad_(True)
                     for name in state}
            optimizer = sgd(list(local.values()), cfg)
            present = present_mask(c.y_train, classes)
            batches, _ = batch_orders(cfg["seed"], t, k, len(c.y_train), cfg["batch_size"],
                                      cfg["epochs"])
            for idx in batches:
                logits = forward(local, c.x_train[idx], rate).masked_fill(~present, 0.0)
                loss = F.cross_entropy(logits, c.y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(local.values()), 1.0)
                optimizer.step()
            trained.append((where, {n: v.detach() for n, v in local.items()}, present))
        state = combine(state, trained, update_counts if rolex_counts else None)
    return state


def combine(state: dict, trained: list, update_counts: dict | None) -> dict:
    """Each entry's mean over the clients holding it (a client holds only its labels'
    classifier rows). With ``update_counts`` (FedRolex's server), biases and the
    classifier are weighted by the running count of each entry's updates, which grows
    with every client read before in the same round; hidden weight matrices stay plain."""
    new = {}
    for name, value in state.items():
        total, count = torch.zeros_like(value), torch.zeros_like(value)
        for where, local, present in trained:
            rows, cols = where[name]
            sub = local[name]
            if name.startswith("classifier"):
                rows, sub = rows[present], sub[present]
            at = (rows,) if cols is None else (rows[:, None], cols[None, :])
            plain = update_counts is None or (value.dim() > 1 and not name.startswith("classifier"))
            weight = torch.ones_like(sub) if plain else update_counts[name][at].clone()
            total[at] += weight * sub
            count[at] += weight
            if update_counts is not None:
                update_counts[name][at] += 1
        new[name] = torch.where(count > 0, total / count.clamp_min(1e-12), value)
    return new


def fjord_rounds(init: dict, clients, widths: dict, levels: list[float],
                 participants: list[list[int]], cfg: dict) -> dict:
    """FjORD as the Flower baseline runs it; the global state after the rounds."""
    state = {k: v.clone() for k, v in init.items()}
    for t, ids in enumerate(participants, start=1):
        uploads = []
        for k in ids:
            c, p_max = clients[k], widths[k]
            allowed = [p for p in levels if p <= p_max + 1e-9]
            net = {n: v.clone().requires_grad_(True) for n, v in state.items()}
            optimizer = sgd(list(net.values()), cfg)
            batches, width_gen = batch_orders(cfg["seed"], t, k, len(c.y_train),
                                              cfg["batch_size"], cfg["epochs"], width_draw=True)
            for idx in batches:
                p = allowed[int(torch.randint(len(allowed), (1,), generator=width_gen))]
                units = {name: kept(state[f"{name}.bias"].shape[0], p) for name in HIDDEN}
                loss = F.cross_entropy(forward(net, c.x_train[idx], units=units), c.y_train[idx])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            uploads.append((p_max, len(c.y_train), {n: v.detach() for n, v in net.items()}))
        state = nested_average(state, uploads, levels)
    return state


def nested_average(state: dict, uploads: list, levels: list[float]) -> dict:
    """FjORD's server: for p from the widest level down, the block of the first units at p
    is the data-weighted mean over the clients with p_max >= p (narrower blocks written
    last); blocks nobody trained keep their value."""
    new = {n: v.clone() for n, v in state.items()}
    for p in sorted(levels, reverse=True):
        group = [(n, s) for p_max, n, s in uploads if p_max >= p - 1e-9]
        if not group:
            continue
        units = {name: torch.arange(kept(state[f"{name}.bias"].shape[0], p)) for name in HIDDEN}
        for name, (rows, cols) in positions(state, units).items():
            at = (rows,) if cols is None else (rows[:, None], cols[None, :])
            new[name][at] = sum(n * s[name][at] for n, s in group) / sum(n for n, _ in group)
    return new


@torch.no_grad()
def scores(state: dict, test_x, test_y, clients, personal) -> dict:
    """``acc_global``/``loss_global`` on the whole test set and ``acc_personal``/
    ``loss_personal`` pooled over the clients' test splits, each client's logits from
    ``personal(client, x)``."""
    logits = forward(state, test_x)
    out = {"acc_global": (logits.argmax(1) == test_y).float().mean().item(),
           "loss_global": F.cross_entropy(logits, test_y).item()}
    correct = loss = total = 0.0
    for c in clients:
        z = personal(c, c.x_test)
        correct += (z.argmax(1) == c.y_test).sum().item()
        loss += F.cross_entropy(z, c.y_test, reduction="sum").item()
        total += len(c.y_test)
    out.update(acc_personal=correct / total, loss_personal=loss / total)
    return out


def label_masked(state: dict, classes: int):
    """HeteroFL's local score: the global model, logits of a client's absent labels set to 0."""
    return lambda c, x: forward(state, x).masked_fill(~present_mask(c.y_train, classes), 0.0)


def assert_states_close(ours: dict, ref: dict, atol: float = 1e-5) -> None:
    """Every tensor of ``ours`` within ``atol`` of ``ref``'s."""
    for name in ref:
        diff = (ours[name] - ref[name]).abs().max().item()
        assert diff <= atol, f"{name}: max |difference| {diff:.2e} > {atol}"
