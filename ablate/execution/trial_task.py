"""What runs on a Ray worker for one trial: import the sweep's plugins, run the trial, stream its messages.

The launcher submits `trial_stream` once per trial (a streaming generator: `ablate.execution.streams`), or, for a
multi-worker trial, `trial_stream` for rank 0 and `trial_task` for each other rank, which reports nothing
(`ablate.execution.gangs`); everything the task needs travels in one `TaskArgs`.
"""

from __future__ import annotations

import os
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from ablate.config import TrialConfig
from ablate.plugins import Plugins
from ablate.training import devices
from ablate.training.checkpoint_storage import Storage
from ablate.training.checkpoints import Checkpointer, Resume
from ablate.training.messages import RENDEZVOUS, EpochEnd, Message, Reporter, Runner, Started, TrialResult


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
    runner: Runner
    plugins: Plugins
    resume: Resume | None = None
    """What the trial's checkpoint must match to be resumed from (`Checkpointer.admit`); None: not checked."""
    submission: int = 0
    """The launch's number for this submission of the trial, sent back in its `Started`
    (`ablate.execution.submissions`)."""


@dataclass(frozen=True)
class Rank:
    """A worker's place in a multi-worker trial and where the workers meet."""

    rank: int
    world: int
    rendezvous: str

    def environment(self) -> dict[str, str]:
        """What `ablate.training.parallel.join` reads (torchrun's names, and the rendezvous file)."""
        return {"RANK": str(self.rank), "WORLD_SIZE": str(self.world), RENDEZVOUS: self.rendezvous}


Send = Callable[[Message], None]
"""Hands a message to the launcher, returning once it took it (`trial_stream`)."""


def trial_stream(args: TaskArgs, place: Rank | None = None) -> Iterator[Message | TrialResult]:
    """Body of one trial's Ray task, a streaming generator: its `Started`, an `EpochEnd` per epoch as the runner
    reports it, then its `TrialResult` (or what the trial raised, raised here).

    The runner calls `report` from inside its loop, so it runs on a thread of its own and hands each message over
    to this generator, which yields it; the yield returns once the launcher took the item
    (`ablate.execution.streams.BACKPRESSURE`), and only then does the runner go on. The trial saved an epoch's
    checkpoint before it reports the epoch, so what the launcher records never runs ahead of the checkpoint, and a
    worker that dies loses no message it sent.
    """
    items: queue.SimpleQueue[tuple[Message | TrialResult | BaseException, threading.Event | None]]
    items = queue.SimpleQueue()

    def send(message: Message) -> None:
        taken = threading.Event()
        items.put((message, taken))
        taken.wait()

    def body() -> None:
        try:
            items.put((trial_task(args, place, send), None))
        except BaseException as e:  # raised again by the generator, as the task's error
            items.put((e, None))

    threading.Thread(target=body, name=f"ablate-trial-{args.key[:8]}", daemon=True).start()
    while True:
        item, taken = items.get()
        if isinstance(item, BaseException):
            raise item
        yield item
        if taken is None:
            return
        taken.set()


def trial_task(args: TaskArgs, place: Rank | None = None, send: Send | None = None) -> TrialResult:
    """Import the sweep's plugins and run the trial, handing its messages to `send` (None: it reports nothing, as
    the ranks of a multi-worker trial other than 0 do).

    The trial trains where the GPU ids Ray gave the task say (`devices.holding`, before a plugin's import could start
    CUDA): the share the launcher submitted, not the config's alone; its `Started` names that device.
    """
    context = ray.get_runtime_context()
    with devices.holding(context.get_accelerator_ids().get("GPU", [])) as placement:
        return _run(args, place, send, devices.describe(placement), context.get_node_id())


def _run(args: TaskArgs, place: Rank | None, send: Send | None, device: str, node: str) -> TrialResult:
    args.plugins.load()
    cfg = TrialConfig.model_validate(args.config)
    if send is not None:
        send(Started(args.key, socket.gethostname(), node, device, args.submission))

    storage = Storage(args.storage)
    checkpointer = Checkpointer(storage.folder(args.key), resume=args.resume)

    def report(epoch: int, metrics: dict[str, float]) -> None:
        if send is not None:  # the trial saved this epoch's checkpoint before it reports the epoch
            send(EpochEnd(args.key, epoch, metrics, time.time(), checkpointer.saved()))

    env = {} if place is None else place.environment()
    os.environ.update(env)
    try:
        with checkpointer.attempt(storage, reports=send is not None) as problems:
            result = args.runner(cfg, report, checkpointer.folder)
            result.checkpoint = checkpointer.saved()  # and in the bucket as the `with` ends, whatever the outcome
        result.warnings.extend(problems)
        return result
    finally:
        for name in env:
            os.environ.pop(name, None)
