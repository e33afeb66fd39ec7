"""The run log the book build reads for its execution report (HETFL_RUN_LOG)."""
import json

from hetfl_core.science.data.fingerprint import dataset_fingerprint
from hetfl_core.runtime.experiments import cache_path, run_cached, sweep


def test_runs_are_logged_as_computed_then_cached(tiny_config, cache, tmp_path, monkeypatch):
    log = tmp_path / "log" / "chapter.jsonl"
    monkeypatch.setenv("HETFL_RUN_LOG", str(log))
    config = tiny_config.replace(rounds=1)
    run_cached(config)
    run_cached(config)
    sweep([config], processes=1, progress=False)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["cached"] for line in lines] == [False, True, True]
    assert {line["method"] for line in lines} == {"fedavg"} and lines[0]["seconds"] > 0
    assert {line["key"] for line in lines} == {cache_path(config).stem.rsplit("-", 1)[1]}
    assert {line["data"] for line in lines} == {dataset_fingerprint(config.dataset)}


def test_nothing_is_logged_without_the_variable(tiny_config, cache, tmp_path, monkeypatch):
    monkeypatch.delenv("HETFL_RUN_LOG", raising=False)
    run_cached(tiny_config.replace(rounds=1))
    assert not list(tmp_path.rglob("*.jsonl"))


def test_the_cache_key_ignores_code_that_only_reads_results(tmp_path, monkeypatch):
    import functools

    import hetfl_core.runtime.experiments as ex

    files = {"runtime/engine.py": "a", "book/chapter.py": "b", "book/report.py": "c",
             "science/methods/fedavg.py": "d"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(ex, "__file__", str(tmp_path / "runtime" / "experiments.py"))
    monkeypatch.setattr(ex, "source_hash", functools.cache(ex.source_hash.__wrapped__))  # a cache of its own

    def fresh():
        ex.source_hash.cache_clear()
        return ex.source_hash()

    before = fresh()
    (tmp_path / "book" / "chapter.py").write_text("changed")
    (tmp_path / "book" / "report.py").write_text("changed")
    assert fresh() == before
    (tmp_path / "science" / "methods" / "fedavg.py").write_text("changed")
    assert fresh() != before
