"""The variants' runs the sweep's view shows (`ablate.tracking.variants`), on a real MLflow SQLite store fed from a
real results store: the numbers of the report's own variant table, one active run per variant, replaced when the
report changes and gone when there is no report."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd
import pytest
from mlflow.entities import Metric

from ablate.config import TrialConfig
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.reporting import report
from ablate.store import Store
from ablate.tracking import records
from ablate.tracking.tracker import Tracker, sweep_report
from ablate.tracking.variants import keep_variant_runs

#: Scripted test.top1 per kind and seed: 6 seeds, so the report gives each difference an interval.
SCORES = {"softmax": [71.25, 72.5, 70.0, 71.0, 73.0, 70.5], "csan": [80.75, 81.0, 79.5, 82.0, 80.25, 81.5]}


def grid() -> list[Trial]:
    out = []
    for kind, scores in SCORES.items():
        for seed in range(len(scores)):
            cfg = TrialConfig.model_validate({"attention": {"kind": kind}, "seed": seed})
            out.append(Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": kind, "seed": seed}))
    return out


def finish(store: Store, t: Trial, top1: float) -> None:
    store.mark_running(t.key)
    store.finish(t.key, "done", result={"test": {"top1": top1}})


def variant_runs(tracker: Tracker, store: Store) -> dict[str, tuple[str, str, dict[str, float]]]:
    """The experiment's active variant runs: per variant key, (run id, name, metrics); a second run of a variant
    fails the test."""
    exp = store.sweep("s").mlflow_experiment_id
    out: dict[str, tuple[str, str, dict[str, float]]] = {}
    for run in tracker.client.search_runs([exp], "tags.summary = 'variant'"):
        variant = run.data.tags["variant"]
        assert variant not in out, "two runs of one variant"
        out[variant] = (run.info.run_id, run.info.run_name, run.data.metrics)
    return out


def reported(store: Store, tmp: Path) -> pd.DataFrame:
    """The report's variant table, as `ablate report` writes it."""
    report("s", store=store, out=tmp, formats=("csv",))
    return pd.read_csv(tmp / "s" / "variants.csv", index_col="variant")


@pytest.fixture
def sweep(tmp_path: Path):
    """A results store with sweep 's' (softmax the baseline, 6 seeds each, done with `SCORES`) and a tracker."""
    trials = grid()
    with Store(f"sqlite:///{tmp_path / 'r.sqlite'}") as store:
        store.upsert_sweep(
            "s", metric="test.top1", spec={"axes": ["attention.kind", "seed"]}, baseline=trials[0].variant
        )
        store.add_trials("s", trials)
        for t in trials:
            finish(store, t, SCORES[t.config.attention.kind][t.config.seed])
        yield store, Tracker(f"sqlite:///{tmp_path / 'm.sqlite'}"), trials


def test_each_variant_gets_one_run_holding_its_reports_numbers(sweep, tmp_path):
    store, tracker, _ = sweep
    tracker.end_sweep(store, "s")
    runs = variant_runs(tracker, store)
    table = reported(store, tmp_path / "report")
    assert set(runs) == set(table.index)
    names = {"mean": "mean", "std": "std", "n": "n", "delta": "delta", "lo": "delta lo", "hi": "delta hi",
             "p_adj": "p adj"}  # fmt: skip
    for variant, (_, name, metrics) in runs.items():
        row = table.loc[variant]
        assert name == f"kind={row['axis.attention.kind']}"  # short: the axis that varies, not the long label
        assert metrics == {names[c]: pytest.approx(row[c]) for c in names if row[c] == row[c]}
    csan = next(v for v, (_, name, _) in runs.items() if name == "kind=csan")
    assert runs[csan][2]["mean"] == pytest.approx(sum(SCORES["csan"]) / 6)  # the mean over seeds, not a trial's
    lo, hi = runs[csan][2]["delta lo"], runs[csan][2]["delta hi"]
    assert lo < runs[csan][2]["delta"] < hi  # an interval: 6 seeds are enough for one


def test_a_changed_report_replaces_its_variants_run_and_no_report_leaves_none(sweep, tmp_path):
    store, tracker, trials = sweep
    tracker.end_sweep(store, "s")
    before = variant_runs(tracker, store)
    finish(store, trials[-1], 90.0)  # a csan trial trained again, with another score
    assert tracker.summarise(store, "s")
    after = variant_runs(tracker, store)
    table = reported(store, tmp_path / "again")
    softmax, csan = trials[0].variant, trials[-1].variant
    assert after[softmax][0] == before[softmax][0]  # unchanged numbers: the same run
    assert after[csan][0] != before[csan][0] and after[csan][2]["mean"] == pytest.approx(table.at[csan, "mean"])
    assert tracker.client.get_run(before[csan][0]).info.lifecycle_stage == "deleted"

    store.upsert_sweep("s", metric="val.nope")  # a metric no trial recorded: the sweep has no report
    assert tracker.summarise(store, "s")
    assert variant_runs(tracker, store) == {}


def test_a_copy_another_process_made_at_once_is_deleted_and_the_newest_kept(sweep):
    """Two processes summarising one sweep at once may each make a variant's run: keeping them again (as the later
    one does once its own are made) leaves one run per variant, the newest."""
    store, tracker, trials = sweep
    tracker.end_sweep(store, "s")
    exp = store.sweep("s").mlflow_experiment_id
    with tempfile.TemporaryDirectory() as tmp:
        summary = sweep_report(store, "s", Path(tmp))
    assert summary is not None
    first = variant_runs(tracker, store)
    softmax = trials[0].variant
    copy = tracker.client.create_run(exp, tags={"summary": "variant", "variant": softmax},
                                     run_name=summary.variants[softmax].name).info.run_id  # fmt: skip
    metrics = summary.variants[softmax].numbers
    tracker.client.log_batch(copy, metrics=[Metric(k, v, 0, 0) for k, v in metrics.items()])
    assert keep_variant_runs(tracker.client, exp, "s", summary.variants) == 0  # nothing was missing
    runs = variant_runs(tracker, store)
    assert runs[softmax][0] == copy and set(runs) == set(first)
    assert tracker.client.get_run(first[softmax][0]).info.lifecycle_stage == "deleted"


def test_a_sweep_summarised_before_variant_runs_existed_gets_them_when_next_ended(sweep, monkeypatch):
    """A parent run whose summary an earlier form logged (its digest without `SUMMARY_FORM`, no variant runs) is
    not in step: the next `end_sweep` (a launch's end, `ablate sync`) logs the summary again, variant runs too."""
    store, tracker, _ = sweep
    monkeypatch.setattr(records, "SUMMARY_FORM", "")
    tracker.end_sweep(store, "s")
    for run_id, _, _ in variant_runs(tracker, store).values():  # as the earlier form left it: none
        tracker.client.delete_run(run_id)
    monkeypatch.undo()
    assert not tracker.in_step(store, "s")
    tracker.end_sweep(store, "s")
    assert len(variant_runs(tracker, store)) == len(SCORES) and tracker.in_step(store, "s")
