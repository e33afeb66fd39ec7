"""Throughput benchmark: local-training samples per second and seconds per FedAvg round.

    python tools/benchmark.py [--model cnn] [--dataset fashion-mnist] [--threads 1]

Speed is measured here, never asserted in a test.
"""
import argparse
import time

import torch

from hetfl_core import RunConfig, run
from hetfl_core.data import load_dataset
from hetfl_core.engine import seeded_generator
from hetfl_core.models import build_model
from hetfl_core.training import local_sgd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="cnn")
    parser.add_argument("--dataset", default="fashion-mnist")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    ds = load_dataset(args.dataset)
    model = build_model(args.model, ds.input_shape, ds.num_classes)
    local_sgd(model, ds.x_train, ds.y_train, 5, 32, 0.05, seeded_generator(0))  # warm-up
    start = time.perf_counter()
    result = local_sgd(model, ds.x_train, ds.y_train, args.steps, 32, 0.05, seeded_generator(1))
    elapsed = time.perf_counter() - start
    print(f"{args.model} on {args.dataset}, {args.threads} thread(s): "
          f"{result.samples / elapsed:,.0f} training samples/s")
    config = RunConfig(dataset=args.dataset, model=args.model, train_samples=12000, clients=20, rounds=3)
    start = time.perf_counter()
    run(config)
    print(f"FedAvg, 20 clients, 12,000 samples, 1 epoch: {(time.perf_counter() - start) / 3:.2f} s per round")


if __name__ == "__main__":
    main()
