"""Launch on real Ray, record in a real SQLite store and a real MLflow store: resume, retry, no lost results."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pandas as pd
import procfs
import pytest
import torch
from conftest import TINY, write_sweeps
from gate import Gate, wait_for
from rich.console import Console
from sqlalchemy import event
from synthetic import failed_elsewhere
from typer.testing import CliRunner

from ablate.cli import app
from ablate.execution import fanout
from ablate.execution.launcher import LaunchResult, RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import Plan, plan, plan_all
from ablate.store import Store
from ablate.store.database import now
from ablate.tracking.tracker import Tracker
from ablate.training.checkpoints import FILE, Checkpointer

GATE_SCRIPT = Path(__file__).parents[1] / "gate.py"

pytestmark = pytest.mark.timeout(300)


def quiet() -> Display:
    return Display(live=False)


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from Linux's /proc")
def test_the_embedded_ray_listens_on_loopback_only(ray_local) -> None:
    """Every server of the embedded Ray (GCS, raylet, agents, workers) accepts connections on loopback only."""
    ray_local.get(ray_local.remote(lambda: None).remote())  # a worker process exists too
    found = procfs.listening(procfs.descendants(os.getpid()) | {os.getpid()})
    assert found, "no listening socket found: the /proc reading is broken"
    assert not procfs.beyond_loopback(found), f"Ray listens beyond loopback on {procfs.beyond_loopback(found)}"


def test_launch_records_everything_and_never_reruns(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 1}}
    )
    p = plan(f, "s")
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{tmp_path}/m.sqlite", str(tmp_path / "art"))
        res = launch([p], store=store, tracker=tracker, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.counts == {"done": 2} and res.skipped == 0
        trials = store.trials_frame("s")
        assert set(trials["state"]) == {"done"}
        assert (trials["params"] > 0).all() and trials["node_id"].notna().all()
        assert set(trials["resumed_from"]) == {0}  # fresh trials trained from scratch
        m = store.metrics_frame("s")
        assert set(m["step"]) == {1, 2}
        assert not m.duplicated(["key", "name", "step"]).any()
        runs = tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")
        assert {r.data.tags["trial_key"] for r in runs} == set(trials["key"])
        assert all(r.info.status == "FINISHED" and "val.top1" in r.data.metrics for r in runs)

        again = launch([p], store=store, tracker=tracker, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert again.counts == {} and again.skipped == 2
        assert set(store.trials_frame("s")["attempts"]) == {1}
        assert len(tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")) == 2


def test_a_copied_truncated_or_edited_checkpoint_is_refused_and_the_trial_retrains(ray_local, tmp_path: Path) -> None:
    """Four trials run to their last epoch and are then left as if interrupted. One checkpoint is replaced by
    another trial's, one truncated, one given edited metrics: each is refused and its trial trains again from
    scratch to its honest result; the untouched one resumes from its checkpoint."""
    from sqlalchemy import text

    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "seeds": 4}})
    p = plan(f, "s")
    copied, cut, edited, intact = (t.key for t in p.trials)
    ck = tmp_path / "ck"
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        launch([p], store=store, run=RunConfig(storage=ck), progress=quiet())
        honest = store.metrics_frame("s").set_index(["key", "name", "step"])["value"]
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE trials SET state = 'interrupted'"))
        shutil.copy(ck / intact / FILE, ck / copied / FILE)
        data = (ck / cut / FILE).read_bytes()
        (ck / cut / FILE).write_bytes(data[: len(data) // 2])
        state = torch.load(ck / edited / FILE, weights_only=True)
        state["history"] = [(e, {**m, "val.top1": -1.0}) for e, m in state["history"]]
        torch.save(state, ck / edited / FILE)
        console = Console(record=True, width=400)
        launch([p], store=store, run=RunConfig(storage=ck), progress=Display(live=False, console=console))
        said = console.export_text()
        assert said.count("does not match the store's record") == 3, said
        t = store.trials_frame("s").set_index("key")
        assert set(t["state"]) == {"done"}
        assert t.loc[intact, "resumed_from"] == 2
        assert (t.loc[[copied, cut, edited], "resumed_from"] == 0).all()
        after = store.metrics_frame("s").set_index(["key", "name", "step"])["value"]
        assert (after.xs(edited)["val.top1"] >= 0).all()  # a score no training gives is not kept
        assert after.xs(edited).xs("val.top1").tolist() == honest.xs(edited).xs("val.top1").tolist()  # retrained alike
        for key in (copied, cut, edited):
            assert (ck / key / f"{FILE}.refused").exists()


def test_the_library_launches_one_plan_into_the_default_store(ray_local, tmp_path: Path, monkeypatch) -> None:
    """`ablate.launch(ablate.plan(path))`, as the README shows it: one Plan, the CLI's default store."""
    import ablate

    monkeypatch.chdir(tmp_path)
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    res = ablate.launch(ablate.plan(f), run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
    assert res.counts == {"done": 1}
    with Store(f"sqlite:///{tmp_path / 'db' / 'ablate.sqlite'}") as store:
        assert set(store.states().values()) == {"done"}


def test_extended_grid_runs_only_new_cells(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax"]}}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        launch([plan(f, "s")], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        write_sweeps(f, {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "sparsemax"]}}})
        res = launch([plan(f, "s")], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.counts == {"done": 1} and res.skipped == 1


def test_failure_and_divergence_are_recorded(ray_local, tmp_path: Path) -> None:
    broken = {
        **TINY,
        "task": "mil",
        "data": {"name": "mil_csv", "path": str(tmp_path / "missing.csv"), "remote": True},
        "model": {"size": "synpool"},
    }
    nan = {**TINY, "train": {**TINY["train"], "lr": 1e30, "weight_decay": 0.0}}
    f = write_sweeps(tmp_path / "e.yaml", {"broken": {"base": broken}, "nan": {"base": nan}, "ok": {"base": TINY}})
    plans = plan_all(f)
    console = Console(record=True, width=400)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        progress = Display(live=False, console=console)
        res = launch(plans, store=store, run=RunConfig(storage=tmp_path / "ck"), progress=progress)
        assert res.counts == {"failed": 1, "diverged": 1, "done": 1}
        t = store.trials_frame().set_index("sweep")
        assert "missing.csv" in t.loc["broken", "error"]
        trace = store.trial(t.loc["broken", "key"]).traceback
        assert 'File "' in trace and "build_data" in trace and "\x1b[" not in trace
        assert t.loc["nan", "state"] == "diverged" and t.loc["nan", "diverged_epoch"] == 1
        step = t.loc["nan", "diverged_step"]
        said = f"diverged {t.loc['nan', 'key'][:10]} at epoch 1, step {step}"  # the launch says where
        assert said in console.export_text(), console.export_text()


def by_value() -> None:
    """Ship this module's and the gate's runners to Ray workers by value (tests/ is not on their path)."""
    import gate
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(gate)


def launch_in_thread(
    p: Plan, store: Store, tmp_path: Path, gate: Gate, lease: float = RunConfig.lease
) -> tuple[dict, threading.Thread]:
    """Launch `p` with gated trials in a thread; the result lands in the returned box as `res`."""
    box: dict = {}
    run = RunConfig(storage=tmp_path / "ck", runner=gate.runner(), lease=lease)
    th = threading.Thread(target=lambda: box.update(res=launch([p], store=store, run=run, progress=quiet())))
    th.start()
    return box, th


def test_killed_worker_is_retried_and_resumes_from_its_checkpoint(ray_local, tmp_path: Path) -> None:
    by_value()
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 4}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}})
    p = plan(f, "s")
    key = p.trials[0].key
    gate = Gate(tmp_path / "gate", epoch=2)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        box, th = launch_in_thread(p, store, tmp_path, gate)
        pid = gate.wait(1)[key]  # the worker sits at epoch 2, its epoch-2 checkpoint written
        os.kill(pid, signal.SIGKILL)
        th.join(timeout=240)
        assert box["res"].counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert row["state"] == "done" and row["attempts"] == 2
        assert row["resumed_from"] == 2  # the retry trained epochs 3 and 4 only
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3, 4]
        assert not m.duplicated(["key", "name", "step"]).any()
        per_step = m.groupby("step")["name"].nunique()
        assert per_step.nunique() == 1  # every epoch has the same metric names: nothing lost


def test_a_launcher_learns_what_another_finished_from_the_trials_finished_since_its_last_look(
    ray_local, tmp_path: Path
) -> None:
    """Two trials, one at a time (2 CPUs each). While this launcher holds the first at the gate, another launcher
    (its store calls here) runs the second, which fails, and records it by a clock behind this one's: stamped
    before this launch began. Once the first trial settles, the launcher reads the trials finished since its
    last look, reaching a lease further back: it counts the second as failed elsewhere and does not train it
    (a failed trial can be claimed), and from its first trial's start on no statement but a claim (which refuses it)
    names the second, so it did not read the state of its whole queue. Its lease of 600 s keeps the periodic look at
    the whole queue (every quarter of a lease with nothing finished) out of the test."""
    by_value()
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 2}}, "seeds": 2}})
    p = plan(f, "s")
    first, other = (t.key for t in p.trials)
    gate, began, named = Gate(tmp_path / "gate", epoch=1, keys=[first]), now(), list[str]()
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store, Store(db) as elsewhere:
        box, th = launch_in_thread(p, store, tmp_path, gate, lease=600)
        gate.wait(1)
        event.listen(
            store.engine, "before_cursor_execute", lambda *call: "lease_owner" in call[2] or named.append(str(call[3]))
        )  # every statement but a claim: its parameters
        failed_elsewhere(elsewhere, other, began - timedelta(seconds=10))
        gate.open()
        th.join(timeout=240)
        assert box["res"].counts == {"done": 1, "failed": 1}
        t = store.trials_frame("s").set_index("key")
        assert (t.loc[first, "state"], t.loc[other, "state"], t.loc[other, "attempts"]) == ("done", "failed", 1)
    assert named
    assert not [s for s in named if other in s], "the launcher named the trial finished elsewhere"


def test_the_launcher_looks_for_trials_finished_elsewhere_once_a_look_or_when_the_claim_refuses_the_queue(
    ray_local, tmp_path: Path, monkeypatch
) -> None:
    """Six trials, two at a time (1 CPU each), `LOOK` an hour. The first waits at one gate; the second at another,
    while a second launcher fails the sixth; then the second to fifth run one after another beside the first. The
    waves that settle them leave a trial running and none reads the trials finished since the last look (with `LOOK`
    0 they read at every wave); the claim refuses the sixth meanwhile. The wave that settles the first, whose claim
    then refuses the whole queue, looks once and counts the sixth as failed elsewhere, untrained (without that look
    it waits a quarter of the lease, 150 s, for the look at the whole queue)."""
    by_value()
    monkeypatch.setattr(fanout, "LOOK", 3600.0)
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 1}}, "seeds": 6}})
    p = plan(f, "s")
    keys = [t.key for t in p.trials]
    first, rest = Gate(tmp_path / "first", epoch=1, keys=keys[:1]), Gate(tmp_path / "rest", epoch=1, keys=keys[1:2])
    gates = {key: (first if key == keys[0] else rest).runner() for key in keys}
    looks, db = list[str](), f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store, Store(db) as elsewhere:
        event.listen(store.engine, "before_cursor_execute",
                     lambda *call: "finished_at >=" in call[2] and looks.append(call[2]))  # fmt: skip
        run = RunConfig(storage=tmp_path / "ck", runner=lambda cfg, report, ckpt: gates[Path(ckpt).name](
            cfg, report, ckpt), lease=600)  # fmt: skip
        box: dict = {}
        th = threading.Thread(target=lambda: box.update(res=launch([p], store=store, run=run, progress=quiet())))
        th.start()
        first.wait(1), rest.wait(1)
        failed_elsewhere(elsewhere, keys[5], now())
        rest.open()
        wait_for(lambda: set(store.states(keys[1:5]).values()) == {"done"})
        assert looks == [], looks
        first.open()
        th.join(timeout=240)
        assert box["res"].counts == {"done": 5, "failed": 1}
        assert store.trials_frame("s").set_index("key").loc[keys[5], "attempts"] == 1
    assert len(looks) == 1, looks


def flaky_runner(cfg, report, checkpoint_dir):
    """Raises until it has been called `cfg.seed` times before (a count kept in the checkpoint folder)."""
    from ablate.training.messages import TrialResult

    calls = Path(checkpoint_dir) / "calls"
    calls.parent.mkdir(parents=True, exist_ok=True)
    n = int(calls.read_text()) if calls.exists() else 0
    calls.write_text(str(n + 1))
    if n < cfg.seed:
        raise RuntimeError(f"planned failure {n + 1}")
    report(1, {"calls": n + 1.0})
    return TrialResult("done", 1, {"test.top1": 1.0})


@pytest.mark.parametrize("retries", [0, 2])
def test_application_errors_are_retried_exactly_resources_retries_times(
    ray_local, tmp_path: Path, retries: int
) -> None:
    """Seed n fails n times: with `retries` r, seeds up to r end done after n + 1 calls, the rest failed after r + 1."""
    by_value()
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 0.5, "retries": retries}},
                                                 "seeds": [0, 1, 2, 3]}})  # fmt: skip
    p = plan(f, "s")
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launch([p], store=store, run=RunConfig(storage=tmp_path / "ck", runner=flaky_runner), progress=quiet())
        t = store.trials_frame("s").set_index("seed")
    assert res.counts == {"done": retries + 1, "failed": 3 - retries}
    for trial in p.trials:
        seed = trial.config.seed
        calls = int((tmp_path / "ck" / trial.key / "calls").read_text())
        if seed <= retries:
            assert (t.loc[seed, "state"], calls) == ("done", seed + 1)
        else:
            assert (t.loc[seed, "state"], calls) == ("failed", retries + 1)
            assert f"planned failure {retries + 1}" in t.loc[seed, "error"]


def test_a_relaunch_within_a_lease_trains_again_the_failed_trials_waiting_in_its_queue(
    ray_local, tmp_path: Path
) -> None:
    """A launch trains again the trials that failed before it chose them, also while they wait in its queue (one
    trial at a time: 2 CPUs each) and failed less than a lease ago: the look after each settled trial reaches a
    lease back, where their earlier failures are, and once counted them as failed elsewhere, never training them.
    Seed n fails n times (no retries): the first launch ends seeds 1 to 3 failed, the second trains each again,
    so seed 1 ends done and seeds 2 and 3 failed after a second call."""
    by_value()
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 2, "retries": 0}},
                                                 "seeds": [0, 1, 2, 3]}})  # fmt: skip
    p = plan(f, "s")
    run = RunConfig(storage=tmp_path / "ck", runner=flaky_runner)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        assert launch([p], store=store, run=run, progress=quiet()).counts == {"done": 1, "failed": 3}
        res = launch([p], store=store, run=run, progress=quiet())
        t = store.trials_frame("s").set_index("seed")
    assert res.counts == {"done": 1, "failed": 2} and res.skipped == 1
    assert [(t.loc[s, "state"], t.loc[s, "attempts"]) for s in (1, 2, 3)] == [("done", 2), ("failed", 2), ("failed", 2)]


def burst_runner(cfg, report, checkpoint_dir):
    """A trial body that reports 40 epochs x 10 metrics at once (what many trials ending together send)."""
    from ablate.training.messages import TrialResult

    for epoch in range(1, 41):
        report(epoch, {f"m{i}": epoch + i / 10 for i in range(10)})
    return TrialResult("done", 40, {"test.top1": 1.0})


def test_many_trials_finishing_at_once_lose_nothing(ray_local, tmp_path: Path) -> None:
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"cpus": 0.1}}, "seeds": 24}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        tracker = Tracker(f"sqlite:///{tmp_path}/m.sqlite", str(tmp_path / "art"))
        res = launch(
            [plan(f, "s")],
            store=store,
            tracker=tracker,
            run=RunConfig(storage=tmp_path / "ck", runner=burst_runner),
            progress=quiet(),
        )
        assert res.counts == {"done": 24}
        assert len(store.metrics_frame("s")) == 24 * 40 * 10


LEASE = 4.0
"""Lease seconds of the CLI launches here: a killed launcher's trials are taken over this soon."""


def launch_cmd(
    f: Path,
    tmp_path: Path,
    gate: Gate | None = None,
    mlflow: str | None = None,
    storage: str | None = None,
    db: str | None = None,
) -> list[str]:
    """The CLI launch of `f` (recording to MLflow at `mlflow`, if given; checkpoints in `storage` and results in
    `db`, by default a folder and a SQLite file of `tmp_path`), through the gate script when the trials must
    stop at its epoch."""
    storage, db = storage or str(tmp_path / "ck"), db or f"sqlite:///{tmp_path}/r.sqlite"
    args = ["launch", str(f), "--db", db, "--plain", "--storage", storage,
            "--lease", str(LEASE), *(["--mlflow-uri", mlflow] if mlflow else ["--no-mlflow"])]  # fmt: skip
    if gate is None:
        return [sys.executable, "-m", "ablate.cli", *args]
    return [sys.executable, str(GATE_SCRIPT), str(gate.folder), str(gate.epoch), *(gate.keys or []), "--", *args]


CLI_ENV = {**os.environ, "RAY_ADDRESS": "", "RAY_AUTH_MODE": "disabled"}


def test_killed_launcher_is_finished_by_the_next_launch(ray_local, tmp_path: Path) -> None:
    """A second launcher starts while the first holds two trials provably mid-run (and has finished a third):
    it leaves them alone. SIGKILL the first launcher's process group (it and its embedded Ray): once its leases
    lapse the second takes the two over, resumes them from their checkpoints and never re-runs the done one. The
    second is a launch in this process, on the session's Ray (a launcher of its own all the same: its own leases)."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 3}, "resources": {"cpus": 0.5}}
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": cfg, "grid": {"attention.kind": ["softmax", "sparsemax", "entmax15"]}}}
    )
    p = plan(f, "s")
    first, *gated = [t.key for t in p.trials]
    gate = Gate(tmp_path / "gate", epoch=1, keys=gated)
    proc = subprocess.Popen(launch_cmd(f, tmp_path, gate), cwd=tmp_path, env=CLI_ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    db = f"sqlite:///{tmp_path}/r.sqlite"
    console = Console(record=True, width=400)
    second: dict[str, LaunchResult] = {}

    def launch_second() -> None:
        with Store(db) as store:
            run = RunConfig(storage=tmp_path / "ck", lease=LEASE)
            second["result"] = launch([p], store, run=run, progress=Display(live=False, console=console))

    thread = threading.Thread(target=launch_second, daemon=True)
    try:
        gate.wait(2)
        with Store(db) as store:
            wait_for(lambda: store.states().get(first) == "done")
        thread.start()
        wait_for(lambda: "2 trials are leased to other launchers" in console.export_text(clear=False))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    killed = pd.Timestamp.now(tz="UTC")
    thread.join(timeout=240)
    assert second.get("result") is not None and second["result"].counts == {"done": 2}, console.export_text()
    with Store(db) as store:
        t = store.trials_frame("s").set_index("key")
        assert set(t["state"]) == {"done"} and len(t) == 3
        assert t.loc[first, "attempts"] == 1  # the completed trial was not re-run
        assert (t.loc[gated, "resumed_from"] == 1).all() and (t.loc[gated, "attempts"] == 2).all()
        assert (t.loc[gated, "started_at"] >= killed).all()  # never trained while the first launcher held them
        assert not store.metrics_frame("s").duplicated(["key", "name", "step"]).any()


def test_launchers_started_together_train_each_trial_once(tmp_path: Path) -> None:
    """Three launchers of one sweep at the same moment, on one fresh SQLite store and one fresh MLflow
    database: they split the trials, each trial has exactly one training attempt and one MLflow run, and every
    launcher ends when all are done. (Three launchers on PostgreSQL, with faults: tests/execution/test_team.py, `make
    team`; the claims themselves on both backends: test_store.)"""
    db = f"sqlite:///{tmp_path}/r.sqlite"
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 1}, "resources": {"cpus": 1}}
    f = write_sweeps(
        tmp_path / "e.yaml", {"s": {"base": cfg, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 3}}
    )
    mlflow = f"sqlite:///{tmp_path}/m.sqlite"
    cmd = launch_cmd(f, tmp_path, mlflow=mlflow, db=db)
    procs = [subprocess.Popen(cmd, cwd=tmp_path, env=CLI_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for _ in range(3)]  # fmt: skip
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outs
    with Store(db) as store:
        t = store.trials_frame("s")
        assert len(t) == 6 and set(t["state"]) == {"done"} and set(t["attempts"]) == {1}
        assert store.holders() == {}  # every lease given back
    starts = [line.split()[2] for out in outs for line in out.splitlines() if " start " in line]
    assert sorted(starts) == sorted(k[:10] for k in t["key"])  # each trial started by exactly one launcher
    tracker = Tracker(mlflow, str(tmp_path / "art"))
    runs = tracker.client.search_runs([tracker.experiment("s")], "tags.trial_key != ''")
    assert sorted(r.data.tags["trial_key"] for r in runs) == sorted(t["key"])


def test_ctrl_c_marks_running_trials_interrupted_and_the_next_launch_resumes(ray_local, tmp_path: Path) -> None:
    """Ctrl-C as a terminal sends it (SIGINT to the whole process group) while both trials provably run; the next
    launch (in this process, on the session's Ray) resumes them."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 3}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg, "seeds": 2}})
    gate = Gate(tmp_path / "gate", epoch=1)
    proc = subprocess.Popen(launch_cmd(f, tmp_path, gate), cwd=tmp_path, env=CLI_ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        gate.wait(2)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out
    assert "interrupted 2" in out
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        assert set(store.states().values()) == {"interrupted"}
        res = launch([plan(f, "s")], store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.counts == {"done": 2}
        t = store.trials_frame("s")
        assert set(t["state"]) == {"done"}
        assert set(t["resumed_from"]) == {1} and set(t["attempts"]) == {2}
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3] and not m.duplicated(["key", "name", "step"]).any()


def test_sigterm_preempts_trials_at_a_step_boundary_and_the_next_launch_resumes(ray_local, tmp_path: Path) -> None:
    """SIGTERM to the launcher alone (what `ray job stop`, Kubernetes and spot reclaims send) while two trials
    provably run: it asks them to stop, they checkpoint after their next step and end `preempted`, the
    launcher exits 143; the next launch (in this process, on the session's Ray) resumes them mid-epoch and
    finishes."""
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 3, "batch_size": 32}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg, "seeds": 2}})
    keys = [t.key for t in plan(f, "s").trials]
    gate = Gate(tmp_path / "gate", epoch=1)
    proc = subprocess.Popen(launch_cmd(f, tmp_path, gate), cwd=tmp_path, env=CLI_ENV, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        gate.wait(2)
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: all((tmp_path / "ck" / k / "preempt").exists() for k in keys))
        gate.open()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 143, out
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        assert set(store.states().values()) == {"preempted"} and store.holders() == {}
        for k in keys:
            state, _ = Checkpointer(tmp_path / "ck" / k).read()
            assert state is not None and state["epoch"] == 1 and state["step"] >= 1  # stopped inside epoch 2
        res = launch([plan(f, "s")], store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.counts == {"done": 2}
        t = store.trials_frame("s")
        assert set(t["state"]) == {"done"} and set(t["resumed_from"]) == {1} and set(t["attempts"]) == {2}
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3] and not m.duplicated(["key", "name", "step"]).any()


@contextlib.contextmanager
def silent_cluster() -> Iterator[tuple[str, threading.Event]]:
    """A "Ray cluster" that accepts connections and never answers, on 127.0.0.2 (Ray swaps 127.0.0.1 for the
    machine's own address); the event is set once a client sent it bytes: ray.init's gRPC client sends its
    preface at once, `launcher.reachable`'s probe sends nothing."""
    server = socket.create_server(("127.0.0.2", 0))
    spoke, held = threading.Event(), []

    def listen(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            if conn.recv(1):
                spoke.set()

    def accept() -> None:
        with contextlib.suppress(OSError):  # the server closed: done
            while True:
                conn, _ = server.accept()
                held.append(conn)
                threading.Thread(target=listen, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.2:{server.getsockname()[1]}", spoke
    finally:
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize("sig, existing", [(signal.SIGTERM, False), (signal.SIGINT, True)], ids=["term", "int-later"])
def test_a_signal_while_joining_the_cluster_stops_the_launch_with_nothing_run(
    tmp_path: Path, sig: signal.Signals, existing: bool
) -> None:
    """SIGTERM (or Ctrl-C's SIGINT) while `ablate launch --address` is provably inside ray.init, talking to a cluster
    that does not answer: one line says nothing ran and the launcher exits 128 + the signal, as for any stop (ray.init's
    own SIGTERM handler made it "cannot connect ... exit code 15", exit 2); nothing is written. A first launch
    connects before its results database exists (`api._ray_first`: none is made); a later one connects while MLflow
    opens beside (`fanout.start`: the store holds nothing new). The signal comes while the launch waits for the
    cluster's GCS to answer (`gcs.answered`), which looks every second: ray.init, not yet called, would hold it
    for its connect timeout (about 40 s at Ray's defaults; shortened to 2 s, the test raced it and lost at load 18)."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    db = f"sqlite:///{tmp_path}/r.sqlite"
    if existing:
        Store(db).close()
    mlflow = f"sqlite:///{tmp_path}/m.sqlite" if existing else None
    with silent_cluster() as (address, spoke):
        proc = subprocess.Popen([*launch_cmd(f, tmp_path, mlflow=mlflow), "--no-check", "--address", address],
                                cwd=tmp_path, env=CLI_ENV, start_new_session=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)  # fmt: skip
        try:
            assert spoke.wait(timeout=120), "the launcher never reached the cluster"
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + sig, out
    assert f"stopped by {sig.name} while connecting to the Ray cluster at {address}; nothing ran" in out, out
    assert "Traceback" not in out and "cannot connect" not in out, out
    if not existing:
        assert not (tmp_path / "r.sqlite").exists()
        return
    with Store(db) as store:
        assert store.sweeps_frame().empty and store.states() == {}


class Interrupted(Exception):
    """Raised by the test's SIGUSR1 handler."""


def _interrupt(signum: int, frame: object) -> None:
    raise Interrupted


def test_waiting_for_a_cluster_to_answer_runs_signal_handlers_at_once(ray_local) -> None:
    """`gcs.answered` returns for a GCS that answers (the embedded Ray's); for one that never answers it waits,
    running this process's signal handlers as they come (ray.init held them for its whole connect timeout): a
    signal sent once the launch's gRPC client spoke ends the wait by its handler's exception, long before the
    600 s the wait was given (were the handler held, the test's own timeout would fail it); given 1 s it gives
    up, naming the address."""
    import ray

    from ablate.execution import gcs

    gcs.answered(ray.get_runtime_context().gcs_address)
    previous = signal.signal(signal.SIGUSR1, _interrupt)
    try:
        with silent_cluster() as (address, spoke):
            sender = threading.Thread(target=lambda: spoke.wait(120) and os.kill(os.getpid(), signal.SIGUSR1))
            sender.start()
            with pytest.raises(Interrupted):
                gcs.answered(address, wait=600)
            sender.join()
            assert spoke.is_set()
            with pytest.raises(gcs.Unanswered, match=f"cluster at {address}: it accepted the connection but did "
                                                        "not answer in 1 s"):  # fmt: skip
                gcs.answered(address, wait=1)
    finally:
        signal.signal(signal.SIGUSR1, previous)


class SignalledStore(Store):
    """A real store that sends this process `signum` as a launch first writes its sweep: a signal in the launch's
    set-up, after Ray's start and before its loop."""

    def __init__(self, url: str, signum: int) -> None:
        super().__init__(url)
        self.signum = signum

    def upsert_sweep(self, *args, **kwargs):
        os.kill(os.getpid(), self.signum)
        return super().upsert_sweep(*args, **kwargs)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["term", "int"])
def test_a_signal_during_the_launchs_set_up_stops_it_before_anything_is_claimed(
    ray_local, tmp_path: Path, sig: signal.Signals
) -> None:
    """Between Ray's start and the loop the launch records its sweeps and trials: a SIGTERM there was Ray's own
    handler's SystemExit(15) (the launcher exited 15 mid-write), a Ctrl-C a KeyboardInterrupt. Now the launch's
    stop handler holds from Ray's start on: the set-up's writes finish, the loop claims nothing, and the launch
    ends as a stop by that signal."""
    p = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "seeds": 2}}), "s")
    with SignalledStore(f"sqlite:///{tmp_path}/r.sqlite", sig) as store:
        res = launch([p], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.interrupted and res.signal == sig and not res.counts.get("done")
        assert store.states() == {t.key: "pending" for t in p.trials} and store.holders() == {}


class InterruptedTracker(Tracker):
    """A real MLflow tracker that sends this process Ctrl-C's SIGINT as the launch opens it, beside Ray's start."""

    def open(self) -> Tracker:
        os.kill(os.getpid(), signal.SIGINT)
        return super().open()


def test_ctrl_c_while_mlflow_opens_is_a_stop_with_nothing_run(ray_local, tmp_path: Path) -> None:
    """Ctrl-C while the launch waits for MLflow to open (`fanout.start`) is `Stopped`, which `ablate launch` says in
    one line and exits 130 for (it was a KeyboardInterrupt out of the launch: a traceback); nothing is written."""
    from ablate.execution.stopped import Stopped

    p = plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}}), "s")
    tracker = InterruptedTracker(f"sqlite:///{tmp_path}/m.sqlite", str(tmp_path / "art"), lazy=True)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        with pytest.raises(Stopped, match="stopped by SIGINT while opening MLflow; nothing ran") as stopped:
            launch([p], store=store, tracker=tracker, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert stopped.value.signal == signal.SIGINT and store.states() == {}


IN_CORE_WORKER = """
import inspect, os, signal, sys
import ray
from ray._private import worker
from ablate.cli import main

signum, sys.argv = int(sys.argv[1]), ["ablate", *sys.argv[2:]]
connect = inspect.unwrap(worker.connect)
lines, first = inspect.getsourcelines(connect)
line = first + next(i for i, text in enumerate(lines) if "ray._raylet.CoreWorker(" in text)

def tracer(frame, event, arg):  # Python called from inside the core worker's constructor (Cython: no frame of its own)
    back = frame.f_back
    if event == "call" and back is not None and back.f_code is connect.__code__ and back.f_lineno == line:
        sys.settrace(None)
        os.kill(os.getpid(), signum)

init = ray.init
def traced(*args, **kwargs):
    sys.settrace(tracer)
    try:
        return init(*args, **kwargs)
    finally:
        sys.settrace(None)

ray.init = traced
main()
"""


def test_a_signal_inside_the_embedded_rays_core_worker_start_still_exits_128_plus_it(tmp_path: Path) -> None:
    """The chaos soak's exit -6: SIGTERM that lands while ray.init constructs its driver's core worker (sent from the
    first Python call that constructor makes) leaves a half-made core worker, and the interpreter's exit aborted
    (SIGINT there: a segmentation fault). The launcher still says nothing ran and exits 143."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    args = [sys.executable, "-c", IN_CORE_WORKER, str(int(signal.SIGTERM)), *launch_cmd(f, tmp_path)[3:], "--no-check"]
    res = subprocess.run(args, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True, timeout=240)
    out = res.stdout + res.stderr
    assert res.returncode == 143, out
    assert "stopped by SIGTERM while starting the embedded Ray; nothing ran" in out, out
    assert not (tmp_path / "r.sqlite").exists()


def test_failed_trials_make_launch_exit_1_with_a_summary(ray_local, tmp_path: Path) -> None:
    """The CLI in this process, on the session's Ray."""
    broken = {**TINY, "task": "mil", "data": {"name": "mil_csv", "path": str(tmp_path / "missing.csv"), "remote": True},
              "model": {"size": "synpool"}}  # fmt: skip
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": broken}})
    res = CliRunner().invoke(app, [*launch_cmd(f, tmp_path)[3:], "--no-check"])
    assert res.exit_code == 1, res.output
    assert "1 trials not done" in res.stdout and "DataError: dataset 'mil_csv'" in res.stdout


def two_worker_sweep(tmp_path: Path, epochs: int) -> Path:
    cfg = {**TINY, "train": {**TINY["train"], "epochs": epochs}, "resources": {"cpus": 1, "workers": 2}}
    return write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}})


def test_two_worker_trial_trains_on_ray_like_one_process(ray_local, tmp_path: Path) -> None:
    """A trial of two gloo workers (a placement group of two 1-CPU bundles) ends with the test metrics of
    the same config trained by one process; only rank 0's messages reach the store."""
    from ablate.training.loop import run_trial

    p = plan(two_worker_sweep(tmp_path, 2), "s")
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launch([p], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert res.counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert row["attempts"] == 1 and sorted(set(store.metrics_frame("s")["step"])) == [1, 2]
    alone = p.trials[0].config.model_copy(
        update={"resources": p.trials[0].config.resources.model_copy(update={"workers": 1})}
    )
    expected = run_trial(alone).metrics
    assert abs(row["test.loss"] - expected["test.loss"]) < 1e-5 and row["test.top1"] == expected["test.top1"]


def test_a_killed_rank_restarts_the_whole_trial_from_its_checkpoint(ray_local, tmp_path: Path) -> None:
    """SIGKILL of rank 1 while rank 0 waits at epoch 2: rank 0's next all-reduce fails, the launcher stops
    the gang and starts both ranks again, and they resume from the epoch-2 checkpoint."""
    by_value()
    p = plan(two_worker_sweep(tmp_path, 4), "s")
    key = p.trials[0].key
    gate = Gate(tmp_path / "gate", epoch=2)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        box, th = launch_in_thread(p, store, tmp_path, gate)
        gate.wait(1)
        follower = gate.folder / f"{key}.rank1"
        os.kill(int(wait_for(lambda: follower.exists() and follower.read_text())), signal.SIGKILL)
        gate.open()
        th.join(timeout=240)
        assert box["res"].counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert row["state"] == "done" and row["attempts"] == 2 and row["resumed_from"] == 2
        m = store.metrics_frame("s")
        assert sorted(set(m["step"])) == [1, 2, 3, 4] and not m.duplicated(["key", "name", "step"]).any()


RELAUNCH = """
import json, sys
from ablate.api import launch
from ablate.execution.launcher import RunConfig
from ablate.planning.plan import plan
res = launch(plan(sys.argv[1], "s"), sys.argv[2], sys.argv[3], run=RunConfig(storage=sys.argv[4]))
print(json.dumps({"skipped": res.skipped, "counts": res.counts,
                  "loaded": sorted(m for m in ("ray", "mlflow", "ablate.training.loop") if m in sys.modules)}))
"""


def test_a_launch_with_nothing_to_run_starts_no_ray_and_opens_mlflow_only_where_it_lags(ray_local, tmp_path) -> None:
    """Every trial done and MLflow in step: a relaunch as `ablate launch` makes it (the library call, in a fresh
    process) says so and imports neither ray nor mlflow. Once MLflow lags behind the
    store (the sweep's parent run deleted by hand), the same relaunch opens it and brings it up to date."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "seeds": 2}})
    db, mlflow = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
    with Store(db) as store:
        tracker = Tracker(mlflow)
        first = launch(plan(f, "s"), store, tracker, run=RunConfig(storage=tmp_path / "ck"), progress=quiet())
        assert first.counts == {"done": 2}
        parent = store.sweep("s").mlflow_run_id

    def relaunch() -> tuple[dict, str]:
        args = [sys.executable, "-c", RELAUNCH, str(f), db, mlflow, str(tmp_path / "ck")]
        out = subprocess.run(args, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True, timeout=240)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout.splitlines()[-1]), out.stdout

    idle, said = relaunch()
    assert idle == {"skipped": 2, "counts": {}, "loaded": []}
    said = " ".join(said.split())  # as one line, however the console wrapped it
    assert "nothing to run: all 2 trials are done; report: `ablate report s` writes reports/s/index.html" in said
    assert tracker.client.get_run(parent).info.status == "FINISHED"

    tracker.client.delete_run(parent)
    lagging, _ = relaunch()
    assert lagging["loaded"] == ["mlflow"] and lagging["skipped"] == 2
    with Store(db) as store:
        again = tracker.client.get_run(store.sweep("s").mlflow_run_id)
    assert again.info.run_id != parent and again.info.status == "FINISHED" and again.data.metrics


UNOPENED = """
import json, sys
import ray
from ablate.api import launch
from ablate.execution.launcher import RunConfig
from ablate.planning.plan import plan
from ablate.store import Owner, Store
from ablate.store.queries import TRIALS
from ablate.store.database import now
try:
    launch(plan(sys.argv[1], "s"), sys.argv[2], sys.argv[3], run=RunConfig(storage=sys.argv[4]))
except Exception as e:
    with Store(sys.argv[2]) as store:
        print(json.dumps({"error": str(e), "ray": ray.is_initialized(), "sweeps": len(store.sweeps_frame())}))
"""


def test_an_mlflow_store_that_cannot_be_opened_stops_the_launch_before_anything_is_written(tmp_path) -> None:
    """MLflow is opened in a thread of its own while the launch starts its embedded Ray: what it raises (here
    its SQLite store's lock file cannot be made, a folder holds the name) propagates, nothing reached the store,
    and that Ray is down again. (A SQLite file that is not a database would do, after MLflow's own retries for
    nearly two minutes.)"""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    (tmp_path / "m.sqlite.lock").mkdir()
    args = [sys.executable, "-c", UNOPENED, str(f), f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite",
            str(tmp_path / "ck")]  # fmt: skip
    out = subprocess.run(args, cwd=tmp_path, env=CLI_ENV, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0 and out.stdout.strip(), out.stdout + out.stderr
    said = json.loads(out.stdout.splitlines()[-1])
    assert "Is a directory" in said["error"] and not said["ray"] and said["sweeps"] == 0


def test_a_launch_says_what_the_sweep_holds_that_its_plan_no_longer_makes(tmp_path) -> None:
    """`th` launched at 2 epochs, then at 3 (`-s train.epochs=3`): the relaunch (nothing to run) says how many
    trials the plan no longer makes, what they differ in and how to see or delete them, and marks them outside
    the plan; launched once more without csan, the csan knobs are paths no config of the plan has."""
    from synthetic import fill

    def at(epochs: int, kinds: list[str]) -> Plan:
        base = {**TINY, "train": {**TINY["train"], "epochs": epochs}}
        sweep = {"base": base, "seeds": 2, "grid": {"attention.kind": kinds}}
        return plan(write_sweeps(tmp_path / f"{epochs}.yaml", {"th": sweep}), "th")

    def relaunch(p: Plan) -> str:
        console = Console(record=True, width=2000)
        launch(p, store, run=RunConfig(storage=tmp_path / "ck"), progress=Display(live=False, console=console))
        return " ".join(console.export_text().split())

    two, three = at(2, ["softmax", "csan"]), at(3, ["softmax", "csan"])
    db = f"sqlite:///{tmp_path}/r.sqlite"
    with Store(db) as store:
        for p in (two, three):
            fill(store, p, lambda t: 50.0)
        dry = CliRunner().invoke(app, ["launch", str(tmp_path / "3.yaml"), "--db", db, "--dry-run"])
        assert "sweep th holds 4 trials its plan no longer makes: they differ in train.epochs" in " ".join(
            dry.output.split()
        ), dry.output  # the dry run says it too, and writes nothing
        assert store.outside_plan("th") == []
        said = relaunch(three)
        assert ("sweep th holds 4 trials its plan no longer makes: they differ in train.epochs (2; the plan: 3). Its "
                "report leaves them out (`ablate report th --all-trials` shows them, labelled by what differs); "
                "`ablate forget th --where 'train.epochs=2'` deletes them") in said  # fmt: skip
        assert store.outside_plan("th") == sorted(t.key for t in two.trials)
        said = relaunch(at(3, ["softmax"]))
        assert (
            "sweep th holds 6 trials its plan no longer makes" in said
            and "attention.kind (csan; the plan: softmax)" in said
        )
        assert "no config of the plan has attention." in said and "--where PATH=VALUE" in said, said
