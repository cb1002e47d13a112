"""A trial trains without waiting for its inbox (a new actor's process, still starting as a launch's first trials
begin), and the launcher counts each submission of a trial once: from its own `Started`, or, where the trial's
worker died before that message left it, from the launcher's record of the submission; a start that arrives after
its submission settled is dropped."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
from conftest import TINY, write_sweeps
from gate import wait_for

from ablate.config import TrialConfig
from ablate.execution import inbox
from ablate.execution.inbox import Inbox
from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.execution.submissions import Submissions
from ablate.execution.trial_task import TaskArgs, trial_task
from ablate.planning.plan import plan
from ablate.plugins import Plugins
from ablate.store import Store
from ablate.training.messages import EpochEnd, Started, TrialResult

pytestmark = pytest.mark.timeout(300)


def test_a_start_counts_once_and_only_for_its_trials_current_submission() -> None:
    s = Submissions()
    first = s.submit("a")
    later = EpochEnd("a", 1, {"loss": 0.5}, 1.0)
    kept = s.admitted([Started("a", "h", "n", "cpu", first), later, Started("a", "h", "n", "cpu", first)])
    assert kept == [Started("a", "h", "n", "cpu", first), later]  # a start delivered twice counts once
    assert s.settled(["a"]) == []  # its start is recorded: nothing to add as it settles

    second = s.submit("a")  # a retry: a start of the first submission arriving late is not the second's
    assert s.admitted([Started("a", "h", "n", "cpu", first)]) == []
    assert s.admitted([Started("a", "h2", "n", "cpu", second)]) == [Started("a", "h2", "n", "cpu", second)]

    third = s.submit("a")  # its worker died before its start left it: the launcher records it as it settles
    assert s.settled(["a"]) == [Started("a", "", "", "", third)]
    assert s.admitted([Started("a", "h", "n", "cpu", third)]) == []  # arriving after the outcome: dropped

    s.submit("b")  # stopped because another launcher took it over: neither its start nor one in its stead
    s.forget(["b"])
    assert s.admitted([Started("b", "h", "n", "cpu", 1)]) == [] and s.settled(["b"]) == []


class LateInbox(Inbox):
    """An inbox whose actor is up only once the test makes the file `up` (as a new actor's process takes a moment)."""

    def __init__(self, up: str) -> None:
        super().__init__()
        while not Path(up).exists():
            time.sleep(0.01)


def test_a_trial_trains_before_its_inbox_is_up_and_its_messages_arrive_in_order(ray_local, tmp_path: Path) -> None:
    """The trial's body begins while its inbox actor is still starting (the test opens the inbox only once the body
    has begun: a trial that waited for its `Started` to arrive would wait for ever); its start and epochs then
    arrive in the order sent, every one of them in the inbox when the task returns."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    up, began = tmp_path / "up", tmp_path / "began"

    def runner(cfg: TrialConfig, report: object, folder: Path) -> TrialResult:
        began.touch()
        for epoch in (1, 2, 3):
            report(epoch, {"val.top1": epoch / 10})  # type: ignore[operator]
        return TrialResult("done", 3)

    late = ray.remote(LateInbox).options(num_cpus=0).remote(str(up))
    config = TrialConfig.model_validate(TINY).model_dump(mode="json")
    args = TaskArgs(config, "k", str(tmp_path / "ck"), late, runner, Plugins(), submission=7)
    task = ray.remote(trial_task).options(num_cpus=1).remote(args)
    wait_for(began.exists, timeout=60)
    up.touch()
    assert ray.get(task, timeout=120).outcome == "done"
    messages = ray.get(late.drain.remote())
    assert [type(m) for m in messages] == [Started, EpochEnd, EpochEnd, EpochEnd]
    assert messages[0].submission == 7 and [m.epoch for m in messages[1:]] == [1, 2, 3]  # type: ignore[union-attr]


def killed_at_first(cfg: TrialConfig, report: object, folder: Path) -> TrialResult:
    """The first attempt writes its pid to `died` and kills its own worker (its `Started`, queued for an inbox that
    is not up yet, dies with it); the second ends done."""
    died = Path(str(folder)).parents[1] / "died"
    if not died.exists():
        died.write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    return TrialResult("done", 1, {"test.top1": 1.0})


def test_an_attempt_whose_start_never_arrived_still_counts(ray_local, tmp_path: Path, monkeypatch) -> None:
    """The launch's inbox is up only once the first attempt's worker is dead, so that attempt's `Started` never
    arrives (deterministically: it was queued in the dead worker for an actor not yet created); the trial is lost,
    run again and done, and the store counts both attempts, the second's host recorded."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    up, died = tmp_path / "up", tmp_path / "died"
    monkeypatch.setattr(inbox, "start", lambda: ray.remote(LateInbox).options(num_cpus=0).remote(str(up)))

    def open_when_dead() -> None:
        pid = int(wait_for(lambda: died.exists() and died.read_text(), timeout=120))
        wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=60)
        up.touch()

    opener = threading.Thread(target=open_when_dead, daemon=True)
    opener.start()
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        run = RunConfig(storage=tmp_path / "ck", runner=killed_at_first)
        res = launch([plan(f, "s")], store=store, run=run, progress=Display(live=False))
        opener.join(timeout=1)
        assert res.counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"]) == ("done", 2) and row["host"]
