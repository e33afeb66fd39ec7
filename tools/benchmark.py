"""Speed benchmark: one fixed FedAvg workload through every way hetfl can run it.

    python tools/benchmark.py [--rounds 5] [--runs 4] [--skip ray,flower]

The workload: LeNet-5 on Fashion-MNIST, 20 IID clients with 300 training samples each,
5 rounds of FedAvg with one local epoch of batch-32 SGD, one torch thread per process,
each client's personal accuracy scored after the last round. It runs through a
hand-written PyTorch loop (textbook LeNet-5, its third layer an ``nn.Linear``), the same
loop with hetfl's LeNet-5, hetfl's engine in this process, ``sweep`` on 1 and 2 processes
and on a local Ray (``--runs`` seeds each), and the Flower bridge. It prints training
samples per second and each one's ratio to the hand-written loop; then a HeteroFL round at
width 0.5 against one at width 1, beside the model's own compute at those widths.

``--batched`` adds (``only``: runs only) the comparison of a round's clients trained one
after another against all of them as one vectorised batch (``RunConfig.batched_clients``,
:mod:`hetfl_core.runtime.batched`): the LeNet-5 workload above and one paper-scale round of 100
clients (``--paper-clients``), in samples per second, on ``--device``; on CUDA also the
share of each round's wall time the GPU spends in kernels (``torch.profiler``). ``--tiny``
shrinks both workloads to a smoke test of the script. ``--variants plain,compile,cudagraphs,fused``
times each way a batched step can run (:func:`hetfl_core.runtime.batched.step_variant`), each with
its largest weight difference from the sequential round; ``--json PATH`` writes the
measurements (after every way, so an interrupted run keeps what it measured).

Speed is measured here, never asserted in a test. Ray and Flower timings include their
start-up (a local Ray, and Flower's own for its simulation).
"""
import argparse
import copy
import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hetfl_core import RunConfig
from hetfl_core.runtime.batched import VARIANTS, step_variant
from hetfl_core.runtime.engine import build_simulation, run_rounds
from hetfl_core.science.methods.base import seeded_generator
from hetfl_core.runtime.experiments import sweep
from hetfl_core.science.models import build_model


class TextbookLeNet5(nn.Module):
    """LeNet-5 as tutorials write it: two convolutions, then 400 -> 120 -> 84 -> 10 linear layers."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2).flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def hand_loop(model: nn.Module, clients, rounds: int, lr: float, batch_size: int) -> int:
    """FedAvg written out by hand; returns the number of training samples processed."""
    samples = 0
    for t in range(rounds):
        states, weights = [], []
        for client in clients:
            local = copy.deepcopy(model)
            optimizer = torch.optim.SGD(local.parameters(), lr=lr)
            order = torch.randperm(client.n_train, generator=seeded_generator(0, t, client.client_id))
            for i in range(0, client.n_train, batch_size):
                idx = order[i:i + batch_size]
                optimizer.zero_grad()
                F.cross_entropy(local(client.x_train[idx]), client.y_train[idx]).backward()
                optimizer.step()
                samples += len(idx)
            states.append(local.state_dict())
            weights.append(client.n_train / sum(c.n_train for c in clients))
        model.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states)) for k in states[0]})
    with torch.no_grad():
        for client in clients:
            model(client.x_test).argmax(1)
    return samples


def timed(fn):
    """(seconds, fn's result)."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def kernel_share(fn) -> float | None:
    """The share of ``fn``'s wall time the GPU spends in kernels (``None`` without CUDA)."""
    if not torch.cuda.is_available():
        return None
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
    kernels = [e for e in prof.key_averages()
               if str(getattr(e, "device_type", "")).endswith("CUDA")]
    busy_us = sum(getattr(e, "self_device_time_total", getattr(e, "self_cuda_time_total", 0))
                  for e in kernels)
    return busy_us / 1e6 / wall


def one_round(config: RunConfig):
    """(seconds, training samples, the simulation) of round 1 of ``config`` (built beforehand,
    not scored)."""
    sim = build_simulation(config)
    seconds, row = timed(lambda: sim.round(1, evaluate=False))
    if config.device.startswith("cuda"):
        torch.cuda.synchronize()
    return seconds, sum(c.n_train * config.local_epochs for c in sim.data.clients if c.client_id in
                        {r["id"] for r in row["clients"]}), sim


def model_gap(a, b) -> float:
    """The largest absolute difference between two simulations' global weights."""
    return max(float((p - q).abs().max()) for p, q in zip(a.method.model.state_dict().values(),
                                                          b.method.model.state_dict().values()))


def batched_comparison(lenet: RunConfig, paper_clients: int, tiny: bool,
                       variants=("plain",), backend: str | None = None, save=None) -> dict:
    """Sequential against batched clients, samples/s: the LeNet-5 workload's rounds, and one
    round of ``paper_clients`` clients; each batched step ``variant``
    (:func:`hetfl_core.runtime.batched.step_variant`), with its largest weight difference from the
    sequential round's; on CUDA the kernel share of a round's wall time. Returns the
    measurements (the JSON that ``--json`` writes); ``save(measured)``, if given, is called
    with what is measured so far after each way, so a run stopped early keeps those."""
    pool = max(paper_clients * 8, 2000) if tiny else 60_000
    paper = lenet.replace(clients=paper_clients, train_samples=pool, rounds=1)
    print(f"\nclients as one batch ({lenet.device}): samples/s, sequential -> batched")
    named = ((f"LeNet-5, {lenet.clients} clients, {lenet.rounds} rounds", lenet),
             (f"LeNet-5, {paper.clients} clients, one round", paper))
    rows = {what: {} for what, _ in named}
    measured = {"device": lenet.device, "tiny": tiny, "variants": list(variants), "backend": backend}

    def record() -> dict:
        return measured | {"workloads": [workload_record(what, config, rows[what]) for what, config in named
                                         if rows[what]]}

    # sequential and the first variant for both workloads first, the others (slow to compile) after
    for ways in (("sequential", *variants[:1]), variants[1:]):
        for what, config in named:
            for way in ways:
                rows[what][way] = measure_way(config, way, backend)
                rows[what][way]["max_weight_gap_to_sequential"] = model_gap(rows[what][way]["sim"],
                                                                            rows[what]["sequential"]["sim"])
                if save:
                    save(record())
    for what, _ in named:
        base = rows[what]["sequential"]["samples_per_s"]
        for way, row in rows[what].items():
            line = f"  {what:40s} {way:12s} {row['samples_per_s']:10,.0f}  ({row['samples_per_s'] / base:.2f}x)"
            if row["kernel_share"] is not None:
                line += f"; GPU busy in kernels {row['kernel_share']:.0%}"
            print(line)
    return record()


def measure_way(config: RunConfig, way: str, backend: str | None) -> dict:
    """Samples/s of ``config``'s rounds trained ``way`` (``sequential`` or a batched step
    variant), with the kernel share of one more round and the last round's simulation."""
    run_config = config.replace(batched_clients=way != "sequential")
    with step_variant("plain" if way == "sequential" else way, backend):
        # not timed: the first kernels' start-up, and a compiled step's compiling for
        # the group's own shapes (a smaller warm-up round would compile other shapes)
        warm_up = run_config.replace(rounds=1)
        one_round(warm_up if way != "sequential" else warm_up.replace(train_samples=config.clients * 8))
        seconds, samples, last = 0.0, 0, None
        for _ in range(config.rounds):
            s, n, last = one_round(run_config)
            seconds, samples = seconds + s, samples + n
        share = kernel_share(lambda: one_round(run_config))
    return {"samples_per_s": samples / seconds, "seconds": seconds, "samples": samples,
            "kernel_share": share, "sim": last}


def workload_record(what: str, config: RunConfig, rows: dict) -> dict:
    """One workload's measurements as the JSON stores them (the simulations left out)."""
    return {"workload": what, "clients": config.clients, "rounds": config.rounds,
            "train_samples": config.train_samples, "batch_size": config.batch_size,
            "ways": {way: {k: v for k, v in row.items() if k != "sim"} for way, row in rows.items()}}


def environment() -> dict:
    """Where the benchmark ran: the device's name, torch's and Python's versions, the date."""
    import datetime
    import platform

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"gpu": gpu, "cuda": torch.version.cuda, "torch": torch.__version__,
            "python": platform.python_version(), "cpu_cores": os.cpu_count(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=4, help="seeds per sweep")
    parser.add_argument("--skip", default="", help="comma-separated: ray, flower")
    parser.add_argument("--batched", choices=("no", "also", "only"), default="also",
                        help="compare sequential and batched clients (only: nothing else)")
    parser.add_argument("--paper-clients", type=int, default=100,
                        help="clients of the paper-scale round")
    parser.add_argument("--device", default="cpu", help="device of the batched comparison")
    parser.add_argument("--tiny", action="store_true",
                        help="a few samples per client: a smoke test")
    parser.add_argument("--variants", default="plain",
                        help=f"comma-separated batched step variants to compare: {', '.join(VARIANTS)}")
    parser.add_argument("--backend", default=None,
                        help="torch.compile's backend for the compiled variants (default inductor)")
    parser.add_argument("--json", type=Path, default=None,
                        help="write the batched comparison's measurements here (JSON)")
    args = parser.parse_args()
    variants = tuple(filter(None, args.variants.split(",")))
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or not variants:
        parser.error(f"unknown --variants {','.join(unknown)!r}; choose from: {', '.join(VARIANTS)}")
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(1)
    config = RunConfig(method="fedavg", dataset="fashion-mnist", model="lenet5", partition="iid", clients=20,
                       train_samples=400 if args.tiny else 7500, test_fraction=0.2,
                       rounds=args.rounds, batch_size=32, lr=0.05, eval_every=args.rounds,
                       eval_global=False)
    if args.batched != "no":
        where = environment()

        def save(measured):
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({**where, **measured}, indent=1))

        batched_comparison(config.replace(device=args.device), args.paper_clients, args.tiny, variants,
                           args.backend, save=save if args.json else None)
        if args.json:
            print(f"wrote {args.json}")
        if args.batched == "only":
            return
    sim = build_simulation(config)
    clients = sim.data.clients
    assert all(c.n_train == 300 for c in clients), [c.n_train for c in clients]
    rows = []   # (what, samples, seconds)

    torch.manual_seed(0)
    seconds, samples = timed(lambda: hand_loop(TextbookLeNet5(), clients, args.rounds, config.lr, config.batch_size))
    rows.append(("hand-written loop, textbook LeNet-5", samples, seconds))
    torch.manual_seed(0)
    seconds, samples = timed(lambda: hand_loop(build_model("lenet5", (1, 28, 28), 10), clients, args.rounds,
                                               config.lr, config.batch_size))
    rows.append(("hand-written loop, hetfl's LeNet-5", samples, seconds))
    seconds, result = timed(lambda: run_rounds(sim))
    rows.append(("hetfl engine, one process", samples, seconds))
    per_run = samples
    configs = [config.replace(seed=s) for s in range(args.runs)]
    with tempfile.TemporaryDirectory() as tmp:
        seconds, _ = timed(lambda: sweep(configs, processes=1, directory=Path(tmp, "p1"), progress=False))
        rows.append((f"sweep, 1 process ({args.runs} runs)", args.runs * per_run, seconds))
        warm = [config.replace(rounds=1, seed=100 + s) for s in range(2)]   # start the workers, load the data
        sweep(warm, processes=2, directory=Path(tmp, "warm"), progress=False)
        seconds, _ = timed(lambda: sweep(configs, processes=2, directory=Path(tmp, "p2"), progress=False))
        rows.append((f"sweep, 2 processes ({args.runs} runs)", args.runs * per_run, seconds))
        if "ray" not in skip:
            from hetfl_core.runtime.ray_executor import connect

            seconds, _ = timed(lambda: (connect(cpus=2), sweep(configs, processes=2, executor="ray",
                                                               directory=Path(tmp, "ray"), progress=False)))
            rows.append((f"sweep on a local Ray, 2 CPUs ({args.runs} runs)", args.runs * per_run, seconds))
            connect().shutdown()
    if "flower" not in skip:
        from hetfl_core.runtime.flower import run_flower

        seconds, _ = timed(lambda: run_flower([config]))
        rows.append(("Flower bridge (simulation, 20 nodes)", per_run, seconds))

    hand = rows[0][1] / rows[0][2]
    print(f"{'':48s} {'samples/s':>10s} {'x hand loop':>12s}")
    for what, n, s in rows:
        print(f"{what:48s} {n / s:10,.0f} {n / s / hand:12.2f}")

    widths = {}
    for width in (1.0, 0.5):
        heterofl = build_simulation(config.replace(method="heterofl", rounds=2, options={"widths": [width]}))
        ends = []   # round 1 (not evaluated); round 2 is the last and scores the clients
        start = time.perf_counter()
        run_rounds(heterofl, callback=lambda row: ends.append(time.perf_counter()))
        seconds = ends[0] - start
        torch.manual_seed(0)
        compute, _ = timed(lambda: hand_loop(build_model("lenet5", (1, 28, 28), 10, width=width), clients, 1,
                                             config.lr, config.batch_size))
        widths[width] = (seconds, compute)
    print(f"HeteroFL round at width 0.5 / width 1: {widths[0.5][0] / widths[1.0][0]:.2f} "
          f"(the model's own training at width 0.5 / width 1: {widths[0.5][1] / widths[1.0][1]:.2f})")


if __name__ == "__main__":
    main()
