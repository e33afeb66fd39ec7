"""Each chapter's book-scale training cost in training samples, to keep its budget.

``python tools/training_cost.py [SCALE]`` lists, per chapter, its runs' configs at
``SCALE`` (default ``book``) and their cost: for one run, the participants per round times
the rounds times the samples each trains on per round (``local_steps x batch_size``, or
``local_epochs`` times its share of the training samples). A plan's equal configs are
counted once, as the cache runs them once. The cost is nominal: it ignores the model's size and
methods that train twice a visit (Ditto), so it compares a chapter with itself.

The FedLPS and SRP-pFed runs come from the chapters' plans (as ``tools/scale_snapshot.py``
collects them); the Heroes and lightweight chapters build their grids in the notebooks,
so :func:`heroes` and :func:`lightweight` rebuild them with the same chapter functions and
the notebooks' ``by_scale`` values: keep them in step with the notebooks.
"""
from __future__ import annotations

import functools
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hetfl_core import ALL, RunConfig, by_scale  # noqa: E402


@functools.lru_cache(maxsize=None)
def _pool(dataset: str) -> int:
    """The training pool's size of ``dataset``."""
    from hetfl_core.data import load_dataset

    return len(load_dataset(dataset).y_train)


def samples(config: RunConfig) -> float:
    """Training samples one run of ``config`` processes (nominal, see the module)."""
    per_round = max(1, round(config.clients * config.participation))
    if config.local_steps:
        local = config.local_steps * config.batch_size
    else:
        pool = config.train_samples or _pool(config.dataset)
        share = pool * (1 - config.test_fraction - config.val_fraction) / config.clients
        local = config.local_epochs * share
    return per_round * config.rounds * local


def fedlps(scale: str) -> dict:
    """The FedLPS plan's runs, and the notebook's decomposition runs (not cached)."""
    from hetfl_core.chapters import fedlps as ch

    plan = ch.make_plan(scale, "fashion-mnist", 0, "medium")
    runs = {c.key(): c for c in plan.configs.values()}
    side = plan.side
    extra = [side.replace(classes_per_client=c)
             for c in (max(plan.class_levels), 2)]                 # the mask decomposition
    iid = side.replace(classes_per_client=max(plan.class_levels))
    extra += [iid.replace(local_epochs=e or iid.local_epochs)      # the IID collapse
              for _, e in ch.COLLAPSE.values()]
    return {"plan": list(runs.values()), "decomposition": extra}


def srp_pfed(scale: str) -> dict:
    """The SRP-pFed plan's runs (with Table III's further seeds) and the semi-asynchronous
    pairs."""
    from hetfl_core.chapters import srp_pfed as ch

    rounds = by_scale(scale, smoke=2, book=30, paper=2000)
    srp = {"candidates": 10, "k": 2, "decay": 0.9}
    plan = ch.make_plan(scale, "fashion-mnist", 0, rounds, srp)
    # Table III's further seeds: SRP-pFed and the comparator the first seed picks (any
    # rival costs the same here; LotteryFL stands for it)
    for sp in ch.SPLITS:
        for m in ("LotteryFL", "SRP-pFed"):
            for s in plan.seeds:
                plan.configs.setdefault(("tab3", sp, m, s), plan.config(sp, m, {}, s))
    runs = {c.key(): c for c in plan.configs.values()}
    pairs = [plan.config("dir(1)", "SRP-pFed", {"window": w}, s, heterogeneity="medium",
                         eval_every=1) for s in plan.seeds7 for w in (None, 1.0)]
    return {"plan": list(runs.values()), "semi-async": pairs}


def heroes(scale: str) -> dict:
    """The Heroes notebook's grids (book/heroes.ipynb), rebuilt."""
    from hetfl_core.chapters import heroes as ch

    seed = 0
    seeds = list(range(seed, seed + by_scale(scale, smoke=1, book=3, paper=3)))
    base = ch.cnn_setting(scale, "mnist-5k-14", "edge", seed, skew=0.4, lr=0.05)
    grid = {"E1 CNN": ch.experiment(list(ch.VARIANTS), base, seeds),
            "HeteroFL own widths": {s: base.replace(seed=s, **ch.HETEROFL_OWN_WIDTHS)
                                    for s in seeds},
            "noisy times": ch.experiment(["fedavg", "heterofl", "heroes"], base, [seed],
                                         time_noise=0.3)}
    res_base = base.replace(model="resnet", partition="missing", alpha=0.4,
                            rounds=by_scale(scale, smoke=2, book=20, paper=120))
    grid["E2 ResNet"] = ch.experiment(["fedavg", "flanc", "enc", "heroes"], res_base, seeds)
    grid["Fig. 7"] = {(a, *k): c for a in (0.1, 0.8) for k, c in ch.experiment(
        ["fedavg", "heterofl", "flanc", "heroes"], base, [seed], alpha=a).items()}
    text = base.replace(dataset="shakespeare", model="charlstm-s", partition="natural",
                        clients=12, participation=0.5, batch_size=16,
                        train_samples=by_scale(scale, smoke=4000, book=40000, paper=ALL),
                        rounds=by_scale(scale, smoke=2, book=16, paper=120))
    grid["Fig. 9 text"] = ch.experiment(["fedavg", "flanc", "enc", "heroes"], text, seeds)
    grid["3x rounds probe"] = ch.experiment(
        ["fedavg", "heterofl", "flanc", "enc", "heroes"],
        base.replace(rounds=3 * base.rounds), [seed])
    return {k: list(v.values()) for k, v in grid.items()}



def lightweight(scale: str) -> dict:
    """The lightweight notebook's grids (book/lightweight_pfl.ipynb), rebuilt."""
    from hetfl_core.chapters import lightweight_pfl as lp

    seed, clients = 0, 10
    dataset = by_scale(scale, smoke="digits", book="fashion-mnist", paper="fashion-mnist")
    model = "cnn" if dataset == "digits" else "lenet5"
    rounds = by_scale(scale, smoke=2, book=40, paper=100)
    local_steps = by_scale(scale, smoke=1, book=2, paper=1)
    seeds = list(range(seed, seed + by_scale(scale, smoke=1, book=3, paper=5)))
    base = RunConfig(method="sparse-prune-pfl", dataset=dataset, model=model,
                     clients=clients, rounds=rounds, local_steps=local_steps,
                     batch_size=32, seed=seed,
                     train_samples=by_scale(scale, smoke=400, book=4000, paper=ALL),
                     options={"theta_ratio": 10.0})
    cases = by_scale(scale, smoke=["class-2", "alpha=0.1"], book=list(lp.CASES),
                     paper=list(lp.CASES))
    grid = {"Figs. 2-3, Table IV, Fig. 10": lp.image_grid(
                base, cases, seeds, ablation_seeds=by_scale(scale, smoke=2, book=1, paper=2)),
            "scale probe": lp.scale_probe_grid(base, cases[-1], seed)}
    res_cases = by_scale(scale, smoke=["alpha=0.1"], book=["class-4", "alpha=0.1"],
                         paper=list(lp.CASES))
    res_base = base.replace(model="resnet",
                            rounds=by_scale(scale, smoke=2, book=30, paper=rounds))
    grid["ResNet"] = {(c, m, s): lp.config_for(res_base, o, seed=s, **lp.CASES[c])
                      for c in res_cases for m, o in lp.RES_METHODS.items()
                      for s in seeds}
    alphas = by_scale(scale, smoke=[0.1], book=[0.1, 2.0], paper=[0.1, 0.3, 0.5, 0.7, 1.0, 2.0])
    grid["Table III"] = {(a, i): lp.method_config(base, split=f"first:{i}",
                                                  partition="dirichlet", alpha=a)
                         for a in alphas for i in range(1, 5)}
    bands = by_scale(scale, smoke=["10 MHz", "50 MHz"], book=["10 MHz", "50 MHz", "10~50 MHz"],
                     paper=["10 MHz", "30 MHz", "50 MHz", "10~50 MHz"])
    case9 = "alpha=0.5" if "alpha=0.5" in cases else cases[0]
    # Fig. 9's runs differ from ``base`` in the band and the deadline only: the same cost
    grid["Fig. 9"] = {(b, m): base for b in bands for m in ("OPT", *lp.FIXED9)}
    grid["warm-up"] = {0: lp.method_config(base, allocation="dca", **lp.CASES[case9])}
    text_seeds = seeds[:by_scale(scale, smoke=1, book=2, paper=3)]
    text = base.replace(dataset="bible-pairs", model="lora-transformer", local_steps=1,
                        rounds=by_scale(scale, smoke=3, book=50, paper=300),
                        partition="dirichlet",
                        train_samples=by_scale(scale, smoke=400, book=ALL, paper=ALL))
    grid["Figs. 6-8 text"] = lp.text_grid(text, by_scale(scale, smoke=[1.0], book=[1.0, 2.0],
                                                         paper=[1.0, 2.0]), text_seeds)
    return {k: list(v.values()) for k, v in grid.items()}



CHAPTERS = {"fedlps": fedlps, "heroes": heroes, "lightweight_pfl": lightweight,
            "srp_pfed": srp_pfed}


def main(argv) -> int:
    """Print each chapter's runs and training samples at the scale given (book)."""
    scale = argv[0] if argv else "book"
    for name, grids in CHAPTERS.items():
        parts = grids(scale)
        total, lines = 0.0, []
        for part, configs in parts.items():
            cost = sum(samples(c) for c in configs)
            total += cost
            lines.append(f"  {part:32s} {len(configs):4d} runs {cost / 1e6:9.2f} M samples")
        print(f"{name}: {total / 1e6:.3f} M training samples")
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
