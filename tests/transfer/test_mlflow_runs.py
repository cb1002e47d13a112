"""Runs from a real MLflow experiment (issue 57), logged the usual way (log_params, log_metric per epoch, a seed
param), in an SQLite tracking store, a local `mlruns` folder and a real `mlflow server` (one for the module):
parameters become axes, histories epochs, FINISHED done and FAILED failed, a RUNNING run left out until it ends; a
second import adds nothing, new runs only themselves; an unknown experiment names those there are; `ablate sync` of
the imported sweep links each trial to its run where it came from and copies it anywhere else."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import free_port
from mlflow.tracking import MlflowClient
from procs import MlflowServer

from ablate.api import import_runs, report, runs, sync
from ablate.store import Store
from ablate.tracking.tracker import Tracker
from ablate.transfer.mlflow_runs import tracking_uri
from ablate.transfer.runs import ImportProblem


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    """A real `mlflow server` for this module's tests (each its own experiment): an import reads it over HTTP."""
    with MlflowServer(tmp_path_factory.mktemp("mlflow"), free_port()) as running:
        yield running


def log(client: MlflowClient, experiment: str, lr: float, seed: int, status: str = "FINISHED") -> str:
    """One run as a training script logs it: its parameters once, two metrics per epoch, how it ended."""
    found = client.get_experiment_by_name(experiment)
    ident = found.experiment_id if found else client.create_experiment(experiment)
    run = client.create_run(ident)
    for name, value in {"lr": lr, "seed": seed, "epochs": 3}.items():
        client.log_param(run.info.run_id, name, value)
    for epoch in range(1, 4 if status != "FAILED" else 2):
        client.log_metric(run.info.run_id, "val_acc", 0.5 + lr + epoch / 10 + seed / 100, step=epoch)
        client.log_metric(run.info.run_id, "train_loss", 1 / epoch, step=epoch)
    if status != "RUNNING":
        client.set_terminated(run.info.run_id, status)
    return str(run.info.run_id)


@pytest.mark.parametrize("where", ["sqlite", "mlruns"])
def test_an_experiment_is_a_sweep_and_importing_it_again_adds_only_new_runs(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    source = str(tmp_path / "m.sqlite") if where == "sqlite" else str(tmp_path / "mlruns")
    if where == "mlruns":
        (tmp_path / "mlruns").mkdir()
    imports_again_only_new_runs(source, f"sqlite:///{source}" if where == "sqlite" else tracking_uri(source), tmp_path)


def test_an_experiment_on_a_tracking_server_imports_as_from_a_file(tmp_path: Path, server: MlflowServer) -> None:
    """The same runs logged to a real `mlflow server` and imported over HTTP (a test of its own: requesting the
    server marks it as one that starts a process, tests/markers.py)."""
    imports_again_only_new_runs(server.uri, server.uri, tmp_path)


def imports_again_only_new_runs(source: str, uri: str, tmp_path: Path) -> None:
    """Runs logged at the tracking URI `uri`, imported from `source` (a file, folder or URI); a second import adds
    only the run that ended since and a new one."""
    client = MlflowClient(uri)
    ids = [log(client, "cifar", lr, seed) for lr in (0.1, 0.2) for seed in (0, 1)]
    failed = log(client, "cifar", 0.3, 0, "FAILED")
    running = log(client, "cifar", 0.3, 1, "RUNNING")
    db = str(tmp_path / "a.sqlite")
    got = import_runs(source, experiment="cifar", store=db, ignore=["epochs"], metric="val_acc")
    assert got.sweeps == ["cifar"] and len(got.added) == 5
    assert got.notes == [f"run {running} is RUNNING: left out (import again once it ends)"]
    with Store(db) as store:
        rows = store.trials_frame("cifar")
        states = {store.trial(k).source["run_id"]: s for k, s in zip(rows["key"], rows["state"])}  # type: ignore[union-attr]
        assert states == {**dict.fromkeys(ids, "done"), failed: "failed"}
        assert sorted(store.metrics_frame("cifar", names="val_acc")["step"].unique()) == [1, 2, 3]
        assert store.code_digests("cifar") == {}  # no code record: never stale
    client.set_terminated(running, "FINISHED")
    new = log(client, "cifar", 0.2, 2)
    again = import_runs(source, experiment=client.get_experiment_by_name("cifar").experiment_id, store=db,
                        ignore=["epochs"], metric="val_acc")  # fmt: skip
    assert (len(again.added), len(again.known)) == (2, 5) and again.notes == []
    listed = runs(["cifar"], store=db, where=["params.lr=0.2"]).rows
    assert sorted(listed["axis.seed"]) == [0, 1, 2] and sorted(listed["val_acc"]) == pytest.approx([1.0, 1.01, 1.02])
    with Store(db) as store:
        assert new in {store.trial(k).source["run_id"] for k in again.added}  # type: ignore[union-attr]
    report("cifar", store=db, out=tmp_path / "r", formats=["md"])
    assert "Trials: 7 (6 done, 1 failed)" in (tmp_path / "r" / "cifar" / "report.md").read_text()


def test_an_unknown_experiment_names_those_there_are(tmp_path: Path) -> None:
    client = MlflowClient(f"sqlite:///{tmp_path / 'm.sqlite'}")
    client.create_experiment("cifar")
    with pytest.raises(ImportProblem, match=r"no experiment named 'imagenet' \(experiments: .*cifar"):
        import_runs(tmp_path / "m.sqlite", experiment="imagenet", store=str(tmp_path / "a.sqlite"))
    with pytest.raises(ImportProblem, match="no runs to import"):
        import_runs(tmp_path / "m.sqlite", experiment="cifar", store=str(tmp_path / "a.sqlite"))
    assert not (tmp_path / "a.sqlite").exists()


def test_a_sweep_synced_to_the_mlflow_it_came_from_copies_no_run_and_elsewhere_one_per_trial(tmp_path: Path) -> None:
    """Synced to the tracking store it was imported from, each trial is linked to the run it came from (no copy in
    that experiment), the sweep's summary goes beside them, and importing the experiment again adds nothing (the
    runs ablate made there are left out); a store of the same runs synced to another tracking store gives each trial
    a run with its history, as a trial ablate trained."""
    source, db = f"sqlite:///{tmp_path / 'm.sqlite'}", str(tmp_path / "a.sqlite")
    client = MlflowClient(source)
    ids = [log(client, "cifar", lr, seed) for lr in (0.1, 0.2) for seed in (0, 1)]
    import_runs(source, experiment="cifar", store=db, ignore=["epochs"], metric="val_acc")
    assert sync(None, db, Tracker(source)).trials == 4
    exp = client.get_experiment_by_name("cifar").experiment_id
    assert client.search_runs([exp], "tags.trial_key != ''") == []
    with Store(db) as store:
        linked = {store.trial(k).source["run_id"]: store.trial(k).mlflow_run_id for k in store.member_keys(["cifar"])}  # type: ignore[union-attr]
        assert linked == {i: i for i in ids} and store.unmirrored() == []
        assert client.get_run(store.sweep("cifar").mlflow_run_id).info.experiment_id == exp  # type: ignore[union-attr]
    again = import_runs(source, experiment="cifar", store=db, ignore=["epochs"], metric="val_acc")
    assert (again.added, len(again.known)) == ([], 4) and "ablate made" in again.notes[0]
    other, elsewhere = str(tmp_path / "b.sqlite"), Tracker(f"sqlite:///{tmp_path / 'o.sqlite'}")
    import_runs(source, experiment="cifar", store=other, ignore=["epochs"], metric="val_acc")
    assert sync(None, other, elsewhere).trials == 4
    copies = elsewhere.client.search_runs([elsewhere.experiment("cifar")], "tags.trial_key != ''")
    assert len(copies) == 4 and all(c.info.run_id not in ids and c.info.status == "FINISHED" for c in copies)
    assert {m.step for m in elsewhere.client.get_metric_history(copies[0].info.run_id, "val_acc")} == {1, 2, 3}


EXAMPLE = Path(__file__).parents[2] / "examples" / "mlflow_runs"
GRID = """
import sys
sys.path.insert(0, {folder!r})
import train
for lr in (0.001, 0.003):
    for seed in (0, 1):
        train.train(lr, depth=1, seed=seed, epochs=2)
"""


@pytest.mark.timeout(900)
def test_the_plain_training_scripts_experiment_imports_and_reports(tmp_path: Path, server: MlflowServer) -> None:
    """examples/mlflow_runs/train.py, run over a grid of two learning rates and two seeds as its user would (a
    process of its own, MLflow's tracking URI from the environment: a tracking server), then imported from the
    server and reported."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": server.uri, "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-c", GRID.format(folder=str(EXAMPLE))], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=900)  # fmt: skip
    db = str(tmp_path / "a.sqlite")
    got = import_runs(server.uri, experiment="digits", store=db, metric="val_acc", ignore=["epochs"],
                      baseline={"lr": 0.001})  # fmt: skip
    assert got.sweeps == ["digits"] and len(got.added) == 4
    report("digits", store=db, out=tmp_path / "r", formats=["md"])
    text = (tmp_path / "r" / "digits" / "report.md").read_text()
    assert "Trials: 4 (4 done); variants: 2" in text and "Baseline: run; lr=0.001" in text
    with Store(db) as store:
        assert sorted(store.metrics_frame("digits", names="val_acc")["step"].unique()) == [1, 2]
