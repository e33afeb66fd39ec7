"""Local training and evaluation, shared by every method."""
from __future__ import annotations

import copy
import inspect
import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["LocalResult", "LocalSGD", "forward_hooked", "run_step", "steps_for_epochs", "minibatch_indices",
           "local_sgd", "evaluate", "clone_model", "multistep_factor"]


@dataclass
class LocalResult:
    """What a run of local SGD did: mean training loss, samples processed, steps taken and
    the training predictions that were right (counted under the default cross-entropy)."""

    loss: float
    samples: int
    steps: int
    correct: int = 0


def steps_for_epochs(n_samples: int, batch_size: int, epochs: float, drop_last: bool = False) -> int:
    """Minibatch steps in ``epochs`` passes over ``n_samples`` samples: at least one with the
    last partial batch of each pass kept; with ``drop_last`` (a ``DataLoader(drop_last=True)``)
    ``epochs`` x floor(n / B) full batches, none for a client smaller than a batch."""
    if drop_last:
        return math.floor(epochs * (n_samples // batch_size))
    return max(1, math.ceil(epochs * math.ceil(n_samples / batch_size)))


def multistep_factor(round_idx: int, milestones, gamma: float = 0.1) -> float:
    """The factor of a ``MultiStepLR`` stepped once per round: ``gamma`` to the number of
    distinct milestones m < ``round_idx`` (round 1 is the first; the rate drops after
    round m)."""
    return gamma ** sum(1 for m in set(int(m) for m in milestones) if m < round_idx)


#: module attributes shared, not copied, by :func:`clone_model` (immutable values)
_SHARED_TYPES = (bool, int, float, str, type(None), torch.dtype, torch.device)


def _plain_module_class(cls: type) -> bool:
    """Whether ``copy.deepcopy`` copies an instance of ``cls`` as it copies a plain
    ``nn.Module``: no ``__deepcopy__``, and the module's own reduce and ``__getstate__``
    (a ``__setstate__`` of its own, such as the convolutions' compatibility shim, is called)."""
    return not hasattr(cls, "__deepcopy__") and all(
        getattr(cls, name) is getattr(nn.Module, name) for name in ("__reduce_ex__", "__reduce__", "__getstate__"))


def _immutable(value) -> bool:
    return type(value) in _SHARED_TYPES or (type(value) is tuple and all(type(v) in _SHARED_TYPES for v in value))


def _clone_module(module: nn.Module, memo: dict) -> nn.Module:
    """``copy.deepcopy(module, memo)`` for a tree of plain modules, without the generic
    reduce-and-rebuild of every attribute: the state ``nn.Module.__getstate__`` gives, with
    parameters and buffers deep-copied as deepcopy copies them (``Parameter.__deepcopy__``:
    the data cloned, ``requires_grad`` kept), empty hook dictionaries and sets made anew,
    immutable attributes shared and anything else deep-copied, handed to the class's
    ``__setstate__`` as deepcopy hands it."""
    if id(module) in memo:
        return memo[id(module)]
    cls = type(module)
    if not _plain_module_class(cls):
        return copy.deepcopy(module, memo)
    clone = cls.__new__(cls)
    memo[id(module)] = clone
    state = {}
    for name, value in module.__dict__.items():
        if name == "_compiled_call_impl":            # nn.Module.__getstate__ leaves it out
            continue
        if name == "_modules":
            state[name] = type(value)((key, None if child is None else _clone_module(child, memo))
                                      for key, child in value.items())
        elif _immutable(value):
            state[name] = value
        elif type(value) in (dict, OrderedDict, set) and not value:
            state[name] = type(value)()
        else:
            state[name] = copy.deepcopy(value, memo)
    clone.__setstate__(state)
    return clone


def clone_model(model: nn.Module) -> nn.Module:
    """A deep copy with its own parameters: equal to ``copy.deepcopy(model)`` (the same
    classes, attributes, hooks, parameter values bit for bit, ``requires_grad`` and training
    flags), built in a fraction of its time for the plain ``nn.Module`` trees every method
    copies once per client and round; a module with a copy hook of its own is deep-copied."""
    return _clone_module(model, {})


def minibatch_indices(n: int, steps: int, batch_size: int, generator: torch.Generator,
                      drop_last: bool = False):
    """The sample indices of ``steps`` minibatches over ``n`` samples: a fresh permutation from
    ``generator`` each epoch, consecutive slices of ``batch_size`` (the last one of an epoch
    shorter, or with ``drop_last`` left out, and no batch at all when ``n`` < ``batch_size``).
    :func:`local_sgd` and the batched trainer (:mod:`hetfl_core.runtime.batched`) both draw their
    batches here, so a client sees the same batches on either path."""
    if drop_last and n < batch_size:
        return
    end = n - n % batch_size if drop_last else n
    order = torch.randperm(n, generator=generator)
    pos = 0
    for _ in range(steps):
        if pos >= end:
            order, pos = torch.randperm(n, generator=generator), 0
        yield order[pos:pos + batch_size]
        pos += batch_size


def local_sgd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, batch_size: int,
              lr: float, generator: torch.Generator, *, momentum: float = 0.0,
              weight_decay: float = 0.0, prox_center: dict | None = None, prox_mu: float = 0.0,
              masks: dict | None = None, params=None, loss_fn=None, penalty=None,
              clip_norm: float | None = None, drop_last: bool = False) -> LocalResult:
    """``steps`` minibatch SGD steps on (x, y), reshuffling each epoch with ``generator``.

    ``prox_center``/``prox_mu`` add FedProx's term (mu/2)||w - w_global||^2.
    ``masks`` (parameter name -> 0/1 tensor) keeps pruned weights at zero: gradients are
    masked before each step and weights after it. ``params`` restricts the trained
    parameters (names); ``loss_fn(model, xb, yb)`` replaces cross-entropy; ``penalty(model)``
    is added to the cross-entropy of each step (and to the loss reported); ``clip_norm``
    scales the trained parameters' gradients to at most that global L2 norm before each step;
    ``drop_last`` leaves out each epoch's partial batch (:func:`minibatch_indices`). A run
    with no batch (``steps`` 0) leaves the model as it was and reports loss 0 over 0 samples.
    """
    model.train()
    named = dict(model.named_parameters())
    if masks:  # a method may build its masks on the CPU; they act on the model's device
        masks = {k: m.to(named[k].device) for k, m in masks.items()}
    train_names = list(named) if params is None else list(params)
    optimizer = torch.optim.SGD([named[n] for n in train_names], lr=lr, momentum=momentum,
                                weight_decay=weight_decay)
    total_loss, samples, taken, correct = 0.0, 0, 0, 0
    for idx in minibatch_indices(len(y), steps, batch_size, generator, drop_last):
        xb, yb = x[idx], y[idx]
        if loss_fn:
            loss = loss_fn(model, xb, yb)
        else:
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            correct = correct + (out.argmax(1) == yb).sum()
            if penalty is not None:
                loss = loss + penalty(model)
        total = loss
        if prox_mu and prox_center is not None:
            total = loss + 0.5 * prox_mu * sum(((named[k] - prox_center[k]) ** 2).sum()
                                                for k in train_names if k in prox_center)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        if masks:
            for k, m in masks.items():
                if named[k].grad is not None:
                    named[k].grad.mul_(m)
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_([named[n] for n in train_names], clip_norm)
        optimizer.step()
        if masks:
            with torch.no_grad():
                for k, m in masks.items():
                    named[k].mul_(m)
        total_loss += loss.item() * len(yb)
        samples += len(yb)
        taken += 1
    return LocalResult(total_loss / max(samples, 1), samples, taken, int(correct))


def forward_hooked(model: nn.Module) -> bool:
    """Whether any module of ``model`` has a forward hook or forward pre-hook: code that
    runs in its forward besides the modules' own, and may close over values of its own
    (HeteroFL's Scaler its width, FedLPS's scored network its unit masks)."""
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


@dataclass
class LocalSGD:
    """One run of local SGD that a client's step hands to the engine (``result = yield
    LocalSGD(...)``): ``steps`` minibatch steps on ``model`` (trained in place) over the
    client's training data, batches drawn from ``generator``, with the options of
    :func:`local_sgd`. The engine runs it here (:meth:`run`) or, where the run batches
    clients and the phase allows it (:attr:`batchable`), together with the other clients'
    phases (:mod:`hetfl_core.runtime.batched`); either way the step gets a :class:`LocalResult`.

    ``sub_masks`` trains on the mean loss of the model and of each masked sub-network
    (:func:`~hetfl_core.science.lottery.joint_loss`); ``penalty(model)`` adds a term to the
    cross-entropy, written once for both paths; ``loss(model, xb, yb)`` replaces the
    cross-entropy altogether, and like ``clip_norm`` keeps the phase out of a batch;
    ``alone`` keeps it out for a reason of the method's own.

    ``group`` is what else must agree for phases to train together: the batched trainer
    runs the forward of the group's first model, with the group's parameters swapped in,
    so whatever else a model's forward reads (an attribute such as a composed model's
    block selection, a mode, the values a forward hook holds) belongs in ``group``. A
    model with forward hooks (:func:`forward_hooked`) batches only where ``group`` is
    given: a hook's values are out of the trainer's sight."""

    model: nn.Module
    client: object
    steps: int
    generator: torch.Generator
    batch_size: int
    lr: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    params: list | None = None
    masks: dict | None = None
    prox_center: dict | None = None
    prox_mu: float = 0.0
    sub_masks: list = field(default_factory=list)
    penalty: Callable | None = None
    loss: Callable | None = None
    clip_norm: float | None = None
    drop_last: bool = False
    alone: bool = False
    group: tuple = ()

    @property
    def batchable(self) -> bool:
        """Whether the batched trainer can run this phase: no loss of the method's own, no
        clipping, no forward hook unless ``group`` names what it holds, and nothing else
        that keeps it ``alone``."""
        return (not self.alone and self.loss is None and self.clip_norm is None
                and (bool(self.group) or not forward_hooked(self.model)))

    def run(self) -> LocalResult:
        """The phase run here, by :func:`local_sgd`."""
        loss = self.loss
        if loss is None and self.sub_masks:
            from .lottery import joint_loss

            loss = lambda model, xb, yb: joint_loss(model, self.sub_masks, xb, yb)   # noqa: E731
        return local_sgd(self.model, self.client.x_train, self.client.y_train, self.steps,
                         self.batch_size, self.lr, self.generator, momentum=self.momentum,
                         weight_decay=self.weight_decay, prox_center=self.prox_center,
                         prox_mu=self.prox_mu, masks=self.masks, params=self.params,
                         loss_fn=loss, penalty=self.penalty, clip_norm=self.clip_norm,
                         drop_last=self.drop_last)


def run_step(step):
    """A client's step (what :meth:`~hetfl_core.science.methods.base.Method.client_step` returns)
    driven to its end here, one phase after another: each :class:`LocalSGD` it yields is
    run and its result sent back; returns what the step returns (its report and the
    client's new state). A step that trains by itself returns them without yielding."""
    if not inspect.isgenerator(step):
        return step
    try:
        phase = next(step)
        while True:
            phase = step.send(phase.run())
    except StopIteration as done:
        return done.value


#: rows a forward pass of :func:`evaluate` takes at once: on a CPU a pass over 500 rows keeps
#: its activations closer to the cache and runs about 1.5x faster per row than one over 2,000
FORWARD_ROWS = 500


def batch_dependent(model: nn.Module) -> bool:
    """Whether ``model``'s output for a sample depends on the other samples of its batch: a
    batch norm that normalises by the batch's statistics (in training mode, or without
    running statistics, as HeteroFL's static batch norm)."""
    return any(isinstance(m, nn.modules.batchnorm._BatchNorm) and (m.training or not m.track_running_stats)
               for m in model.modules())


def forward_in_parts(model: nn.Module, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
    """``model(x)``, computed ``rows`` (default :data:`FORWARD_ROWS`) rows at a time where the model scores each sample on
    its own (:func:`batch_dependent`), and the parts concatenated: the logits equal one pass's
    (``tests/test_training.py`` checks every registered model), in less time."""
    rows = FORWARD_ROWS if rows is None else rows
    if len(x) <= rows or batch_dependent(model):
        return model(x)
    return torch.cat([model(x[i:i + rows]) for i in range(0, len(x), rows)])


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 2000,
             confusion: dict | None = None):
    """Return (number correct, summed loss) of ``model`` on (x, y).

    The loss is summed over ``batch_size`` rows at a time (the sums' order fixes their last
    bits); each batch's logits come from :func:`forward_in_parts`. ``confusion`` (a dict)
    accumulates ``tp``, ``fp``, ``fn`` of class 1 for binary F1.
    """
    if len(y) == 0:
        return 0, 0.0
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, len(y), batch_size):
        out = forward_in_parts(model, x[i:i + batch_size])
        yb = y[i:i + batch_size]
        pred = out.argmax(1)
        correct += int((pred == yb).sum())
        loss += float(F.cross_entropy(out, yb, reduction="sum"))
        if confusion is not None:
            for key, hit in (("tp", (pred == 1) & (yb == 1)), ("fp", (pred == 1) & (yb != 1)),
                             ("fn", (pred != 1) & (yb == 1))):
                confusion[key] = confusion.get(key, 0) + int(hit.sum())
    return correct, loss
