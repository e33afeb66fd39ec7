"""A kit for one short call on a GPU machine that has PyTorch but nothing of hetfl's own.

    python tools/gpu_kit.py pack              # here: build .kit/ and print the call to make
    python tools/gpu_kit.py there ...         # there: the one command that call runs
    python tools/gpu_kit.py unpack ARCHIVE    # here again: merge what came back
    python tools/gpu_kit.py readme            # re-render the README's GPU table

``pack`` fills ``.kit/`` (git-ignored; the call carries it): the pure-Python wheels of the
packages the planned runs import lazily that the machine lacks, the datasets they read
(from ``$HETFL_DATA``, compressed), and a manifest. It prints the kit's size, the size of
the whole tree that travels, and the command; it stops with one line if the two together
pass the 64 MiB a call may carry.

``there`` runs stage by stage, each boxed in time so that one that fails or overruns still
leaves the others' output: it installs the wheels, unpacks the data, runs the CUDA tests,
runs the benchmark (sequential against batched clients, :mod:`tools.benchmark`), then
computes missing ladder runs (``tools/ladder.py run``) until the time is nearly up, and
packs every new run, the benchmark's JSON and the log into one archive under ``--out``.

``unpack`` merges the archive's runs into ``results/ladder/runs/`` (a stored run that is as
new or newer is kept), stores the benchmark as ``results/gpu/benchmark.json`` and renders
the README's GPU table from it.

Only the standard library is imported at the top: ``there`` starts before its wheels are
installed.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KIT = ROOT / ".kit"
MIB = 1 << 20
#: what one call may carry (the tree that travels, the kit included) and bring back per file
CARRY_LIMIT = 64 * MIB
RETURN_LIMIT = 16 * MIB
#: the packages hetfl imports lazily that the GPU machine lacks, pure Python: ``mlxtend``
#: (the mnist-5k digits, hetfl_core/science/data/datasets.py) and ``pysword`` (the Bible corpora's
#: versification, hetfl_core/science/data/bible.py). cvxpy (DCA's solver, hetfl_core/science/dca.py) is
#: compiled code and is not carried: a run that solves DCA's subproblem fails there.
WHEELS = ("mlxtend", "pysword")
#: dataset name -> what it reads under ``$HETFL_DATA`` (``digits`` ships with scikit-learn,
#: which the machine has; ``mnist-5k`` is read from mlxtend's wheel, or its cached copy)
DATA_FILES = {"fashion-mnist": ("FashionMNIST",), "shakespeare": ("shakespeare",),
              "bible-pairs": ("bible",), "bible-topics": ("bible",), "mnist-5k": ("mnist-5k.npz",),
              "digits": ()}
#: the datasets the chapters read at paper scale (their parameters cells)
PAPER_DATASETS = ("fashion-mnist", "mnist-5k", "shakespeare", "bible-pairs", "bible-topics", "digits")
#: the platforms pip matches a wheel against for the machine (x86-64 Linux, CPython 3.12)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any")
#: the stages of ``there`` with the most seconds each may take (the ladder gets what is left)
STAGE_CAPS = {"environment": 30, "install": 90, "data": 90, "datasets": 120, "tests": 150, "benchmark": 200}
#: seconds kept back at the end for packing the archive
PACK_RESERVE_S = 25
#: the benchmark's arguments per scale (``tiny``: a smoke test of the stage)
BENCHMARK_ARGS = {"paper": ["--rounds", "3", "--paper-clients", "100", "--variants", "plain,compile,cudagraphs,fused"],
                  "smoke": ["--tiny", "--rounds", "1", "--paper-clients", "10", "--variants", "plain,compile,fused",
                            "--backend", "aot_eager"],
                  "tiny": ["--tiny", "--rounds", "1", "--paper-clients", "4", "--variants", "plain"]}
#: the CUDA tests (their ids name the device; without a GPU each skips with its reason)
CUDA_TESTS = ("tests/test_devices.py", "tests/test_batched_clients.py")
README_BEGIN, README_END = "<!-- gpu-table -->", "<!-- /gpu-table -->"


def fail(message: str):
    """Stop with one line naming the cause."""
    raise SystemExit(f"gpu_kit: {message}")


def sha256(path: Path) -> str:
    """The file's sha256, hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def folder_size(path: Path) -> int:
    """Bytes of every file under ``path`` (or of the file itself)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def travelling_size(root: Path = ROOT) -> int:
    """Bytes of the tree a call sends: tracked files and untracked ones git does not ignore."""
    listed = [p for which in ("--cached", "--others")     # together, git lists ignored files too
              for p in subprocess.run(["git", "ls-files", "-z", which, "--exclude-standard"], cwd=root,
                                      capture_output=True, check=True).stdout.split(b"\0")]
    return sum((root / p.decode()).stat().st_size for p in listed if p and (root / p.decode()).is_file())


def there_command(budget_s: int = 540, rung: str = "paper", device: str = "cuda") -> str:
    """The one command the GPU call runs (in the repository's root, carrying ``.kit``)."""
    return (f'PYTHONUNBUFFERED=1 python3 tools/gpu_kit.py there --kit .kit --out "$OUT" '
            f"--budget-s {budget_s} --rung {rung} --device {device}")


# ---------------------------------------------------------------------------------- pack

def download_wheels(names, dest: Path) -> list[Path]:
    """Each package's wheel, at the version installed here, for CPython 3.12 on x86-64 Linux
    (no dependencies: the machine has theirs); a package released as source only is built
    into a wheel here, which must be pure Python."""
    from importlib.metadata import PackageNotFoundError, version

    dest.mkdir(parents=True, exist_ok=True)
    wheels = []
    for name in names:
        try:
            pinned = f"{name}=={version(name)}"
        except PackageNotFoundError:
            fail(f"{name} is not installed here, so its version for the kit is unknown (pip install {name})")
        platform_args = [x for p in PLATFORMS for x in ("--platform", p)]
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                               "--python-version", "3.12", "--implementation", "cp", *platform_args,
                               "-d", str(dest), pinned], capture_output=True, text=True)
        if done.returncode:   # a source release only (pysword): build its wheel here
            done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), pinned],
                                  capture_output=True, text=True)
        if done.returncode:
            fail(f"pip could neither download nor build a wheel of {pinned} for Python 3.12: "
                 f"{(done.stderr.strip().splitlines() or ['no message'])[-1]}")
        found = sorted(dest.glob(f"{name.replace('-', '_')}-{version(name)}-*.whl"))
        if found and not found[0].name.endswith("-none-any.whl"):
            fail(f"{found[0].name} is not pure Python: it may not run on the GPU machine's Python 3.12")
        if not found:
            fail(f"pip downloaded no wheel named {name}-{version(name)}-*.whl into {dest}")
        wheels.append(found[0])
    return wheels


def pack_data(datasets, data_root: Path, dest: Path, compresslevel: int = 6) -> list[str]:
    """The files of ``datasets`` under ``data_root`` as one gzip tar at ``dest``; returns the
    entries packed. A dataset that is not installed here stops the pack."""
    unknown = sorted(set(datasets) - set(DATA_FILES))
    if unknown:
        fail(f"unknown dataset(s) {', '.join(unknown)}; the kit knows: {', '.join(DATA_FILES)}")
    entries = sorted({entry for name in datasets for entry in DATA_FILES[name]})
    present = [e for e in entries if (data_root / e).exists()]
    missing = sorted(set(entries) - set(present) - {"mnist-5k.npz"})   # mlxtend's wheel holds mnist-5k
    if missing:
        fail(f"{', '.join(missing)} not in {data_root} (install the data: make data)")
    with tarfile.open(dest, "w:gz", compresslevel=compresslevel) as tar:
        for entry in present:
            tar.add(data_root / entry, arcname=entry)
    return present


def source_hash() -> str:
    """The package's source hash (:func:`hetfl_core.runtime.experiments.source_hash`)."""
    sys.path.insert(0, str(ROOT))
    from hetfl_core.runtime.experiments import source_hash as digest

    return digest()


def git_commit(root: Path = ROOT) -> str:
    """The checked-out commit, with a note when the package has uncommitted changes."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "hetfl_core", "tools"], cwd=root,
                           capture_output=True, text=True).stdout.strip()
    return (commit or "unknown") + (" (with uncommitted changes)" if dirty else "")


def pack(kit: Path = KIT, wheels=WHEELS, datasets=PAPER_DATASETS, data_root: Path | None = None,
         limit: int = CARRY_LIMIT, root: Path = ROOT, budget_s: int = 540, compresslevel: int = 6) -> dict:
    """Build the kit (wheels, data, manifest) afresh in ``kit``; return its manifest. Stops with
    one line when the tree that travels, the kit included, is over ``limit`` bytes
    (``compresslevel``: gzip's, 1 fastest, 9 smallest)."""
    data_root = Path(data_root or os.environ.get("HETFL_DATA") or Path.home() / ".cache" / "hetfl")
    if kit.exists():
        shutil.rmtree(kit)
    kit.mkdir(parents=True)
    found = download_wheels(wheels, kit / "wheels") if wheels else []
    entries = pack_data(datasets, data_root, kit / "data.tar.gz", compresslevel)
    kit_bytes = folder_size(kit)
    tree_bytes = travelling_size(root)
    manifest = {"created": now(), "commit": git_commit(root), "source_hash": source_hash(),
                "wheels": [{"file": w.name, "sha256": sha256(w), "bytes": w.stat().st_size} for w in found],
                "datasets": list(datasets), "data_entries": entries,
                "data_sha256": sha256(kit / "data.tar.gz"), "kit_bytes": kit_bytes, "tree_bytes": tree_bytes,
                "command": there_command(budget_s), "carry": [kit.name], "timeout_s": 600}
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=1))
    if kit_bytes + tree_bytes > limit:
        fail(f"the kit ({kit_bytes / MIB:.1f} MiB) and the tree ({tree_bytes / MIB:.1f} MiB) are "
             f"{(kit_bytes + tree_bytes) / MIB:.1f} MiB, over the {limit / MIB:.0f} MiB a call carries: "
             f"pack fewer datasets (--datasets)")
    return manifest


def now() -> str:
    """The UTC time as the stored runs write it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# --------------------------------------------------------------------------------- there

class Stages:
    """``there``'s stages against one deadline, each logged (with its wall time and outcome)
    to one log file that is also packed into the archive."""

    def __init__(self, log: Path, budget_s: float):
        self.log, self.deadline = log, time.monotonic() + budget_s
        self.outcomes: dict[str, str] = {}

    def left(self) -> float:
        """Seconds until the deadline."""
        return self.deadline - time.monotonic()

    def write(self, text: str) -> None:
        """Append ``text`` to the log and echo it."""
        with self.log.open("a") as f:
            f.write(text.rstrip("\n") + "\n")
        print(text, flush=True)

    def run(self, name: str, command: list[str], cap: float, env: dict | None = None) -> bool:
        """Run ``command`` for at most ``cap`` seconds (and never past the deadline less the
        packing reserve), its output into the log; whether it exited 0."""
        timeout = min(cap, self.left() - PACK_RESERVE_S)
        if timeout < 5:
            return self.skip(name, f"no time left ({self.left():.0f} s before the deadline)")
        self.write(f"\n== {name}: {shlex.join(command)} (at most {timeout:.0f} s)")
        start = time.monotonic()
        with self.log.open("a") as f:
            try:
                done = subprocess.run(command, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT,
                                      timeout=timeout, start_new_session=False)
                outcome = "ok" if done.returncode == 0 else f"exit {done.returncode}"
            except subprocess.TimeoutExpired:
                outcome = f"stopped after {timeout:.0f} s"
            except OSError as exc:
                outcome = f"could not start ({exc})"
        self.outcomes[name] = f"{outcome}, {time.monotonic() - start:.0f} s"
        self.write(f"== {name}: {self.outcomes[name]}")
        return outcome == "ok"

    def skip(self, name: str, why: str) -> bool:
        """Record ``name`` as skipped, saying why."""
        self.outcomes[name] = f"skipped: {why}"
        self.write(f"\n== {name}: stage skipped: {why}")
        return False


def run_files(store: Path) -> dict[str, str]:
    """``name -> sha256`` of the stored runs under ``store/runs``."""
    return {p.name: sha256(p) for p in sorted((store / "runs").glob("*.json"))}


def test_counts(junit: Path) -> dict | None:
    """Passed, failed, errors and skipped from pytest's JUnit XML (``None`` if absent)."""
    if not junit.is_file():
        return None
    suite = ElementTree.parse(junit).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return counts


def there(kit: Path, out: Path, budget_s: float = 540, rung: str = "paper", device: str = "cuda",
          scale: str = "paper", ladder: Path | None = None, store: Path | None = None,
          python: str = sys.executable, tests_filter: str = "cuda and not variants", skip=()) -> Path:
    """The GPU call's work (module docstring), stage by stage within ``budget_s`` seconds,
    but for the stages named in ``skip`` (``tests``, ``benchmark``, ``ladder``: a second
    call spends its time on the ladder alone); returns the archive written under ``out``.
    The tests leave the compiled step variants to the benchmark, which records their weight
    gap to the sequential round: compiling them for the tests would take minutes."""
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu-kit-"))
    stages = Stages(out / "there.log", budget_s)
    ladder = ladder or ROOT / "tools" / "ladder.py"
    store = store or ROOT / "results" / "ladder"
    site, data = work / "site", work / "data"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HETFL_DATA": str(data),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(site), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    stages.write(f"gpu kit, {now()}: budget {budget_s:.0f} s, rung {rung}, device {device}, scale {scale}")
    manifest = kit / "manifest.json"
    stages.write(manifest.read_text() if manifest.is_file() else f"no manifest in {kit}")

    probe = ("import json, platform, torch; print(json.dumps({'python': platform.python_version(), "
             "'torch': torch.__version__, 'cuda': torch.version.cuda, 'gpu': torch.cuda.get_device_name(0) "
             "if torch.cuda.is_available() else None, 'gpus': torch.cuda.device_count()}))")
    stages.run("environment", [python, "-c", probe], STAGE_CAPS["environment"], env)
    wheels = sorted((kit / "wheels").glob("*.whl"))
    if wheels:
        stages.run("install", [python, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)],
                   STAGE_CAPS["install"], env)
    else:
        stages.skip("install", f"no wheels in {kit / 'wheels'}")
    archive = kit / "data.tar.gz"
    if archive.is_file():
        stages.run("data", [python, "-c", "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], "
                            "filter='data')", str(archive), str(data)], STAGE_CAPS["data"], env)
    else:
        stages.skip("data", f"no {archive}")
    datasets = json.loads(manifest.read_text()).get("datasets", []) if manifest.is_file() else []
    if datasets:     # every packed dataset loads there (the wheels and the data in place)
        stages.run("datasets", [python, "-c", "import sys; from hetfl_core.science.data import load_dataset; "
                                "[print(n, len(load_dataset(n).y_train)) for n in sys.argv[1:]]", *datasets],
                   STAGE_CAPS["datasets"], env)
    junit = work / "tests.xml"
    if "tests" in skip:
        stages.skip("tests", "--skip tests")
    else:
        stages.run("tests", [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"--junitxml={junit}",
                             "-k", tests_filter, *CUDA_TESTS], STAGE_CAPS["tests"], env)
    benchmark = work / "benchmark.json"
    if "benchmark" in skip:
        stages.skip("benchmark", "--skip benchmark")
    else:
        stages.run("benchmark", [python, "tools/benchmark.py", "--batched", "only", "--device", device,
                                 "--json", str(benchmark), *BENCHMARK_ARGS[scale]], STAGE_CAPS["benchmark"], env)
    if "ladder" in skip:
        new_runs = []
        stages.skip("ladder", "--skip ladder")
    else:
        new_runs = ladder_stage(stages, ladder, rung, device, store, python, env)
    summary = {"stages": stages.outcomes, "cuda_tests": test_counts(junit), "finished": now()}
    path = pack_results(out / "gpu-results.tar.gz", new_runs, benchmark if benchmark.is_file() else None,
                        [stages.log, junit], summary)
    stages.write(f"packed {path.name}: {path.stat().st_size / 1024:.0f} KiB; "
                 f"{budget_s - stages.left():.0f} s in all")
    shutil.rmtree(work, ignore_errors=True)
    return path


def ladder_stage(stages: Stages, ladder: Path, rung: str, device: str, store: Path, python: str,
                 env: dict) -> list[Path]:
    """Missing ladder runs computed by ``ladder run`` until the time is nearly up (skipped,
    with a line in the log, where ``ladder`` is absent); returns the run files it wrote or
    changed under ``store/runs``."""
    before = run_files(store)
    if not ladder.is_file():
        stages.skip("ladder", f"{ladder} is not in this tree: no ladder runs computed")
    else:
        until = int(stages.left() - PACK_RESERVE_S - 15)   # its own deadline, then 15 s to write and stop
        if until < 10:
            stages.skip("ladder", f"no time left ({stages.left():.0f} s before the deadline)")
        else:
            stages.run("ladder", [python, str(ladder), "run", "--rung", rung, "--until-s", str(until),
                                  "--device", device, "--store", str(store)], until + 15, env)
    after = run_files(store)
    new_runs = [store / "runs" / name for name, digest in after.items() if before.get(name) != digest]
    stages.write(f"\n== ladder runs finished in this call: {len(new_runs)}")
    return new_runs


def pack_results(dest: Path, runs, benchmark: Path | None, logs, summary: dict) -> Path:
    """One gzip tar at ``dest``: ``runs/*.json``, ``benchmark.json`` (with ``summary`` merged
    in: the stages' outcomes and the CUDA tests' counts), ``summary.json`` and the logs. A log
    that would take the archive past what one file may bring back is cut to its end."""
    def add(tar, name: str, data: bytes):
        info = tarfile.TarInfo(name)
        info.size, info.mtime = len(data), int(time.time())
        tar.addfile(info, io.BytesIO(data))

    measured = json.loads(benchmark.read_text()) if benchmark else None
    with tarfile.open(dest, "w:gz") as tar:
        for run in runs:
            add(tar, f"runs/{Path(run).name}", Path(run).read_bytes())
        if measured is not None:
            add(tar, "benchmark.json", json.dumps({**measured, **summary}, indent=1).encode())
        add(tar, "summary.json", json.dumps(summary, indent=1).encode())
        for log in logs:
            if Path(log).is_file():
                add(tar, f"logs/{Path(log).name}", Path(log).read_bytes()[-4 * MIB:])
    if dest.stat().st_size > RETURN_LIMIT:
        fail(f"{dest.name} is {dest.stat().st_size / MIB:.1f} MiB, over the {RETURN_LIMIT / MIB:.0f} MiB "
             f"one file may bring back")
    return dest


# -------------------------------------------------------------------------------- unpack

def run_date(record: dict) -> datetime.datetime | None:
    """A stored run's provenance date (``None`` if it has none that parses)."""
    text = str(record.get("provenance", {}).get("date", "")).replace(" UTC", "").replace("Z", "")
    for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S.%f"):
        try:
            return datetime.datetime.strptime(text.split("+")[0], fmt)
        except ValueError:
            continue
    return None


def unpack(archive: Path, root: Path = ROOT) -> dict:
    """Merge ``archive`` (:func:`pack_results`'s) into ``root``: its runs into
    ``results/ladder/runs/`` unless a stored run of the same name is as new or newer, its
    benchmark into ``results/gpu/benchmark.json``, and the README's GPU table rendered
    from it. Returns what was added, updated and kept."""
    if not Path(archive).is_file():
        fail(f"no archive {archive}")
    done = {"added": [], "updated": [], "kept": [], "refused": [], "benchmark": None}
    runs_dir = root / "results" / "ladder" / "runs"
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        for run in sorted(Path(tmp, "runs").glob("*.json")):
            record = json.loads(run.read_text())
            new_date = run_date(record)
            if new_date is None or not {"device", "commit", "source_hash"} <= set(record["provenance"]):
                done["refused"].append(f"{run.name} (its provenance lacks a date, device, commit or source hash)")
                continue
            target = runs_dir / run.name
            if target.is_file():
                old_date = run_date(json.loads(target.read_text()))
                if old_date is not None and old_date >= new_date:
                    done["kept"].append(run.name)
                    continue
            runs_dir.mkdir(parents=True, exist_ok=True)
            done["updated" if target.is_file() else "added"].append(run.name)
            shutil.copyfile(run, target)
        benchmark = Path(tmp, "benchmark.json")
        if benchmark.is_file():
            stored = root / "results" / "gpu" / "benchmark.json"
            stored.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(benchmark, stored)
            done["benchmark"] = str(stored.relative_to(root))
            update_readme(root)
    return done


def gpu_table(measured: dict | None) -> str:
    """The README's GPU section body from the stored benchmark JSON (``None``: not yet run)."""
    if not measured:
        return ("The kit has not yet run on a GPU: no `results/gpu/benchmark.json` is stored. "
                "Its table of samples per second appears here after `unpack`.")
    where = measured.get("gpu") or f"CPU ({measured.get('cpu_cores')} cores)"
    lines = [f"Measured on {where}, torch {measured.get('torch')}, {measured.get('date')}"
             f" (device `{measured.get('device')}`{', tiny workloads' if measured.get('tiny') else ''}).", "",
             "| workload | way | samples/s | x sequential | GPU busy in kernels | max weight gap |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for workload in measured.get("workloads", []):
        base = workload["ways"]["sequential"]["samples_per_s"]
        for way, row in workload["ways"].items():
            share = row.get("kernel_share")
            lines.append(f"| {workload['workload']} | {way} | {row['samples_per_s']:,.0f} | "
                         f"{row['samples_per_s'] / base:.2f} | {'-' if share is None else f'{share:.0%}'} | "
                         f"{row.get('max_weight_gap_to_sequential', 0):.1e} |")
    tests = measured.get("cuda_tests")
    if tests:
        lines += ["", f"CUDA tests: {tests['passed']} passed, {tests['failures']} failed, "
                      f"{tests['errors']} errors, {tests['skipped']} skipped."]
    return "\n".join(lines)


def update_readme(root: Path = ROOT) -> bool:
    """Render :func:`gpu_table` between the README's markers; whether the README changed."""
    readme = root / "README.md"
    stored = root / "results" / "gpu" / "benchmark.json"
    text = readme.read_text()
    if README_BEGIN not in text or README_END not in text:
        fail(f"README.md has no {README_BEGIN} ... {README_END} section to render the GPU table into")
    body = gpu_table(json.loads(stored.read_text()) if stored.is_file() else None)
    new = re.sub(re.escape(README_BEGIN) + ".*?" + re.escape(README_END),
                 lambda _: f"{README_BEGIN}\n{body}\n{README_END}", text, flags=re.S)
    readme.write_text(new)
    return new != text


# ---------------------------------------------------------------------------------- main

def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("pack", help="build .kit/ here and print the call")
    p.add_argument("--datasets", default=",".join(PAPER_DATASETS))
    p.add_argument("--no-wheels", action="store_true", help="leave the wheels out (a machine that has them)")
    p.add_argument("--budget-s", type=int, default=540)
    t = verbs.add_parser("there", help="the command the GPU call runs")
    t.add_argument("--kit", type=Path, default=KIT)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--budget-s", type=float, default=540)
    t.add_argument("--rung", default="paper")
    t.add_argument("--device", default="cuda")
    t.add_argument("--scale", choices=tuple(BENCHMARK_ARGS), default="paper")
    t.add_argument("--store", type=Path, default=None, help="the ladder's store (default results/ladder)")
    t.add_argument("--skip", default="", help="comma-separated stages to leave out: tests, benchmark, ladder")
    u = verbs.add_parser("unpack", help="merge an archive that came back")
    u.add_argument("archive", type=Path)
    verbs.add_parser("readme", help="re-render the README's GPU table")
    args = parser.parse_args(argv)
    if args.verb == "pack":
        manifest = pack(wheels=() if args.no_wheels else WHEELS,
                        datasets=tuple(filter(None, args.datasets.split(","))), budget_s=args.budget_s)
        print(f"kit {KIT.relative_to(ROOT)}/: {manifest['kit_bytes'] / MIB:.1f} MiB "
              f"({len(manifest['wheels'])} wheels, data: {', '.join(manifest['data_entries']) or 'none'}); "
              f"with the tree {(manifest['kit_bytes'] + manifest['tree_bytes']) / MIB:.1f} MiB of "
              f"{CARRY_LIMIT / MIB:.0f}")
        print(f"the call: run(command={manifest['command']!r}, carry={manifest['carry']!r}, timeout_s=600)")
    elif args.verb == "there":
        if args.budget_s < 60:
            parser.error(f"--budget-s {args.budget_s:g} leaves no time for the stages (at least 60)")
        skip = set(filter(None, args.skip.split(",")))
        if skip - {"tests", "benchmark", "ladder"}:
            parser.error(f"--skip {args.skip!r}: the stages that can be left out are tests, benchmark, ladder")
        there(args.kit, args.out, args.budget_s, args.rung, args.device, args.scale, store=args.store, skip=skip)
    elif args.verb == "unpack":
        done = unpack(args.archive)
        for key in ("added", "updated", "kept", "refused"):
            print(f"{key}: {len(done[key])}" + (f" ({', '.join(done[key])})" if done[key] else ""))
        print(f"benchmark: {done['benchmark'] or 'none in the archive'}")
        if done["added"] or done["updated"]:
            print("the ladder ledgers are recomputed from the stored runs by: python tools/ladder.py ledger")
    else:
        print("README.md " + ("updated" if update_readme() else "unchanged"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
