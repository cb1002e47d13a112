"""A trial's checkpoint and its one owner, the `Checkpointer`: may the trial continue from the file, fetch it, restore
from it, save it.

One file per trial (`<storage>/<key>/checkpoint.pt`, the folder named after the trial's key), rewritten after every
epoch: written to a temporary file and renamed, so a crash mid-write leaves the previous checkpoint intact. It loads
with `weights_only=True` (tensors and plain values only: no pickled code runs on resume). An unreadable file is
reported and ignored: the trial restarts from scratch rather than failing the sweep.

Each save also writes the file's SHA-256 beside it (`checkpoint.pt.sha256`); the trial's task reports it with the
epoch (`Checkpointer.saved`), and the store keeps it with the code digest the checkpoint was written with. Before a
trial resumes, `Checkpointer.admit` holds the file against that record (`Resume`): a checkpoint copied from another
trial, truncated or edited (its metrics, its weights) does not match and is refused, so the trial restarts from
scratch, as is one an attempt saved and never reported (its worker died before the launcher took the epoch's
report: the file matches the digest beside it, and the refusal says so); one written by other code follows the
sweep's staleness policy.

torch is imported where a checkpoint is written or read, so the launcher (which only builds `Resume` records)
starts without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from ablate.training.checkpoint_storage import Storage

FILE = "checkpoint.pt"
DIGEST = f"{FILE}.sha256"
"""The newest checkpoint's SHA-256, written by `Checkpointer.save` after the checkpoint itself."""


@dataclass(frozen=True)
class Resume:
    """What a trial's task holds its checkpoint against before resuming (from the store, at submission)."""

    key: str
    sha: str | None
    """SHA-256 of the trial's last reported checkpoint (None: no record, e.g. its message was lost with a
    node: then only a file that names this trial is resumed from)."""
    code: str | None
    """The code digest that checkpoint was written with."""
    current: str | None
    """The code digest of this attempt."""
    policy: str = "warn"
    """The trial's staleness policy: a checkpoint of other code restarts (`rerun`) or resumes (warn, reuse)."""

    @classmethod
    def of(cls, key: str, record: dict[str, Any] | None, current: str | None, policy: str) -> Resume:
        """From the store's record of the trial's last checkpoint (what `Checkpointer.saved` reported; None: none)."""
        record = record or {}
        return cls(key, record.get("sha"), record.get("code"), current, policy)


@dataclass
class Progress:
    """Where training stands after an epoch, beyond the weights: what a resumed trial continues from."""

    epoch: int = 0
    """Epochs completed (0: a fresh start)."""
    step: int = 0
    """Optimizer steps done in the next epoch when a stop request ended the trial mid-epoch (else 0)."""
    partial: tuple[float, int] = (0.0, 0)
    """(summed training loss, examples) of those steps, so the epoch's train.loss covers all of it."""
    history: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    """(epoch, metrics) of every completed epoch, replayed to the recorder on resume (writes are idempotent)."""
    winners: dict[str, Tensor] | None = None
    """Attention diagnostics' previous argmax keys (for winner transfer across epochs)."""
    problem: str | None = None
    """Why an existing checkpoint was ignored, if it was."""


def _rng_state(device: torch.device | None) -> dict[str, Any]:
    """RNG states as tensors and plain values, so the checkpoint loads with weights_only=True. On CUDA, the
    generator of the trial's own device only: a node may show the trial more devices than it trains on (every one
    of the node's, outside Ray), and a list of all of them would not restore on a node with fewer."""
    import torch

    legacy = cast(tuple[str, np.ndarray[Any, Any], int, int, float], np.random.get_state(legacy=True))
    kind, keys, pos, has_gauss, gauss = legacy
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": random.getstate(),
    }
    if device is not None and device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device | None) -> None:
    """Restore `_rng_state`'s states; the CUDA generator's onto the device the trial trains on now (none: a
    checkpoint of a GPU trial resumed on the CPU). A checkpoint written before ablate kept one device's state holds
    a list, every visible device's: its first is the one that trial trained on (ablate trained on `cuda`, its
    process's device 0)."""
    import torch

    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if isinstance(cuda, list):
        cuda = cuda[0] if cuda else None
    if cuda is not None and device is not None and device.type == "cuda":
        torch.cuda.set_rng_state(cuda, device)


class Checkpointer:
    """One trial's checkpoint in its folder (`<storage>/<key>`): the only code that decides whether the trial may
    continue from the file there (`admit`), fetches it from the checkpoint storage (`attempt`), restores from it and
    saves it. The trial's task opens an attempt with the store's record (`resume`); the training loop restores and
    saves (`device`: where the trial trains, whose CUDA generator the checkpoint keeps; None: the CPU)."""

    def __init__(self, folder: Path, device: torch.device | None = None, resume: Resume | None = None) -> None:
        self.folder, self.device, self.resume = folder, device, resume
        self.path = folder / FILE

    @property
    def key(self) -> str:
        """The trial's key: its folder's name."""
        return self.folder.name

    @contextlib.contextmanager
    def attempt(self, storage: Storage, reports: bool) -> Iterator[list[str]]:
        """One attempt of the trial: fetch the published checkpoint from `storage` (and keep it published while the
        trial runs, the last one as the `with` ends, whatever the outcome), `admit` the file (the digest an earlier
        attempt saved beside it tells a lost report from an edit), then forget that digest when this one `reports`
        its saves (rank 0: only this attempt's are reported).
        Yields the problems to tell the user: what the storage and the admission said, complete once the `with`
        ends. Every rank of a trial reaches the same verdict."""
        problems: list[str] = []
        with storage.sync(self.key) as sync:
            refused = self.admit()
            if reports:
                (self.folder / DIGEST).unlink(missing_ok=True)
            yield problems
        problems.extend(sync.problems + ([refused] if refused else []))

    def admit(self) -> str | None:
        """Hold the checkpoint against the store's record (`resume`; None: not checked) before the trial resumes
        from it; a refused one is set aside (`checkpoint.pt.refused`) and the trial starts from scratch. Returns
        what to tell the user, if anything."""
        resume = self.resume
        if resume is None or not self.path.exists():
            return None
        why = None
        if resume.sha is None:  # no record (a lost message, an older store): the file must at least be this trial's
            if self._named_key() not in (resume.key, None):
                why = f"checkpoint {self.path} belongs to another trial: refused, restarting from scratch"
        elif (sha := file_sha(self.path)) != resume.sha:
            if sha == self._digest() and self._named_key() == resume.key:  # intact, this trial's, never reported
                why = (f"checkpoint {self.path} was saved after the store's last record of trial {resume.key[:10]} "
                       "(the attempt that saved it stopped before its report reached the launcher): refused, "
                       "restarting from scratch")  # fmt: skip
            else:
                why = (f"checkpoint {self.path} does not match the store's record of trial {resume.key[:10]} "
                       "(copied from another trial, truncated or edited, or saved on another node by an attempt "
                       "whose report was lost): refused, restarting from scratch")  # fmt: skip
        elif resume.code not in (resume.current, None) and resume.policy == "rerun":
            why = f"checkpoint {self.path} was written by other code (stale: rerun): restarting from scratch"
        if why is None:
            if resume.code not in (resume.current, None) and resume.policy == "warn":
                return f"resuming from a checkpoint written by other code than now ({self.path})"
            return None
        with contextlib.suppress(FileNotFoundError):  # another rank of the trial set it aside first
            self.path.replace(self.folder / f"{FILE}.refused")
        return why

    def _named_key(self) -> str | None:
        """The trial key the checkpoint names (None when it names none or cannot be read: `restore` reports that)."""
        import torch

        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True, mmap=True)
        except Exception:
            return None
        return state.get("key") if isinstance(state, dict) else None

    def saved(self) -> dict[str, Any] | None:
        """The record of the newest checkpoint this attempt saved, for the store: its SHA-256 (as `save` wrote it)
        and the code digest it was written with (what `Resume.of` reads back); None before the first save."""
        sha = self._digest()
        return {"sha": sha, "code": self.resume.current if self.resume else None} if sha else None

    def _digest(self) -> str | None:
        """The SHA-256 `save` wrote beside the newest checkpoint (None: none there)."""
        try:
            return (self.folder / DIGEST).read_text().strip() or None
        except FileNotFoundError:
            return None

    def save(self, model: nn.Module, optimizer: Any, scheduler: Any, progress: Progress) -> None:
        """Write the checkpoint atomically: a temporary file of this attempt's own, then a rename, so no reader (and
        no other attempt) ever sees a partial file; then its SHA-256 beside it, the same way."""
        import torch

        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.folder / f"{FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"  # one per attempt
        state = {
            "key": self.key, "epoch": progress.epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict() if scheduler is not None else {}, "rng": _rng_state(self.device),
            "winners": progress.winners, "history": progress.history, "step": progress.step,
            "partial": list(progress.partial),
        }  # fmt: skip
        torch.save(state, tmp)
        sha = file_sha(tmp)
        tmp.replace(self.path)
        side = self.folder / f"{DIGEST}.{tmp.stem.rsplit('.', 1)[-1]}.tmp"
        side.write_text(sha)
        side.replace(self.folder / DIGEST)

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        """(state, None); (None, None) when there is no checkpoint; (None, why) when it cannot be read."""
        import torch

        if not self.path.exists():
            return None, None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
            if not isinstance(state, dict) or "epoch" not in state:
                raise ValueError("not an ablate checkpoint")
            return state, None
        except Exception as e:  # any unreadable file: restart from scratch rather than fail the sweep
            return None, f"corrupt checkpoint {self.path} ignored ({type(e).__name__}: {e}); restarting from scratch"

    def restore(self, model: nn.Module, optimizer: Any, scheduler: Any) -> Progress:
        """Load the checkpoint into model, optimizer, scheduler and the RNGs (the CUDA generator's state onto
        `device`); a fresh Progress when there is none (with `problem` set when one could not be read)."""
        state, problem = self.read()
        if state is None:
            return Progress(problem=problem)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        _set_rng_state(state["rng"], self.device)
        loss, seen = state.get("partial", (0.0, 0))
        return Progress(epoch=state["epoch"], step=state.get("step", 0), partial=(float(loss), int(seen)),
                        history=state.get("history", []), winners=state.get("winners"))  # fmt: skip


def restore(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any, device: torch.device | None) -> Progress:
    """The training loop's restore (`Checkpointer.restore` of `folder`): the loop's calls keep the form its code
    digest was pinned with (tests/golden_fingerprints.json), since another call there would make every stored
    result stale."""
    return Checkpointer(folder, device).restore(model, optimizer, scheduler)


def save(
    folder: Path, model: nn.Module, optimizer: Any, scheduler: Any, progress: Progress, device: torch.device | None
) -> None:
    """The training loop's save (`Checkpointer.save` into `folder`), in the form `restore` keeps."""
    Checkpointer(folder, device).save(model, optimizer, scheduler, progress)


def file_sha(path: Path) -> str:
    """A file's SHA-256, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
