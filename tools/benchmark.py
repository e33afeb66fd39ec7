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

Speed is measured here, never asserted in a test. Ray and Flower timings include their
start-up (a local Ray, and Flower's own for its simulation).
"""
import argparse
import copy
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from hetfl_core import RunConfig
from hetfl_core.engine import build_simulation, run_rounds, seeded_generator
from hetfl_core.experiments import sweep
from hetfl_core.models import build_model


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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=4, help="seeds per sweep")
    parser.add_argument("--skip", default="", help="comma-separated: ray, flower")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    torch.set_num_threads(1)
    config = RunConfig(method="fedavg", dataset="fashion-mnist", model="lenet5", partition="iid", clients=20,
                       train_samples=7500, test_fraction=0.2, rounds=args.rounds, batch_size=32, lr=0.05,
                       eval_every=args.rounds, eval_global=False)
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
            from hetfl_core.ray_executor import connect

            seconds, _ = timed(lambda: (connect(cpus=2), sweep(configs, processes=2, executor="ray",
                                                               directory=Path(tmp, "ray"), progress=False)))
            rows.append((f"sweep on a local Ray, 2 CPUs ({args.runs} runs)", args.runs * per_run, seconds))
            connect().shutdown()
    if "flower" not in skip:
        from hetfl_core.flower import run_flower

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
