"""A trial's task streams its messages in order, each in the launcher's hands before the trial goes on (a worker
killed right after a report loses nothing), and the launcher counts each submission of a trial once: from its own
`Started`, or, where the trial's worker died before that message left it, from the launcher's record of the
submission; a start that arrives after its submission settled is dropped."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import ray
import ray.cloudpickle
import yaml
from conftest import TINY, write_sweeps

from ablate.config import TrialConfig
from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.execution.streams import BACKPRESSURE, Stream
from ablate.execution.submissions import Submissions
from ablate.execution.trial_task import TaskArgs, trial_stream
from ablate.planning.plan import plan
from ablate.plugins import Plugins
from ablate.store import Store
from ablate.training.messages import EpochEnd, Message, Started, TrialResult

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


def test_a_trials_messages_come_in_order_then_its_result(ray_local, tmp_path: Path) -> None:
    """The task's items, taken as the launcher takes them (`Stream.pull`): its start, with its submission number, its
    epochs in order, then its result as the stream's outcome."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def runner(cfg: TrialConfig, report: object, folder: Path) -> TrialResult:
        for epoch in (1, 2, 3):
            report(epoch, {"val.top1": epoch / 10})  # type: ignore[operator]
        return TrialResult("done", 3)

    config = TrialConfig.model_validate(TINY).model_dump(mode="json")
    args = TaskArgs(config, "k", str(tmp_path / "ck"), runner, Plugins(), submission=7)
    task = ray.remote(num_returns="streaming", _generator_backpressure_num_objects=BACKPRESSURE)(trial_stream)
    stream, messages = Stream(task.options(num_cpus=1).remote(args)), list[Message]()
    while not stream.pull(messages):
        ray.wait([stream.generator], timeout=60)
    assert ray.get(stream.outcome).outcome == "done"
    assert [type(m) for m in messages] == [Started, EpochEnd, EpochEnd, EpochEnd]
    assert messages[0].submission == 7 and [m.epoch for m in messages[1:]] == [1, 2, 3]  # type: ignore[union-attr]


def killed_after_reporting(cfg: TrialConfig, report: object, folder: Path) -> TrialResult:
    """The first attempt reports epoch 1 and, the moment the report returns, kills its own worker; the second reports
    nothing and ends done."""
    died = Path(str(folder)).parents[1] / "died"
    if not died.exists():
        report(1, {"val.top1": 0.5})  # type: ignore[operator]
        died.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return TrialResult("done", 1, {"test.top1": 1.0})


def test_a_worker_killed_right_after_a_report_loses_nothing_it_reported(ray_local, tmp_path: Path) -> None:
    """Ray drops the items a task yielded that were not taken when its worker dies; a report returns only once the
    launcher took the message, so the epoch the killed attempt reported is in the store beside the second attempt's
    result (a task that ran ahead of its yields lost it: its worker died before the loop woke)."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        run = RunConfig(storage=tmp_path / "ck", runner=killed_after_reporting)
        res = launch([plan(f, "s")], store=store, run=run, progress=Display(live=False))
        assert res.counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"]) == ("done", 2)
        epochs = store.metrics_frame("s")
        assert epochs.loc[epochs["name"] == "val.top1", "value"].tolist() == [0.5]


def test_an_attempt_whose_start_never_arrived_still_counts(ray_local, tmp_path: Path) -> None:
    """The sweep's plugin kills the first worker that imports it, before the trial's `Started` leaves it (a trial
    sends it once its plugins are imported); the trial is lost, run again and done, and the store counts both
    attempts, the second's host recorded."""
    died = tmp_path / "died"
    (tmp_path / "dies.py").write_text(
        "import os, pathlib, signal\n"
        f"died = pathlib.Path({str(died)!r})\n"
        f"if os.getpid() != {os.getpid()} and not died.exists():  # a worker, not the test's process\n"
        "    died.touch()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    f = tmp_path / "e.yaml"
    f.write_text(yaml.safe_dump({"plugins": ["dies.py"], "sweeps": {"s": {"base": TINY}}}, sort_keys=False))
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launch([plan(f, "s")], store=store, run=RunConfig(storage=tmp_path / "ck"), progress=Display(live=False))
        assert died.exists() and res.counts == {"done": 1}
        row = store.trials_frame("s").iloc[0]
        assert (row["state"], row["attempts"]) == ("done", 2) and row["host"]
