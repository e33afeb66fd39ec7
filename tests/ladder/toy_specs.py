"""A toy claim for the ladder's tests: FedAvg against local training on a few digits,
two rungs of a few seconds each (loaded through $HETFL_LADDER_SPECS)."""
from hetfl_core.runtime.config import RunConfig
from hetfl_core.book.ladder import ClaimSpec, register
from hetfl_core.book.report import at_least, final, per_seed


def toy_setting(scale):
    """Four clients, two rounds of 15 local steps on the digits (the paper scale three rounds)."""
    return RunConfig(dataset="digits", model="mlp", partition="iid", clients=4, participation=0.5,
                     rounds=3 if scale == "paper" else 2, local_steps=15, batch_size=16,
                     train_samples=200, eval_every=1, heterogeneity="none", seed=0)


def toy_gap(runs, rival):
    """Per seed, FedAvg's final accuracy minus the rival's (points)."""
    return 100 * (per_seed(runs["FedAvg"], final) - per_seed(runs[rival], final))


register(ClaimSpec("toy", "Toy 1", "FedAvg beats local training", "none", "+5 points", 5.0,
                   "FedAvg", ("Local",), {"FedAvg": ("fedavg", {}), "Local": ("local", {})},
                   toy_setting, toy_gap, at_least(0, " points", "FedAvg − Local"),
                   rungs=("book", "x2")))
