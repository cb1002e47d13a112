"""A fresh local MLflow store is a copy of the empty migrated database kept in the cache folder, and is what MLflow
would have made itself: its schema current, its default experiment its own (where MLflow puts it for this store)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from ablate.provenance.cache import CACHE_ENV
from ablate.tracking.sqlite_db import template
from ablate.tracking.tracker import Tracker


def opened(folder: Path, monkeypatch) -> Tracker:
    """A tracker of a fresh SQLite store in `folder`, made from there (MLflow puts its default experiment's
    artifacts under the working folder)."""
    folder.mkdir()
    monkeypatch.chdir(folder)
    return Tracker(f"sqlite:///{folder}/m.sqlite")


def schema(db: Path) -> tuple[list[str], list[tuple]]:
    with closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name")]
        return tables, conn.execute("SELECT * FROM alembic_version").fetchall()


def test_a_fresh_mlflow_store_is_made_from_the_template_as_mlflow_makes_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    first = opened(tmp_path / "first", monkeypatch)  # MLflow creates it; it becomes the template
    assert template().exists()
    with closing(sqlite3.connect(template())) as conn:
        assert conn.execute("SELECT count(*) FROM experiments").fetchone() == (0,)
    second = opened(tmp_path / "second", monkeypatch)  # a copy of the template
    assert schema(tmp_path / "second" / "m.sqlite") == schema(tmp_path / "first" / "m.sqlite")
    default = second.client.get_experiment("0")
    assert default.name == "Default" and default.artifact_location == str(tmp_path / "second" / "mlruns" / "0")
    assert default.creation_time > first.client.get_experiment("0").creation_time
    assert second.experiment("s") == "1"  # experiment ids go on as in a store MLflow made
    run = second.client.create_run("1")
    second.log_metrics(run.info.run_id, 1, {"val.top1": 0.5})
    assert second.client.get_run(run.info.run_id).data.metrics == {"val.top1": 0.5}
