"""How a ladder run that diverged got there: its rounds re-run, with what grows on the way.

``python tools/divergence_probe.py CHAPTER CLAIM RUNG LABEL SEED [--every 10]`` rebuilds the
run of the ladder (:func:`hetfl_core.book.ladder.rung_config`) that the claim ``CLAIM`` of
``CHAPTER`` needs at rung ``RUNG`` for its method ``LABEL`` (as the claim names it, e.g.
``ENC-fixed``) and seed ``SEED``, and trains it round by round exactly as the ladder did
(same config, same scoring schedule, so the same random streams). Every ``--every`` rounds,
and at every round of the last ``--tail`` before the end or the divergence, it prints:

* the round's mean and largest local training loss over its participants;
* the largest number of local steps a participant took (a method that sets them per
  round, as Heroes' Eq. (27) does, shows it here);
* the global model's parameter norm (L2 over every parameter) and largest absolute
  weight, and the layer holding it (a method without a global model, e.g. FedPer: the
  largest norm and weight among its clients' models);
* the global accuracy where the round was scored.

It stops at the divergence (the round and client the ladder recorded should be the ones it
names: that is the check that the probe re-ran the same run) or after the run's last
round. A run costs what the ladder's did (``python tools/ladder.py plan`` lists it).

* ``--steps-at ROUND`` traces that round step by step: for each participant's local SGD
  (:func:`hetfl_core.science.training.local_sgd`, run here, not batched), each step's
  training loss, largest absolute logit, gradient norm over the trained parameters and
  largest absolute trained weight before the step. The traced round trains as the run
  does (the loss is computed by the same operations); the probe stops after it, unless
  ``--rounds`` says a later round.
* ``--dense-twin`` also trains, in the traced round, each composed model's twin whose
  composed weights are plain parameters (the local step as Heroes' Alg. 2, l. 5 writes
  it), from the same start on the same batches: whether the factors are what runs away.
* ``--set FIELD=VALUE`` re-runs it with a field of its config changed (e.g. a smaller
  ``lr``), kept apart from the ladder's own run.
* ``--save`` keeps what it found in the ladder's store (``results/ladder/probes/``, with
  its provenance), where a chapter's :func:`hetfl_core.book.ladder.divergence_note` reads it.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import pathlib
import sys
import time
import types

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_pre_hook

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import hetfl_core.science.training as training  # noqa: E402
from hetfl_core.book.ladder import rung_config  # noqa: E402
from hetfl_core.book.ladder_specs import SPECS  # noqa: E402
from hetfl_core.book.ladder_specs.claims import RUNGS  # noqa: E402
from hetfl_core.runtime.engine import build_simulation, single_thread  # noqa: E402
from hetfl_core.science.composition import ComposedConv2d  # noqa: E402
from hetfl_core.science.errors import DivergenceError, HetflError  # noqa: E402


def find_spec(chapter: str, claim: str):
    """The ladder's claim ``claim`` of ``chapter``, or a one-line error naming the choices."""
    if chapter not in SPECS:
        sys.exit(f"error: no chapter {chapter!r} on the ladder (one of {', '.join(SPECS)})")
    for spec in SPECS[chapter]:
        if spec.ref == claim:
            return spec
    sys.exit(f"error: no claim {claim!r} in {chapter} (one of {', '.join(s.ref for s in SPECS[chapter])})")


def models_summary(method, clients: int) -> tuple[float, float, str]:
    """:func:`weight_summary` of the method's global model, or where it has none, the
    largest norm and largest weight among its clients' models (and where that weight is)."""
    model = method.global_model()
    if model is not None:
        return weight_summary(model)
    each = [weight_summary(method.personal_model(k)) for k in range(clients)]
    top = max(each, key=lambda s: s[1])
    return max(s[0] for s in each), top[1], top[2]


def weight_summary(model: torch.nn.Module) -> tuple[float, float, str]:
    """The model's parameter norm (L2 over all of them), its largest absolute weight and the
    parameter holding it."""
    squares, largest, where = 0.0, 0.0, ""
    with torch.no_grad():
        for name, p in model.named_parameters():
            squares += float(p.double().pow(2).sum())
            top = float(p.abs().max()) if p.numel() else 0.0
            if top > largest:
                largest, where = top, name
    return math.sqrt(squares), largest, where


def dense_twin(model: torch.nn.Module) -> torch.nn.Module | None:
    """A copy of a composed model (:class:`~hetfl_core.science.composition.ComposedNet`) whose
    every composed weight W_p = v . u (Eq. 4) at its selection is one plain parameter: SGD on
    it trains the composed weights themselves, as Alg. 2 l. 5 writes the local step (the
    book trains the factors v and u). ``None`` for a model without composed layers."""
    layers = [m for m in model.modules() if isinstance(m, ComposedConv2d)]
    if not layers:
        return None
    twin = copy.deepcopy(model)
    sel = twin.selection
    for layer in (m for m in twin.modules() if isinstance(m, ComposedConv2d)):
        with torch.no_grad():
            layer.dense = torch.nn.Parameter(layer.weight(sel.blocks, sel.p).clone())
        layer.forward = types.MethodType(
            lambda self, x, sel: F.conv2d(x, self.dense, stride=self.stride, padding=self.kernel // 2), layer)
    return twin


def traced_round(sim, round_idx: int, twins: bool = False
                 ) -> tuple[dict | None, list[tuple[int, list[dict]]], str | None]:
    """Round ``round_idx`` of ``sim`` with every local SGD step recorded: the history row
    (``None`` if it diverged), per phase of local SGD its client and steps (``loss``,
    ``logit``: the largest absolute logit, ``grad``: the gradient norm over the trained
    parameters, ``weight``: their largest absolute value before the step), and the
    divergence's message, if any. With ``twins``, a phase on a composed model is also run,
    before the phase itself, from the same start on the same batches by its
    :func:`dense_twin`, and each step keeps the twin's loss as ``dense_loss`` (the run
    itself trains as it would without)."""
    phases: list[tuple[int, list[dict]]] = []
    original_sgd, original_run = training.local_sgd, training.LocalSGD.run
    in_twin = [False]

    def run(phase):                                    # which client the phase trains
        phases.append((phase.client.client_id, []))
        return original_run(phase)

    def local_sgd(model, x, y, *args, loss_fn=None, penalty=None, **kwargs):
        steps = phases[-1][1]
        twin = dense_twin(model) if twins and loss_fn is None and penalty is None else None
        if twin is not None:
            steps_, batch_size, lr, generator = args
            same = torch.Generator()
            same.set_state(generator.get_state())          # the same batches; the run's stream untouched
            losses = []

            def twin_loss(model_, xb, yb):
                loss = F.cross_entropy(model_(xb), yb)
                losses.append(float(loss.detach()))
                return loss
            in_twin[0] = True
            try:
                original_sgd(twin, x, y, steps_, batch_size, lr, same, loss_fn=twin_loss,
                             **{k: kwargs[k] for k in ("momentum", "weight_decay", "clip_norm", "drop_last")
                                if k in kwargs})
            finally:
                in_twin[0] = False

        def recorded(model_, xb, yb):                 # local_sgd's loss, by the same operations
            if loss_fn is not None:
                loss, logit = loss_fn(model_, xb, yb), float("nan")
            else:
                out = model_(xb)
                loss, logit = F.cross_entropy(out, yb), float(out.detach().abs().max())
                if penalty is not None:
                    loss = loss + penalty(model_)
            steps.append({"loss": float(loss.detach()), "logit": logit})
            return loss
        result = original_sgd(model, x, y, *args, loss_fn=recorded, penalty=None, **kwargs)
        if twin is not None:
            for step, dense in zip(steps, losses):
                step["dense_loss"] = dense
        return result

    def before_step(optimizer, args, kwargs):
        if phases and phases[-1][1] and not in_twin[0]:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            grads = [float(p.grad.double().pow(2).sum()) for p in params if p.grad is not None]
            phases[-1][1][-1].update(grad=math.sqrt(sum(grads)),
                                     weight=max(float(p.detach().abs().max()) for p in params))

    hook = register_optimizer_step_pre_hook(before_step)
    training.local_sgd, training.LocalSGD.run = local_sgd, run
    try:
        return sim.round(round_idx), phases, None
    except DivergenceError as exc:
        return None, phases, str(exc).split(":")[0]
    finally:
        hook.remove()
        training.local_sgd, training.LocalSGD.run = original_sgd, original_run


def print_steps(phases) -> None:
    """Each phase's steps, one line a step."""
    if not phases:
        print("no local SGD ran step by step in this round (a batched run traces nothing)")
    for client, steps in phases:
        print(f"client {client}:")
        for i, s in enumerate(steps):
            dense = f", dense twin's loss {s['dense_loss']:.3g}" if "dense_loss" in s else ""
            print(f"  step {i}: loss {s['loss']:.3g}, max|logit| {s['logit']:.3g}, "
                  f"|grad| {s.get('grad', float('nan')):.3g}, max|w| {s.get('weight', float('nan')):.3g}{dense}")


def parse_changes(pairs: list[str]) -> dict:
    """``["lr=0.025", ...]`` as config changes (a value read as JSON where it parses), or a
    one-line error for a pair without ``=``."""
    changes = {}
    for pair in pairs:
        field, sep, text = pair.partition("=")
        if not sep or not field:
            sys.exit(f"error: --set takes FIELD=VALUE, got {pair!r}")
        try:
            changes[field] = json.loads(text)
        except ValueError:
            changes[field] = text
    return changes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapter")
    parser.add_argument("claim", help="the claim's reference, e.g. 'Table I'")
    parser.add_argument("rung", choices=RUNGS)
    parser.add_argument("label", help="the method as the claim names it, e.g. 'ENC-fixed'")
    parser.add_argument("seed", type=int)
    parser.add_argument("--every", type=int, default=10, help="print every so many rounds (default 10)")
    parser.add_argument("--tail", type=int, default=8,
                        help="print every round of the last so many (default 8)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="stop after this round (default: the run's last)")
    parser.add_argument("--steps-at", type=int, default=None, metavar="ROUND",
                        help="trace this round step by step, then stop (unless --rounds)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a field of the run's config, e.g. lr=0.025 (repeatable; the value "
                             "is read as JSON where it parses, else as text)")
    parser.add_argument("--dense-twin", action="store_true",
                        help="at --steps-at, also train each composed model's dense twin (its composed "
                             "weights as plain parameters) from the same start on the same batches")
    parser.add_argument("--save", action="store_true",
                        help="keep the probe in the ladder's store, where the chapter reads it")
    args = parser.parse_args(argv)
    if args.every < 1 or args.tail < 0:
        sys.exit("error: --every must be at least 1 and --tail at least 0")
    if args.steps_at is not None and args.steps_at < 1:
        sys.exit("error: --steps-at must be a round, at least 1")
    if args.dense_twin and args.steps_at is None:
        sys.exit("error: --dense-twin trains twins in the traced round: give --steps-at ROUND")
    spec = find_spec(args.chapter, args.claim)
    if args.label not in spec.methods:
        sys.exit(f"error: {args.claim} of {args.chapter} names no method {args.label!r} "
                 f"(one of {', '.join(spec.methods)})")
    config = rung_config(spec, args.rung, args.label, args.seed)
    changes = parse_changes(args.set)
    if changes:
        try:
            config = config.replace(**changes).validate()
        except (TypeError, ValueError, HetflError) as exc:
            sys.exit(f"error: --set {', '.join(args.set)}: {str(exc).splitlines()[0]}")
    if args.steps_at is not None and args.steps_at > config.rounds:
        sys.exit(f"error: --steps-at {args.steps_at} is past the run's {config.rounds} rounds")
    last = config.rounds if args.rounds is None else min(args.rounds, config.rounds)
    if args.steps_at is not None and args.rounds is None:
        last = args.steps_at                      # the traced round is the last, unless --rounds
    print(f"{config.method} {config.options} at {args.rung}, seed {args.seed}: {config.rounds} rounds, "
          f"{config.clients} clients, lr {config.lr}, momentum {config.momentum}")
    print(f"{'round':>5} {'loss mean':>9} {'loss max':>9} {'steps':>5} {'|w|':>9} {'max|w|':>8}  "
          f"{'acc':>6}  largest weight in")
    start = time.perf_counter()
    rounds, traced, diverged = [], [], None
    with single_thread():
        sim = build_simulation(config)
        for r in range(1, last + 1):
            if r == args.steps_at:
                row, traced, diverged = traced_round(sim, r, twins=args.dense_twin)
                print_steps(traced)
            else:
                try:
                    row = sim.round(r)
                except DivergenceError as exc:
                    row, diverged = None, str(exc).split(":")[0]
            if diverged:
                print(f"{r:>5} diverged: {diverged}")
                break
            norm, largest, where = models_summary(sim.method, config.clients)
            rounds.append({"round": r, "loss": row["loss"],
                           "loss_max": max(c.loss for c in sim.reports if c.local_steps > 0),
                           "steps": max(c["local_steps"] for c in row["clients"]),
                           "norm": norm, "largest": largest, "where": where, "acc": row["acc_global"]})
            if r % args.every == 0 or r > last - args.tail or r == 1 or r == args.steps_at:
                got = rounds[-1]
                acc = "" if got["acc"] is None else f"{100 * got['acc']:.1f}"
                print(f"{r:>5} {got['loss']:9.4f} {got['loss_max']:9.4f} {got['steps']:>5} {norm:9.2f} "
                      f"{largest:8.3f}  {acc:>6}  {where}", flush=True)
    wall = time.perf_counter() - start
    print(f"({wall:.0f} s)")
    if args.save:
        scope = "global model" if sim.method.global_model() is not None else "clients' models"
        path = save_probe(args, config, changes, scope, rounds, traced, diverged, wall, argv)
        print(f"wrote {path}")
    return 0


def variant_name(changes: dict) -> str | None:
    """The probe's name for its config changes (``lr=0.025``), ``None`` without any."""
    return ",".join(f"{k}={v}" for k, v in sorted(changes.items())) or None


def save_probe(args, config, changes, scope, rounds, traced, diverged, wall_s, argv) -> pathlib.Path:
    """Keep the probe in the ladder's store (``probes/``, :func:`hetfl_core.book.ladder.probe_path`)
    with its provenance, as the ladder keeps a run: a chapter renders it from there."""
    from hetfl_core.book.chapter import provenance
    from hetfl_core.book.ladder import _current_data, equivalence_digest, probe_path
    from hetfl_core.runtime.experiments import write_atomic

    command = "python tools/divergence_probe.py " + " ".join(
        f"'{a}'" if " " in a else a for a in (sys.argv[1:] if argv is None else argv))
    how = provenance(command, wall_s)
    how["equivalence_digest"] = equivalence_digest()
    how["data"] = _current_data(config.dataset)
    record = {"scope": scope, "chapter": args.chapter, "claim": args.claim, "rung": args.rung,
              "label": args.label, "seed": args.seed, "changes": changes, "steps_at": args.steps_at,
              "config": config.to_dict(),
              "rounds": rounds, "traced": [{"client": c, "steps": s} for c, s in traced],
              "diverged": diverged, "provenance": how}
    path = probe_path(args.chapter, args.label, args.rung, args.seed, variant=variant_name(changes))
    write_atomic(path, json.dumps(record, indent=None, separators=(",", ":"), allow_nan=True).encode())
    return path

if __name__ == "__main__":
    sys.exit(main())
