"""What flows from a trial to the launcher and on to the recorder, as typed values (no torch, no Ray).

A trial runner (`ablate.training.loop.run_trial`, or any `Runner`) calls `report(epoch, metrics)` after each epoch
and returns a `TrialResult`. The Ray task around it streams `Started` and `EpochEnd` to the launcher; the
launcher turns the task's outcome into a `Finished`; the recorder writes all three to the store and MLflow.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from ablate.config import TrialConfig


class Reporter(Protocol):
    """Called after every epoch with the epoch (1-based) and its metrics."""

    def __call__(self, epoch: int, metrics: dict[str, float], /) -> None: ...


class Runner(Protocol):
    """Trains one trial: `run_trial`'s signature (tests and benchmarks pass lighter runners)."""

    def __call__(self, config: TrialConfig, report: Reporter | None, checkpoint_dir: Path | None, /) -> TrialResult: ...


RENDEZVOUS = "ABLATE_RENDEZVOUS"
"""Environment variable of a multi-worker trial's processes: a file on storage every worker sees, where they
meet (torch's FileStore); without it, the torchrun variables MASTER_ADDR and MASTER_PORT."""


PREEMPT = "preempt"
"""A file the launcher writes into a running trial's checkpoint folder to ask it to checkpoint at the next
step and stop (SIGTERM, preemption); a file, so it reaches a trial on any node through the shared storage."""


class StopRequest:
    """Whether the launcher asked the trial of `folder` to stop: one stat per optimizer step (microseconds on
    a local disk; network filesystems cache attributes), so a request is never missed however short a step."""

    def __init__(self, folder: Path | None) -> None:
        self.path = folder / PREEMPT if folder is not None else None

    def __call__(self) -> bool:
        return self.path is not None and self.path.exists()


def request_stop(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / PREEMPT).touch()


def clear_stop(folder: Path) -> None:
    (folder / PREEMPT).unlink(missing_ok=True)


class PeerLost(RuntimeError):
    """A collective of a multi-worker trial failed: another worker died or left (it raised). The launcher records
    that worker's own outcome (`ablate.execution.gangs`); where none comes (its node died), this one counts as a
    lost worker: the trial's workers start again from the last checkpoint, as for a dead single-process worker."""


@dataclass(frozen=True)
class Divergence:
    """Where a non-finite loss stopped a trial."""

    epoch: int
    step: int


@dataclass
class TrialResult:
    """What a finished trial returns; `metrics` holds the final (test) metrics."""

    outcome: Literal["done", "diverged", "preempted"]
    epochs: int
    metrics: dict[str, float] = field(default_factory=dict)
    diverged_at: Divergence | None = None
    params: int | None = None
    flops: int | None = None
    peak_memory: int | None = None
    """Bytes: peak CUDA allocation, or the process's peak resident set on CPU."""
    environment: dict[str, Any] | None = None
    """Versions and hardware (`ablate.provenance.environment`)."""
    resumed_from: int = 0
    """The epoch of the checkpoint the trial resumed from (0: from scratch)."""
    warnings: list[str] = field(default_factory=list)
    """Things the launcher should tell the user (e.g. a corrupt checkpoint that was ignored)."""
    checkpoint: dict[str, Any] | None = None
    """The last checkpoint the attempt wrote (sha, code), set by its task: what a later attempt resumes from."""


@dataclass(frozen=True)
class Started:
    """A trial's task began on a worker."""

    key: str
    host: str
    node_id: str
    device: str
    """Where the trial trains, as `ablate.training.devices.describe` writes it (`cpu`, `cuda:0 <name> pci <bus id>`)."""
    submission: int = 0
    """Which of the launch's submissions of the trial began (`ablate.execution.submissions`). Empty `host`, `node_id`
    and `device`: the launcher's record of a submission that settled before its own `Started` arrived."""


@dataclass(frozen=True)
class EpochEnd:
    """A trial finished an epoch (resumed trials replay their history: writes are idempotent)."""

    key: str
    epoch: int
    metrics: dict[str, float]
    wall: float
    """Unix time the message was sent."""
    checkpoint: dict[str, Any] | None = None
    """The checkpoint saved with this epoch: its SHA-256 and the code digest it was written with."""


Message = Started | EpochEnd
"""What a trial's task streams to the launcher while it runs (`ablate.execution.streams`)."""


@dataclass(frozen=True)
class Finished:
    """A trial's final state and everything the store keeps about it."""

    key: str
    state: Literal["done", "failed", "diverged", "preempted"]
    result: dict[str, float] | None = None
    error: str | None = None
    traceback: str | None = None
    diverged_epoch: int | None = None
    diverged_step: int | None = None
    params: int | None = None
    flops: int | None = None
    peak_memory: int | None = None
    environment: dict[str, Any] | None = None
    resumed_from: int | None = None
    code: dict[str, Any] | None = None
    """The code the trial ran with (`ablate.provenance.fingerprint.record`), set by the launcher."""
    checkpoint: dict[str, Any] | None = None

    @classmethod
    def of(cls, key: str, result: TrialResult) -> Finished:
        """The record of a trial that returned (done or diverged)."""
        at = result.diverged_at
        return cls(key, result.outcome, result=result.metrics if result.outcome == "done" else None,
                   diverged_epoch=at.epoch if at else None, diverged_step=at.step if at else None,
                   params=result.params, flops=result.flops, peak_memory=result.peak_memory,
                   environment=result.environment, resumed_from=result.resumed_from,
                   checkpoint=result.checkpoint)  # fmt: skip

    def fields(self) -> dict[str, Any]:
        """Everything but key and state, the unset facts left out (the store keeps what it had)."""
        out = asdict(self)
        del out["key"], out["state"]
        return {k: v for k, v in out.items() if v is not None}
