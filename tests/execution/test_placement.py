"""Where launched trials train: the GPU their Ray task holds (what the launcher submitted, `--gpus` included), else
the CPU with no GPU visible; a GPU torch cannot use fails the trial unless the tests' fake-GPU opt-in is set, and the
store's `trials.device` says where each trained.

The scenario runs in its own process (tests/placed.py) on two real Rays with 2 logical GPUs, one without the opt-in
and one with it; a tiny runner records, per task, Ray's GPU ids, CUDA_VISIBLE_DEVICES and the device it resolved.
"""

from __future__ import annotations

import pytest
from conftest import scenario

from ablate.training.devices import FAKE_GPU

FAKE = f"cpu ({FAKE_GPU})"


@pytest.fixture(scope="module")
def placed(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("placed")
    return scenario("placed.py", root)


def refused(phase: dict) -> None:
    """Every trial failed before training, its recorded error naming the GPU Ray gave it, the node, torch's build
    and the opt-in; no device recorded (it never started)."""
    assert phase["counts"] == {"failed": 1} and phase["seen"] == []
    for row in phase["rows"]:
        assert row["state"] == "failed" and row["device"] is None, row
        for part in ("DeviceError: Ray gave this task GPU", "on node", "CUDA_VISIBLE_DEVICES=", "is a CPU build",
                     "does not fall back to the CPU", FAKE_GPU):  # fmt: skip
            assert part in row["error"], (part, row["error"])


def trained(phase: dict, device: str, seeds: int = 1) -> None:
    assert phase["counts"] == {"done": seeds}
    assert [row["device"] for row in phase["rows"]] == [device] * seeds


def test_a_trial_on_a_logical_gpu_without_the_opt_in_fails_naming_the_cause(placed: dict) -> None:
    refused(placed["gpu"])


def test_with_the_opt_in_a_gpu_trial_trains_on_the_cpu_and_its_record_says_so(placed: dict) -> None:
    trained(placed["fake"], FAKE)
    assert {s["device"] for s in placed["fake"]["seen"]} == {FAKE}
    trained(placed["fake_trained"], FAKE)  # the training loop itself, on the device the task resolved


def test_gpus_1_on_a_cpu_sweep_trains_on_the_gpu_it_holds(placed: dict) -> None:
    refused(placed["cpu_sweep_gpus_1"])  # it holds a GPU, so it must train there: here it cannot
    fake = placed["fake_cpu_sweep_gpus_1"]
    trained(fake, FAKE, seeds=2)
    for seen in fake["seen"]:
        assert len(seen["gpu_ids"]) == 1 and seen["visible"] == seen["gpu_ids"][0] and seen["device"] == FAKE, seen


def test_gpus_0_on_a_gpu_sweep_trains_on_the_cpu_and_sees_no_gpu(placed: dict) -> None:
    phase = placed["gpu_sweep_gpus_0"]
    trained(phase, "cpu")
    assert [(s["gpu_ids"], s["visible"], s["device"]) for s in phase["seen"]] == [([], "", "cpu")]


def test_a_cpu_trial_sees_no_gpu(placed: dict) -> None:
    """Ray 2.60 leaves CUDA_VISIBLE_DEVICES unset for a task without GPUs: it would see every GPU of its node."""
    phase = placed["cpu"]
    trained(phase, "cpu")
    assert [s["visible"] for s in phase["seen"]] == [""]
