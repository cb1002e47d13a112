"""MLflow's closing in a process of its own (`RunConfig.detach`, what `ablate launch` does): the launch returns once
the store holds every result; the closing makes MLflow equal to the store, and one killed at any point loses nothing
that `ablate sync` and the next launch do not bring over. Real Ray, SQLite store, SQLite MLflow store."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import write_sweeps
from gate import wait_for
from rich.console import Console

from ablate.api import sync
from ablate.execution.launcher import LaunchResult, RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store
from ablate.tracking.tracker import Tracker
from ablate.training.messages import TrialResult

pytestmark = pytest.mark.timeout(400)
BASE = {"data": {"name": "digits"},
        "model": {"backbone": "vit", "embed_dim": 16, "depths": [1], "num_heads": [1], "patch_size": 2, "img_size": 8},
        "resources": {"cpus": 1}}  # fmt: skip


def noop(cfg: Any, report: Any, checkpoint_dir: Any) -> TrialResult:
    report(1, {"val.top1": 0.5})
    return TrialResult("done", 1, {"test.top1": 0.5})


def launched(tmp_path: Path, detach: bool) -> tuple[LaunchResult, str, str]:
    """A launch of three no-op trials of sweep `s` (store and MLflow under `tmp_path`): its result, the URLs."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # tests/ is not on the workers' path
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": BASE, "grid": {"train.weight_decay": [0.0, 0.1, 0.2]}}})
    db, uri = f"sqlite:///{tmp_path}/r.sqlite", f"sqlite:///{tmp_path}/m.sqlite"
    with Store(db) as store:
        res = launch(plan(f, "s"), store, Tracker(uri, lazy=True),
                     run=RunConfig(tmp_path / "ck", runner=noop, detach=detach),
                     progress=Display(live=False, console=Console(quiet=True)))  # fmt: skip
    return res, db, uri


def assert_mlflow_in_step(db: str, uri: str) -> None:
    """Every trial's run finished with its result and metric; the sweep's parent run ended with its summary as the
    store has it now (`Tracker.in_step`: status, summary digest, the experiment's view)."""
    tracker = Tracker(uri)
    with Store(db) as store:
        assert store.unmirrored() == [] and tracker.in_step(store, "s")
        for row in store.trials_frame("s").itertuples():
            assert isinstance(row.mlflow_run_id, str), row.key  # the trial has its run
            run = tracker.client.get_run(row.mlflow_run_id)
            assert (row.state, run.info.status, run.data.metrics["test.top1"]) == ("done", "FINISHED", 0.5)
            assert [m.step for m in tracker.client.get_metric_history(run.info.run_id, "val.top1")] == [1]


def test_a_detached_launch_leaves_mlflow_to_its_closing_which_makes_it_equal_the_store(ray_local, tmp_path) -> None:
    res, db, uri = launched(tmp_path, detach=True)
    assert res.counts == {"done": 3} and len(res.closings) == 1
    assert res.closings[0].wait() == 0
    assert_mlflow_in_step(db, uri)
    again, _, _ = launched(tmp_path, detach=True)  # nothing to run, MLflow in step: no closing
    assert again.skipped == 3 and again.closings == []


def test_a_closing_killed_loses_nothing_sync_and_the_next_launch_bring_mlflow_in_step(ray_local, tmp_path) -> None:
    """The closing killed with SIGKILL once it has marked a trial of those it found unmirrored as mirrored (at once
    where the mirror left none; wherever it is then: mid-way, or done already): the store holds every result;
    `ablate sync` sends what MLflow lacks, and the next launch, with nothing to run, ends the sweep's parent run."""
    res, db, uri = launched(tmp_path, detach=True)
    (closing,) = res.closings
    with Store(db) as store:
        behind = len(store.unmirrored())
        wait_for(lambda: not behind or closing.poll() is not None or len(store.unmirrored()) < behind)
        os.kill(closing.pid, signal.SIGKILL)
        assert closing.wait() in (-signal.SIGKILL, 0)
        assert set(store.trials_frame("s")["state"]) == {"done"}
    sync(None, db, Tracker(uri))
    again, _, _ = launched(tmp_path, detach=False)
    assert again.skipped == 3 and again.closings == []
    assert_mlflow_in_step(db, uri)


def test_show_right_after_a_launch_waits_for_its_closing_and_names_the_run_it_made(tmp_path: Path) -> None:
    """`ablate show` of a trial whose run a launch's closing is still making (the closing holds its MLflow store's
    lock; the store names no run yet): `show` looks once the closing has ended, and names the run it kept, where
    looking at once said nothing of MLflow (CI, 2026-12-04: a `show` right after `--stale rerun` lacked the run)."""
    import fcntl
    import threading

    from ablate.api import show
    from ablate.api.trials import Shown
    from ablate.tracking.closing import lock_file

    db, run = f"sqlite:///{tmp_path}/r.sqlite", "0123456789abcdef0123456789abcdef"
    with Store(db) as store:
        store.upsert_sweep("s", metric="test.top1")
        store.add_trials("s", [{"key": "k1", "variant": "v", "config": BASE, "axes": {}}])
        store.finish("k1", "done", result={"test": {"top1": 0.5}})
    tracker = Tracker(f"sqlite:///{tmp_path}/m.sqlite", lazy=True)
    path = lock_file(tracker)
    held = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(held, fcntl.LOCK_EX)  # a closing at work
    shown: list[Shown] = []
    looker = threading.Thread(target=lambda: shown.append(show("k1", db, tracker)))
    looker.start()
    descriptors = lambda: [p for p in Path("/proc/self/fd").iterdir() if os.path.realpath(p) == str(path)]  # noqa: E731
    wait_for(lambda: not looker.is_alive() or len(descriptors()) > 1, timeout=60)  # it waits, or it looked
    with Store(db) as store:
        store.keep_mlflow_run("k1", run, None)  # what the closing does for a trial the mirror had not sent
    os.close(held)  # the closing ends
    looker.join(timeout=120)
    assert shown and shown[0].mlflow is not None and shown[0].mlflow.run_id == run, shown
