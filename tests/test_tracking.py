"""MLflow tracking on a real MLflow SQLite store in tmp_path, kept in step with a real results store."""

from __future__ import annotations

import os

import pytest

from ablate.config import TrialConfig
from ablate.planner import Trial, trial_key, variant_key
from ablate.store import Store
from ablate.tracking import MAX_KEY, MAX_PARAM, Tracker, mlflow_name, params_of


def trial(seed: int, **axes: object) -> Trial:
    cfg = TrialConfig.model_validate({"attention": {"kind": "csan"}, "seed": seed})
    return Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": "csan", "seed": seed, **axes})


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def tracker(home):
    """One tracker for the module, made with the default URI in `home` (MLflow's start-up, mostly the
    creation of its schema, takes seconds)."""
    cwd = os.getcwd()
    os.chdir(home)
    try:
        return Tracker()
    finally:
        os.chdir(cwd)


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'ablate.sqlite'}") as s:
        yield s


def runs_of(tracker: Tracker, experiment_id: str) -> list:
    return tracker.client.search_runs([experiment_id])


def test_default_uri_puts_db_and_artifacts_under_db(tracker, home):
    assert tracker.uri == f"sqlite:///{home / 'db' / 'mlflow.sqlite'}" and (home / "db" / "mlflow.sqlite").is_file()
    assert tracker.artifact_root == (home / "db" / "mlartifacts").as_uri()
    assert Tracker("http://127.0.0.1:5000").artifact_root is None  # a server decides (no connection made)


def test_one_experiment_and_parent_run_per_sweep_reused_on_relaunch(tracker, store):
    store.upsert_sweep("sweep-a", description="CSaN switches")
    store.upsert_sweep("sweep-b")
    parent = tracker.start_sweep(store, "sweep-a")
    record = store.sweep("sweep-a")
    assert record.mlflow_run_id == parent
    assert tracker.client.get_experiment(record.mlflow_experiment_id).name == "sweep-a"
    assert tracker.start_sweep(store, "sweep-b") != parent
    assert store.sweep("sweep-b").mlflow_experiment_id != record.mlflow_experiment_id

    tracker.end_sweep(store, "sweep-a", "KILLED")
    assert tracker.client.get_run(parent).info.status == "KILLED"
    assert tracker.start_sweep(store, "sweep-a") == parent  # relaunch: same run, running again
    assert tracker.client.get_run(parent).info.status == "RUNNING"
    assert tracker.client.get_run(parent).data.tags["mlflow.note.content"] == "CSaN switches"
    assert len(runs_of(tracker, record.mlflow_experiment_id)) == 1


def test_trial_run_is_nested_tagged_and_carries_flat_params(tracker, store):
    t = trial(0, **{"model.embed_dim": 64})
    store.add_trials("nest", [t])
    run_id = tracker.start_trial(store, "nest", t.key)  # starts the sweep's parent run too
    run = tracker.client.get_run(run_id)
    sweep = store.sweep("nest")
    assert run.data.tags["mlflow.parentRunId"] == sweep.mlflow_run_id
    assert run.info.experiment_id == sweep.mlflow_experiment_id
    assert {k: run.data.tags[k] for k in ("sweep", "trial_key", "variant")} == {
        "sweep": "nest", "trial_key": t.key, "variant": t.variant}  # fmt: skip
    params = run.data.params
    assert params["axis.attention.kind"] == "csan" and params["axis.model.embed_dim"] == "64"
    assert params["attention.kind"] == "csan" and params["model.depths"] == "[12]" and params["seed"] == "0"
    assert params["train.lr"] == "0.001" and params["attention.tau"] == "true"
    assert len(params) == len(params_of(t.config.model_dump(mode="json"), t.axes)) > 60
    assert store.trial(t.key).mlflow_run_id == run_id


def test_params_are_flattened_clipped_and_batched(tracker, store):
    long_key = "k" * 300
    config = {"nested": {"deep": {"x": 1}}, "text": "v" * 7000, long_key: 1, "odd:name(1)": "a",
              **{f"p{i}": i for i in range(150)}}  # fmt: skip
    params = params_of(config, {"grid path": [1, 2]})
    assert params["nested.deep.x"] == "1" and params["axis.grid path"] == "[1, 2]"
    assert len(params["text"]) == MAX_PARAM and params["text"].endswith("...")
    assert mlflow_name(long_key) in params and len(mlflow_name(long_key)) == MAX_KEY
    assert mlflow_name(long_key) != mlflow_name("k" * 299 + "j") and "odd_name_1_" in params
    store.add_trials("clip", [{"key": "c1", "variant": "v", "config": config, "axes": {"grid path": [1, 2]}}])
    run = tracker.client.get_run(tracker.start_trial(store, "clip", "c1"))
    assert run.data.params == params and len(params) > 150


def test_resumed_trial_reuses_its_run_never_duplicates(tracker, store):
    t = trial(1)
    store.add_trials("resume", [t])
    run_id = tracker.start_trial(store, "resume", t.key)
    tracker.log_metrics(run_id, 0, {"train.loss": 1.0, "val.top1": 0.2}, wall_time=1000.0)
    tracker.end_trial(run_id, "failed", error='Traceback (most recent call last):\n  File "x"\nRuntimeError: oom')
    run = tracker.client.get_run(run_id)
    assert (run.info.status, run.data.tags["error"]) == ("FAILED", "RuntimeError: oom")

    assert tracker.start_trial(store, "resume", t.key) == run_id  # retry: same run, running again
    assert tracker.client.get_run(run_id).info.status == "RUNNING"
    tracker.log_metrics(run_id, 0, {"train.loss": 1.0, "val.top1": 0.2}, wall_time=1000.0)  # resent as is
    tracker.log_metrics(run_id, 1, {"train.loss": 0.5, "val.top1": 0.4}, wall_time=1001.0)
    tracker.end_trial(run_id, "done", result={"test": {"top1": 0.42, "n": 10}, "ok": True}, step=1)
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    assert run.data.metrics == {"train.loss": 0.5, "val.top1": 0.4, "test.top1": 0.42, "test.n": 10}
    assert [m.step for m in tracker.client.get_metric_history(run_id, "val.top1")] == [0, 1]

    store.add_trials("resume-2", [t])  # the same trial in another sweep keeps its one run
    assert tracker.start_trial(store, "resume-2", t.key) == run_id
    exp = store.sweep("resume").mlflow_experiment_id
    assert [r.info.run_id for r in runs_of(tracker, exp) if r.data.tags.get("trial_key") == t.key] == [run_id]


def test_a_run_the_store_lost_is_found_by_its_tag(tracker, store, tmp_path):
    t = trial(2)
    store.add_trials("lost", [t])
    run_id = tracker.start_trial(store, "lost", t.key)
    parent = store.sweep("lost").mlflow_run_id
    with Store(f"sqlite:///{tmp_path / 'fresh.sqlite'}") as fresh:  # a store that never saw the run ids
        fresh.add_trials("lost", [t])
        fresh.set_sweep_mlflow("lost", store.sweep("lost").mlflow_experiment_id, parent)
        assert tracker.start_trial(fresh, "lost", t.key) == run_id
        assert fresh.trial(t.key).mlflow_run_id == run_id


def test_metric_batches_over_the_limit(tracker, store):
    t = trial(3)
    store.add_trials("many", [t])
    run_id = tracker.start_trial(store, "many", t.key)
    rows = [(f"m{i % 3}", i // 3, float(i), 2000.0 + i) for i in range(2500)]
    tracker.log_metric_rows(run_id, rows)
    tracker.log_metric_rows(run_id, rows)  # exact repeats are dropped
    assert len(tracker.client.get_metric_history(run_id, "m0")) == 834
