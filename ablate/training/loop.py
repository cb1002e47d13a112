"""One trial: build, train, evaluate, checkpoint, resume. A plain function, usable without Ray.

`run_trial(config, report, checkpoint_dir)` trains `config` for its epochs, calls `report(epoch, metrics)`
after every epoch, checkpoints after every epoch and resumes from the checkpoint it finds (both asked of the
trial's `ablate.training.checkpoints.Checkpointer`, through `checkpoints.restore` and `checkpoints.save`).
A NaN/inf loss ends the trial as `diverged` (epoch and step recorded); any other error propagates with
its traceback for the launcher to record. The test split is evaluated once, at the end, on the final
model (`train.select: final`), or every epoch with the result taken from the epoch of the best validation
score (`best`): it is never used for selection, and its per-epoch scores stay in the checkpoint (for that
choice after a resume), never reported, so no per-epoch test curve reaches the store or MLflow.
"""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor, nn

from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.nn.accounting import count_flops, count_params
from ablate.nn.diagnostics import argmax_keys, recording, summarize, winner_transfer
from ablate.nn.factory import create_model
from ablate.provenance.environment import environment
from ablate.registry import TASKS
from ablate.training import checkpoints, devices, parallel
from ablate.training.messages import Divergence, Reporter, StopRequest, TrialResult
from ablate.training.parallel import Group
from ablate.training.tasks import Task


class Diverged(Exception):
    def __init__(self, epoch: int, step: int) -> None:
        super().__init__(f"non-finite loss at epoch {epoch}, step {step}")
        self.epoch, self.step = epoch, step


class Preempted(Exception):
    """The launcher asked the trial to stop (SIGTERM, a spot reclaim): raised at a step boundary, with the
    steps of the epoch done so far and their summed loss, for a mid-epoch checkpoint."""

    def __init__(self, step: int, partial: tuple[float, int]) -> None:
        super().__init__(f"stopped at step {step}")
        self.step, self.partial = step, partial


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


# ------------------------------------------------------------------------------------------------- metrics
def reset_peak(device: torch.device) -> None:
    """Start the trial's peak memory from what its process holds now: a worker that ran another trial before keeps
    that trial's peak (CUDA: torch's statistics; CPU: the kernel's high-water mark, reset where Linux allows)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return
    with suppress(OSError):  # "5": reset the peak resident set size (Linux 4.0+, /proc/self/clear_refs)
        Path("/proc/self/clear_refs").write_text("5")


def peak_memory_mb(device: torch.device) -> float:
    """Peak since `reset_peak`. CUDA: allocated by torch; CPU: resident set size of this process (VmHWM; where
    /proc is missing, ru_maxrss, the peak since the process began)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    with suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------------------------------------ the loop
def autocast(cfg: TrialConfig, device: torch.device) -> Any:
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=cfg.train.amp and device.type == "cuda")


def set_tf32(enabled: bool) -> None:
    """The trial's float32 policy on CUDA (`train.tf32`), set both ways at every trial's start: torch's defaults
    differ (matmuls off, cuDNN convolutions on), and a worker process may have run another trial before."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


@torch.no_grad()
def evaluate(model: nn.Module, task: Task, ds: Any, cfg: TrialConfig) -> dict[str, float]:
    model.eval()
    outs, targets = [], []
    for batch in task.loader(ds):
        x, y = task.inputs(batch)
        with autocast(cfg, task.device):
            outs.append(model(*x).float().cpu())
        targets.append(y.cpu())
    return task.score(torch.cat(outs), torch.cat(targets))


def run_trial(
    config: TrialConfig, report: Reporter | None = None, checkpoint_dir: str | Path | None = None
) -> TrialResult:
    """Train and evaluate one resolved config; resume from `checkpoint_dir` when it holds a checkpoint. It trains
    where `devices.for_trial` says (its Ray task's device, else its `resources.gpus`): a GPU torch cannot use raises
    `devices.DeviceError`, never a fall back to the CPU."""
    cfg = config
    device = devices.for_trial(cfg).device
    reset_peak(device)
    group = parallel.join(cfg.resources.workers, device)
    try:
        result = _train(cfg, report if group.main and report else (lambda epoch, metrics: None), checkpoint_dir,
                        device, group)  # fmt: skip
    except BaseException:
        parallel.leave(group, failed=True)
        raise
    parallel.leave(group)
    return result


def _train(
    cfg: TrialConfig, report: Reporter, checkpoint_dir: str | Path | None, device: torch.device, group: Group
) -> TrialResult:
    torch.set_num_threads(max(1, int(cfg.resources.cpus)))
    set_tf32(cfg.train.tf32)
    seed_everything(cfg.seed)  # every worker builds the same initial weights
    data = build_data(cfg)  # DataError before any training
    model = create_model(cfg, data.num_classes, data.in_chans).to(device)
    task = TASKS.get(cfg.task)(cfg, data, device)
    result = TrialResult("done", 0, params=count_params(model), flops=count_flops(model, task.example()),
                         environment=environment(device))  # fmt: skip

    from timm.optim import create_optimizer_v2

    t = cfg.train
    optimizer = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    scheduler = make_scheduler(cfg, optimizer, len(task.train_steps(0)))
    folder = Path(checkpoint_dir) if checkpoint_dir else None
    progress = checkpoints.restore(folder, model, optimizer, scheduler, device) if folder else checkpoints.Progress()
    if progress.problem:
        result.warnings.append(progress.problem)
    if not group.main:  # augmentation streams of their own (rank 0 keeps the single-process stream)
        seed_everything(cfg.seed + 1_000_003 * group.rank + 7919 * progress.epoch)
    result.resumed_from = progress.epoch
    for epoch, metrics in progress.history:  # metrics a crashed recorder may have missed; writes are idempotent
        report(epoch, reported(metrics))
    train_model = cast(nn.Module, torch.compile(model)) if t.compile else model
    total_epochs = t.epochs + t.cooldown_epochs
    stop = StopRequest(folder)
    for epoch in range(progress.epoch, total_epochs):
        try:
            metrics = train_epoch(train_model, task, optimizer, scheduler, epoch, group, progress, stop)
        except Diverged as d:
            result.outcome, result.epochs, result.diverged_at = "diverged", epoch, Divergence(d.epoch, d.step)
            return result
        except Preempted as p:
            progress.step, progress.partial = p.step, p.partial
            if group.main and folder is not None:
                checkpoints.save(folder, model, optimizer, scheduler, progress, device)
            group.barrier()
            result.outcome, result.epochs = "preempted", epoch
            return result
        progress.step, progress.partial = 0, (0.0, 0)
        if not group.main:  # rank 0 evaluates, checkpoints and reports
            continue
        if data.val is not None:
            metrics.update({f"val.{k}": v for k, v in evaluate(model, task, data.val, cfg).items()})
        if t.select == "best":  # scored now, chosen at the end by validation only
            metrics.update({f"test.{k}": v for k, v in evaluate(model, task, data.test, cfg).items()})
        if t.diagnostics:
            diag, progress.winners = diagnose(model, task, cfg, progress.winners)
            metrics.update(diag)
        metrics["peak_mem_mb"] = peak_memory_mb(device)
        progress.epoch = epoch + 1
        progress.history.append((epoch + 1, metrics))
        if folder is not None:
            checkpoints.save(folder, model, optimizer, scheduler, progress, device)
        report(epoch + 1, reported(metrics))
    if group.main and t.select == "best":
        result.metrics = best_epoch(progress.history, f"val.{task.headline}")
    elif group.main:
        result.metrics = {f"test.{k}": v for k, v in evaluate(model, task, data.test, cfg).items()}
    group.barrier()  # no worker leaves the group while rank 0 still evaluates
    result.epochs = total_epochs
    result.peak_memory = int(peak_memory_mb(device) * 2**20)  # bytes
    return result


def reported(metrics: dict[str, float]) -> dict[str, float]:
    """An epoch's metrics without its test scores (`select: best` keeps them for the final choice only): a
    reader given a per-epoch test curve could pick the best epoch on the test split."""
    return {k: v for k, v in metrics.items() if not k.startswith("test.")}


def best_epoch(history: list[tuple[int, dict[str, float]]], score: str) -> dict[str, float]:
    """The test scores of the epoch with the highest validation `score` (the earliest on ties), and that
    epoch as `test.epoch`: the model selection uses validation data only."""

    def rank(h: tuple[int, dict[str, float]]) -> tuple[float, int]:
        value = h[1].get(score, math.nan)
        return (value if math.isfinite(value) else -math.inf, -h[0])

    epoch, metrics = max(history, key=rank)
    return {**{k: v for k, v in metrics.items() if k.startswith("test.")}, "test.epoch": float(epoch)}


def make_scheduler(cfg: TrialConfig, optimizer: Any, steps_per_epoch: int) -> Any:
    """timm's scheduler for the recipe, stepped per update (None for `sched: none`)."""
    from timm.scheduler import create_scheduler_v2

    t = cfg.train
    if t.sched == "none":
        return None
    scheduler, _ = create_scheduler_v2(
        optimizer,
        sched=t.sched,
        num_epochs=t.epochs,
        warmup_epochs=t.warmup_epochs,
        warmup_lr=t.min_lr if t.warmup_lr is None else t.warmup_lr,
        min_lr=t.min_lr,
        cooldown_epochs=t.cooldown_epochs,
        updates_per_epoch=steps_per_epoch,
        step_on_epochs=False,
    )
    return scheduler


def train_epoch(
    model: nn.Module,
    task: Task,
    optimizer: Any,
    scheduler: Any,
    epoch: int,
    group: Group,
    resume: checkpoints.Progress | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> dict[str, float]:
    """One epoch of optimizer steps; each step accumulates this worker's micro-batches (loss weighted by their
    share of the global batch), sums the gradients over the workers, then clips and steps. `resume`: an epoch
    stopped after `resume.step` steps continues there (the epoch's order depends only on seed and epoch).
    `stop()` true on any worker: every worker raises Preempted after the same step."""
    cfg = task.cfg
    model.train()
    plan = task.train_steps(epoch, group.rank)
    start = resume.step if resume is not None else 0
    carried = resume.partial if resume is not None and group.main else (0.0, 0)  # group totals, counted once
    loss_sum, seen = carried
    batches = iter(task.micro_batches(plan[start:], epoch))
    t0, done_here = time.perf_counter(), 0
    for i, step in enumerate(plan[start:], start):
        optimizer.zero_grad(set_to_none=True)
        finite, step_loss = True, 0.0
        for micro in filter(None, step.micro):
            x, y = task.mix(*task.inputs(next(batches)))
            with autocast(cfg, task.device):
                loss = task.loss(model(*x), y)
            value = loss.item()
            finite = finite and math.isfinite(value)
            if not finite:
                break
            (loss * (len(micro) / step.size)).backward()
            step_loss += value * len(micro)
        diverged, stopping = group.sum([float(not finite), float(stop())], task.device)  # every worker agrees
        if diverged:
            raise Diverged(epoch + 1, i + 1)
        loss_sum, seen, done_here = loss_sum + step_loss, seen + sum(map(len, step.micro)), done_here + 1
        group.all_reduce_grads(model)
        if cfg.train.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.train.grad_clip)
        optimizer.step()
        if scheduler is not None:
            scheduler.step_update(epoch * len(plan) + i + 1)
        if stopping:  # after the step: the checkpoint holds exactly what step i + 1 of an unstopped run starts from
            raise Preempted(i + 1, group_totals(group, loss_sum, seen, task.device))
    seconds = time.perf_counter() - t0
    total_loss, total_seen = group_totals(group, loss_sum, seen, task.device)
    return {
        "train.loss": total_loss / max(total_seen, 1),
        "lr": optimizer.param_groups[0]["lr"],
        "samples_per_s": (total_seen - carried[1]) / seconds if done_here else 0.0,
        "epoch_s": seconds,
    }


def group_totals(group: Group, loss_sum: float, seen: int, device: torch.device) -> tuple[float, int]:
    """This worker's summed loss and example count, summed over the workers."""
    total_loss, total_seen = group.sum([loss_sum, float(seen)], device)
    return total_loss, int(total_seen)


@torch.no_grad()
def diagnose(
    model: nn.Module, task: Task, cfg: TrialConfig, prev: dict[str, Tensor] | None
) -> tuple[dict[str, float], dict[str, Tensor]]:
    """Attention diagnostics on a fixed probe batch of the validation (else test) split."""
    model.eval()
    probe = task.data.val if task.data.val is not None else task.data.test
    x, _ = task.inputs(next(iter(task.loader(probe, batch_size=min(64, cfg.train.eval_batch_size)))))
    with recording(model):
        model(*x)
        stats = summarize(model)
        winners = argmax_keys(model)
    out = {f"diag.{k}": v for k, v in stats.items()}
    if prev is not None and winners:
        out["diag.winner_transfer"] = winner_transfer(prev, winners)
    return out, winners
