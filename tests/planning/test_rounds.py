"""Tuned sweeps (issue 30) wired into the product: the `tune:` block checked against its sweep (the refusals
are files of tests/specs/bad), the searches run in rounds by real launches (a relaunch trains nothing, a
larger budget runs only the new configurations, a killed launch resumes), and the report's tuning section on
a simulated study whose answer is known."""

from __future__ import annotations

import math
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY, write_sweeps
from gate import Gate, wait_for
from test_launcher import CLI_ENV, launch_cmd
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import TrialConfig
from ablate.errors import SpecError
from ablate.planning.keys import Trial, trial_key
from ablate.planning.plan import Plan, plan
from ablate.planning.rounds import Round, Rounds
from ablate.planning.search import Search, best, proposals
from ablate.registry import TASKS
from ablate.reporting import ReportError, bands, report
from ablate.spec.paths import set_path
from ablate.spec.tuning import Searches, TuneSpec
from ablate.store import Store

TUNE = {"space": {"train.lr": {"log": [1e-4, 3e-2]}}, "budget": 4, "batch": 2, "metric": "val.top1"}
ARMS = {"attention.kind": ["softmax", "sparsemax"]}


def tuned(tmp_path: Path, name: str = "e.yaml", epochs: int = 1, **over: Any) -> Path:
    """A tuned sweep of two arms on the tiny digits model; `over` replaces its keys."""
    base = {**TINY, "train": {**TINY["train"], "epochs": epochs}, "resources": {"cpus": 1}}
    sweep = {"base": base, "grid": ARMS, "baseline": {"attention.kind": "softmax"}, "seeds": 2, "tune": TUNE, **over}
    return write_sweeps(tmp_path / name, {"t": sweep})


# --------------------------------------------------------------------------------------------------- spec
def test_a_tuned_sweep_plans_its_arms_and_runs_nothing_before_its_searches(tmp_path: Path) -> None:
    p = plan(tuned(tmp_path))
    assert p.tuning is not None and p.tuning.spec.budget == 4 and p.tuning.baseline == 0
    assert p.trials == [] and len(p.arms) == 4  # 2 arms x 2 seeds at the base's values, for the rounds to use
    assert [t.axes["attention.kind"] for t in p.arms] == ["softmax", "softmax", "sparsemax", "sparsemax"]


def test_an_override_may_not_set_a_searched_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"override 'train.lr=0.001'.*searches train.lr in its tune: space"):
        plan(tuned(tmp_path), overrides=["train.lr=0.001"])


@pytest.mark.parametrize("task", ["classify", "mil"])
def test_a_task_declares_the_scores_it_reports(task: str) -> None:
    """What `tune.metric` is checked against is what `score` returns."""
    outs, targets = (
        (torch.randn(8, 3), torch.arange(8) % 3) if task == "classify" else (torch.randn(8), torch.arange(8.0) % 2)
    )
    cls = TASKS.get(task)
    assert tuple(cls.score(cls.__new__(cls), outs, targets)) == cls.scores


# ------------------------------------------------------------------------------------------------- rounds
def invoke(*args: str) -> str:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.output


def searches(store: Store, sweep: str = "t") -> Searches:
    """The searches as the last launch recorded them in the sweep's record."""
    record = store.sweep(sweep)
    assert record is not None and record.spec is not None
    return Searches.model_validate(record.spec["tuning"])


def val_scores(store: Store) -> dict[str, float]:
    """Each tuning trial's val.top1 at its last epoch, read on its own (what the searches must have been told)."""
    m = store.metrics_frame("t/tuning", names=["val.top1"])
    last = m.sort_values("step").groupby("key", observed=True)["value"].last()
    return {str(k): float(v) for k, v in last.items()}


def test_a_tuned_sweep_through_the_cli_relaunched_and_given_a_larger_budget(ray_local, tmp_path: Path) -> None:
    """Every arm tries its budget in rounds (configurations in the companion sweep t/tuning, chosen on val.top1
    only), then runs the sweep's seeds at its best (the sweep's own trials; the best's first seed is its tuning
    trial) and, for the other arm, at the baseline's best. A relaunch trains nothing; budget 4 -> 6 trains
    only the 2 new configurations of each arm (and the seeds of a best that changed)."""
    f, db = tuned(tmp_path), f"sqlite:///{tmp_path}/r.sqlite"
    args = ["launch", str(f), "--db", db, "--no-mlflow", "--plain", "--storage", str(tmp_path / "ck"), "--no-check"]
    out = invoke(*args)
    assert "tuning t: 4 more configurations proposed from the results so far" in out
    assert "trials at the arms' best configurations" in out
    with Store(db) as store:
        record, scores = searches(store), val_scores(store)
        configs = store.trials_frame("t/tuning").set_index("key")
        spec = record.spec
        for arm, kind in zip(record.arms, ARMS["attention.kind"]):
            assert arm.axes == {"attention.kind": kind} and len(arm.search) == 4 and arm.best is not None
            results = [scores[k] for k in arm.search]
            assert arm.best == best(spec, results)  # chosen on validation
            replayed = proposals(spec, results)  # the store's results replay the very configurations
            assert [configs.loc[k, "axis.train.lr"] for k in arm.search] == [c["train.lr"] for c in replayed]
            assert list(configs.loc[arm.search, "axis.tuning"]) == [1, 2, 3, 4]
            assert arm.finals[0] == arm.search[arm.best]  # seed 0 at the best is its tuning trial, run once
        main = store.trials_frame("t").set_index("key")
        assert list(main.index) == [k for arm in record.arms for k in arm.finals] and set(main["state"]) == {"done"}
        lrs = {k: store.configs([k])[k]["train"]["lr"] for k in main.index}
        for arm in record.arms:
            assert {lrs[k] for k in arm.finals} == {configs.loc[arm.search[arm.best], "axis.train.lr"]}
        softmax, other = record.arms
        assert record.baseline == 0 and softmax.at_baseline == [] and len(other.at_baseline) == 2
        theirs = store.configs(other.at_baseline)
        assert {c["train"]["lr"] for c in theirs.values()} == {lrs[softmax.finals[0]]}
        assert {c["attention"]["kind"] for c in theirs.values()} == {"sparsemax"}
        assert store.sweep("t").baseline == main.loc[softmax.finals[0], "variant"]  # the baseline at its best
        before = store.trials_frame(["t", "t/tuning"]).drop_duplicates("key").set_index("key")["attempts"]
    assert "nothing to run" in invoke(*args)

    tuned(tmp_path, tune={**TUNE, "budget": 6})
    out = invoke(*args)
    with Store(db) as store:
        grown = searches(store)
        after = store.trials_frame(["t", "t/tuning"]).drop_duplicates("key").set_index("key")["attempts"]
    assert (after.reindex(before.index) == before).all()  # nothing trained again
    trained = set(after.index) - set(before.index)
    extra = {k for arm in grown.arms for k in arm.search[4:]}
    assert len(extra) == 4 and extra <= trained
    finals = {k for arm in grown.arms for k in [*arm.finals, *arm.at_baseline]}
    assert trained - extra <= finals  # anything else: the seeds of a best that changed
    for arm, was in zip(grown.arms, record.arms):
        assert arm.search[:4] == was.search


def test_a_launch_replays_each_arm_search_once(ray_local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One `ablate launch` of a tuned sweep replays each arm's search from the spec once, however often it plans
    (the file's plans, the size question, the launch's rounds, what it left): one set of searches per launch,
    told only what is new. The count is of real searches started (Optuna studies) through a real launch."""
    started: list[TuneSpec] = []
    start = Search._start

    def counted(self: Search) -> Any:
        started.append(self.spec)
        return start(self)

    monkeypatch.setattr(Search, "_start", counted)
    f, db = tuned(tmp_path, tune={**TUNE, "budget": 2}), f"sqlite:///{tmp_path}/r.sqlite"
    out = invoke(
        "launch", str(f), "--db", db, "--no-mlflow", "--plain", "--storage", str(tmp_path / "ck"), "--no-check"
    )
    assert "trials at the arms' best configurations" in out  # the launch went on to the arms' seeds at their best
    with Store(db) as store:
        assert all(arm.best is not None for arm in searches(store).arms)
    assert len(started) == len(ARMS["attention.kind"])


def test_a_launch_killed_mid_search_resumes_where_it_stopped(ray_local, tmp_path: Path) -> None:
    """SIGKILL of a real launcher process and its embedded Ray while two of the second round's trials provably
    run (held at epoch 1 of 2, their checkpoints written): the next launch replays the first round from the
    store, proposes the same second round, resumes those two from their checkpoints, trains no first-round
    trial again and ends every search. Random search: the second round is known before the first's results,
    so the gate can name its trials."""
    f = tuned(tmp_path, epochs=2, tune={**TUNE, "sampler": "random"}, seeds=1)
    p = plan(f)
    assert p.tuning is not None
    arms = [t for t in p.arms if t.axes["seed"] == 0]
    configs = proposals(p.tuning.spec, [0.0] * 4)  # random search: the same whatever the results
    keys = [[trial_key(at(t, c)) for c in configs] for t in arms]  # worked out here, not by the product
    second = [k for arm in keys for k in arm[2:]]
    gate = Gate(tmp_path / "gate", epoch=1, keys=second)
    proc = subprocess.Popen([*launch_cmd(f, tmp_path, gate), "--no-check"], cwd=tmp_path, env=CLI_ENV,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    db = f"sqlite:///{tmp_path}/r.sqlite"
    try:
        held = gate.wait(2)
        with Store(db) as store:  # the launcher records a start from the trial's message, after the trial has begun
            wait_for(lambda: set(store.states(list(held)).values()) == {"running"})
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    with Store(db) as store:
        first = [k for arm in keys for k in arm[:2]]
        assert set(store.states(first).values()) == {"done"} and set(store.states(held).values()) == {"running"}
    invoke(*launch_cmd(f, tmp_path)[3:], "--no-check")  # the next launch, in this process (the session's Ray)
    with Store(db) as store:
        record = searches(store)
        assert [arm.search for arm in record.arms] == keys  # the same configurations, replayed
        t = store.trials_frame(["t", "t/tuning"]).drop_duplicates("key").set_index("key")
        assert set(t["state"]) == {"done"} and all(arm.best is not None and arm.finals for arm in record.arms)
        assert (t.loc[first, "attempts"] == 1).all()
        assert (t.loc[list(held), "resumed_from"] == 1).all() and (t.loc[list(held), "attempts"] == 2).all()


def at(trial: Trial, values: dict[str, Any]) -> TrialConfig:
    """`trial`'s config with `values` (dotted path -> value) set: a configuration's trial, as the issue says."""
    raw = trial.config.model_dump(mode="json")
    for path, value in values.items():
        set_path(raw, path, value)
    return TrialConfig.model_validate(raw)


# --------------------------------------------------------------------------------------- simulated studies
LRS = [1e-4, 1e-3, 1e-2, 1e-1]
PEAK = {"softmax": (90.0, 1e-3), "csan": (92.0, 1e-2)}
"""Each arm's best validation and test score, and the learning rate it is reached at: CSaN is better than the
baseline only at its own learning rate (at the baseline's, 1e-3, it is 10 points worse)."""


def truth(t: Trial) -> float:
    """A trial's made-up score: its arm's peak, minus 10 points per decade away from the arm's learning rate, and
    a little noise of its own per seed (so paired differences have a spread)."""
    peak, lr = PEAK[t.config.attention.kind]
    noise = 0.3 * math.sin(7.1 * t.config.seed + len(t.config.attention.kind))
    return peak - 10 * abs(math.log10(t.config.train.lr / lr)) + noise


def simulate(store: Store, p: Plan, score: Callable[[Trial], float] = truth) -> Round:
    """Run `p`'s rounds as a launch would, with made-up results instead of training (recorded through the
    store's write API: the sweeps and their records, the trials, one epoch of val.top1 and the test score)."""
    rounds = Rounds([p])
    grown = rounds.first(store)
    while True:
        for each in grown.plans:
            record = {"axes": each.axes, "tuning": each.tuning and each.tuning.model_dump(mode="json")}
            store.upsert_sweep(each.sweep, metric=each.metric, baseline=each.baseline, spec=record)
            store.add_trials(each.sweep, each.trials)
        done = store.done_keys()
        for t in {t.key: t for each in grown.plans for t in each.trials if t.key not in done}.values():
            store.mark_running(t.key, host="simulated")
            store.log_metrics(t.key, 1, {"val.top1": score(t), "val.loss": (100 - score(t)) / 50})
            store.finish(t.key, "done", result={"test": {"top1": score(t)}})
        grown = rounds.grow(store)
        if not grown.new:
            return grown


def test_an_arm_better_only_at_its_own_learning_rate_is_reported_as_such(tmp_path: Path) -> None:
    """Grid search over four learning rates, every arm the same: softmax is best at 1e-3, CSaN at 1e-2, where it
    beats the baseline; at the baseline's 1e-3 it is worse. The section says each chose its own rate and that
    the conclusion depends on tuning; the CSVs hold the configurations, the arms and the curves."""
    tune = {"space": {"train.lr": LRS}, "sampler": "grid", "budget": 4, "batch": 2, "metric": "val.top1"}
    f = tuned(tmp_path, tune=tune, grid={"attention.kind": ["softmax", "csan"]}, seeds=8)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        simulate(store, plan(f))
        with pytest.raises(ReportError, match="t/tuning is the search of the tuned sweep t: its report is the"):
            report("t/tuning", store=store, out=tmp_path / "rep")
        written = report(
            ["t", "t/tuning"], store=store, out=tmp_path / "rep", formats=["md", "csv"]
        )  # as a launch says
    figures = {"tuning.png", "tuning_median.png"}
    assert {w.name for w in written} >= {"report.md", *figures, "tuning.csv", "tuning_arms.csv"}
    md = (tmp_path / "rep" / "t" / "report.md").read_text()
    section = md.split("## Tuning", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in section.splitlines() if line.startswith("| ")]
    header, softmax, csan = rows
    assert header[3] == "train.lr" and softmax[3] == "0.001" and csan[3] == "0.01"
    assert softmax[4] == "baseline" and csan[4].startswith("+") and csan[5].startswith("-")
    assert csan[4].endswith("*") and csan[5].endswith("*")  # both significant after adjustment
    assert csan[6] == "depends on tuning: better at its own best, worse at the baseline's"
    assert "is the same from" in section and "expected best val.top1" in section
    arms = pd.read_csv(tmp_path / "rep" / "t" / "tuning_arms.csv")
    assert list(arms["train.lr"]) == [1e-3, 1e-2] and arms["conclusion"].iloc[1] == csan[6]
    assert abs(arms["own_delta"].iloc[1] - 2) < 0.5 and abs(arms["theirs_delta"].iloc[1] + 8) < 0.5
    configs = pd.read_csv(tmp_path / "rep" / "t" / "tuning.csv")
    assert len(configs) == 8 and sorted(configs["train.lr"].unique()) == LRS and configs["chosen"].sum() == 2
    curves = pd.read_csv(tmp_path / "rep" / "t" / "tuning_curves.csv")
    assert list(curves.groupby("arm")["n"].max()) == [4, 4]
    for arm, tried in configs.groupby("arm"):  # each arm's band is that of its four validation scores
        band = bands.band(list(tried["val.top1"]), "max", (0.0, 100.0), 0.975)
        mine = curves[curves["arm"] == arm]
        assert np.allclose(mine["lo"], band.lo, rtol=0, atol=1e-9) and np.allclose(
            mine["hi"], band.hi, rtol=0, atol=1e-9
        )
        middle = bands.band(list(tried["val.top1"]), "max", (0.0, 100.0), 0.975, curve=bands.MEDIAN)
        assert np.array_equal(mine["median_lo"], middle.lo) and np.array_equal(mine["median_hi"], middle.hi)
    assert "| not decided | Tuned alike, CSaN" in md and "in median best val.top1" in md
    assert "bands overlap at every n from 1 to 4" in md


def test_a_search_on_a_loss_has_bands_on_its_expected_least_loss_open_above(tmp_path: Path) -> None:
    """Tuned on val.loss (lower is better, no top): each arm's band on the expected least loss of n configurations
    has the lower edge of its four losses on [0, inf) and an infinite upper edge; its band on the median least loss
    is finite above from n = 2. The Findings compare the median bands: they overlap, and say the search that would
    separate them."""
    tune = {"space": {"train.lr": LRS}, "sampler": "grid", "budget": 4, "batch": 2, "metric": "val.loss"}
    f = tuned(tmp_path, tune=tune, grid={"attention.kind": ["softmax", "csan"]}, seeds=1)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        simulate(store, plan(f))
        report("t", store=store, out=tmp_path / "rep", formats=["md", "csv"])
    configs = pd.read_csv(tmp_path / "rep" / "t" / "tuning.csv")
    curves = pd.read_csv(tmp_path / "rep" / "t" / "tuning_curves.csv")
    for arm, tried in configs.groupby("arm"):
        band = bands.band(list(tried["val.loss"]), "min", (0.0, math.inf), 0.975)
        assert np.allclose(curves[curves["arm"] == arm]["lo"], band.lo, rtol=0, atol=1e-12)
        assert np.isinf(curves["hi"]).all()
        middle = bands.band(list(tried["val.loss"]), "min", (0.0, math.inf), 0.975, curve=bands.MEDIAN)
        mine = curves[curves["arm"] == arm]
        assert np.array_equal(mine["median_hi"], middle.hi) and np.isfinite(middle.hi[1:]).all()
    md = (tmp_path / "rep" / "t" / "report.md").read_text()
    assert "in median best val.loss of n configurations: the bands overlap at every n from 1 to 4" in md
    assert "bands from about 34 configurations per arm would be apart at n = 1" in md
    assert "The metric's range has no upper end, so that side of every band is infinite" in md


def test_adaptive_seeds_grow_the_arms_at_their_best_configurations(tmp_path: Path) -> None:
    """Tuning composed with adaptive seeds: the arms' final trials start at `min` seeds of their best
    configurations; CSaN ties with the baseline at its best, so it stays undecided and gets the next look's
    seeds at that configuration, as does the baseline it pairs with; its trials at the baseline's configuration
    keep the first seeds."""
    tune = {"space": {"train.lr": LRS}, "sampler": "grid", "budget": 4, "batch": 2, "metric": "val.top1"}
    seeds = {"min": 6, "max": 9, "looks": 2, "threshold": 0.5}
    f = tuned(tmp_path, tune=tune, grid={"attention.kind": ["softmax", "csan"]}, seeds=seeds)

    def tie(t: Trial) -> float:  # both arms peak at 90, each at its own rate
        return truth(t) - 2 * (t.config.attention.kind == "csan")

    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        last = simulate(store, plan(f), tie)
        record = searches(store)
        frame = store.trials_frame("t")
    main = next(p for p in last.plans if p.sweep == "t")
    lrs = {t.key: t.config.train.lr for t in main.trials}
    seeds_of = frame.groupby("variant")["seed"].apply(sorted).to_dict()
    softmax, csan = record.arms
    assert [seeds_of[main.trials[0].variant], seeds_of[main.trials[-1].variant]] == [list(range(9))] * 2
    assert {lrs[k] for k in softmax.finals} == {1e-3} and {lrs[k] for k in csan.finals} == {1e-2}
    assert set(frame["key"]) == {*softmax.finals, *csan.finals} and len(csan.at_baseline) == 6


def test_a_best_moved_by_a_larger_budget_leaves_the_comparison(tmp_path: Path) -> None:
    """Budget 2, then 4 on the same store: CSaN's best moves to 1e-2 (a grid seed whose first two rates leave it
    out). The sweep keeps the done trials of its earlier best, but the report compares each arm at its current
    best only: two variants."""
    spec = TuneSpec.model_validate({"space": {"train.lr": LRS}, "sampler": "grid", "budget": 4, "metric": "val.top1"})
    first = {s: [c["train.lr"] for c in proposals(spec.model_copy(update={"seed": s}), [])[:2]] for s in range(20)}
    seed = next(s for s, rates in first.items() if 1e-2 not in rates)
    tune = {"space": {"train.lr": LRS}, "sampler": "grid", "budget": 2, "batch": 2, "metric": "val.top1", "seed": seed}
    grid = {"attention.kind": ["softmax", "csan"]}
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        simulate(store, plan(tuned(tmp_path, tune=tune, grid=grid, seeds=8)))
        before = searches(store)
        simulate(store, plan(tuned(tmp_path, tune={**tune, "budget": 4}, grid=grid, seeds=8)))
        after = searches(store)
        kept = set(store.trials_frame("t")["key"])
        report("t", store=store, out=tmp_path / "rep", formats=["csv"])
    moved = set(before.arms[1].finals) - set(after.arms[1].finals)
    assert moved and moved <= kept  # the earlier best's trials are still the sweep's
    variants = pd.read_csv(tmp_path / "rep" / "t" / "variants.csv")
    assert len(variants) == 2 and variants["n"].tolist() == [8, 8]
    arms = pd.read_csv(tmp_path / "rep" / "t" / "tuning_arms.csv")
    assert list(arms["train.lr"]) == [1e-3, 1e-2]
