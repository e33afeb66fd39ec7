import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, tmp_path=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    if tmp_path is not None:
        env["HETFL_CACHE"] = str(tmp_path / "runs")
    return subprocess.run([sys.executable, "-m", "hetfl_core", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


@pytest.mark.slow
def test_list_names_methods_and_datasets():
    out = cli("list")
    assert out.returncode == 0
    for word in ("fedavg", "fedprox", "fashion-mnist", "digits", "dirichlet", "lenet5"):
        assert word in out.stdout


@pytest.mark.slow
def test_list_method_shows_its_options_and_description():
    out = cli("list", "sparse-prune-pfl")
    assert out.returncode == 0, out.stderr
    assert 'allocation="dca"' in out.stdout and "theta_ratio=10.0" in out.stdout
    assert "Algorithm 1" in out.stdout          # the module's description follows the options
    bad = cli("list", "fedavgg")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "fedavg" in bad.stderr


@pytest.mark.slow
def test_run_writes_history(tmp_path):
    path = tmp_path / "run.json"
    out = cli("run", "fedavg", "--dataset", "digits", "--partition", "dirichlet", "--alpha", "0.5",
              "--clients", "5", "--rounds", "2", "--seed", "3", "--no-eval-global", "--quiet", "--out", str(path),
              tmp_path=tmp_path)
    assert out.returncode == 0, out.stderr
    result = json.loads(path.read_text())
    assert result["config"]["seed"] == 3 and result["config"]["clients"] == 5
    assert result["config"]["eval_global"] is False and result["history"][-1]["acc_global"] is None
    assert len(result["history"]) == 2
    for key in ("round", "time_s", "acc_global", "acc_personal", "loss", "uplink_bits", "downlink_bits", "flops"):
        assert key in result["history"][0]


@pytest.mark.parametrize("args,needle", [
    (["run", "nope"], "unknown method"),
    (["run", "fedavg", "--dataset", "imagenet"], "unknown dataset"),
    (["run", "fedavg", "--rounds", "0"], "rounds"),
    (["run", "fedavg", "--alpha", "0"], "alpha"),
    (["run", "fedavg", "--participation", "1.5"], "participation"),
    (["run", "fedavg", "--option", "foo=1"], "no option foo"),
    (["run", "fedavg", "--clients", "many"], "invalid int"),
])
@pytest.mark.slow
def test_bad_input_exits_2_with_one_line(args, needle, tmp_path):
    out = cli(*args, tmp_path=tmp_path)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0]
    assert not (tmp_path / "runs").exists()  # nothing ran


def test_run_help_gives_each_field_its_meaning_and_choices(capsys):
    from hetfl_core.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())      # argparse wraps lines
    assert exc.value.code == 0
    assert "SGD learning rate; in (0, 1e+09]" in out
    assert "how the training pool is dealt to clients; one of: iid, dirichlet" in out


def test_list_of_an_empty_name_is_an_error(capsys):
    from hetfl_core.cli import main

    assert main(["list", ""]) == 2
    assert "unknown method ''" in capsys.readouterr().err


def _interrupt_a_long_run(tmp_path, flags: list[str], started, before_interrupt=None,
                          exit_within_s: float = 60) -> tuple[int, str]:
    """Start a 100000-round run with ``flags``, wait until ``started(stderr so far)`` says it
    trains, call ``before_interrupt(pid)`` if given, send SIGINT (as Ctrl-C does), and return
    its exit code and whole stderr; it must exit within ``exit_within_s`` seconds."""
    import selectors
    import signal
    import time

    env = dict(os.environ, PYTHONPATH=str(ROOT), HETFL_CACHE=str(tmp_path / "runs"))
    # SIGINT at its default in the child: a test runner that ignores it would pass SIG_IGN on
    proc = subprocess.Popen([sys.executable, "-m", "hetfl_core", "run", "fedavg", "--dataset", "digits",
                             "--rounds", "100000", *flags], stderr=subprocess.PIPE, env=env, cwd=ROOT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = b""
    try:
        waiting = selectors.DefaultSelector()
        waiting.register(proc.stderr, selectors.EVENT_READ)
        deadline = time.monotonic() + 300      # past the imports, into training
        while not started(seen.decode(errors="replace")) and time.monotonic() < deadline:
            assert proc.poll() is None, seen + proc.stderr.read()
            if waiting.select(timeout=0.5):
                seen += os.read(proc.stderr.fileno(), 4096)
        time.sleep(2)
        if before_interrupt is not None:
            before_interrupt(proc.pid)
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=exit_within_s)[1]
    finally:
        if proc.poll() is None:           # never leave the 100000-round run behind
            proc.kill()
            proc.wait()
    return proc.returncode, (seen + rest).decode(errors="replace")


@pytest.mark.slow
def test_ctrl_c_during_a_run_prints_one_line(tmp_path):
    code, err = _interrupt_a_long_run(tmp_path, ["--quiet"],       # a run holds its lock file
                                      lambda _: list((tmp_path / "runs").glob("*.lock")))
    assert code == 130 and err.strip().splitlines() == ["python -m hetfl_core: interrupted "
                                                        "(finished runs are cached)"], err


@pytest.mark.slow
def test_ctrl_c_under_no_cache_promises_no_cached_runs(tmp_path):
    code, err = _interrupt_a_long_run(tmp_path, ["--no-cache"],    # no lock: the progress bar shows
                                      lambda text: "fedavg:" in text)
    lines = [part.strip() for part in err.replace("\r", "\n").splitlines() if part.strip()]
    assert code == 130 and lines[-1] == "python -m hetfl_core: interrupted", err
    assert "Traceback" not in err and not any("cached" in line for line in lines), err


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (Ray's daemons and workers under a Flower run)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:                  # the process ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = set(), [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.add(child)
            pending.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads the process tree from /proc")
@pytest.mark.slow
def test_ctrl_c_during_a_flower_run_exits_at_once_and_leaves_no_ray_behind(tmp_path):
    import re
    import time

    ray = set()
    a_round_done = re.compile(r"\| [1-9]\d*/100000")          # the progress bar counts rounds
    code, err = _interrupt_a_long_run(tmp_path, ["--engine", "flower", "--clients", "2"],
                                      a_round_done.search,
                                      before_interrupt=lambda pid: ray.update(_descendants(pid)),
                                      exit_within_s=30)
    lines = [part.strip() for part in err.replace("\r", "\n").splitlines() if part.strip()]
    assert code == 130 and lines[-1] == "python -m hetfl_core: interrupted", err[-3000:]
    assert "Traceback" not in err and sum("interrupted" in line for line in lines) == 1, err[-3000:]
    assert ray, "the Flower run started no Ray processes"
    deadline = time.monotonic() + 30     # Ray's workers take seconds to go on a loaded machine
    while any(_alive(pid) for pid in ray) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in ray if _alive(pid)]
    for pid in left:                     # never leave them running, then fail
        os.kill(pid, 9)
    assert not left, f"Ray processes left behind: {left}"


@pytest.mark.parametrize("flags,named", [(["--executor", "ray"], "--executor ray"),
                                         (["--address", "127.0.0.1:6379"], "--address")])
@pytest.mark.slow
def test_flower_refuses_rays_executor_flags_before_any_compute(flags, named, tmp_path):
    out = cli("run", "fedavg", "--dataset", "digits", "--engine", "flower", *flags,
              tmp_path=tmp_path)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and named in lines[0], out.stderr
    assert "--engine flower" in lines[0] and not (tmp_path / "runs").exists()


def test_a_failed_write_of_out_after_training_keeps_the_cached_run(tmp_path, cache, monkeypatch, capsys):
    """The disk fills up between the check and the write: one line says where the run is."""
    import errno
    import pathlib

    from hetfl_core import RunConfig
    from hetfl_core.cli import main
    from hetfl_core.runtime.experiments import cache_path, load_cached

    out = tmp_path / "run.json"
    real_replace = os.replace

    def full_disk(source, target, *args, **kwargs):     # the last step of writing --out
        if pathlib.Path(target) == out:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full_disk)
    argv = ["run", "fedavg", "--dataset", "digits", "--clients", "3", "--rounds", "1", "--local-steps", "1",
            "--quiet", "--out", str(out)]
    assert main(argv) == 1
    line = capsys.readouterr().err.strip().splitlines()[-1]
    config = RunConfig(method="fedavg", dataset="digits", clients=3, rounds=1, local_steps=1).validate()
    assert "No space left on device" in line and str(cache_path(config)) in line
    assert load_cached(config) is not None and not out.exists()
    assert list(tmp_path.glob(".run.json.*")) == []           # no temporary file left behind


FAST = ["--dataset", "digits", "--clients", "3", "--rounds", "1", "--local-steps", "1", "--quiet"]


def test_a_missing_dataset_exits_2_in_one_line_naming_what_to_use(tmp_path, monkeypatch, capsys):
    from hetfl_core.cli import main

    monkeypatch.setenv("HETFL_DATA", str(tmp_path / "empty"))
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "runs"))
    assert main(["run", "fedavg", *FAST, "--dataset", "mnist", "--no-cache"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "mnist-5k" in lines[0]


def test_out_refuses_a_symbolic_link_and_never_touches_its_target(tmp_path, monkeypatch, capsys):
    from hetfl_core.cli import main

    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "runs"))
    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    (tmp_path / "link.json").symlink_to(precious)
    (tmp_path / "dangling.json").symlink_to(tmp_path / "created.json")
    for link in ("link.json", "dangling.json"):
        assert main(["run", "fedavg", *FAST, "--out", str(tmp_path / link)]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and "symbolic link" in lines[0]
    assert precious.read_text() == "keep" and not (tmp_path / "created.json").exists()
    assert not (tmp_path / "runs").exists()       # refused before training


def test_a_link_made_during_the_run_is_replaced_not_followed(tmp_path, monkeypatch):
    from hetfl_core import cli

    precious = tmp_path / "precious.txt"
    precious.write_text("keep")
    out = cli._check_out(str(tmp_path / "run.json"))
    out.symlink_to(precious)                       # put there after the check, before the write
    cli._write_out(out, b'{"history": []}')
    assert precious.read_text() == "keep" and not out.is_symlink()
    assert out.read_text() == '{"history": []}'
    assert out.stat().st_mode & 0o777 == 0o666 & ~_umask()     # as open() makes it, not 0600


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("out", ["newfile_trailing/", "newdir/.", ".."])
def test_out_naming_a_directory_is_refused_in_one_line(out, tmp_path, monkeypatch, capsys):
    from hetfl_core.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HETFL_CACHE", str(tmp_path / "runs"))
    assert main(["run", "fedavg", *FAST, "--out", out]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "directory" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.parametrize("args,needle", [
    (["--seed", "-1"], "seed must be an integer in [0, 2**32), got -1"),
    (["--partition", "natural"],
     "choose one of: iid, dirichlet, shards, quantity, writers, dominant, missing"),
])
def test_messages_read_as_written(args, needle, capsys):
    from hetfl_core.cli import main

    assert main(["run", "fedavg", "--dataset", "digits", *args]) == 2
    assert needle in capsys.readouterr().err
