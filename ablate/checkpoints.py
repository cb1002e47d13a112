"""A trial's checkpoint: everything needed to continue training exactly where it stopped.

One file per trial (`<storage>/<key>/checkpoint.pt`), rewritten after every epoch: written to a temporary
file and renamed, so a crash mid-write leaves the previous checkpoint intact. It loads with
`weights_only=True` (tensors and plain values only: no pickled code runs on resume). An unreadable file
is reported and ignored: the trial restarts from scratch rather than failing the sweep.
"""

from __future__ import annotations

import os
import random
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

FILE = "checkpoint.pt"


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


def _rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain values, so the checkpoint loads with weights_only=True."""
    legacy = cast(tuple[str, np.ndarray[Any, Any], int, int, float], np.random.get_state(legacy=True))
    kind, keys, pos, has_gauss, gauss = legacy
    state = {
        "torch": torch.get_rng_state(),
        "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any, progress: Progress) -> None:
    """Write the checkpoint of `folder` atomically: a temporary file of this attempt's own, then a rename, so
    no reader (and no other attempt) ever sees a partial file."""
    folder.mkdir(parents=True, exist_ok=True)
    path, tmp = folder / FILE, folder / f"{FILE}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"  # one per attempt
    state = {
        "epoch": progress.epoch, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict() if scheduler is not None else {}, "rng": _rng_state(),
        "winners": progress.winners, "history": progress.history, "step": progress.step,
        "partial": list(progress.partial),
    }  # fmt: skip
    torch.save(state, tmp)
    tmp.replace(path)


def read(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(state, None); (None, None) when there is no checkpoint; (None, why) when it cannot be read."""
    path = folder / FILE
    if not path.exists():
        return None, None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError("not an ablate checkpoint")
        return state, None
    except Exception as e:  # any unreadable file: restart from scratch rather than fail the sweep
        return None, f"corrupt checkpoint {path} ignored ({type(e).__name__}: {e}); restarting from scratch"


def restore(folder: Path, model: nn.Module, optimizer: Any, scheduler: Any) -> Progress:
    """Load the checkpoint of `folder` into model, optimizer, scheduler and the RNGs; a fresh Progress when
    there is none (with `problem` set when one could not be read)."""
    state, problem = read(folder)
    if state is None:
        return Progress(problem=problem)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(state["scheduler"])
    _set_rng_state(state["rng"])
    loss, seen = state.get("partial", (0.0, 0))
    return Progress(epoch=state["epoch"], step=state.get("step", 0), partial=(float(loss), int(seen)),
                    history=state.get("history", []), winners=state.get("winners"))  # fmt: skip
