"""Multi-worker trials on Ray: one task per rank, started together, stopped together.

A trial with `resources.workers` N > 1 runs as N Ray tasks in one placement group (strategy PACK: as few
nodes as the resources allow). A placement group starts all of its bundles or none, so two half-started
trials never hold each other's workers. The ranks meet through a torch.distributed FileStore in the
trial's checkpoint folder (which every node sees, as it must for checkpoints), a fresh file per attempt.
Rank 0 is the trial as the launcher sees it: its task streams the messages and the result
(`ablate.execution.streams`); the others report nothing.

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

from ablate.execution.streams import Stream
from ablate.execution.trial_task import Rank, TaskArgs
from ablate.training.messages import Message, PeerLost

ECHO_WAIT = 20.0
"""Seconds a gang whose only failed ranks report a lost peer (`PeerLost`, the echo of another rank's end) waits
for the rank that ended to report why: under gloo a rank that raised closes its connections as it leaves, so its
peers may return before it does. A peer whose node died may never report: the echo then stands, and the trial
is lost."""


@dataclass
class Gang:
    """The tasks of one attempt of a multi-worker trial."""

    group: PlacementGroup
    leader: Stream
    """Rank 0's task: the trial's messages and result."""
    followers: list[Any]
    running: list[Any] = field(default_factory=list)
    """The followers whose tasks have not returned."""

    def __post_init__(self) -> None:
        self.running = list(self.followers)

    def returned(self, ref: Any) -> bool:
        """A follower's task returned: True if it failed, which ends the gang now (rank 0 may wait on it forever)."""
        self.running.remove(ref)
        return _error(ref) is not None

    def end(self, taken: list[Message]) -> Any:
        """Stop every rank and return the outcome that is the trial's: rank 0's once it returned a result, else the
        first rank's (in rank order) that raised or died for a reason of its own, else a rank's that lost its peer
        (`ECHO_WAIT`). What rank 0 sent meanwhile goes onto `taken`; a rank stopped takes its unsent messages
        with it."""
        outcomes = self.outcomes(taken)
        if _deciding(outcomes) is None:
            outcomes = self._wait_for_cause(taken)
        self.stop()
        return _deciding(outcomes, echo=True)

    def outcomes(self, taken: list[Message]) -> list[Any]:
        """Each rank's outcome in rank order: the reference to its result or error once it returned, else None."""
        self.leader.pull(taken)
        done = set(ray.wait(self.followers, num_returns=len(self.followers), timeout=0)[0])
        return [self.leader.outcome, *(ref if ref in done else None for ref in self.followers)]

    def _wait_for_cause(self, taken: list[Message]) -> list[Any]:
        """The ranks' outcomes once one failed for a reason of its own, every rank returned, or `ECHO_WAIT` passed."""
        end = time.monotonic() + ECHO_WAIT
        while True:
            outcomes = self.outcomes(taken)
            left = max(0.0, end - time.monotonic())
            if None not in outcomes or not left or _deciding(outcomes) is not None:
                return outcomes
            waiting = [self.leader.generator] if outcomes[0] is None else []
            waiting += [ref for ref, outcome in zip(self.followers, outcomes[1:]) if outcome is None]
            ray.wait(waiting, num_returns=1, timeout=left)

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


def _deciding(outcomes: list[Any], echo: bool = False) -> Any:
    """Of the ranks' `outcomes` (None: not returned): rank 0's result, else the first failure that is not an echo
    (with `echo`, an echo too), else None."""
    errors = [None if ref is None else _error(ref) for ref in outcomes]
    if outcomes[0] is not None and errors[0] is None:
        return outcomes[0]
    failed = [ref for ref, e in zip(outcomes, errors) if e is not None]
    causes = [ref for ref, e in zip(outcomes, errors) if e is not None and not _echo(e)]
    return next(iter(causes or (failed if echo else [])), None)


def watched(gangs: dict[str, Gang], pending: dict[Stream, str]) -> dict[Any, Stream]:
    """The running followers of the gangs among `pending` (rank 0's stream -> trial key), each with its rank 0's
    stream."""
    return {ref: leader for leader, key in pending.items() if key in gangs for ref in gangs[key].running}


def start(leader: Any, follower: Any, options: dict[str, Any], workers: int, args: TaskArgs) -> Gang:
    """Submit `workers` ranks into a new placement group, each bundle the task's cpus and gpus: rank 0 as `leader`
    (`trial_stream`), the others as `follower` (`trial_task`)."""
    bundle = {"CPU": options["num_cpus"], **({"GPU": options["num_gpus"]} if options["num_gpus"] else {})}
    group = placement_group([bundle] * workers, strategy="PACK")
    folder = Path(args.storage) / args.key
    folder.mkdir(parents=True, exist_ok=True)
    rendezvous = str(folder / f"rendezvous-{uuid.uuid4().hex}")
    refs = []
    for rank in range(workers):
        placed = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)
        opts = {**options, "max_retries": 0, "scheduling_strategy": placed, "name": f"{options['name']}-{rank}"}
        refs.append((follower if rank else leader).options(**opts).remote(args, Rank(rank, workers, rendezvous)))
    return Gang(group, Stream(refs[0]), refs[1:])
