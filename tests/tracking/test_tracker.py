"""MLflow tracking on a real MLflow SQLite store in tmp_path, kept in step with a real results store."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import free_port

from ablate.config import TrialConfig
from ablate.planning.keys import Trial, trial_key, variant_key
from ablate.store import Store
from ablate.tracking.names import MAX_KEY, MAX_PARAM, mlflow_name
from ablate.tracking.tracker import DIGEST_TAG, Tracker, params_of
from ablate.tracking.view import VIEW_TAG, sweep_view, view_state


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
        fresh.keep_sweep_mlflow("lost", store.sweep("lost").mlflow_experiment_id, parent, None)
        assert tracker.start_trial(fresh, "lost", t.key) == run_id
        assert fresh.trial(t.key).mlflow_run_id == run_id


class LateStore(Store):
    """A real store whose first read of a sweep lets another launcher start the same sweep right after it:
    the interleaving of two launchers racing to create the sweep's parent run, made deterministic."""

    def __init__(self, url: str, other: Tracker) -> None:
        super().__init__(url)
        self.other, self.raced = other, False

    def sweep(self, name: str):
        record = super().sweep(name)
        if not self.raced:
            self.raced = True
            with Store(self.url) as theirs:
                self.other.start_sweep(theirs, name)
        return record


def test_two_launchers_starting_one_sweep_keep_one_parent_run(tracker, tmp_path):
    """The second launcher read the sweep with no parent run, the first then made one, and the second's
    write came too late: it keeps the first's run and deletes its own, so the experiment has one parent."""
    url = f"sqlite:///{tmp_path / 'race.sqlite'}"
    with Store(url) as s:
        s.add_trials("race", [trial(4)])
    with LateStore(url, tracker) as late:
        kept = tracker.start_sweep(late, "race")
        assert late.sweep("race").mlflow_run_id == kept
    exp = tracker.experiment("race")
    assert [r.info.run_id for r in runs_of(tracker, exp)] == [kept]


def test_metric_batches_over_the_limit(tracker, store):
    t = trial(3)
    store.add_trials("many", [t])
    run_id = tracker.start_trial(store, "many", t.key)
    rows = [(f"m{i % 3}", i // 3, float(i), 2000.0 + i) for i in range(2500)]
    tracker.log_metric_rows(run_id, rows)
    tracker.log_metric_rows(run_id, rows)  # exact repeats are dropped
    assert len(tracker.client.get_metric_history(run_id, "m0")) == 834


def grid(kinds: tuple[str, ...], seeds: tuple[int, ...]) -> list[Trial]:
    """Trials of one attention axis by seeds: a variant per kind."""
    out = []
    for kind in kinds:
        for seed in seeds:
            cfg = TrialConfig.model_validate({"attention": {"kind": kind}, "seed": seed})
            out.append(Trial(trial_key(cfg), variant_key(cfg), cfg, {"attention.kind": kind, "seed": seed}))
    return out


def run_done(tracker: Tracker, store: Store, sweep: str, t: Trial, top1: float) -> str:
    """The trial done in the store with `top1`, and mirrored to MLflow as the launch would."""
    store.mark_running(t.key)
    run_id = tracker.start_trial(store, sweep, t.key)
    store.finish(t.key, "done", result={"test": {"top1": top1}})
    tracker.end_trial(run_id, "done", result={"test": {"top1": top1}})
    return run_id


def test_the_parent_run_carries_the_sweeps_summary_and_report(tracker, store):
    """Per-variant means and paired deltas as metrics, the report as artifacts, logged again only when the
    sweep changed; trial runs named by label and seed; the experiment opens on its runs."""
    trials = grid(("softmax", "csan"), (0, 1))
    store.upsert_sweep("summary", spec={"axes": ["attention.kind", "seed"]}, baseline=trials[0].variant)
    store.add_trials("summary", trials)
    runs = [run_done(tracker, store, "summary", t, top1) for t, top1 in zip(trials, (0.5, 0.6, 0.7, 0.9))]
    assert [tracker.client.get_run(r).info.run_name for r in runs] == [
        "Softmax, attn-FFN · seed 0", "Softmax, attn-FFN · seed 1",
        "CSaN (tau, mu, private; unit readout), attn-FFN · seed 0",
        "CSaN (tau, mu, private; unit readout), attn-FFN · seed 1"]  # fmt: skip

    tracker.end_sweep(store, "summary")
    record = store.sweep("summary")
    parent = tracker.client.get_run(record.mlflow_run_id)
    csan = "CSaN tau mu private unit readout attn-FFN"
    assert parent.info.status == "FINISHED" and parent.data.metrics == pytest.approx({
        "test.top1/mean/Softmax attn-FFN": 0.55, f"test.top1/mean/{csan}": 0.8,
        "test.top1/delta/Softmax attn-FFN": 0.0, f"test.top1/delta/{csan}": 0.25})  # fmt: skip
    tags = parent.data.tags
    assert (tags["report.metric"], tags["report.baseline"]) == ("test.top1", "Softmax, attn-FFN")
    # two seeds a variant: no test can decide, so MLflow names no winner, as the report and the launch do not
    tied = "tied: CSaN (tau, mu, private; unit readout), attn-FFN (0.8) / Softmax, attn-FFN (0.55)"
    assert tags["report.best"] == tied
    files = {a.path for a in tracker.client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/index.html", "report/variants.csv", "report/summary.json"} <= files
    page = tracker.client.download_artifacts(parent.info.run_id, "report/index.html")
    assert "Softmax" in Path(page).read_text(encoding="utf-8")
    kind = tracker.client.get_experiment(record.mlflow_experiment_id).tags["mlflow.experimentKind"]
    assert kind == "custom_model_development"

    assert not tracker.summarise(store, "summary")  # nothing changed: nothing logged
    store.mark_running(trials[3].key)
    store.finish(trials[3].key, "done", result={"test": {"top1": 0.8}})
    assert tracker.summarise(store, "summary")
    assert tracker.client.get_run(parent.info.run_id).data.metrics[f"test.top1/mean/{csan}"] == pytest.approx(0.75)


def test_a_sweep_reusing_trials_gets_its_experiment_linking_their_runs(tracker, store):
    trials = grid(("softmax", "csan"), (2,))
    store.upsert_sweep("first", spec={"axes": ["attention.kind", "seed"]})
    store.add_trials("first", trials)
    runs = [run_done(tracker, store, "first", t, top1) for t, top1 in zip(trials, (0.5, 0.7))]
    store.upsert_sweep("again", spec={"axes": ["attention.kind", "seed"]}, description="softmax only")
    store.add_trials("again", trials[:1])  # done already: a launch of it runs nothing
    tracker.end_sweep(store, "again")

    first, again = store.sweep("first"), store.sweep("again")
    assert again.mlflow_experiment_id not in (None, first.mlflow_experiment_id)
    parent = tracker.client.get_run(again.mlflow_run_id)
    assert parent.info.experiment_id == again.mlflow_experiment_id
    assert parent.data.metrics == {"test.top1/mean/Softmax attn-FFN": 0.5}  # no baseline: no deltas
    assert tracker.client.get_run(runs[0]).data.tags["sweep.again"] == again.mlflow_run_id
    assert "sweep.again" not in tracker.client.get_run(runs[1]).data.tags
    note = parent.data.tags["mlflow.note.content"]
    link = f"#/experiments/{first.mlflow_experiment_id}/runs/{runs[0]}?workflowType=machine_learning"  # training view
    assert note.startswith("softmax only") and f"({link})" in note
    assert tracker.run_url(runs[0]) == f"http://127.0.0.1:5000/{link} (while `ablate ui` serves it)"
    trial_runs = [r for r in runs_of(tracker, again.mlflow_experiment_id) if "trial_key" in r.data.tags]
    assert trial_runs == []  # not copied


def test_a_lazy_tracker_makes_its_client_and_database_on_first_use(tmp_path):
    db = tmp_path / "lazy" / "m.sqlite"
    lazy = Tracker(f"sqlite:///{db}", lazy=True)
    assert lazy.uri == f"sqlite:///{db}" and not db.exists()  # the folder is made, MLflow's database not yet
    assert lazy.client is lazy.open().client and db.is_file()  # made once, then kept
    assert lazy.client.search_experiments() is not None


def test_in_step_holds_exactly_where_ending_the_sweep_would_change_nothing(tracker, store):
    """`in_step` (read from MLflow's SQLite tables) says the parent run is ended with the asked status and carries
    the summary of the sweep as the store has it; `end_sweep` then sends nothing (not even a new end time).
    Anything else is not in step: a running parent, another status, a changed store, a deleted run, a server."""
    trials = grid(("softmax", "csan"), (0,))
    store.upsert_sweep("steady", spec={"axes": ["attention.kind"]}, baseline=trials[0].variant)
    store.add_trials("steady", trials)
    assert not tracker.in_step(store, "steady")  # no parent run yet
    run_done(tracker, store, "steady", trials[0], 0.5)
    assert not tracker.in_step(store, "steady")  # the trial's run set its parent running
    tracker.end_sweep(store, "steady")
    parent = store.sweep("steady").mlflow_run_id
    assert tracker.in_step(store, "steady") and not tracker.in_step(store, "steady", "KILLED")
    ended = tracker.client.get_run(parent).info.end_time
    time.sleep(0.01)
    tracker.end_sweep(store, "steady")
    assert tracker.client.get_run(parent).info.end_time == ended  # in step: nothing sent

    store.mark_running(trials[1].key)
    store.finish(trials[1].key, "done", result={"test": {"top1": 0.7}})  # MLflow's summary is now behind
    assert not tracker.in_step(store, "steady")
    tracker.end_sweep(store, "steady")
    assert tracker.in_step(store, "steady") and tracker.client.get_run(parent).info.end_time > ended
    assert tracker.client.get_run(parent).data.tags[DIGEST_TAG]

    tracker.client.delete_run(parent)
    assert not tracker.in_step(store, "steady")
    tracker.end_sweep(store, "steady")  # a new parent run, with the summary
    assert store.sweep("steady").mlflow_run_id != parent and tracker.in_step(store, "steady")
    assert not Tracker("http://127.0.0.1:9", lazy=True).in_step(store, "steady")  # a server: ask it


def test_the_sweeps_experiment_keeps_the_view_ablate_ui_opens(tracker, store):
    """The experiment holds the sweep's saved view (`sweep_view`, what `ablate ui` lands on): only the variants' runs
    (the search filter on their tag), the report's numbers as columns, best first (a loss: lowest), a table of every
    number as wide as the page, then bar charts of the mean and of the difference to the reference. A sweep whose
    view went missing (an experiment an earlier version made) is not in step, and ending it writes the view."""
    t = trial(0)
    store.upsert_sweep("view", metric="val.loss", spec={"axes": ["attention.kind", "train.lr", "data.fold"]})
    store.add_trials("view", [t])
    tracker.end_sweep(store, "view")
    exp = store.sweep("view").mlflow_experiment_id
    state = view_state(tracker.client.get_experiment(exp).tags[VIEW_TAG])
    assert state is not None and state == sweep_view("val.loss")
    assert state["searchFilter"] == "tags.summary = 'variant'" and state["groupBy"] is None
    names = ["mean", "std", "n", "delta", "delta lo", "delta hi", "p adj"]
    assert state["selectedColumns"] == [f"metrics.`{n}`" for n in names]
    assert (state["orderByKey"], state["orderByAsc"]) == ("metrics.`mean`", True)  # a loss: lowest first
    assert state["runsHiddenMode"] == "SHOW_ALL"  # MLflow's default charts only the first 10 runs
    charts = [(c["type"], c.get("metricKey")) for c in state["compareRunCharts"]]
    assert charts == [("DIFFERENCE", None), ("BAR", "mean"), ("BAR", "delta")]
    assert [(s["name"], s["columns"]) for s in state["compareRunSections"]] == [("Variants compared", 1),
                                                                             ("Means and deltas", 2)]  # fmt: skip
    assert tracker.in_step(store, "view")

    tracker.client.delete_experiment_tag(exp, VIEW_TAG)
    assert not tracker.in_step(store, "view")
    again = Tracker(tracker.uri)  # another process: it asks MLflow once whether the view is there
    again.end_sweep(store, "view")
    assert view_state(tracker.client.get_experiment(exp).tags[VIEW_TAG]) == state and tracker.in_step(store, "view")


def test_a_run_another_sweeps_launcher_made_but_could_not_keep_is_adopted(tracker, store, tmp_path):
    """The chaos soak (seed 1, CI) found a trial of two sweeps with two MLflow runs: a launcher of one sweep made
    the run and lost the store before keeping its id; a launcher of the other sweep looked only in its own
    experiment and made a second. The search covers the experiments of every sweep that holds the trial."""
    t = trial(3)
    store.add_trials("made-here", [t])
    run_id = tracker.start_trial(store, "made-here", t.key)
    made = store.sweep("made-here")
    with Store(f"sqlite:///{tmp_path / 'fresh.sqlite'}") as fresh:  # the id never reached the store
        fresh.add_trials("made-here", [t])
        fresh.add_trials("mirrored-there", [t])
        fresh.keep_sweep_mlflow("made-here", made.mlflow_experiment_id, made.mlflow_run_id, None)
        assert tracker.start_trial(fresh, "mirrored-there", t.key) == run_id
        there = fresh.sweep("mirrored-there").mlflow_experiment_id
    assert there != made.mlflow_experiment_id
    assert [r.info.run_id for r in runs_of(tracker, there) if r.data.tags.get("trial_key") == t.key] == []


def test_only_a_run_mlflow_says_does_not_exist_is_gone(tracker, monkeypatch):
    """A run MLflow cannot read for another reason (its server or database down a moment) is not gone: taking it
    for gone makes the trial a second run once MLflow answers again."""
    from mlflow.exceptions import MlflowException

    assert tracker._resume("0" * 32) is None
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    down = Tracker(f"http://127.0.0.1:{free_port()}", lazy=True)
    with pytest.raises(MlflowException):
        down._resume("0" * 32)


def test_a_run_created_twice_is_kept_once(tracker, store):
    """MLflow's client retries a create that failed on the way back (its database restarting as it committed):
    the trial's training then has two runs with its tags. Mirroring it keeps one."""
    t = trial(4)
    store.add_trials("twice", [t])
    exp, parent = tracker._sweep_run(store, "twice")
    tags = {"mlflow.parentRunId": parent, "sweep": "twice", "trial_key": t.key, "retrained": "0"}
    made = [tracker.client.create_run(exp, tags=tags).info.run_id for _ in range(2)]
    run_id = tracker.start_trial(store, "twice", t.key)
    alive = {r.info.run_id for r in runs_of(tracker, exp) if r.data.tags.get("trial_key") == t.key}
    assert run_id in made and alive == {run_id} and store.trial(t.key).mlflow_run_id == run_id


def test_a_trial_trained_again_keeps_one_run_per_training(tracker, store):
    """Each training of a trial (`--rerun`, stale code) gets a run of its own, tagged `retrained` with how many
    trainings came before: clearing a retried create's copies must match that tag too, or it deletes the
    earlier trainings' runs."""
    t = trial(5)
    store.add_trials("again", [t])
    trainings = []
    for _ in range(3):
        run_id = tracker.start_trial(store, "again", t.key)
        tracker.end_trial(run_id, "done", result={"test": {"top1": 0.5}})
        assert tracker.start_trial(store, "again", t.key) == run_id  # a retry of the same training: its run
        trainings.append(run_id)
        store.archive([t.key], "rerun")
    exp = store.sweep("again").mlflow_experiment_id
    alive = {r.data.tags["retrained"]: r.info.run_id for r in runs_of(tracker, exp)
             if r.data.tags.get("trial_key") == t.key}  # fmt: skip
    assert alive == {"0": trainings[0], "1": trainings[1], "2": trainings[2]}
