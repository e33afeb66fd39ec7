"""The clients of a round trained together: one vectorised SGD over stacked parameters.

The sequential engine trains a round's clients one after another, each on minibatches of
20-32 samples, which leaves a GPU nearly idle. Where the clients train the same
architecture with plain local SGD (with or without masks, a proximal term, frozen
parameters or a joint loss over masked sub-networks), the same arithmetic can run for all
of them at once: their parameters are stacked along a leading client axis and one
``torch.func.vmap`` of ``torch.func.grad`` over ``functional_call`` computes every
client's gradient in one pass.

Exactness, client by client, against :func:`hetfl_core.science.training.local_sgd`:

* minibatches come from the client's own seeded generator through the same
  :func:`~hetfl_core.science.training.minibatch_indices`, so every client sees exactly the batches
  it would see alone, in the same order;
* a short last batch is padded to the batch size with weight-zero samples, the others
  weighted 1/b, so its gradient is the mean over its own b samples; a client with fewer
  steps than the longest one idles (its update is switched off, momentum included);
* the optimiser is ``torch.optim.SGD``'s rule written out per client (weight decay
  d = g + lambda w, momentum buffer b = beta b + d from a first b = d, w <- w - lr b),
  with masks applied to the gradient before and to the weights after each step, and
  frozen parameters outside it, as ``local_sgd`` keeps them.

How a step runs on the device is a choice that changes no number beyond rounding
(:func:`step_variant`): ``"plain"`` calls the vectorised gradient eagerly, ``"compile"``
runs it through ``torch.compile`` (outside the ``torch.func`` transform, where the
compiler supports it), ``"cudagraphs"`` the same with ``mode="reduce-overhead"`` (CUDA
graphs: a tiny model's many small kernels replayed as one launch), ``"fused"`` compiles the
whole step (the minibatch gather, the gradient and the SGD update: one larger graph whose
update kernels fuse). The training loop
itself makes no host-device copy and no synchronisation: the schedule of every step is
built on the host and moved once per phase, and the losses come back once per phase.

A client's step yields its training as :class:`~hetfl_core.science.training.LocalSGD` phases;
:func:`batched_steps` trains the phases of a round's clients together where each phase
allows it (:attr:`~hetfl_core.science.training.LocalSGD.batchable`), and the sequential engine
runs the same phases one by one (:func:`~hetfl_core.science.training.run_step`), so the two paths
share everything but the SGD loop.
"""
from __future__ import annotations

import inspect
from contextlib import contextmanager
from itertools import accumulate
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from ..science.devices import resolve_device
from ..science.training import LocalResult, LocalSGD, minibatch_indices

__all__ = ["batchable_model", "train_phases", "train_group", "phase_signature", "batched_steps",
           "uses_batched_clients", "VARIANTS", "step_variant"]

#: the ways a batched step can run (:func:`step_variant`)
VARIANTS = ("plain", "compile", "cudagraphs", "fused")
_VARIANT = {"name": "plain", "backend": None}
#: compiled gradient functions, one per group shape and variant (compiling is slow: seconds)
_COMPILED: dict = {}


@contextmanager
def step_variant(name: str, backend: str | None = None):
    """Within the block, batched steps run as ``name`` (one of :data:`VARIANTS`); ``backend``
    is ``torch.compile``'s (default ``"inductor"``; ``"aot_eager"`` traces the same graph
    without generating code, for a machine with no compiler). The numbers are the same up
    to rounding: the benchmark compares the variants' speed and agreement."""
    if name not in VARIANTS:
        raise ValueError(f"unknown batched step variant {name!r}; choose one of: {', '.join(VARIANTS)}")
    saved = dict(_VARIANT)
    _VARIANT.update(name=name, backend=backend)
    try:
        yield
    finally:
        _VARIANT.update(saved)


def uses_batched_clients(config) -> bool:
    """Whether a run trains its rounds' clients as one batch: ``batched_clients``, or where it
    is ``None``, whether the run's device is a CUDA GPU."""
    if config.batched_clients is not None:
        return bool(config.batched_clients)
    return resolve_device(config.device).type == "cuda"


#: module types whose training differs with a padded batch or draws from the global RNG
_UNBATCHABLE = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.RNNBase,
                nn.EmbeddingBag)


def _all_modules(model: nn.Module):
    """The modules of ``model`` and those its modules hold as plain attributes, outside the
    module tree (a composed LSTM runs its recurrence in such an ``nn.LSTM``), and theirs."""
    seen: set[int] = set()
    stack = [model]
    while stack:
        module = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield module
        stack.extend(module.children())
        stack.extend(v for v in vars(module).values() if isinstance(v, nn.Module))


def batchable_model(model: nn.Module) -> bool:
    """Whether ``model`` trains the same per sample in a padded, vectorised batch: no buffers,
    no batch-norm (its statistics would see the padding), no dropout (global RNG), no RNN,
    counting the modules it holds outside its module tree."""
    modules = list(_all_modules(model))
    return not any(True for m in modules for _ in m.buffers(recurse=False)) and \
        not any(isinstance(m, _UNBATCHABLE) for m in modules)


def phase_signature(phase: LocalSGD) -> tuple:
    """Phases with equal signatures train in one vectorised group: the same parameter
    shapes, trained names, masked names, proximal use, sub-network count, penalty use,
    optimiser settings and the method's own ``group``."""
    shapes = tuple((n, tuple(p.shape)) for n, p in phase.model.named_parameters())
    return (type(phase.model), shapes, None if phase.params is None else tuple(phase.params),
            tuple(sorted(phase.masks or {})), phase.prox_center is not None and bool(phase.prox_mu),
            float(phase.prox_mu), tuple(tuple(sorted(m)) for m in phase.sub_masks),
            phase.penalty is not None, phase.drop_last, phase.batch_size, phase.lr, phase.momentum,
            phase.weight_decay, phase.group)


def train_phases(phases: list[LocalSGD]) -> list[LocalResult]:
    """Train every phase (in place), each group of one :func:`phase_signature` as one
    vectorised batch, and return each phase's :class:`LocalResult`."""
    groups: dict[tuple, list[int]] = {}
    for i, phase in enumerate(phases):
        groups.setdefault(phase_signature(phase), []).append(i)
    results = {}
    for members in groups.values():
        results.update(zip(members, train_group([phases[i] for i in members])))
    return [results[i] for i in range(len(phases))]


def _schedule(phases, steps: int, batch_size: int, offsets: list[int]):
    """Every client's minibatches of one phase as [steps, K, B] row indices into the
    concatenated data, with [steps, K, B] sample weights (1/b, 0 for padding) and each
    client's batch sizes [steps, K]."""
    k = len(phases)
    index = torch.zeros(steps, k, batch_size, dtype=torch.long)
    weight = torch.zeros(steps, k, batch_size, dtype=torch.float64)
    sizes = torch.zeros(steps, k, dtype=torch.long)
    for j, phase in enumerate(phases):
        index[:, j, :] = offsets[j]
        for s, idx in enumerate(minibatch_indices(len(phase.client.y_train), phase.steps, batch_size,
                                                  phase.generator, phase.drop_last)):
            b = len(idx)
            index[s, j, :b] = idx + offsets[j]
            weight[s, j, :b] = 1.0 / b
            sizes[s, j] = b
    return index, weight, sizes


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([t.detach() for t in tensors])


def train_group(phases: list[LocalSGD]) -> list[LocalResult]:
    """Train phases of one :func:`phase_signature` together, as the module docstring says;
    write the trained weights back."""
    first = phases[0]
    template = first.model
    for phase in phases:        # as local_sgd: a forward or hook reading ``training`` sees True
        phase.model.train()
    steps = max(ph.steps for ph in phases)
    if steps == 0:      # no client has a batch in this phase (drop_last, all smaller than one)
        return [LocalResult(0.0, 0, 0) for _ in phases]
    device = next(template.parameters()).device
    names = [n for n, _ in template.named_parameters()]
    models = [dict(ph.model.named_parameters()) for ph in phases]
    stacked = {n: _stack([m[n] for m in models]) for n in names}
    x = torch.cat([ph.client.x_train for ph in phases]).to(device)
    y = torch.cat([ph.client.y_train for ph in phases]).to(device)
    offsets = list(accumulate((len(ph.client.y_train) for ph in phases[:-1]), initial=0))
    dtype = next(template.parameters()).dtype
    index, weight, sizes = _schedule(phases, steps, first.batch_size, offsets)
    trained = [n for n in names if first.params is None or n in set(first.params)]
    masks = {n: _stack([ph.masks[n].to(device) for ph in phases]) for n in (first.masks or {})}
    subs = [{n: _stack([ph.sub_masks[j][n].to(device) for ph in phases]) for n in sub}
            for j, sub in enumerate(first.sub_masks)]
    mu = float(first.prox_mu) if first.prox_center is not None else 0.0
    centers = {n: _stack([ph.prox_center[n].to(device) for ph in phases])
               for n in trained if mu and n in first.prox_center}
    losses, correct = _train_phase(template, stacked, trained, masks, subs, centers, mu,
                                   first.penalty, x, y, index.to(device),
                                   weight.to(device=device, dtype=dtype), first.lr,
                                   first.momentum, first.weight_decay)
    sums = (losses.double().cpu() * sizes.double()).sum(0)
    counts = sizes.sum(0)
    correct = correct.double().sum(0).cpu()
    with torch.no_grad():
        for j, m in enumerate(models):
            for n in names:
                m[n].copy_(stacked[n][j])
    return [LocalResult(float(sums[j]) / max(int(counts[j]), 1), int(counts[j]),
                        int((sizes[:, j] > 0).sum()), int(round(float(correct[j]))))
            for j in range(len(phases))]


class _Objective(nn.Module):
    """The model's output and a phase's penalty as one module's forward, so that
    ``functional_call`` swaps the model's parameters for both (the penalty reads them)."""

    def __init__(self, model: nn.Module, penalty: Callable):
        super().__init__()
        self.model, self.penalty = model, penalty

    def forward(self, xb):
        return self.model(xb), self.penalty(self.model)


def _train_phase(template, stacked, trained, masks, subs, centers, mu, penalty, x, y, index,
                 weight, lr, momentum, weight_decay) -> tuple[torch.Tensor, torch.Tensor]:
    """The SGD steps of one phase on the stacked parameters (updated in place in ``stacked``);
    returns each step's per-client data loss and right predictions, both [steps, K]."""
    frozen_names = [n for n in stacked if n not in set(trained)]
    objective = _Objective(template, penalty) if penalty is not None else None

    def client_loss(train, frozen, xb, yb, wb, client_subs, center):
        params = {**frozen, **train}
        if objective is not None:
            renamed = {f"model.{n}": p for n, p in params.items()}
            out, extra = functional_call(objective, renamed, (xb,))
            data_loss = (F.cross_entropy(out, yb, reduction="none") * wb).sum() + extra
        else:
            out = functional_call(template, params, (xb,))
            data_loss = (F.cross_entropy(out, yb, reduction="none") * wb).sum()
        correct = ((out.argmax(1) == yb) & (wb > 0)).sum()
        if client_subs:
            terms = [data_loss]
            for m in client_subs:
                masked = {n: p * m[n] if n in m else p for n, p in params.items()}
                out = functional_call(template, masked, (xb,))
                terms.append((F.cross_entropy(out, yb, reduction="none") * wb).sum())
            data_loss = sum(terms) / len(terms)
        total = data_loss
        if mu:
            total = data_loss + 0.5 * mu * sum(((train[n] - center[n]) ** 2).sum() for n in center)
        return total, (data_loss, correct)

    grads_of = vmap(grad(client_loss, has_aux=True))   # every argument has the clients on dim 0
    key = (type(template), tuple((n, tuple(p.shape)) for n, p in stacked.items()), tuple(trained),
           tuple(sorted(masks)), len(subs), mu, penalty)
    if _VARIANT["name"] in ("compile", "cudagraphs"):
        grads_of = _compiled(grads_of, key)

    def step(stacked, buffers, x, y, idx, wb, masks, subs, centers):
        """One SGD step of every client on rows ``idx`` (updates ``stacked`` and ``buffers``
        in place); returns each client's data loss and right predictions."""
        active = wb.sum(1) > 0          # clients with a batch at this step
        train = {n: stacked[n] for n in trained}
        frozen = {n: stacked[n] for n in frozen_names}
        grads, (data_loss, tally) = grads_of(train, frozen, x[idx], y[idx], wb, subs, centers)
        with torch.no_grad():
            for n in trained:
                p, g = stacked[n], grads[n]
                if n in masks:
                    g = g * masks[n]
                if weight_decay:
                    g = g.add(p, alpha=weight_decay)
                if momentum:
                    buf = buffers.get(n)    # an idle client never resumes, so its buffer may run on
                    buffers[n] = g = g.clone() if buf is None else buf * momentum + g
                new = p.add(g, alpha=-lr)
                if n in masks:
                    new = new * masks[n]
                stacked[n] = _where(active, new, p)
            for n in frozen_names:       # local_sgd masks every masked weight after a step
                if n in masks:
                    stacked[n] = _where(active, stacked[n] * masks[n], stacked[n])
        return data_loss.detach(), tally.detach()

    if _VARIANT["name"] == "fused":     # the gather, gradient and update as one compiled step
        step = _compiled(step, (*key, "step", lr, momentum, weight_decay))
    buffers: dict[str, torch.Tensor] = {}
    step_losses, tallies = [], []
    for s in range(index.shape[0]):
        data_loss, tally = step(stacked, buffers, x, y, index[s], weight[s], masks, subs, centers)
        # a CUDA graph's replay overwrites its outputs: keep copies of what outlives the step
        step_losses.append(data_loss.clone())
        tallies.append(tally.clone())
    return torch.stack(step_losses), torch.stack(tallies)


def _compiled(fn, key: tuple):
    """``fn`` (the vectorised gradient, or a whole step) through ``torch.compile`` as the
    current variant says, once per ``key`` (a group's model type, shapes, trained and masked
    names, sub-network count, proximal weight, loss and optimiser settings: what the
    function's graph depends on besides its arguments)."""
    key = (_VARIANT["name"], _VARIANT["backend"], *key)
    if key not in _COMPILED:
        mode = "reduce-overhead" if _VARIANT["name"] == "cudagraphs" else None
        _COMPILED[key] = torch.compile(fn, backend=_VARIANT["backend"] or "inductor", mode=mode)
    return _COMPILED[key]


def _where(active: torch.Tensor, new: torch.Tensor, old: torch.Tensor) -> torch.Tensor:
    """``new`` for the active clients (leading axis), ``old`` for the idle ones."""
    return torch.where(active.view(-1, *([1] * (new.dim() - 1))), new, old)


def batched_steps(method, jobs: list[tuple]) -> list:
    """The reports of ``[(client, plan, generator), ...]``, in order, each client's
    :meth:`~hetfl_core.science.methods.base.Method.client_step` driven with the others: every step
    runs until it yields a phase; the round's batchable phases train as one batch
    (:func:`train_phases`), each step gets its result and runs on to its next phase, until
    every step has returned its report and the client's new state, which the method then
    keeps (in the clients' order). A phase that is not :attr:`~LocalSGD.batchable`
    (and every phase of a model that :func:`batchable_model` refuses) runs at once, here,
    so a step of such phases runs from start to end before the next client's begins, as
    in the sequential engine."""
    together = batchable_model(method.model)
    reports: list = [None] * len(jobs)
    waiting: dict[int, tuple] = {}

    def advance(i, step, result):
        """Run client ``i``'s step on until it waits on a batchable phase or returns."""
        try:
            phase = step.send(result)
            while not (together and phase.batchable):
                phase = step.send(phase.run())
            waiting[i] = (step, phase)
        except StopIteration as done:
            reports[i] = done.value

    for i, (client, plan, generator) in enumerate(jobs):
        step = method.client_step(client, plan, method.client_state_of(client.client_id), generator)
        if inspect.isgenerator(step):
            advance(i, step, None)
        else:
            reports[i] = step
    while waiting:
        order = sorted(waiting)
        results = train_phases([waiting[i][1] for i in order])
        steps = {i: waiting.pop(i)[0] for i in order}
        for i, result in zip(order, results):
            advance(i, steps[i], result)
    for (client, _, _), (_, state) in zip(jobs, reports):
        method.set_client_state(client.client_id, state)
    return [report for report, _ in reports]
