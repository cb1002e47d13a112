"""A checkpoint's CUDA generator: the trial's own device's only, so a trial resumes on a node with fewer devices.

No GPU here: `StubCuda` stands in for torch.cuda's RNG calls on a node of N devices (each device's generator state a
real tensor, an ordinal past N failing as CUDA's does); the checkpoint itself is written and read by torch.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ablate.training import checkpoints


class StubCuda:
    """torch.cuda's RNG calls on a node of `count` devices."""

    def __init__(self, count: int) -> None:
        self.states = [torch.full((16,), i, dtype=torch.uint8) for i in range(count)]

    def index(self, device: int | str | torch.device) -> int:
        at = device if isinstance(device, int) else torch.device(device).index
        at = 0 if at is None else at  # `cuda`: the current device, 0 (ablate never changes it)
        if at >= len(self.states):
            raise RuntimeError("CUDA error: invalid device ordinal")
        return at

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return len(self.states)

    def current_device(self) -> int:
        return 0

    def get_rng_state(self, device: int | str | torch.device = "cuda") -> torch.Tensor:
        return self.states[self.index(device)].clone()

    def set_rng_state(self, new_state: torch.Tensor, device: int | str | torch.device = "cuda") -> None:
        self.states[self.index(device)] = new_state.clone()

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [s.clone() for s in self.states]

    def set_rng_state_all(self, new_states: list[torch.Tensor]) -> None:
        for i, state in enumerate(new_states):
            self.set_rng_state(state, i)


def node(monkeypatch: pytest.MonkeyPatch, count: int) -> StubCuda:
    """torch.cuda, as far as RNG states go, on a node of `count` devices."""
    stub = StubCuda(count)
    for name in ("is_available", "device_count", "current_device", "get_rng_state", "set_rng_state",
                 "get_rng_state_all", "set_rng_state_all"):  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, getattr(stub, name))
    return stub


def save(folder: Path, device: torch.device | None) -> dict:
    model = torch.nn.Linear(2, 2)
    checkpoints.save(folder, model, torch.optim.SGD(model.parameters(), lr=0.1), None, checkpoints.Progress(1), device)
    return torch.load(folder / checkpoints.FILE, weights_only=True)


def restore(folder: Path, device: torch.device | None) -> None:
    model = torch.nn.Linear(2, 2)
    checkpoints.restore(folder, model, torch.optim.SGD(model.parameters(), lr=0.1), None, device)


MID_TRAINING = torch.arange(100, 116, dtype=torch.uint8)
"""The trial's CUDA generator state when its checkpoint is written."""


def test_a_checkpoint_written_on_device_3_of_8_resumes_on_a_node_of_1(tmp_path: Path, monkeypatch) -> None:
    big = node(monkeypatch, 8)
    big.states[3] = MID_TRAINING.clone()
    saved = save(tmp_path, torch.device("cuda", 3))
    assert torch.equal(saved["rng"]["cuda"], MID_TRAINING)  # its own device's generator, not the node's eight
    small = node(monkeypatch, 1)
    restore(tmp_path, torch.device("cuda"))
    assert torch.equal(small.states[0], MID_TRAINING)


def test_an_older_checkpoint_holding_every_devices_state_resumes_from_its_first(tmp_path: Path, monkeypatch) -> None:
    """Written before ablate kept one device's state: a list of all 8, the first the trial's (it trained on `cuda`,
    its process's device 0)."""
    node(monkeypatch, 8)
    state = save(tmp_path, torch.device("cuda"))
    state["rng"]["cuda"] = [MID_TRAINING.clone()] + [torch.full((16,), i, dtype=torch.uint8) for i in range(1, 8)]
    torch.save(state, tmp_path / checkpoints.FILE)
    small = node(monkeypatch, 1)
    restore(tmp_path, torch.device("cuda"))
    assert torch.equal(small.states[0], MID_TRAINING)


def test_a_cpu_trial_keeps_and_restores_no_cuda_generator(tmp_path: Path, monkeypatch) -> None:
    """A trial on the CPU of a GPU node (or a GPU trial's checkpoint resumed on a CPU) leaves the devices' alone."""
    gpus = node(monkeypatch, 2)
    assert "cuda" not in save(tmp_path / "cpu", None)["rng"]
    gpus.states[0] = MID_TRAINING.clone()
    save(tmp_path / "gpu", torch.device("cuda"))
    gpus.states[0] = torch.zeros(16, dtype=torch.uint8)
    restore(tmp_path / "gpu", torch.device("cpu"))
    assert not gpus.states[0].any()
