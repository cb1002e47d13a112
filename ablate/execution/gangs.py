"""Multi-worker trials on Ray: one task per rank, started together, stopped together.

A trial with `resources.workers` N > 1 runs as N Ray tasks in one placement group (strategy PACK: as few
nodes as the resources allow). A placement group starts all of its bundles or none, so two half-started
trials never hold each other's workers. The ranks meet through a torch.distributed FileStore in the
trial's checkpoint folder (which every node sees, as it must for checkpoints), a fresh file per attempt.
Rank 0 is the trial as the launcher sees it: it streams messages and returns the result.

The launcher watches every rank's task, not rank 0's alone: a rank that raises or dies ends the gang at once
(`Gang.end`). Its peers cannot be relied on to notice: a rank waiting at the rendezvous for a peer that never
comes, or in an NCCL collective whose peer left, waits the whole `ablate.training.parallel.TIMEOUT`. The trial's
outcome is then the failing rank's own: its error (retried as an application error) or its death (lost, resumed
from rank 0's last checkpoint). The whole gang starts again; tasks are never retried one by one (a lone
restarted rank would wait for peers that left).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ablate.execution.trial_task import Rank, TaskArgs
from ablate.training.messages import PeerLost

ECHO_WAIT = 20.0
"""Seconds a gang whose only failed ranks report a lost peer (`PeerLost`, the echo of another rank's end) waits
for the rank that ended to report why: under gloo a rank that raised closes its connections as it leaves, so its
peers may return before it does. A peer whose node died may never report: the echo then stands, and the trial
is lost."""
STOP_WAIT = 30.0
"""Seconds `Gang.end` waits for the stopped ranks' tasks to end, so no message of theirs follows the outcome."""


@dataclass
class Gang:
    """The tasks of one attempt of a multi-worker trial."""

    group: PlacementGroup
    leader: Any
    """Rank 0's task: the trial's result."""
    followers: list[Any]
    running: list[Any] = field(default_factory=list)
    """The followers whose tasks have not returned."""

    def __post_init__(self) -> None:
        self.running = list(self.followers)

    def returned(self, ref: Any) -> bool:
        """A follower's task returned: True if it failed, which ends the gang now (rank 0 may wait on it forever)."""
        self.running.remove(ref)
        return _error(ref) is not None

    def end(self) -> Any:
        """Stop every rank and return the task whose outcome is the trial's: rank 0's once it returned a result,
        else the first rank (in rank order) that raised or died for a reason of its own, else a rank that lost
        its peer (`ECHO_WAIT`)."""
        ranks = [self.leader, *self.followers]
        deciding = _deciding(ranks, ray.wait(ranks, num_returns=len(ranks), timeout=0)[0])
        if deciding is None:
            deciding = _deciding(ranks, _wait_for_cause(ranks), echo=True)
        self.stop()
        ray.wait(ranks, num_returns=len(ranks), timeout=STOP_WAIT)
        return deciding

    def stop(self) -> None:
        """Give the placement group's resources back, which kills the ranks still running in it (their tasks end
        with `WorkerCrashedError`). Never `ray.cancel`: at a gang's end its ranks return together, and Ray 2.60's
        driver aborts (`task_manager.cc: Tried to complete task that was not pending`) when a force-cancel meets a
        task's reply in flight; a worker killed with its bundle takes the path of any lost worker."""
        remove_placement_group(self.group)


def _error(ref: Any) -> Exception | None:
    """What a returned task raised (None: it returned a result)."""
    try:
        ray.get(ref)
    except ray.exceptions.RayError as e:
        return e
    return None


def _echo(e: Exception | None) -> bool:
    return isinstance(e, ray.exceptions.RayTaskError) and isinstance(getattr(e, "cause", None), PeerLost)


def _deciding(ranks: list[Any], done: list[Any], echo: bool = False) -> Any:
    """Of the returned ranks `done`: rank 0 with its result, else the first failure that is not an echo (with
    `echo`, an echo too), else None."""
    errors = {ref: _error(ref) for ref in ranks if ref in done}
    if ranks[0] in errors and errors[ranks[0]] is None:
        return ranks[0]
    failed = [ref for ref, e in errors.items() if e is not None]
    causes = [ref for ref in failed if not _echo(errors[ref])]
    return next(iter(causes or (failed if echo else [])), None)


def _wait_for_cause(ranks: list[Any]) -> list[Any]:
    """The returned ranks once one failed for a reason of its own, every rank returned, or `ECHO_WAIT` passed."""
    end = time.monotonic() + ECHO_WAIT
    done: list[Any] = []
    while True:
        left = max(0.0, end - time.monotonic())
        done, rest = ray.wait(ranks, num_returns=min(len(ranks), len(done) + 1), timeout=left)
        if not rest or not left or _deciding(ranks, done) is not None:
            return done


def watched(gangs: dict[str, Gang], pending: dict[Any, str]) -> dict[Any, Any]:
    """The running followers of the gangs among `pending` (rank 0's task -> trial key), each with its rank 0's task."""
    return {ref: leader for leader, key in pending.items() if key in gangs for ref in gangs[key].running}


def start(task: Any, options: dict[str, Any], workers: int, args: TaskArgs) -> Gang:
    """Submit `workers` ranks of `task` into a new placement group, each bundle the task's cpus and gpus."""
    bundle = {"CPU": options["num_cpus"], **({"GPU": options["num_gpus"]} if options["num_gpus"] else {})}
    group = placement_group([bundle] * workers, strategy="PACK")
    folder = Path(args.storage) / args.key
    folder.mkdir(parents=True, exist_ok=True)
    rendezvous = str(folder / f"rendezvous-{uuid.uuid4().hex}")
    refs = []
    for rank in range(workers):
        placed = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)
        opts = {**options, "max_retries": 0, "scheduling_strategy": placed, "name": f"{options['name']}-{rank}"}
        rank_args = args if rank == 0 else args.follower()
        refs.append(task.options(**opts).remote(rank_args, Rank(rank, workers, rendezvous)))
    return Gang(group, refs[0], refs[1:])
