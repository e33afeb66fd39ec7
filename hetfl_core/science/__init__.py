"""The science: the papers' pieces and the simulation they run in.

The methods (:mod:`.methods`, one file each), the pieces they are built from (masks,
bandits, composition, DCA, lottery tickets, frequency, reinforced walks, sub-models,
personalization, compression, partial updates), the models and local training, the data
(:mod:`.data`) and the simulated hardware and its cost model (:mod:`.system`).
Every file here enters a run's cache key (:func:`hetfl_core.runtime.experiments.source_hash`).
"""
