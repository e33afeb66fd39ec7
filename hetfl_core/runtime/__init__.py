"""The run machinery: a run's configuration (:mod:`.config`), the engine that runs one
(:mod:`.engine`, its clients batched by :mod:`.batched`), the cache, sweeps and worker pool
(:mod:`.experiments`), and the executors that spread runs or clients over machines (Ray,
:mod:`.ray_executor`; Flower, :mod:`.flower` and its app :mod:`.flower_app`).
Every file here enters a run's cache key (:func:`.experiments.source_hash`).
"""
