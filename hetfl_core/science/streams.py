"""The run's seeded random streams, each named once.

Every random draw of a run comes from a generator seeded with the run's seed and a stream
id, ``np.random.default_rng([seed, STREAMS["hardware"]])`` or
``seeded_generator(seed, STREAMS["random_units"], client)``, so that one part of a run
(another method, another cost model) never shifts the numbers another part draws. The ids
are fixed for good: a changed id changes every number drawn from its stream, and with them
the golden histories.

A client's local training draws from ``seeded_generator(seed, round, client)``, which has
no id of its own: its round number stands where an id stands. A stream of the same length
whose id is a round number therefore repeats that round's training stream; FedBABU's
fine-tuning, ``(finetune, client)``, is the client's round-7 training stream, and the
``round_zero`` streams are the clients' streams of a round the engine never runs.
"""
from __future__ import annotations

__all__ = ["STREAMS"]

#: stream name -> id, the number after the run's seed in the generator's seed
STREAMS: dict[str, int] = {
    "round_zero": 0,        # a client's draws fixed before round 1 (FedLPS' random pattern, PruneFL's pruning)
    "deal": 1,              # the training subset and the deal of samples to clients
    "hardware": 2,          # each client's hardware tier
    "participants": 4,      # each round's sampled clients
    "time_noise": 5,        # the noise on a client's compute time, per (round, client)
    "writers": 6,           # each writer's style (partition "writers")
    "finetune": 7,          # FedBABU's fine-tuning minibatches, per client
    "random_blocks": 7,     # Heroes' random block selection, appended after (round, client)
    "random_units": 11,     # the random unit mask's units, per client
    "rate_walk": 31,        # SRP-pFed's update rates, per round
    "learned_scores": 41,   # FedLPS' initial unit scores, per client
    "pucbv": 43,            # FedLPS' P-UCBV agents, per client
    "dynamic_tiers": 47,    # FedLPS' redrawn hardware tiers, per (round, client)
    "code_masks": 53,       # FedLPS (released code): the fresh scores, per (round, client)
    "server_noise": 59,     # FedLPS (released code): the server's noise on the model, per round
    "dynamic_rates": 61,    # HeteroFL's 'dynamic' mode: every client's width, per round
    "cell": 404,            # the wireless cell, then 0: its clients' places, 1: the deadline probe, 2: its rounds
}
