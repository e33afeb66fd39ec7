"""A chapter's parameter check (hetfl_core.chapter.check_parameters)."""
import pytest

from hetfl_core.book import check_parameters, injected_parameters
from hetfl_core.science.errors import ConfigError

pytestmark = pytest.mark.slow     # servers, notebooks, processes or long runs: not in make test-fast


def namespace(**values):
    ns = {"__annotations__": {"scale": str, "dataset": str, "seed": int, "lr": float, "note": "int | None"},
          "scale": "book", "dataset": "digits", "seed": 0, "lr": 0.05, "note": None}
    ns.update(values)
    return ns


def test_good_parameters_pass():
    check_parameters(namespace(), history=[], lr=(1e-6, 10))
    ns = namespace(dataset=None)
    ns["__annotations__"]["dataset"] = "str | None"      # None: the chapter picks its default
    check_parameters(ns, history=[])
    check_parameters(namespace(lr=1, note=3), history=["# Parameters\nlr = 1\n"])   # an int is a float


@pytest.mark.parametrize("values, rules, word", [
    (dict(seed=-1), {}, "seed"), (dict(seed=2 ** 32), {}, "seed"), (dict(seed="abc"), {}, "seed"),
    (dict(seed=1.5), {}, "seed"), (dict(seed=True), {}, "seed"), (dict(scale="huge"), {}, "scale"),
    (dict(dataset="imagenet"), {}, "dataset"), (dict(lr="abc"), {}, "lr"), (dict(lr=50.0), {"lr": (1e-6, 10)}, "lr"),
    (dict(note="x"), {}, "note"), (dict(scale="book"), {"scale": ["smoke"]}, "scale"),
])
def test_bad_parameters_fail_in_one_line_naming_them(values, rules, word):
    with pytest.raises(ConfigError) as info:
        check_parameters(namespace(**values), history=[], **rules)
    message = str(info.value)
    assert f"parameter {word}" in message and "\n" not in message


def test_an_unknown_injected_parameter_fails():
    history = ["import x", "# Parameters\nseed = 1\nsed = 2\n"]
    assert injected_parameters(history) == {"seed", "sed"}
    with pytest.raises(ConfigError, match="unknown parameter.*sed"):
        check_parameters(namespace(), history=history)


def test_a_caption_names_the_settings_and_the_rerun_command():
    from hetfl_core import RunConfig
    from hetfl_core.book import caption_text

    base = RunConfig(dataset="digits", clients=10, rounds=5, local_steps=3, participation=0.5)
    configs = [base.replace(method=m, seed=s) for m in ("fedavg", "heterofl") for s in (0, 1, 2)]
    text = caption_text(configs, "heroes", "book", seed=0)
    assert text.startswith("Ran at scale book with digits, cnn, dirichlet, α=0.5, 10 clients, 50% per round, "
                           "5 rounds, 3 local steps, lr 0.05, identical hardware, seeds 0–2; methods: fedavg, heterofl.")
    command = "jupytext --to ipynb -o - book/heroes.md | papermill - out.ipynb -p scale {} -p seed {}"
    assert f"Rerun as shown: `{command.format('book', 0)}`" in text
    shown = caption_text([c.replace(seed=c.seed + 5) for c in configs], "heroes", "smoke", seed=5)
    assert "seeds 5–7" in shown and f"`{command.format('smoke', 5)}`" in shown
    assert "-p scale paper -p seed" not in shown and "-p scale paper`" in shown    # offered apart
    assert "`-p scale paper`" not in caption_text(configs, "heroes", "paper")
    results = [{"config": c.to_dict(), "history": []} for c in configs[:1]]
    assert "seed 0;" in caption_text(results, "heroes", "smoke")
    assert "α=" not in caption_text([base.replace(partition="iid")], "x", "book")
    shards = caption_text([base.replace(partition="shards", clients=c) for c in (10, 20)], "x", "book")
    assert "α=" not in shards and "2 classes per client" in shards and "10/20 clients" in shards


def test_papermill_stops_a_chapter_at_a_bad_or_unknown_parameter(tmp_path):
    """A real papermill run of a two-cell chapter: a bad seed and an unknown name stop it in
    the first code cell, with one line naming the parameter."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    cells = [{"cell_type": "code", "execution_count": None, "id": "p", "metadata": {"tags": ["parameters"]},
              "outputs": [], "source": "scale: str = \"smoke\"\nseed: int = 0\n"},
             {"cell_type": "code", "execution_count": None, "id": "c", "metadata": {}, "outputs": [],
              "source": "from hetfl_core.book import check_parameters\ncheck_parameters(globals())\n"
                        "print('ran with seed', seed)"}]
    nb = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                       "language": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "ch.ipynb").write_text(json.dumps(nb))
    papermill = Path(sys.executable).parent / "papermill"

    def run(*params):
        proc = subprocess.run([str(papermill), "ch.ipynb", "out.ipynb", "-k", "python3", "--no-progress-bar",
                               *params], cwd=tmp_path, capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stderr

    assert run("-p", "seed", "3")[0] == 0
    code, err = run("-p", "seed", "-1")
    assert code != 0 and "ConfigError: parameter seed must be an integer in [0, 2**32), got -1" in err
    code, err = run("-p", "sed", "1")
    assert code != 0 and "ConfigError: unknown parameter(s) sed" in err


def test_a_caption_counts_one_in_the_singular():
    from hetfl_core import RunConfig
    from hetfl_core.book import caption_text

    one = RunConfig(dataset="digits", partition="shards", classes_per_client=1, clients=1,
                    rounds=1, local_steps=None, local_epochs=1)
    text = caption_text([one], "x", "smoke")
    assert "1 class per client, 1 client, 100% per round, 1 round, 1 local epoch," in text
    two = caption_text([one.replace(local_epochs=2, rounds=2)], "x", "smoke")
    assert "2 rounds, 2 local epochs," in two


def test_a_chapter_checks_its_parameters_and_keeps_its_ledger(tmp_path):
    from hetfl_core.book import Chapter
    from hetfl_core.science.errors import ConfigError
    from hetfl_core.book.report import at_least

    ns = {"__annotations__": {"scale": "str", "seed": "int"}, "scale": "smoke", "seed": 3, "In": []}
    book = Chapter("alpha", "Alpha", ns)
    assert (book.scale, book.seed, book.parameters) == ("smoke", 3, {"scale": "smoke", "seed": 3})
    assert book.by_scale(smoke=1, book=2, paper=3) == 1
    with pytest.raises(ConfigError, match="no paper value"):
        book.by_scale(smoke=1, book=2)
    claim = book.claim("Fig. 1", "A beats B", "+5", [1.0, 2.0, 3.0], at_least(0))
    assert book.ledger.claims == [claim] and book.ledger.scale == "smoke"
    with pytest.raises(ConfigError, match="seed"):
        Chapter("alpha", "Alpha", {**ns, "seed": -1})


def test_simplified_baselines_change_only_the_corrected_baselines():
    from hetfl_core import RunConfig
    from hetfl_core.book import SIMPLIFIED_BASELINES, Chapter, rerun_command, with_baselines

    base = RunConfig(dataset="digits", clients=4, rounds=1, local_steps=1)
    for method, options in SIMPLIFIED_BASELINES.items():
        c = base.replace(method=method)
        assert with_baselines(c) == c
        simple = with_baselines(c, "simplified")
        assert simple.options == {**c.options, **options} and simple.key() != c.key()
        simple.validate()                                   # every option is one the method takes
    assert with_baselines(base, "simplified") == base       # FedAvg has nothing to simplify
    with pytest.raises(ConfigError, match="baselines must be one of authors, simplified"):
        with_baselines(base, "old")
    ns = {"__annotations__": {"scale": "str", "baselines": "str"}, "scale": "smoke",
          "baselines": "simplified", "In": []}
    assert Chapter("alpha", "Alpha", ns).baselines == "simplified"
    with pytest.raises(ConfigError, match="parameter baselines"):
        Chapter("alpha", "Alpha", {**ns, "baselines": "old"})
    assert rerun_command("x", "book").endswith("-p seed 0")
    assert rerun_command("x", "book", 0, "simplified").endswith("-p seed 0 -p baselines simplified")


def test_stating_a_claim_adds_it_and_displays_its_row(monkeypatch):
    """book.state records the claim in the ledger and displays its verdict row once."""
    import IPython.display

    from hetfl_core.book import Chapter
    from hetfl_core.book.report import at_least

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    book = Chapter("demo", "Demo", namespace())
    assert book.state("Fig. 1: A beats B", "+3", [1.0, 2.0, 3.0], at_least(0)) is None
    assert len(book.ledger.claims) == 1 and shown == book.ledger.claims
    assert (shown[0].ref, shown[0].statement) == ("Fig. 1", "A beats B")
    assert "A beats B" in shown[0]._repr_markdown_()
    with pytest.raises(ValueError, match="'where: what'"):
        book.state("A beats B", "+3", [1.0, 2.0, 3.0], at_least(0))


def test_a_claim_reads_where_and_what_split_at_the_first_colon():
    from hetfl_core.book import split_claim

    assert split_claim("Table III, (0.1, 1): a: b") == ("Table III, (0.1, 1)", "a: b")
    for bad in ("no colon", ": no ref", "Fig. 1: ", "Fig. 1:no space"):
        with pytest.raises(ValueError):
            split_claim(bad)


def test_a_section_holds_the_claims_stated_after_it_and_a_headline_is_marked(monkeypatch):
    """book.section sets the section (and kind) of the claims stated after it, until the
    next call, or only inside a with block; a keyword given to a claim wins; book.headline
    marks a headline claim."""
    import IPython.display

    from hetfl_core.book import Chapter
    from hetfl_core.book.report import at_least

    monkeypatch.setattr(IPython.display, "display", lambda obj: None)
    book = Chapter("demo", "Demo", namespace())
    values, crit = [1.0, 2.0, 3.0], at_least(0)
    book.state("Fig. 1: before any section", "+3", values, crit)
    book.section("demo-fig2")
    book.headline("Fig. 2: A beats B", "+3", values, crit)
    book.state("Fig. 2: A beats C", "+3", values, crit, section="demo-other", kind="prediction")
    with book.section("demo-fig3", kind="invariant"):
        book.state("Fig. 3: A is nested", "by design", values, crit)
        book.claim("Fig. 3", "A is nested too", "by design", values, crit)
    book.state("Fig. 2: A beats D", "+3", values, crit, cases=None)
    got = [(c.section, c.kind, c.headline) for c in book.ledger.claims]
    assert got == [("", "paper", False), ("demo-fig2", "paper", True),
                   ("demo-other", "prediction", False), ("demo-fig3", "invariant", False),
                   ("demo-fig3", "invariant", False), ("demo-fig2", "paper", False)]


def test_stating_a_claim_over_cases_judges_each_case_and_displays_its_row(monkeypatch):
    """book.state with cases adds an "in every case" claim (k defaults to all of them),
    judged case by case, and displays its row once; k without cases is refused."""
    import IPython.display

    from hetfl_core.book import Chapter
    from hetfl_core.book.report import at_least

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    book = Chapter("demo", "Demo", namespace())
    cases = {"a": [1.0, 1.2, 0.9], "b": [-1.0, -1.1, -0.8]}
    assert book.state("Fig. 1: A beats B in every case", "+3", cases=cases,
                      criterion=at_least(0)) is None
    claim = book.ledger.claims[0]
    assert shown == [claim] and claim.method == "cases, 2 of 2"
    assert claim.cases["a"]["verdict"] == "holds" and claim.cases["b"]["verdict"] == "fails"
    assert claim.verdict == "fails"
    book.state("Fig. 1: A beats B in one case", "+3", cases=cases, k=1, criterion=at_least(0))
    assert book.ledger.claims[1].verdict == "holds"
    with pytest.raises(ValueError, match="needs cases"):
        book.state("Fig. 1: A beats B", "+3", [1.0, 2.0, 3.0], at_least(0), k=1)
    with pytest.raises(ValueError, match="not both"):
        book.state("Fig. 1: A beats B", "+3", [1.0], at_least(0), cases=cases)


def test_a_chapters_sweep_draws_no_progress_bar_unless_asked(monkeypatch):
    """A chapter rerun with papermill keeps what stderr printed: tqdm's bars would stay in
    its outputs, so a chapter's sweep shows none by default."""
    from hetfl_core.runtime import experiments
    from hetfl_core.book import Chapter

    asked = []
    monkeypatch.setattr(experiments, "sweep", lambda configs, **kw: asked.append(kw) or {})
    book = Chapter("alpha", "Alpha", {"__annotations__": {"scale": "str"}, "scale": "smoke", "In": []})
    book.sweep({})
    book.sweep({}, progress=True)
    assert [kw["progress"] for kw in asked] == [False, True]
    assert asked[0]["desc"] == "alpha"


def test_a_chapters_sweep_prints_the_local_runs_note_without_a_path(monkeypatch, capsys):
    """The note that a plug-in's runs run in this process is one printed line, not a
    warning headed by the library file's path on the machine that ran the chapter."""
    import warnings

    from hetfl_core.runtime import experiments
    from hetfl_core.book import Chapter

    def sweep(configs, **kw):
        warnings.warn("method 'fedavgm' is registered in this process only (x), so its 1 run "
                      "run here", experiments.LocalRunsWarning)
        return {}

    monkeypatch.setattr(experiments, "sweep", sweep)
    book = Chapter("alpha", "Alpha", {"__annotations__": {"scale": "str"}, "scale": "smoke", "In": []})
    with warnings.catch_warnings():
        warnings.simplefilter("error")                      # nothing is left to warn
        book.sweep({})
    out = capsys.readouterr().out
    assert out.startswith("Note: method 'fedavgm' is registered in this process only")
    assert "experiments.py" not in out and "/" not in out
