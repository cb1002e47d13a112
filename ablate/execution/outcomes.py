"""What a trial task that returned (`ray.get` of its result) comes to: done, failed or diverged, or run again (a retry
of an application error, an OOM requeue on a whole GPU, a lost worker or node), with the record of its end
(`settle`); `ablate.execution.fanout` settles a wave of them at once."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

import ray

from ablate.config import TrialConfig
from ablate.execution.gpu_shares import out_of_memory
from ablate.execution.progress import Display
from ablate.training.messages import Finished, PeerLost, TrialResult

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
LOST_RETRIES = 10
"""Times a trial is started again after its worker process or node was lost (each attempt resumes from the
checkpoint, and the trial is `preempted` in between): a long trial on spot instances may be reclaimed often."""


@dataclass
class Attempts:
    """Failed attempts per trial key, against the two retry budgets."""

    errors: Counter[str] = field(default_factory=Counter)
    """Application errors (the trial raised): retried `resources.retries` times."""
    lost: Counter[str] = field(default_factory=Counter)
    """Trials whose worker process or node was lost (a rank of a multi-worker trial too): LOST_RETRIES."""
    oom: Counter[str] = field(default_factory=Counter)
    """Trials that ran out of CUDA memory on a GPU share: requeued once on a whole GPU."""


@dataclass(frozen=True)
class Settled:
    """A returned task's outcome: the trial's state ("retry", "oom" or "lost" where it runs again, see `settle`) and
    the record of its end to write (none where it runs again)."""

    state: str
    record: Finished | None = None


def settle(
    ref: Any,
    key: str,
    cfg: TrialConfig,
    gpus: float,
    attempts: Attempts,
    progress: Display,
    code: dict[str, Any] | None = None,
) -> Settled:
    """A finished task's outcome: its state, "retry" for an application error with retries left, "oom" for a first
    CUDA out-of-memory error on part of a GPU (requeued on a whole one), "lost" for a worker or node that died (Ray
    does not retry tasks itself: a lost trial is recorded `preempted`, then resumed)."""
    try:
        out: TrialResult = ray.get(ref)
    except ray.exceptions.RayError as e:  # the trial raised, or its worker/node died
        if lost_worker(e) and attempts.lost[key] < LOST_RETRIES:
            attempts.lost[key] += 1
            return Settled("lost")
        # A RayTaskError's text is the worker's formatted traceback; its cause is the original exception.
        cause = getattr(e, "cause", None) if isinstance(e, ray.exceptions.RayTaskError) else None
        oom = out_of_memory(cause)
        if oom and gpus < 1 and not attempts.oom[key]:
            attempts.oom[key] += 1
            return Settled("oom")
        attempts.errors[key] += 1
        if isinstance(e, ray.exceptions.RayTaskError) and not oom and attempts.errors[key] <= cfg.resources.retries:
            return Settled("retry")
        error = f"{type(cause or e).__name__}: {cause or e}"
        if oom:
            error = f"CUDA out of memory on {gpus:g} GPU: lower train.device_batch (raise train.accum_steps). {error}"
        return Settled("failed", Finished(key, "failed", error=error, traceback=_ANSI.sub("", str(e)), code=code))
    for warning in out.warnings:
        progress.message(f"{key[:10]}: {warning}")
    progress.result(key, out.metrics)
    return Settled(out.outcome, replace(Finished.of(key, out), code=code))


def lost_worker(e: Exception) -> bool:
    """A rank's process or node died (that rank's own task, or a peer's that saw it as a failed collective)."""
    if isinstance(e, ray.exceptions.RayTaskError):
        return isinstance(getattr(e, "cause", None), PeerLost)
    return isinstance(e, (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError))
