"""The clients of a round trained together: one vectorised SGD over stacked parameters.

The sequential engine trains a round's clients one after another, each on minibatches of
20-32 samples, which leaves a GPU nearly idle. Where the clients train the same
architecture with plain local SGD (with or without masks, a proximal term, frozen
parameters or a joint loss over masked sub-networks), the same arithmetic can run for all
of them at once: their parameters are stacked along a leading client axis and one
``torch.func.vmap`` of ``torch.func.grad`` over ``functional_call`` computes every
client's gradient in one pass.

Exactness, client by client, against :func:`hetfl_core.training.local_sgd`:

* minibatches come from the client's own seeded generator through the same
  :func:`~hetfl_core.training.minibatch_indices`, so every client sees exactly the batches
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

A method opts in per class (``batchable = True``, not inherited) and describes a client's
local work as a :class:`ClientJob`; :func:`run_job` runs the same job sequentially, so the
two paths share everything but the SGD loop.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from .devices import resolve_device
from .lottery import joint_loss
from .training import LocalResult, local_sgd, minibatch_indices

__all__ = ["Phase", "ClientJob", "run_job", "run_job_sgd", "batchable_model", "train_jobs",
           "train_group", "job_signature", "batched_updates", "uses_batched_clients", "VARIANTS",
           "step_variant"]

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


@dataclass
class Phase:
    """One call of local SGD in a client's update.

    ``params``: the trained parameter names (``None``: all); ``masks``: name -> 0/1 tensor
    kept at zero (gradient and weight); ``prox_center``/``prox_mu``: FedProx's
    (mu/2)||w - w_c||^2 over the trained names in the centre; ``sub_masks``: the masks of
    smaller sub-networks whose cross-entropies are averaged with the model's own (a joint
    loss, as OFA-FL's Alg. 4); ``drop_last``: each epoch's partial batch left out (a
    ``DataLoader(drop_last=True)``, :func:`~hetfl_core.training.minibatch_indices`).
    """

    steps: int
    params: list[str] | None = None
    masks: dict | None = None
    prox_center: dict | None = None
    prox_mu: float = 0.0
    sub_masks: list = field(default_factory=list)
    #: a method's own loss: ``loss(model, xb, yb)`` for ``local_sgd``, and the same loss for
    #: the batched trainer, ``batched_loss(model, xb, yb, wb) -> (loss, tally)`` with
    #: per-sample weights ``wb`` (1/b, 0 for padding) and a number that is summed over the
    #: steps and handed to ``tally(total, samples)`` (e.g. correct predictions)
    loss: Callable | None = None
    batched_loss: Callable | None = None
    tally: Callable | None = None
    drop_last: bool = False

    def loss_fn(self):
        """The ``loss_fn`` that ``local_sgd`` takes for this phase (``None``: cross-entropy)."""
        if self.loss is not None or not self.sub_masks:
            return self.loss
        return lambda model, xb, yb: joint_loss(model, self.sub_masks, xb, yb)


@dataclass
class ClientJob:
    """A client's local work: train ``model`` (in place) phase by phase on the client's
    data with ``generator``, then ``finish(results)`` makes the report."""

    client: object
    model: nn.Module
    generator: torch.Generator
    phases: list[Phase]
    finish: Callable[[list[LocalResult]], object]
    #: what else must agree for jobs to train together (e.g. a ratio their models hold)
    group: tuple = ()


def run_job(method, job: ClientJob):
    """The job run sequentially through ``method.local_train``: the engine's own path."""
    results = [method.local_train(job.model, job.client, phase.steps, job.generator,
                                  params=phase.params, masks=phase.masks, loss_fn=phase.loss_fn())
               for phase in job.phases]
    return job.finish(results)


def run_job_sgd(job: ClientJob, config):
    """The job run sequentially by :func:`~hetfl_core.training.local_sgd` with the run's
    optimiser settings and the phases' own proximal centres (a method that trains a model
    of its own, not through ``local_train``)."""
    results = [local_sgd(job.model, job.client.x_train, job.client.y_train, phase.steps,
                         config.batch_size, config.lr, job.generator, momentum=config.momentum,
                         weight_decay=config.weight_decay, prox_center=phase.prox_center,
                         prox_mu=phase.prox_mu, masks=phase.masks, params=phase.params,
                         loss_fn=phase.loss_fn())
               for phase in job.phases]
    return job.finish(results)


def uses_batched_clients(config) -> bool:
    """Whether a run trains its rounds' clients as one batch: ``batched_clients``, or where it
    is ``None``, whether the run's device is a CUDA GPU."""
    if config.batched_clients is not None:
        return bool(config.batched_clients)
    return resolve_device(config.device).type == "cuda"


#: module types whose training differs with a padded batch or draws from the global RNG
_UNBATCHABLE = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd, nn.RNNBase,
                nn.EmbeddingBag)


def batchable_model(model: nn.Module) -> bool:
    """Whether ``model`` trains the same per sample in a padded, vectorised batch: no buffers,
    no batch-norm (its statistics would see the padding), no dropout (global RNG), no RNN."""
    return not any(True for _ in model.buffers()) and not any(isinstance(m, _UNBATCHABLE)
                                                              for m in model.modules())


def job_signature(job: ClientJob) -> tuple:
    """Jobs with equal signatures train in one vectorised group: same parameter shapes, and
    per phase the same trained names, masked names, proximal use and sub-network count."""
    shapes = tuple((n, tuple(p.shape)) for n, p in job.model.named_parameters())
    phases = tuple((None if ph.params is None else tuple(ph.params), tuple(sorted(ph.masks or {})),
                    ph.prox_center is not None and bool(ph.prox_mu), float(ph.prox_mu),
                    tuple(tuple(sorted(m)) for m in ph.sub_masks), ph.batched_loss is not None)
                   for ph in job.phases)
    return type(job.model), shapes, phases, job.group


def train_jobs(jobs: list[ClientJob], batch_size: int, lr: float, momentum: float = 0.0,
               weight_decay: float = 0.0) -> list[list[LocalResult]]:
    """Train every job (in place), each group of one :func:`job_signature` as one vectorised
    batch, and return each job's per-phase :class:`LocalResult`."""
    groups: dict[tuple, list[int]] = {}
    for i, job in enumerate(jobs):
        groups.setdefault(job_signature(job), []).append(i)
    results = {}
    for members in groups.values():
        group = [jobs[i] for i in members]
        results.update(zip(members, train_group(group, batch_size, lr, momentum, weight_decay)))
    return [results[i] for i in range(len(jobs))]


def _schedule(jobs, phase_idx: int, steps: int, batch_size: int, offsets: list[int]):
    """Every client's minibatches of one phase as [steps, K, B] row indices into the
    concatenated data, with [steps, K, B] sample weights (1/b, 0 for padding) and each
    client's batch sizes [steps, K]."""
    k = len(jobs)
    index = torch.zeros(steps, k, batch_size, dtype=torch.long)
    weight = torch.zeros(steps, k, batch_size, dtype=torch.float64)
    sizes = torch.zeros(steps, k, dtype=torch.long)
    for j, job in enumerate(jobs):
        own = job.phases[phase_idx].steps
        index[:, j, :] = offsets[j]
        for s, idx in enumerate(minibatch_indices(len(job.client.y_train), own, batch_size, job.generator,
                                                  job.phases[phase_idx].drop_last)):
            b = len(idx)
            index[s, j, :b] = idx + offsets[j]
            weight[s, j, :b] = 1.0 / b
            sizes[s, j] = b
    return index, weight, sizes


def _stack(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([t.detach() for t in tensors])


def train_group(jobs: list[ClientJob], batch_size: int, lr: float, momentum: float = 0.0,
                weight_decay: float = 0.0) -> list[list[LocalResult]]:
    """Train jobs of one :func:`job_signature` together, as the module docstring says;
    write the trained weights back."""
    template = jobs[0].model
    device = next(template.parameters()).device
    names = [n for n, _ in template.named_parameters()]
    models = [dict(job.model.named_parameters()) for job in jobs]
    stacked = {n: _stack([m[n] for m in models]) for n in names}
    x = torch.cat([job.client.x_train for job in jobs]).to(device)
    y = torch.cat([job.client.y_train for job in jobs]).to(device)
    offsets = list(accumulate((len(job.client.y_train) for job in jobs[:-1]), initial=0))
    dtype = next(template.parameters()).dtype
    results = [[] for _ in jobs]
    for p_idx, phase in enumerate(jobs[0].phases):
        own = [job.phases[p_idx] for job in jobs]
        own_steps = [ph.steps for ph in own]
        steps = max(own_steps)
        if steps == 0:      # no client has a batch in this phase (drop_last, all smaller than one)
            for j in range(len(jobs)):
                results[j].append(LocalResult(0.0, 0, 0))
            continue
        index, weight, sizes = _schedule(jobs, p_idx, steps, batch_size, offsets)
        trained = [n for n in names if phase.params is None or n in set(phase.params)]
        masks = {n: _stack([ph.masks[n].to(device) for ph in own]) for n in (phase.masks or {})}
        subs = [{n: _stack([ph.sub_masks[j][n].to(device) for ph in own]) for n in sub}
                for j, sub in enumerate(phase.sub_masks)]
        mu = float(phase.prox_mu) if phase.prox_center is not None else 0.0
        centers = {n: _stack([ph.prox_center[n].to(device) for ph in own])
                   for n in trained if mu and n in phase.prox_center}
        losses, tallies = _train_phase(template, stacked, trained, masks, subs, centers, mu,
                                       phase.batched_loss, x, y, index.to(device),
                                       weight.to(device=device, dtype=dtype), lr, momentum,
                                       weight_decay)
        sums = (losses.double().cpu() * sizes.double()).sum(0)
        counts = sizes.sum(0)
        tallies = tallies.double().sum(0).cpu()
        for j, ph in enumerate(own):
            samples = int(counts[j])
            results[j].append(LocalResult(float(sums[j]) / max(samples, 1), samples,
                                          int((sizes[:, j] > 0).sum())))
            if ph.tally is not None:
                ph.tally(float(tallies[j]), samples)
    with torch.no_grad():
        for j, m in enumerate(models):
            for n in names:
                m[n].copy_(stacked[n][j])
    return results


class _Objective(nn.Module):
    """A method's batched loss as a module's forward, so that ``functional_call`` swaps the
    model's parameters for the whole loss (its forward and any other term it reads)."""

    def __init__(self, model: nn.Module, loss: Callable):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, xb, yb, wb):
        return self.loss(self.model, xb, yb, wb)


def _train_phase(template, stacked, trained, masks, subs, centers, mu, own_loss, x, y, index,
                 weight, lr, momentum, weight_decay) -> tuple[torch.Tensor, torch.Tensor]:
    """The SGD steps of one phase on the stacked parameters (updated in place in ``stacked``);
    returns each step's per-client data loss and the method's tally, both [steps, K]."""
    frozen_names = [n for n in stacked if n not in set(trained)]
    objective = _Objective(template, own_loss) if own_loss is not None else None

    def client_loss(train, frozen, xb, yb, wb, client_subs, center):
        params = {**frozen, **train}
        tally = torch.zeros((), device=xb.device)
        if objective is not None:
            renamed = {f"model.{n}": p for n, p in params.items()}
            data_loss, tally = functional_call(objective, renamed, (xb, yb, wb))
        else:
            out = functional_call(template, params, (xb,))
            data_loss = (F.cross_entropy(out, yb, reduction="none") * wb).sum()
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
        return total, (data_loss, tally)

    grads_of = vmap(grad(client_loss, has_aux=True))   # every argument has the clients on dim 0
    key = (type(template), tuple((n, tuple(p.shape)) for n, p in stacked.items()), tuple(trained),
           tuple(sorted(masks)), len(subs), mu, own_loss)
    if _VARIANT["name"] in ("compile", "cudagraphs"):
        grads_of = _compiled(grads_of, key)

    def step(stacked, buffers, x, y, idx, wb, masks, subs, centers):
        """One SGD step of every client on rows ``idx`` (updates ``stacked`` and ``buffers``
        in place); returns each client's data loss and tally."""
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


def batched_updates(method, config, jobs_in: list[tuple]):
    """The reports of ``[(client, plan, generator), ...]``, in order: the clients whose
    :meth:`client_job` gives a job train as one batch, the others (and every client of a
    model that :func:`batchable_model` refuses) through ``client_update``."""
    if not batchable_model(method.model):
        for client, plan, generator in jobs_in:
            yield method.client_update(client, plan, generator)
        return
    jobs = [method.client_job(client, plan, generator) for client, plan, generator in jobs_in]
    batch = [i for i, job in enumerate(jobs) if job is not None]
    results = dict(zip(batch, train_jobs([jobs[i] for i in batch], config.batch_size, method.round_lr,
                                         method.round_momentum, config.weight_decay))) if batch else {}
    for i, (client, plan, generator) in enumerate(jobs_in):
        if i in results:
            yield jobs[i].finish(results[i])
        else:
            yield method.client_update(client, plan, generator)
