"""What runs on a Ray worker for one trial: import the sweep's plugins, run the trial, stream its messages.

The launcher submits `trial_task` once per trial (or once per rank of a multi-worker trial, see
`ablate.execution.gangs`); everything the task needs travels in one `TaskArgs`.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ray

from ablate.config import TrialConfig
from ablate.plugins import Plugins
from ablate.training import devices
from ablate.training.checkpoint_storage import Storage
from ablate.training.checkpoints import Checkpointer, Resume
from ablate.training.messages import RENDEZVOUS, EpochEnd, Reporter, Runner, Started, TrialResult


def run_trial(
    config: TrialConfig, report: Reporter | None = None, checkpoint_dir: str | Path | None = None
) -> TrialResult:
    """`ablate.training.loop.run_trial`, the default runner, imported where the trial runs: the launcher names this one
    without importing the training loop (torch, timm) itself. A trial that fails where its data does not fit its
    model fails with the DataError `ablate check` gives (`misfit`), not with the model's error alone."""
    from ablate.data import DataError
    from ablate.training.loop import run_trial as run

    try:
        return run(config, report, checkpoint_dir)
    except DataError:
        raise
    except Exception as e:
        if (unfit := misfit(config)) is None:
            raise
        raise unfit from e


def misfit(cfg: TrialConfig) -> Exception | None:
    """The DataError naming the trial's dataset, the shapes of a batch and what the model takes, where a step of the
    model on its own input passes and a batch of the data does not (images of another size than `model.img_size`,
    channels last, ...); else None. The pre-flight check says it before a launch; a launch with --no-check, or of a
    dataset only the cluster has, meets it in the trial, where the model's error named neither the dataset nor the
    shapes. Run only once the trial failed: a training step and a batch of each split."""
    from ablate.data import DataError
    from ablate.probe.check import batches, check_config

    if check_config(cfg) is not None:
        return None  # the model fails its own input: its error is the trial's
    try:
        batches(cfg)
    except DataError as e:
        return e
    return None


@dataclass(frozen=True)
class TaskArgs:
    """One trial as a Ray task receives it."""

    config: dict[str, Any]
    """The trial's config as JSON data (validated again on the worker, after its plugins are imported)."""
    key: str
    storage: str
    """Checkpoint root (a path or an fsspec URL, `ablate.training.checkpoint_storage`): the trial's folder is
    `<storage>/<key>`."""
    inbox: Any
    """The `ablate.execution.inbox.Inbox` actor (None for ranks other than 0: only rank 0 reports)."""
    runner: Runner
    plugins: Plugins
    resume: Resume | None = None
    """What the trial's checkpoint must match to be resumed from (`Checkpointer.admit`); None: not checked."""
    submission: int = 0
    """The launch's number for this submission of the trial, sent back in its `Started`
    (`ablate.execution.submissions`)."""

    def follower(self) -> TaskArgs:
        return replace(self, inbox=None)


@dataclass(frozen=True)
class Rank:
    """A worker's place in a multi-worker trial and where the workers meet."""

    rank: int
    world: int
    rendezvous: str

    def environment(self) -> dict[str, str]:
        """What `ablate.training.parallel.join` reads (torchrun's names, and the rendezvous file)."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world), RENDEZVOUS: self.rendezvous}


def trial_task(args: TaskArgs, place: Rank | None = None) -> TrialResult:
    """Body of one Ray task: import the sweep's plugins, run the trial, streaming its messages to the inbox.

    A trial's calls to the inbox run in the order they were made; waiting for the last of them (its `Started`
    when it sent no other) means that when the task's result is ready, every message it sent is in the inbox, so the
    launcher records them before the outcome. The trial does not wait for its `Started` to arrive before it trains:
    the launch's inbox actor may still be starting (`ablate.execution.submissions` says how attempts are counted).

    The trial trains where the GPU ids Ray gave the task say (`devices.holding`, before a plugin's import could start
    CUDA): the share the launcher submitted, not the config's alone; its `Started` names that device.
    """
    context = ray.get_runtime_context()
    with devices.holding(context.get_accelerator_ids().get("GPU", [])) as placement:
        return _run(args, place, devices.describe(placement), context.get_node_id())


def _run(args: TaskArgs, place: Rank | None, device: str, node: str) -> TrialResult:
    args.plugins.load()
    cfg = TrialConfig.model_validate(args.config)
    inbox, last = args.inbox, list[Any]()
    if inbox is not None:
        last[:] = [inbox.put.remote(Started(args.key, socket.gethostname(), node, device, args.submission))]

    storage = Storage(args.storage)
    checkpointer = Checkpointer(storage.folder(args.key), resume=args.resume)

    def report(epoch: int, metrics: dict[str, float]) -> None:
        if inbox is not None:  # the trial saved this epoch's checkpoint before it reports the epoch
            last[:] = [inbox.put.remote(EpochEnd(args.key, epoch, metrics, time.time(), checkpointer.saved()))]

    env = {} if place is None else place.environment()
    os.environ.update(env)
    try:
        with checkpointer.attempt(storage, reports=inbox is not None) as problems:
            result = args.runner(cfg, report, checkpointer.folder)
            result.checkpoint = checkpointer.saved()  # and in the bucket as the `with` ends, whatever the outcome
        result.warnings.extend(problems)
        return result
    finally:
        for name in env:
            os.environ.pop(name, None)
        ray.get(last)
