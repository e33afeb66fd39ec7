"""The GPU kit (tools/gpu_kit.py): its pack, the GPU command's stages run here on the CPU at
a tiny scale, and the merge of what comes back."""
import importlib.util
import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("gpu_kit", ROOT / "tools" / "gpu_kit.py")
gpu_kit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_kit)

#: a stand-in for tools/ladder.py's ``run``: checks the arguments the kit passes, then
#: stores one finished run with its provenance, as the ladder does
FAKE_LADDER = '''
import json, pathlib, sys
verb, _, rung, _, until, _, device, _, store = sys.argv[1:]
assert (verb, sys.argv[2], sys.argv[4], sys.argv[6], sys.argv[8]) == ("run", "--rung", "--until-s", "--device", "--store")
assert rung == "paper" and device == "cpu" and int(until) > 0
runs = pathlib.Path(store, "runs")
runs.mkdir(parents=True, exist_ok=True)
record = {"config": {"method": "fedavg"}, "history": [{"round": 1, "acc_personal": 0.5}],
          "provenance": {"device": "cpu", "date": "2026-11-28 12:00:00 UTC", "commit": "abc",
                         "source_hash": "123"}}
(runs / "fedavg-paper-0.json").write_text(json.dumps(record))
'''


def data_root(tmp_path) -> Path:
    root = tmp_path / "data"
    (root / "shakespeare").mkdir(parents=True)
    (root / "shakespeare" / "play.txt").write_text("To be, or not to be\n" * 100)
    return root


def test_the_gpu_command_fits_one_call():
    command = gpu_kit.there_command()
    assert len(command) <= 2000 and "--kit .kit" in command and '--out "$OUT"' in command
    assert int(command.split("--budget-s ")[1].split()[0]) <= 540     # 9 of the call's 10 minutes


def test_pack_builds_the_kit_and_refuses_one_too_large(tmp_path):
    kit = tmp_path / "kit"
    manifest = gpu_kit.pack(kit, wheels=(), datasets=("shakespeare", "digits"), data_root=data_root(tmp_path))
    assert manifest["data_entries"] == ["shakespeare"] and manifest["wheels"] == []
    assert json.loads((kit / "manifest.json").read_text())["command"] == gpu_kit.there_command()
    with tarfile.open(kit / "data.tar.gz") as tar:
        assert "shakespeare/play.txt" in tar.getnames()
    assert manifest["kit_bytes"] == gpu_kit.folder_size(kit) - (kit / "manifest.json").stat().st_size
    with pytest.raises(SystemExit, match=r"over the 1 MiB a call carries"):
        gpu_kit.pack(kit, wheels=(), datasets=("shakespeare",), data_root=data_root(tmp_path / "again"),
                     limit=gpu_kit.MIB)


@pytest.mark.parametrize("datasets, needle", [(("imagenet",), "unknown dataset"),
                                              (("fashion-mnist",), "FashionMNIST not in")])
def test_pack_names_a_missing_or_unknown_dataset(tmp_path, datasets, needle):
    with pytest.raises(SystemExit, match=needle):
        gpu_kit.pack(tmp_path / "kit", wheels=(), datasets=datasets, data_root=data_root(tmp_path))


@pytest.mark.slow     # the kit's stages in processes: not in make test-fast
def test_the_gpu_command_runs_its_stages_on_the_cpu(tmp_path):
    """``there`` end to end at the tiny scale, on the CPU: the tests (their CUDA cases skip),
    the benchmark, a ladder stand-in, and one archive that ``unpack`` reads."""
    from hetfl_core.science.data.storage import data_root as installed

    if not (installed() / "FashionMNIST").is_dir():
        pytest.skip(f"the benchmark's Fashion-MNIST is not installed in {installed()} (make data)")
    kit = tmp_path / "kit"
    gpu_kit.pack(kit, wheels=(), datasets=("fashion-mnist", "digits"), data_root=installed(), compresslevel=1)
    ladder = tmp_path / "ladder.py"
    ladder.write_text(FAKE_LADDER)
    archive = gpu_kit.there(kit, tmp_path / "out", budget_s=400, device="cpu", scale="tiny", ladder=ladder,
                            store=tmp_path / "store", python=sys.executable)
    log = (tmp_path / "out" / "there.log").read_text()
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        summary = json.load(tar.extractfile("summary.json"))
        measured = json.load(tar.extractfile("benchmark.json"))
    assert {"runs/fedavg-paper-0.json", "benchmark.json", "logs/there.log", "logs/tests.xml"} <= names, log
    stages = summary["stages"]
    assert stages["install"].startswith("skipped: no wheels"), stages
    assert all(stages[s].startswith("ok") for s in ("environment", "data", "datasets", "tests", "benchmark",
                                                    "ladder")), log
    tests = summary["cuda_tests"]
    assert tests["failures"] == tests["errors"] == 0 and tests["tests"] > 0
    ways = measured["workloads"][0]["ways"]
    assert set(ways) == {"sequential", "plain"} and ways["plain"]["samples_per_s"] > 0
    assert ways["plain"]["max_weight_gap_to_sequential"] < 1e-4      # the same round, batched
    root = tmp_path / "repo"
    root.mkdir()
    (root / "README.md").write_text(f"# x\n{gpu_kit.README_BEGIN}\nold\n{gpu_kit.README_END}\n")
    done = gpu_kit.unpack(archive, root)
    assert done["added"] == ["fedavg-paper-0.json"] and done["benchmark"] == "results/gpu/benchmark.json"


def test_a_missing_ladder_is_a_skipped_stage(tmp_path):
    stages = gpu_kit.Stages(tmp_path / "log", 100)
    runs = gpu_kit.ladder_stage(stages, tmp_path / "tools" / "ladder.py", "paper", "cuda", tmp_path / "store",
                                sys.executable, {})
    assert runs == [] and stages.outcomes["ladder"].startswith("skipped")
    assert "stage skipped" in (tmp_path / "log").read_text() and "ladder.py is not in this tree" in (
        tmp_path / "log").read_text()


def run_record(date: str, value: float, provenance: bool = True) -> dict:
    record = {"history": [{"round": 1, "acc_personal": value}]}
    if provenance:
        record["provenance"] = {"device": "NVIDIA H200", "date": date, "commit": "abc", "source_hash": "123"}
    return record


def test_unpack_merges_runs_keeps_newer_ones_and_renders_the_table(tmp_path):
    root = tmp_path / "repo"
    stored = root / "results" / "ladder" / "runs"
    stored.mkdir(parents=True)
    (root / "README.md").write_text(f"# x\n{gpu_kit.README_BEGIN}\nold\n{gpu_kit.README_END}\ntail\n")
    (stored / "older.json").write_text(json.dumps(run_record("2026-11-01 10:00 UTC", 0.1)))
    (stored / "newer.json").write_text(json.dumps(run_record("2026-12-01 10:00:00 UTC", 0.2)))
    came = tmp_path / "came"
    came.mkdir()
    for name, record in {"fresh": run_record("2026-11-28 10:00:00 UTC", 0.3),
                         "older": run_record("2026-11-28 10:00:00 UTC", 0.4),
                         "newer": run_record("2026-11-28 10:00:00 UTC", 0.5),
                         "bare": run_record("", 0.6, provenance=False)}.items():
        (came / f"{name}.json").write_text(json.dumps(record))
    benchmark = tmp_path / "benchmark.json"
    ways = {"sequential": {"samples_per_s": 1000.0, "kernel_share": 0.1, "max_weight_gap_to_sequential": 0.0},
            "plain": {"samples_per_s": 2500.0, "kernel_share": 0.42, "max_weight_gap_to_sequential": 3e-7}}
    benchmark.write_text(json.dumps({"gpu": "NVIDIA H200", "torch": "2.11.0", "date": "2026-11-28 10:00 UTC",
                                     "device": "cuda", "workloads": [{"workload": "LeNet-5, 100 clients",
                                                                      "ways": ways}]}))
    archive = gpu_kit.pack_results(tmp_path / "results.tar.gz", sorted(came.glob("*.json")), benchmark, [],
                                   {"stages": {}, "cuda_tests": {"tests": 3, "passed": 2, "failures": 0,
                                                                 "errors": 0, "skipped": 1}})
    done = gpu_kit.unpack(archive, root)
    assert (done["added"], done["updated"], done["kept"]) == (["fresh.json"], ["older.json"], ["newer.json"])
    assert len(done["refused"]) == 1 and done["refused"][0].startswith("bare.json")
    assert json.loads((stored / "older.json").read_text())["history"][0]["acc_personal"] == 0.4
    assert json.loads((stored / "newer.json").read_text())["history"][0]["acc_personal"] == 0.2
    assert json.loads((stored / "fresh.json").read_text())["provenance"]["device"] == "NVIDIA H200"
    readme = (root / "README.md").read_text()
    assert "old" not in readme and readme.endswith("tail\n")
    assert "| LeNet-5, 100 clients | plain | 2,500 | 2.50 | 42% | 3.0e-07 |" in readme
    assert "CUDA tests: 2 passed, 0 failed, 0 errors, 1 skipped." in readme


def test_the_table_says_when_nothing_ran_on_a_gpu(tmp_path):
    assert "not yet run on a GPU" in gpu_kit.gpu_table(None)
    (tmp_path / "README.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- gpu-table -->"):
        gpu_kit.update_readme(tmp_path)
