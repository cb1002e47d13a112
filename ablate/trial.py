"""One trial: build, train, evaluate, checkpoint, resume. A plain function, usable without Ray.

`run_trial(config, report, checkpoint_dir)` trains `config` for its epochs, calls `report(epoch, metrics)`
after every epoch, checkpoints atomically after every epoch, and resumes from the checkpoint it finds.
A NaN/inf loss ends the trial as `diverged` (epoch and step recorded); any other error propagates with
its traceback for the launcher to record. The test split is evaluated once, at the end, on the final
model: it is never used for selection.
"""

from __future__ import annotations

import math
import random
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

import numpy as np
import torch
from torch import Tensor, nn

from ablate import _tv_compat  # noqa: F401  (torchvision shim before timm)
from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.environment import environment
from ablate.nn.accounting import count_flops, count_params
from ablate.nn.diagnostics import argmax_keys, recording, summarize, winner_transfer
from ablate.nn.factory import create_model
from ablate.registry import TASKS
from ablate.tasks import Task

Report = Callable[[int, dict[str, float]], None]
"""Called after every epoch with the epoch (1-based) and its metrics."""

CHECKPOINT = "checkpoint.pt"


@dataclass
class TrialResult:
    """What a finished trial returns; `metrics` holds the final (test) metrics."""

    outcome: Literal["done", "diverged"]
    epochs: int
    metrics: dict[str, float] = field(default_factory=dict)
    diverged_at: dict[str, int] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    """params, flops, peak_memory (bytes), env, resumed_from, checkpoint_problem."""


class Diverged(Exception):
    def __init__(self, epoch: int, step: int) -> None:
        super().__init__(f"non-finite loss at epoch {epoch}, step {step}")
        self.epoch, self.step = epoch, step


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------- checkpoint
def _rng_state() -> dict[str, Any]:
    """RNG states as tensors and plain values, so the checkpoint loads with weights_only=True."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
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


def save_checkpoint(path: Path, **state: Any) -> None:
    """Write then rename: a crash mid-write leaves the previous checkpoint intact."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(state, tmp)
    tmp.replace(path)


def load_checkpoint(path: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(state, None), (None, None) when there is none, or (None, problem) when it cannot be read."""
    if not path.exists():
        return None, None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or "epoch" not in state:
            raise ValueError("not an ablate checkpoint")
        return state, None
    except Exception as e:  # any unreadable file: restart from scratch rather than fail the sweep
        return None, f"corrupt checkpoint {path} ignored ({type(e).__name__}: {e}); restarting from scratch"


# ------------------------------------------------------------------------------------------------- metrics
def peak_memory_mb(device: torch.device) -> float:
    """CUDA: peak allocated by torch; CPU: peak resident set size of this process (Linux ru_maxrss, KiB)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------------------------ the loop
def _autocast(cfg: TrialConfig, device: torch.device) -> Any:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.amp and device.type == "cuda")


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, ds: Any, cfg: TrialConfig) -> dict[str, float]:
    model.eval()
    outs, targets = [], []
    for batch in task.loader(ds, train=False):
        x, y = task.inputs(batch)
        with _autocast(cfg, task.device):
            outs.append(model(*x).float().cpu())
        targets.append(y.cpu())
    return task.score(torch.cat(outs), torch.cat(targets))


def pick_device(cfg: TrialConfig) -> torch.device:
    return torch.device("cuda") if cfg.resources.gpus > 0 and torch.cuda.is_available() else torch.device("cpu")


def run_trial(config: TrialConfig, report: Report | None = None, checkpoint_dir: str | Path | None = None) -> TrialResult:
    """Train and evaluate one resolved config; resume from `checkpoint_dir` when it holds a checkpoint."""
    cfg = config
    report = report or (lambda epoch, metrics: None)
    device = pick_device(cfg)
    torch.set_num_threads(max(1, int(cfg.resources.cpus)))
    seed_everything(cfg.seed)
    data = build_data(cfg)  # DataError before any training
    model = create_model(cfg, data.num_classes, data.in_chans).to(device)
    task = TASKS.get(cfg.task)(cfg, data, device)
    info: dict[str, Any] = {
        "params": count_params(model),
        "flops": count_flops(model, task.example()),
        "env": environment(device),
    }

    from timm.optim import create_optimizer_v2
    from timm.scheduler import create_scheduler_v2

    t = cfg.train
    optimizer = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    steps_per_epoch = len(task.loader(data.train, train=True))
    scheduler = None
    if t.sched != "none":
        scheduler, _ = create_scheduler_v2(
            optimizer, sched=t.sched, num_epochs=t.epochs, warmup_epochs=t.warmup_epochs, warmup_lr=t.min_lr,
            min_lr=t.min_lr, cooldown_epochs=t.cooldown_epochs, updates_per_epoch=steps_per_epoch,
            step_on_epochs=False,
        )
    start, ckpt_path = 0, Path(checkpoint_dir) / CHECKPOINT if checkpoint_dir else None
    prev_winners: dict[str, Tensor] | None = None
    history: list[tuple[int, dict[str, float]]] = []
    if ckpt_path is not None:
        state, problem = load_checkpoint(ckpt_path)
        if problem:
            info["checkpoint_problem"] = problem
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if scheduler is not None:
                scheduler.load_state_dict(state["scheduler"])
            _set_rng_state(state["rng"])
            start, prev_winners, history = state["epoch"], state.get("winners"), state.get("history", [])
            info["resumed_from"] = start
            for epoch, metrics in history:  # metrics a crashed recorder may have missed; writes are idempotent
                report(epoch, metrics)
    train_model = torch.compile(model) if t.compile else model
    total_epochs = t.epochs + t.cooldown_epochs
    for epoch in range(start, total_epochs):
        metrics = {}
        try:
            metrics = train_epoch(train_model, task, optimizer, scheduler, epoch, steps_per_epoch)
        except Diverged as d:
            return TrialResult("diverged", epoch, info=info, diverged_at={"epoch": d.epoch, "step": d.step})
        if data.val is not None:
            metrics.update({f"val.{k}": v for k, v in evaluate(model, task, data.val, cfg).items()})
        if t.diagnostics:
            diag, prev_winners = diagnose(model, task, cfg, prev_winners)
            metrics.update(diag)
        metrics["peak_mem_mb"] = peak_memory_mb(device)
        history.append((epoch + 1, metrics))
        if ckpt_path is not None:
            save_checkpoint(
                ckpt_path, epoch=epoch + 1, model=model.state_dict(), optimizer=optimizer.state_dict(),
                scheduler=scheduler.state_dict() if scheduler is not None else {}, scaler={}, rng=_rng_state(),
                winners=prev_winners, history=history,
            )
        report(epoch + 1, metrics)
    final = {f"test.{k}": v for k, v in evaluate(model, task, data.test, cfg).items()}
    info["peak_memory"] = int(peak_memory_mb(device) * 2**20)  # bytes
    return TrialResult("done", total_epochs, final, info=info)


def train_epoch(model: nn.Module, task: Task, optimizer: Any, scheduler: Any, epoch: int, steps: int) -> dict[str, float]:
    cfg = task.cfg
    model.train()
    loss_sum, seen, t0 = 0.0, 0, time.perf_counter()
    for i, batch in enumerate(task.loader(task.data.train, train=True, epoch=epoch)):
        x, y = task.mix(*task.inputs(batch))
        with _autocast(cfg, task.device):
            loss = task.loss(model(*x), y)
        value = loss.item()
        if not math.isfinite(value):
            raise Diverged(epoch + 1, i + 1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.train.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step_update(epoch * steps + i + 1)
        loss_sum += value * len(y)
        seen += len(y)
    seconds = time.perf_counter() - t0
    return {
        "train.loss": loss_sum / max(seen, 1),
        "lr": optimizer.param_groups[0]["lr"],
        "samples_per_s": seen / seconds,
        "epoch_s": seconds,
    }


@torch.no_grad()
def diagnose(model: nn.Module, task: Task, cfg: TrialConfig, prev: dict[str, Tensor] | None) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Attention diagnostics on a fixed probe batch of the validation (else test) split."""
    model.eval()
    probe = task.data.val if task.data.val is not None else task.data.test
    x, _ = task.inputs(next(iter(task.loader(probe, train=False, batch_size=min(64, cfg.train.eval_batch_size)))))
    with recording(model):
        model(*x)
        stats = summarize(model)
        winners = argmax_keys(model)
    out = {f"diag.{k}": v for k, v in stats.items()}
    if prev is not None:
        out["diag.winner_transfer"] = winner_transfer(prev, winners)
    return out, winners
