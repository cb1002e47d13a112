"""GPU packing by measured memory: shares from footprints, admission by Ray's logical GPUs, OOM requeue.

The scenario runs in its own process (tests/packed.py) on a real Ray with 2 logical GPUs; the memory probe is
faked there because measuring needs CUDA. Trials hold a gate until the controller opens it, so what runs at
once is Ray's admission alone.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import TINY, scenario, write_sweeps

from ablate.config import Resources, TrialConfig
from ablate.execution.gpu_shares import Footprint, footprint_key, out_of_memory, train_steps
from ablate.execution.launcher import RunConfig, launch
from ablate.execution.progress import Display
from ablate.planning.plan import plan
from ablate.store import Store

GiB = 2**30


@pytest.mark.parametrize(
    ("used", "headroom", "share"),
    [(0.30, 0.1, 0.33), (0.5, 0.0, 0.5), (0.501, 0.0, 0.51), (0.95, 0.1, 1.0), (0.0001, 0.1, 0.01)],
)
def test_share_is_the_measured_fraction_with_headroom_rounded_up(used: float, headroom: float, share: float) -> None:
    assert Footprint(round(used * 80 * GiB), 80 * GiB).share(headroom) == share


def test_trials_share_a_probe_only_when_their_memory_cannot_differ() -> None:
    base = TrialConfig.model_validate({**TINY, "resources": {"gpus": "auto"}})

    def key(**changes: dict) -> str:
        data = base.model_dump()
        for section, values in changes.items():
            data[section] = {**data[section], **values}
        return footprint_key(TrialConfig.model_validate(data))

    assert key() == footprint_key(base.model_copy(update={"seed": 7}))
    assert key(train={"lr": 0.1}) == key()
    for changed in ({"model": {"embed_dim": 64}}, {"train": {"amp": True}}, {"train": {"device_batch": 32}},
                    {"train": {"opt": "sgd"}}, {"attention": {"kind": "csan"}}):  # fmt: skip
        assert key(**changed) != key(), changed


@pytest.mark.parametrize("cfg", [TINY, {"task": "mil", "data": {"name": "musk1"}, "model": {"size": "synpool"}}])
def test_the_probe_trains_the_trials_model_on_its_input_shape(cfg: dict) -> None:
    """The probe's steps (on CUDA in a launch) run on CPU here: the model, optimizer and input shape agree."""
    import torch

    trial = TrialConfig.model_validate({**cfg, "train": {"batch_size": 8}})
    torch.manual_seed(0)
    train_steps(trial, torch.device("cpu"), steps=1)


@pytest.mark.parametrize(
    ("error", "oom"),
    [
        (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), True),
        (torch.AcceleratorError("CUDA error: out of memory\nCUDA kernel errors might be reported later"), True),
        (RuntimeError("CUDA error: out of memory"), True),
        (RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), True),
        (RuntimeError("cuDNN error: CUDNN_STATUS_ALLOC_FAILED"), True),
        (RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"), False),  # also an unsupported shape or setting
        (torch.AcceleratorError("CUDA error: device-side assert triggered"), False),
        (MemoryError(), False),  # the host's memory: a whole GPU would not help
        (ValueError("batch too large for CUDA out of memory tests"), False),
        (None, False),
    ],
)
def test_cuda_out_of_memory_is_recognised_however_cuda_says_it(error: BaseException | None, oom: bool) -> None:
    assert out_of_memory(error) is oom


def test_gpus_takes_a_number_or_auto() -> None:
    assert Resources(gpus="auto").uses_gpu and Resources(gpus=0.25).uses_gpu and not Resources().uses_gpu
    for bad in (-1, "half", 1.5):
        with pytest.raises(ValueError):
            Resources.model_validate({"gpus": bad})


def test_auto_on_a_cluster_without_gpus_is_an_error_before_anything_is_written(ray_local, tmp_path: Path) -> None:
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": {**TINY, "resources": {"gpus": "auto"}}}})
    with Store(f"sqlite:///{tmp_path}/r.sqlite") as store:
        with pytest.raises(RuntimeError, match=r"gpus: auto .* has none"):
            launch([plan(f, "s")], store, run=RunConfig(storage=tmp_path / "ck"), progress=Display(live=False))
        assert store.trials_frame().empty


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("packed")
    return scenario("packed.py", root)


def overcommitted(starts: list[dict]) -> list[tuple[str, float]]:
    """(GPU, total share) wherever trials running at once on one GPU ask for more than all of it."""
    bad = []
    for s in starts:
        at, gpu = s["at"], s["gpu"][0]
        live = [o["share"] for o in starts if o["gpu"][0] == gpu and o["at"] <= at and (o["end"] or at) >= at]
        if sum(live) > 1 + 1e-9:
            bad.append((gpu, sum(live)))
    return bad


def test_trials_probed_at_30_percent_run_three_to_a_gpu(packed: dict) -> None:
    small = packed["small"]
    assert small["held"] == 6 and small["counts"] == {"done": 6}  # all six at once on two GPUs
    assert {s["share"] for s in small["starts"]} == {0.33}
    assert sorted(Counter(s["gpu"][0] for s in small["starts"]).values()) == [3, 3]
    assert any("24.0 of 80 GiB" in m and "0.33 GPU each (3 per GPU)" in m for m in small["messages"])
    assert not overcommitted(small["starts"])


def test_trials_probed_at_60_percent_run_one_to_a_gpu(packed: dict) -> None:
    large = packed["large"]
    assert large["counts"] == {"done": 3} and {s["share"] for s in large["starts"]} == {0.66}
    # Two held the gate on two GPUs and 0.34 of each was left: Ray could not admit the third.
    assert large["held"] == 2 and large["free_gpu"] == pytest.approx(2 - 2 * 0.66)
    assert not overcommitted(large["starts"])


@pytest.mark.parametrize("phase", ["oom", "cuda_error"])  # torch's OutOfMemoryError; the CUDA runtime's error
def test_out_of_memory_on_a_share_requeues_once_on_a_whole_gpu(packed: dict, phase: str) -> None:
    oom = packed[phase]
    assert oom["counts"] == {"done": 1} and oom["attempts"] == [2] and not oom["errors"]
    assert [s["share"] for s in sorted(oom["starts"], key=lambda s: s["at"])] == [0.33, 1.0]
    assert any("out of memory on 0.33 of a GPU; requeued once on a whole GPU" in m for m in oom["messages"])


def test_out_of_memory_on_a_whole_gpu_fails_with_advice(packed: dict) -> None:
    whole = packed["whole"]
    assert whole["counts"] == {"failed": 1} and whole["attempts"] == [1]
    assert "lower train.device_batch" in whole["errors"][0] and "OutOfMemoryError" in whole["errors"][0]


def test_every_gpu_trial_gets_a_fresh_worker_that_sees_only_its_gpu(packed: dict) -> None:
    """CUDA reads CUDA_VISIBLE_DEVICES once per process: a worker Ray reused for a second GPU task would train it on
    the first task's device (and keep its memory). Ray sets max_calls=1 only for `num_gpus` in the decorator, not in
    `.options()` as ablate submits; every attempt of every phase must have a process of its own."""
    starts = [s for phase in packed.values() for s in phase["starts"]]
    assert len(starts) == 14  # 6 small, 3 large, the two out-of-memory trials twice each, the whole-GPU one
    assert sorted(Counter(s["pid"] for s in starts).values()) == [1] * len(starts)
    assert all(s["visible"] == ",".join(s["gpu"]) for s in starts), starts
