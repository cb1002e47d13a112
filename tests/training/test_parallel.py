"""Data parallelism inside a trial: the global batch gives the same training however it is split, over
accumulation steps or over real torch.distributed (gloo) worker processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

from ablate.config import BatchSplit, TrialConfig
from ablate.training.loop import run_trial
from ablate.training.parallel import Group, leave, steps

pytestmark = pytest.mark.timeout(300)

#: No augmentation or dropout: the only randomness is the shared epoch order, so curves must agree.
RAW = {**TINY, "train": {**TINY["train"], "epochs": 2, "batch_size": 64}}


def curve(over: dict | None = None, resources: dict | None = None) -> tuple[list[dict[str, float]], dict]:
    raw = {**RAW, "train": {**RAW["train"], **(over or {})}, "resources": resources or {}}
    seen: list[dict[str, float]] = []
    res = run_trial(TrialConfig.model_validate(raw), lambda epoch, metrics: seen.append(metrics))
    return seen, res.metrics


def close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(1.0, abs(a))


def assert_same_training(a: tuple, b: tuple) -> None:
    for ea, eb in zip(a[0], b[0], strict=True):
        for name in ("train.loss", "val.loss", "val.top1"):
            assert close(ea[name], eb[name]), (name, ea[name], eb[name])
    for name in a[1]:
        assert close(a[1][name], b[1][name]), (name, a[1], b[1])


def test_steps_cut_every_global_batch_the_same_way() -> None:
    """Workers x micro-batches partition each global batch of the shared order; the last one may be short."""
    order = list(range(10))[::-1]
    split = BatchSplit(workers=2, accum_steps=2, device_batch=1)
    plans = [steps(10, split, rank, order) for rank in range(2)]
    assert [s.size for s in plans[0]] == [4, 4, 2]
    for i in range(3):
        union = sorted(x for plan in plans for micro in plan[i].micro for x in micro)
        assert union == sorted(order[4 * i : 4 * i + 4])
    assert plans[1][2].micro == [[], []]  # the short last batch belongs to worker 0


def test_accumulation_equals_one_big_batch() -> None:
    """accum_steps 2 (or device_batch 16: 4 micro-batches) trains like one step on the global batch of 64."""
    whole = curve()
    assert_same_training(curve({"accum_steps": 2}), whole)
    assert_same_training(curve({"device_batch": 16}), whole)
    assert not close(curve({"batch_size": 32})[0][0]["train.loss"], whole[0][0]["train.loss"])  # the test can fail


def test_batch_that_does_not_split_is_a_validation_error() -> None:
    with pytest.raises(ValueError, match="the global batch must split evenly"):
        TrialConfig.model_validate({**RAW, "train": {**RAW["train"], "accum_steps": 3}})


WORKER = """
import json, sys
sys.path[:0] = {tests!r}
from test_parallel import curve
seen, metrics = curve({over!r}, {{"workers": 2}})
print("RESULT" + json.dumps([seen, metrics]))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_workers(over: dict, tmp_path: Path) -> list[tuple[list[dict[str, float]], dict]]:
    """Two real processes joined by torch.distributed (gloo), as the launcher starts a 2-worker trial."""
    port = free_port()
    here = Path(__file__).parent  # this module, and the helpers it imports in tests/
    script = WORKER.format(tests=[str(here), str(here.parent)], over=over)
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    command = [sys.executable, "-c", script]
    procs = [
        subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, text=True, env={**env, "RANK": str(r)})
        for r in range(2)
    ]
    outs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    return [tuple(json.loads(next(x for x in o.splitlines() if x.startswith("RESULT"))[6:])) for o in outs]


def test_two_gloo_workers_train_like_one_process(tmp_path: Path) -> None:
    """2 workers x 32 (and 2 workers x 2 micro-batches of 16) equal one process on batches of 64."""
    whole = curve()
    rank0, rank1 = run_workers({}, tmp_path)
    assert_same_training(rank0, whole)
    assert rank1[0] == [] and rank1[1] == {}  # only rank 0 reports and evaluates
    rank0, _ = run_workers({"accum_steps": 2}, tmp_path)
    assert_same_training(rank0, whole)


@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_a_failed_rank_leaves_an_nccl_group_to_its_process_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Destroying an NCCL communicator waits on the peers' pending collectives, so a rank that failed keeps its
    group (its process ends with the task) and its error reaches the launcher at once; gloo's group is destroyed
    (a CPU worker runs the next trial). NCCL cannot run here: a real gloo group is reported as NCCL."""
    import torch.distributed as dist

    dist.init_process_group("gloo", f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    try:
        if backend == "nccl":
            monkeypatch.setattr(dist, "get_backend", lambda group=None: "nccl")
        leave(Group(0, 2), failed=True)
        assert dist.is_initialized() == (backend == "nccl")
        leave(Group(0, 2))
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
