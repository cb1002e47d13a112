"""Runs from a CSV or Parquet table into a real store (issue 57): one row per run or the long format with an epoch
column; a second import adds nothing and new rows add only themselves; `runs` and the report read the sweep; an
unknown column, or text in a metric column, is named and nothing is written."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ablate.api import compare_reports, import_runs, report, runs
from ablate.transfer.runs import ImportProblem

ROWS = [{"model": m, "lr": lr, "seed": s, "val_acc": 0.7 + 0.05 * (m == "vit") + 0.01 * s + lr, "val_loss": 1 - s / 10}
        for m in ("resnet", "vit") for lr in (0.01, 0.1) for s in range(3)]  # fmt: skip


def test_a_wide_table_is_a_sweep_that_runs_and_report_read(tmp_path: Path) -> None:
    table, db = tmp_path / "grid.csv", str(tmp_path / "a.sqlite")
    pd.DataFrame(ROWS[:9]).to_csv(table, index=False)
    first = import_runs(
        table, store=db, axes=["model", "lr"], metric="val_acc", baseline={"model": "resnet", "lr": 0.01}
    )
    assert first.sweeps == ["grid"] and len(first.added) == 9
    pd.DataFrame(ROWS).to_csv(table, index=False)  # three new rows
    again = import_runs(
        table, store=db, axes=["model", "lr"], metric="val_acc", baseline={"model": "resnet", "lr": 0.01}
    )
    assert (len(again.added), len(again.known)) == (3, 9)
    listed = runs(["grid"], store=db, where=["params.lr=0.1", "params.model=vit"]).rows
    assert sorted(listed["axis.seed"]) == [0, 1, 2] and sorted(listed["val_acc"]) == pytest.approx([0.85, 0.86, 0.87])
    written = report("grid", store=db, out=tmp_path / "r", formats=["md"])
    text = (tmp_path / "r" / "grid" / "report.md").read_text()
    assert written and "Trials: 12 (12 done); variants: 4" in text and "run; model=resnet, lr=0.01 |" in text


def test_a_long_table_gives_each_run_its_epochs(tmp_path: Path) -> None:
    table = tmp_path / "long.parquet"
    rows = [{"run": f"r{s}", "lr": 0.1, "seed": s, "epoch": e, "acc": 0.5 + e / 10 + s / 100, "status": "done"}
            for s in range(2) for e in (1, 2, 3)]  # fmt: skip
    rows[-1]["status"] = "failed"
    pd.DataFrame(rows).to_parquet(table)
    got = import_runs(table, store=str(tmp_path / "a.sqlite"), axes=["lr"], run_id="run", epoch="epoch",
                      status="status")  # fmt: skip
    assert len(got.added) == 2
    listed = runs(store=str(tmp_path / "a.sqlite")).rows
    assert sorted(listed["state"]) == ["done", "failed"] and max(v for v in listed["acc"] if v is not None) == 0.8
    from ablate.store import Store

    with Store(str(tmp_path / "a.sqlite")) as store:
        assert store.metrics_frame(names="acc").groupby("key", observed=True)["step"].max().tolist() == [3, 3]


def test_an_unknown_column_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    table, db = tmp_path / "grid.csv", tmp_path / "a.sqlite"
    pd.DataFrame(ROWS).to_csv(table, index=False)
    with pytest.raises(ImportProblem) as e:
        import_runs(table, store=str(db), axes=["model", "optimizer"], seed="rng")
    there = "(columns: model, lr, seed, val_acc, val_loss)"
    assert e.value.problems == [f"{table}: no column 'rng' {there}", f"{table}: no column 'optimizer' {there}"]
    assert not db.exists()


def test_text_in_a_metric_column_is_named_with_its_row(tmp_path: Path) -> None:
    table = tmp_path / "mixed.csv"
    rows = [dict(r) for r in ROWS[:4]]
    rows[2]["val_acc"] = "lost"
    pd.DataFrame(rows).to_csv(table, index=False)
    with pytest.raises(ImportProblem, match=r"metric column 'val_acc' holds text \('lost' in row 3, and 0 more\)"):
        import_runs(table, store=str(tmp_path / "a.sqlite"), axes=["model", "lr"])
    assert not (tmp_path / "a.sqlite").exists()


def test_two_imported_sweeps_compare(tmp_path: Path) -> None:
    db = str(tmp_path / "a.sqlite")
    for name, shift in (("before", 0.0), ("after", 0.02)):
        pd.DataFrame([{**r, "val_acc": r["val_acc"] + shift} for r in ROWS]).to_csv(
            tmp_path / f"{name}.csv", index=False
        )
        import_runs(tmp_path / f"{name}.csv", store=db, axes=["model", "lr"], metrics=["val_acc"])
    written = compare_reports("before", "after", store=db, out=tmp_path / "c", formats=["md"])
    assert [p.name for p in written] == ["report.md"] and "model=vit, lr=0.1" in written[0].read_text()
