"""Where FedLPS's local training spikes: weight steps or unit-pattern flips.

``python tools/fedlps_spikes.py [--rung x4] [--seed 0] [--rounds 3] [VARIANT ...]`` runs
the first rounds of the ladder's rung of the FedLPS chapter's Table I setting once per
VARIANT, a JSON object whose ``options`` are FedLPS's and whose other keys replace
config fields (``'{"options": {"lam": 0}}'``, ``'{"momentum": 0}'``; default: ``'{}'``).
Per round it prints, over the participants' local steps:

* the largest gradient norms of the weights (``g_w``) and of the scores Q (``g_Q``),
  and the largest cross-entropy of a batch;
* ``flips/step``: how many hidden units the pattern of Eq. (4) switches per step;
* ``CE jump by flips``: the largest rise of a batch's cross-entropy that a step's
  pattern change alone causes, CE(new w, new P) - CE(new w, old P);
* the spread (max - min) of the importance loss's target sigma(|w|_J) (Eq. 8) per
  layer at the first client's first step: where it is ~1e-4 the target ranks nothing.

Local training is :func:`hetfl_core.science.training.local_sgd`'s step (cross-entropy + the
method's penalty + the proximal term, SGD with the run's momentum), re-written here to
measure between its parts; a client stops at its first non-finite loss, and a round that
diverges shows ``NaN``. It takes about a minute
a variant and round on a loaded CPU.
"""
from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

import torch
import torch.nn.functional as F

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hetfl_core.science.training as training  # noqa: E402
from hetfl_core.runtime.engine import build_simulation  # noqa: E402
from hetfl_core.science.errors import DivergenceError  # noqa: E402
from hetfl_core.book.ladder import rung_config  # noqa: E402
from hetfl_core.book.ladder_specs import SPECS  # noqa: E402
from hetfl_core.science.masks import unit_magnitudes  # noqa: E402

STEPS: list[dict] = []   # the current round's steps, all participants


def _norm(grads) -> float:
    return math.sqrt(sum(float(g.norm()) ** 2 for g in grads if g is not None))


def traced_sgd(model, x, y, steps, batch_size, lr, generator, *, momentum=0.0, weight_decay=0.0,
               prox_center=None, prox_mu=0.0, masks=None, params=None, loss_fn=None, penalty=None,
               clip_norm=None, drop_last=False) -> training.LocalResult:
    """:func:`hetfl_core.science.training.local_sgd` on a scored network, recording each step in ``STEPS``."""
    named = dict(model.named_parameters())
    names = list(named) if params is None else list(params)
    optimizer = torch.optim.SGD([named[n] for n in names], lr=lr, momentum=momentum, weight_decay=weight_decay)
    total_loss, samples, correct, taken = 0.0, 0, 0, 0
    for idx in training.minibatch_indices(len(y), steps, batch_size, generator, drop_last):
        xb, yb = x[idx], y[idx]
        old = {k: v.float() for k, v in model.pattern().items()}
        out = model(xb)
        loss = F.cross_entropy(out, yb)
        correct += int((out.argmax(1) == yb).sum())
        row = {"ce": float(loss)}
        if not STEPS or "spread" not in STEPS[0]:
            row["spread"] = {k: float(t.max() - t.min()) for k, t in
                             ((k, torch.sigmoid(v)) for k, v in unit_magnitudes(model.net).items())}
        if penalty is not None:
            loss = loss + penalty(model)
        total = loss
        if prox_mu and prox_center is not None:
            total = loss + 0.5 * prox_mu * sum(((named[k] - prox_center[k]) ** 2).sum()
                                               for k in names if k in prox_center)
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        row["g_w"] = _norm(named[k].grad for k in names if not k.startswith("scores."))
        row["g_Q"] = _norm(named[k].grad for k in names if k.startswith("scores."))
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_([named[n] for n in names], clip_norm)
        optimizer.step()
        with torch.no_grad():
            new = {k: v.float() for k, v in model.pattern().items()}
            row["flips"] = int(sum((new[k] != old[k]).sum() for k in new))
            model.current = old
            before = float(F.cross_entropy(model.net(xb), yb))
            model.current = new
            after = float(F.cross_entropy(model.net(xb), yb))
        row["by_flips"] = after - before if row["flips"] and math.isfinite(after - before) else 0.0
        STEPS.append(row)
        total_loss += float(loss) * len(yb)
        samples += len(yb)
        taken += 1
        if not math.isfinite(float(loss)):   # the engine stops the run at this client anyway
            break
    return training.LocalResult(total_loss / max(samples, 1), samples, taken, correct)


def probe(variant: dict, rung: str = "x4", seed: int = 0, rounds: int = 3) -> list[str]:
    """One line per round of ``variant`` (see the module's docstring) until it diverges."""
    variant = dict(variant)
    config = rung_config(SPECS["fedlps"][0], rung, "FedLPS", seed)
    config = config.replace(rounds=rounds, eval_every=1, options=variant.pop("options", {}), **variant)
    if config.method != "fedlps":
        raise SystemExit("the probe reads FedLPS's scored network")
    sim = build_simulation(config)
    lines = []
    for t in range(1, rounds + 1):
        STEPS.clear()
        try:
            acc = f"{sim.round(t)['acc_personal']:.2f}"
        except DivergenceError:
            acc = "NaN"
        big = {k: max(s[k] for s in STEPS) for k in ("g_w", "g_Q", "ce", "by_flips")}
        spread = " ".join(f"{k} {v:.1e}" for k, v in STEPS[0]["spread"].items())
        lines.append(f"round {t}: acc {acc}  max g_w {big['g_w']:.3g}  max g_Q {big['g_Q']:.3g}  "
                     f"max CE {big['ce']:.3g}  flips/step {sum(s['flips'] for s in STEPS) / len(STEPS):.2f}  "
                     f"CE jump by flips {big['by_flips']:.3g}  sigma(|w|_J) spread: {spread}")
        if acc == "NaN":
            break
    return lines


def main(argv=None) -> None:
    """Parse the command line and print each variant's rounds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variants", nargs="*", default=["{}"])
    parser.add_argument("--rung", default="x4")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    training.local_sgd = traced_sgd
    torch.set_num_threads(1)
    for text in args.variants:
        print(text)
        for line in probe(json.loads(text), args.rung, args.seed, args.rounds):
            print("   ", line, flush=True)


if __name__ == "__main__":
    main()
