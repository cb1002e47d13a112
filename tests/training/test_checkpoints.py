"""The Checkpointer, the one owner of a trial's resume, on real checkpoint files of a tiny real model: it admits its
own file (through the record it reports for the store), refuses another trial's, an edited one and, under `rerun`,
one written by other code; it restores model, optimizer, scheduler, RNGs and position so the next batches' losses
are those of the run that never stopped.

A checkpoint's CUDA generator: the trial's own device's only, so a trial resumes on a node with fewer devices.
No GPU here: `StubCuda` stands in for torch.cuda's RNG calls on a node of N devices (each device's generator state a
real tensor, an ordinal past N failing as CUDA's does); the checkpoint itself is written and read by torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from ablate.training.checkpoint_storage import Storage
from ablate.training.checkpoints import FILE, Checkpointer, Progress, Resume, file_sha


class Tiny:
    """A tiny real model in training: dropout (the torch RNG), Adam (optimizer state), a step schedule (scheduler
    state), and batches drawn from the torch RNG, so each loss depends on all four."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.05)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)

    def step(self) -> float:
        x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
        loss = nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.item()

    def parts(self) -> tuple[nn.Module, Any, Any]:
        return self.model, self.optimizer, self.scheduler


def trained(folder: Path, steps: int = 3) -> tuple[Checkpointer, list[float]]:
    """A checkpoint of `Tiny` after `steps` steps in `folder` (its name the trial's key), and the losses of the
    three steps the run would have taken next."""
    run = Tiny(seed=0)
    for _ in range(steps):
        run.step()
    checkpointer = Checkpointer(folder, resume=Resume(folder.name, None, None, "code-a"))
    checkpointer.save(
        *run.parts(), Progress(epoch=1, step=steps, partial=(1.5, 12), history=[(1, {"train.loss": 1.0})])
    )
    return checkpointer, [run.step() for _ in range(3)]


def test_a_restored_checkpoint_takes_the_next_batches_to_the_same_losses(tmp_path: Path) -> None:
    _, uninterrupted = trained(tmp_path / "trial-a")
    resumed = Tiny(seed=1)  # other weights, optimizer and RNG until restored
    progress = Checkpointer(tmp_path / "trial-a").restore(*resumed.parts())
    assert (progress.epoch, progress.step, progress.partial) == (1, 3, (1.5, 12))
    assert progress.history == [(1, {"train.loss": 1.0})] and progress.problem is None
    assert [resumed.step() for _ in range(3)] == uninterrupted


def test_the_checkpointer_admits_its_own_file_through_the_record_it_reports(tmp_path: Path) -> None:
    """What `saved` reports is what the store keeps and `Resume.of` reads back at the next submission."""
    checkpointer, _ = trained(tmp_path / "trial-a")
    record = checkpointer.saved()
    assert record == {"sha": file_sha(checkpointer.path), "code": "code-a"}
    for policy in ("rerun", "warn", "reuse"):
        assert Checkpointer(checkpointer.folder, resume=Resume.of("trial-a", record, "code-a", policy)).admit() is None
    assert Checkpointer(checkpointer.folder, resume=Resume("trial-a", None, None, "code-a")).admit() is None
    assert checkpointer.path.exists()


def test_a_file_of_another_trial_or_edited_is_refused_and_set_aside(tmp_path: Path) -> None:
    """Without a record only the key the file names is checked; with one, its digest: a copy of another trial's
    checkpoint (its own key inside) or this trial's, edited, does not match."""
    mine, _ = trained(tmp_path / "trial-a")
    theirs, _ = trained(tmp_path / "trial-b", steps=4)
    theirs.path.replace(mine.path)  # trial-b's file in trial-a's folder
    refused = Checkpointer(mine.folder, resume=Resume("trial-a", None, None, "code-a")).admit()
    assert refused is not None and "belongs to another trial" in refused
    assert not mine.path.exists() and (mine.folder / f"{FILE}.refused").exists()

    mine, _ = trained(tmp_path / "trial-c")
    record = mine.saved()
    state = torch.load(mine.path, weights_only=True)
    state["history"] = [(1, {"train.loss": 0.01})]
    torch.save(state, mine.path)
    refused = Checkpointer(mine.folder, resume=Resume.of("trial-c", record, "code-a", "warn")).admit()
    assert refused is not None and "does not match the store's record of trial trial-c" in refused
    assert not mine.path.exists()


def test_a_checkpoint_saved_after_the_last_report_is_refused_as_that(tmp_path: Path) -> None:
    """An attempt saved a newer checkpoint and died before the launcher took its report: the store's record names
    the older file. The refusal says so, not that the file was copied or edited; one edited after that save (the
    digest beside it no longer matching) is told as before, through `attempt` too (it reads the digest before the
    reporting rank forgets it)."""
    storage = Storage(tmp_path)
    mine, _ = trained(storage.folder("trial-a"))
    record = mine.saved()
    run = Tiny(seed=2)
    mine.save(*run.parts(), Progress(epoch=2, history=[(1, {"train.loss": 1.0}), (2, {"train.loss": 0.9})]))
    resumed = Checkpointer(mine.folder, resume=Resume.of("trial-a", record, "code-a", "warn"))
    with resumed.attempt(storage, reports=True) as problems:
        assert not mine.path.exists()
    assert len(problems) == 1 and "was saved after the store's last record of trial trial-a" in problems[0]
    assert "copied" not in problems[0]

    theirs, _ = trained(tmp_path / "trial-b")
    record = theirs.saved()
    theirs.save(*run.parts(), Progress(epoch=2))
    state = torch.load(theirs.path, weights_only=True)
    state["history"] = [(1, {"train.loss": 0.01})]
    torch.save(state, theirs.path)
    refused = Checkpointer(theirs.folder, resume=Resume.of("trial-b", record, "code-a", "warn")).admit()
    assert refused is not None and "does not match the store's record of trial trial-b" in refused


@pytest.mark.parametrize(
    ("policy", "kept", "said"),
    [("rerun", False, "written by other code (stale: rerun)"), ("warn", True, "written by other code than now"),
     ("reuse", True, None)],
)  # fmt: skip
def test_a_checkpoint_of_other_code_follows_the_staleness_policy(
    tmp_path: Path, policy: str, kept: bool, said: str | None
) -> None:
    mine, _ = trained(tmp_path / "k")
    record = mine.saved()
    message = Checkpointer(mine.folder, resume=Resume.of("k", record, "code-b", policy)).admit()
    assert mine.path.exists() == kept
    assert (message is None) if said is None else (said in (message or ""))


def test_an_attempt_admits_after_the_fetch_and_says_why_it_refused(tmp_path: Path) -> None:
    """The task's side: an attempt of the reporting rank forgets the digest an earlier attempt saved (only this
    attempt's saves are reported), and its problems hold the refusal once the `with` ends."""
    storage = Storage(tmp_path)
    theirs, _ = trained(storage.folder("trial-b"))
    mine = Checkpointer(storage.folder("trial-a"), resume=Resume("trial-a", None, None, "code-a"))
    mine.folder.mkdir()
    theirs.path.replace(mine.path)
    (theirs.folder / f"{FILE}.sha256").replace(mine.folder / f"{FILE}.sha256")
    with mine.attempt(storage, reports=True) as problems:
        assert mine.saved() is None and not mine.path.exists()
    assert len(problems) == 1 and "belongs to another trial" in problems[0]


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
    Checkpointer(folder, device).save(model, torch.optim.SGD(model.parameters(), lr=0.1), None, Progress(1))
    return torch.load(folder / FILE, weights_only=True)


def restore(folder: Path, device: torch.device | None) -> None:
    model = torch.nn.Linear(2, 2)
    Checkpointer(folder, device).restore(model, torch.optim.SGD(model.parameters(), lr=0.1), None)


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
    torch.save(state, tmp_path / FILE)
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
