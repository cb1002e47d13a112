"""Multi-worker trials (gangs) on real Ray with gloo on CPU: any rank's end ends the gang at once, and is the trial's
outcome; a fraction of a GPU per worker is refused before anything starts, `gpus: auto` gives whole GPUs."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import TINY, scenario, write_sweeps
from typer.testing import CliRunner

from ablate.cli import app
from ablate.config import Resources
from ablate.execution.launcher import Cluster, RunConfig, launch
from ablate.execution.preflight import Checks, PreflightError, preflight, refuse_split_gpus
from ablate.execution.progress import Display
from ablate.execution.selection import Select
from ablate.planning.plan import Plan, plan
from ablate.store import Store

pytestmark = pytest.mark.timeout(400)

SAFETY = 240.0
"""Seconds a test waits for a launch before it calls the launch hung: far above what it takes (a rank waiting at
the rendezvous or in a collective for a peer that ended waits `ablate.training.parallel.TIMEOUT`, 30 minutes)."""


class ShardMissing(Exception):
    """The application error a test's rank 1 raises."""


def until(condition: Any, limit: float = SAFETY) -> None:
    """Block until `condition()` holds (`limit`: a safety net, never reached when the code works)."""
    end = time.monotonic() + limit
    while not condition():
        if time.monotonic() > end:
            raise TimeoutError("condition never held")
        time.sleep(0.02)


def joining() -> Path:
    """The marker rank 0 leaves as it goes to the rendezvous (after its `Started`: the attempt counts), named after
    the attempt's rendezvous file."""
    from ablate.training.messages import RENDEZVOUS

    return Path(os.environ[RENDEZVOUS] + ".rank0-joins")


def rank1_fails_before_joining(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Rank 0 trains (it joins and waits at the rendezvous); rank 1 raises once rank 0 is on its way there."""
    from ablate.training.loop import run_trial

    if os.environ["RANK"] == "1":
        until(joining().exists)
        raise ShardMissing("rank 1 cannot read its shard")
    joining().touch()
    return run_trial(cfg, report, checkpoint_dir)


def rank1_fails_after_leaving(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Both ranks join; rank 1 leaves the group (under gloo rank 0's next collective fails at once: PeerLost) and
    raises only after rank 0 saw its peer go, so rank 0's lost peer reaches the launcher before rank 1's error."""
    import torch

    from ablate.training import parallel
    from ablate.training.messages import PeerLost

    group = parallel.join(2, torch.device("cpu"))
    saw = Path(checkpoint_dir, "rank0-lost-its-peer")
    try:
        group.barrier()
        if group.rank == 1:
            parallel.leave(group)
            until(saw.exists)
            raise ShardMissing("rank 1 cannot read its shard")
        try:
            group.barrier()
        except PeerLost:
            saw.touch()
            raise
        raise AssertionError("rank 0's collective outlived its peer's leaving")
    finally:
        parallel.leave(group)


def rank1_killable(cfg: Any, report: Any, checkpoint_dir: Path) -> Any:
    """Rank 1 of the first attempt writes its pid once rank 0 is on its way to the rendezvous, and waits to be
    killed; once the test marked it killed, the ranks train."""
    from ablate.training.loop import run_trial

    killed = Path(checkpoint_dir).parent / "killed"
    if os.environ["RANK"] == "0":
        joining().touch()
    elif not killed.exists():
        until(joining().exists)
        Path(checkpoint_dir).parent.joinpath("rank1.pid").write_text(str(os.getpid()))
        until(killed.exists)
    return run_trial(cfg, report, checkpoint_dir)


def by_value() -> None:
    """Ship this module's runners to Ray workers by value (tests/ is not on their path)."""
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


def two_workers(tmp_path: Path, retries: int = 0) -> Plan:
    cfg = {**TINY, "train": {**TINY["train"], "epochs": 1}, "resources": {"cpus": 1, "workers": 2, "retries": retries}}
    return plan(write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}}), "s")


def launched(p: Plan, store: Store, tmp_path: Path, runner: Any) -> Any:
    """Launch `p` in a thread; its result, or a failed test if it does not end within `SAFETY` seconds."""
    box: dict = {}
    run = RunConfig(storage=tmp_path / "ck", runner=runner)
    quiet = Display(live=False)
    th = threading.Thread(target=lambda: box.update(res=launch([p], store=store, run=run, progress=quiet)), daemon=True)
    th.start()
    th.join(timeout=SAFETY)
    assert not th.is_alive(), "the launch hung: a rank still waits for the peer that ended"
    return box["res"]


@pytest.fixture
def cancels(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every task the launcher passes to `ray.cancel` (still cancelled: a spy, not a stand-in). A gang's end must not
    cancel: Ray 2.60's driver aborts when a force-cancel meets a returning rank's reply (`Gang.stop`)."""
    import ray

    calls: list[Any] = []
    real = ray.cancel

    def spy(ref: Any, **kwargs: Any) -> None:
        calls.append(ref)
        real(ref, **kwargs)

    monkeypatch.setattr(ray, "cancel", spy)
    return calls


def test_a_rank_that_raises_before_joining_ends_the_trial_with_its_error_and_its_retries(
    ray_local, tmp_path: Path, cancels: list[Any]
) -> None:
    """Rank 1 raises while rank 0 waits at the rendezvous: the launch does not wait for rank 0's timeout (rank 0 is
    stopped with its placement group, never by `ray.cancel`); the trial is retried `resources.retries` times (an
    application error, not a lost worker) and fails with rank 1's error and traceback."""
    by_value()
    p = two_workers(tmp_path, retries=1)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launched(p, store, tmp_path, rank1_fails_before_joining)
        row = store.trials_frame("s").iloc[0]
        trace = store.trial(p.trials[0].key).traceback
    assert res.counts == {"failed": 1}
    assert row["attempts"] == 2
    assert row["error"] == "ShardMissing: rank 1 cannot read its shard"
    assert 'raise ShardMissing("rank 1 cannot read its shard")' in trace, trace
    assert cancels == []


def test_a_rank_that_raises_is_the_trials_error_though_its_peer_reports_it_lost_first(
    ray_local, tmp_path: Path, cancels: list[Any]
) -> None:
    """Rank 0's collective fails first (PeerLost, which alone would mean a dead worker: resumed up to 10 times),
    then rank 1 raises: the trial fails once, with rank 1's error."""
    by_value()
    p = two_workers(tmp_path)
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        res = launched(p, store, tmp_path, rank1_fails_after_leaving)
        row = store.trials_frame("s").iloc[0]
    assert res.counts == {"failed": 1}
    assert row["attempts"] == 1
    assert row["error"] == "ShardMissing: rank 1 cannot read its shard"
    assert cancels == []


def test_a_rank_killed_before_joining_is_a_lost_worker_and_the_gang_starts_again(ray_local, tmp_path: Path) -> None:
    """SIGKILL of rank 1 while rank 0 waits at the rendezvous: the launcher stops rank 0 at once and starts both
    ranks again (a lost worker, whatever `resources.retries`), and the trial ends done."""
    by_value()
    p = two_workers(tmp_path)
    pid_file = tmp_path / "ck" / "rank1.pid"
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:

        def kill() -> None:
            until(lambda: pid_file.exists() and pid_file.read_text())
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
            (tmp_path / "ck" / "killed").touch()

        killer = threading.Thread(target=kill, daemon=True)
        killer.start()
        res = launched(p, store, tmp_path, rank1_killable)
        killer.join()
        row = store.trials_frame("s").iloc[0]
    assert res.counts == {"done": 1}
    assert row["attempts"] == 2 and row["error"] is None


@pytest.mark.parametrize(("gpus", "workers", "refused"), [(0.5, 2, True), (0.25, 4, True), (1, 2, False),
                                                          (2, 2, False), (0, 2, False), (0.5, 1, False),
                                                          ("auto", 2, False)])  # fmt: skip
def test_a_fraction_of_a_gpu_per_worker_is_refused_for_several_workers(gpus: Any, workers: int, refused: bool) -> None:
    if refused:
        with pytest.raises(ValueError, match=r"workers cannot each hold resources.gpus .* NCCL refuses"):
            Resources(gpus=gpus, workers=workers)
    else:
        Resources(gpus=gpus, workers=workers)


def test_gpus_override_that_splits_a_gpu_between_workers_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    """`--gpus 0.5` on a sweep of two-worker trials: exit 2 naming the flag, the sweep and NCCL's refusal, and the
    working folder stays empty (no store, no Ray): the launch's pre-flight, which the library's launch runs too,
    refuses it. A one-worker sweep takes the same flag."""
    cfg = {**TINY, "resources": {"workers": 2}}
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": cfg}, "one": {"base": TINY}})
    work = tmp_path / "work"
    work.mkdir()
    cwd = os.getcwd()
    os.chdir(work)
    try:
        with pytest.raises(PreflightError, match=r"--gpus 0\.5 gives each worker"):
            preflight([plan(f, "s")], set(), Cluster(), RunConfig(gpus=0.5), Checks(False, False), Select())
        result = CliRunner().invoke(app, ["launch", str(f), "s", "--gpus", "0.5", "--no-check", "--plain"])
    finally:
        os.chdir(cwd)
    text = result.output.replace("\n", "")
    assert result.exit_code == 2, result.output
    assert "--gpus 0.5 gives each worker of a multi-worker trial (resources.workers > 1: 1 of sweep s)" in text
    assert "NCCL refuses" in text
    assert list(work.iterdir()) == []
    refuse_split_gpus([plan(f, "one")], set(), 0.5)  # one worker: a share of a GPU is fine
    refuse_split_gpus([plan(f, "s")], {plan(f, "s").trials[0].key}, 0.5)  # done: not launched, not refused


def test_auto_gpus_give_each_worker_of_a_gang_a_whole_gpu_of_its_own(tmp_path: Path) -> None:
    """On 2 logical GPUs a two-worker trial with `gpus: auto` is not probed (its probe would say 0.3 of a GPU, and
    two ranks would share one): each rank holds a whole GPU, a different one, and the launch says so."""
    seen = scenario("gpu_gangs.py", tmp_path, timeout=300)
    assert seen["counts"] == {"done": 1}
    assert [r["share"] for r in seen["ranks"]] == [1.0, 1.0]
    assert sorted(r["visible"] for r in seen["ranks"]) == ["0", "1"]
    packing = [m for m in seen["messages"] if m.startswith("GPU packing")]
    assert len(packing) == 1 and packing[0].endswith(
        "(1 trials, 2 workers each): a whole GPU per worker, not probed (ranks of one trial cannot share a device)"
    ), packing
