"""Runs ablate did not train, as a sweep's trials (issue 57): axes, seed and result mapped; bad input is one
ImportProblem naming what is wrong (no runs, no seed, a seed that is no integer, an unknown axis or metric, two runs
in one cell with one seed), and a run that lacks the headline metric is imported failed, said in a note."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from ablate.transfer.runs import ImportProblem, Mapping, Point, Run, Source, to_dump

SOURCE = Source("mlflow", "sqlite:///m.sqlite", "cifar")


def run(ident: str, lr: float, seed: object, acc: list[float], minute: int = 0, **params: object) -> Run:
    started = datetime(2026, 1, 1, 0, minute, tzinfo=timezone.utc)
    history = {"val_acc": [Point(i + 1, v) for i, v in enumerate(acc)]} if acc else {}
    return Run(ident, {"lr": lr, "seed": seed, **params}, history, started_at=started)


def test_parameters_become_axes_the_seed_a_replicate_and_the_last_epoch_the_result() -> None:
    runs = [run("a", 0.1, 0, [0.5, 0.7]), run("b", 0.1, 1, [0.6, 0.8]), run("c", 0.01, 0, [0.4, 0.3])]
    got = to_dump(runs, Mapping("s", "seed", baseline={"lr": 0.01}), SOURCE).dump
    assert [t["axes"] for t in got.trials] == [{"params.lr": 0.1, "seed": 0}, {"params.lr": 0.1, "seed": 1},
                                               {"params.lr": 0.01, "seed": 0}]  # fmt: skip
    assert [t["result"] for t in got.trials] == [{"val_acc": 0.7}, {"val_acc": 0.8}, {"val_acc": 0.3}]
    assert got.trials[0]["variant"] == got.trials[1]["variant"] != got.trials[2]["variant"]
    assert got.sweeps[0]["baseline"] == got.trials[2]["variant"] and got.sweeps[0]["metric"] == "val_acc"
    assert got.trials[0]["source"] == {"kind": "mlflow", "uri": "sqlite:///m.sqlite", "experiment": "cifar",
                                       "run_id": "a"}  # fmt: skip
    assert got.trials[0]["code"] is None and got.trials[0]["config"]["seed"] == 0  # never stale
    assert len(got.metrics) == 6 and {m["step"] for m in got.metrics} == {1, 2}
    best = to_dump(runs, Mapping("s", "seed", select="best"), SOURCE).dump
    assert [t["result"] for t in best.trials] == [{"val_acc": 0.7}, {"val_acc": 0.8}, {"val_acc": 0.4}]
    lowest = to_dump(runs, Mapping("s", "seed", direction="min", select="best"), SOURCE).dump
    assert [t["result"] for t in lowest.trials] == [{"val_acc": 0.5}, {"val_acc": 0.6}, {"val_acc": 0.3}]
    assert lowest.sweeps[0]["spec"]["directions"] == {"val_acc": "min"} and "directions" not in best.sweeps[0]["spec"]


def test_the_same_run_is_the_same_key_whatever_the_mapping() -> None:
    one = to_dump([run("a", 0.1, 0, [0.5])], Mapping("s", "seed"), SOURCE).dump.trials[0]["key"]
    two = to_dump([run("a", 0.1, 0, [0.5], depth=2)], Mapping("t", "seed", axes=("lr",)), SOURCE).dump
    assert two.trials[0]["key"] == one


def test_no_runs_is_a_problem() -> None:
    with pytest.raises(ImportProblem, match="no runs to import"):
        to_dump([], Mapping("s", "seed"), SOURCE)


def test_every_run_without_a_seed_or_with_one_not_an_integer_is_named() -> None:
    runs = [run("a", 0.1, None, [0.5]), run("b", 0.1, 1.5, [0.5]), run("c", 0.1, "x", [0.5]), run("d", 0.1, 2, [1])]
    with pytest.raises(ImportProblem) as e:
        to_dump(runs, Mapping("s", "seed"), SOURCE)
    assert e.value.problems == ["run a: no seed (no parameter or tag 'seed')", "run b: seed seed=1.5 is not an integer",
                                "run c: seed seed='x' is not an integer"]  # fmt: skip


def test_an_unknown_axis_metric_or_baseline_is_named_with_what_there_is() -> None:
    with pytest.raises(ImportProblem) as e:
        to_dump([run("a", 0.1, 0, [0.5])], Mapping("s", "seed", axes=("lr", "depth"), metric="top1",
                                                     baseline={"wd": 0}), SOURCE)  # fmt: skip
    assert e.value.problems == ["no parameter 'depth' in any run (parameters: lr, seed)",
                                "no run records metric 'top1' (metrics: val_acc)",
                                "baseline: 'wd' is not an axis (axes: lr, depth)"]  # fmt: skip


def test_two_runs_in_one_cell_with_one_seed_are_named_and_kept_only_as_told() -> None:
    runs = [run("late", 0.1, 0, [0.5], minute=5), run("early", 0.1, 0, [0.6], minute=1), run("c", 0.1, 1, [0.7])]
    with pytest.raises(ImportProblem, match=r"runs late, early claim the same cell \{\"lr\": 0.1\} and seed 0"):
        to_dump(runs, Mapping("s", "seed"), SOURCE)
    first = to_dump(runs, Mapping("s", "seed", duplicates="first"), SOURCE)
    last = to_dump(runs, Mapping("s", "seed", duplicates="last"), SOURCE)
    assert [r["source"]["run_id"] for r in first.dump.trials] == ["early", "c"]
    assert [r["source"]["run_id"] for r in last.dump.trials] == ["late", "c"]
    assert first.notes == ['runs late, early claim the same cell {"lr": 0.1} and seed 0']


def test_a_run_without_the_headline_metric_is_imported_failed_and_said() -> None:
    got = to_dump([run("a", 0.1, 0, [0.5]), run("b", 0.1, 1, [])], Mapping("s", "seed"), SOURCE)
    ended = [(t["state"], t["error"]) for t in got.dump.trials]
    assert ended == [("done", None), ("failed", "no value of val_acc recorded")]
    assert got.notes == ["run b: finished without a value of val_acc: imported as failed"]
