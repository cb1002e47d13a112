"""Multi-worker trials on Ray: one task per rank, started together, stopped together.

A trial with `resources.workers` N > 1 runs as N Ray tasks in one placement group (strategy PACK: as few
nodes as the resources allow). A placement group starts all of its bundles or none, so two half-started
trials never hold each other's workers. The ranks meet through a torch.distributed FileStore in the
trial's checkpoint folder (which every node sees, as it must for checkpoints), a fresh file per attempt.
Rank 0 is the trial as the launcher sees it: it streams messages and returns the result. When any rank
fails the launcher stops the others and starts the whole gang again, which resumes from rank 0's last
checkpoint; tasks are never retried one by one (a lone restarted rank would wait for peers that left).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ablate.execution.trial_task import Rank, TaskArgs


@dataclass
class Gang:
    """The tasks of one attempt of a multi-worker trial."""

    group: PlacementGroup
    leader: Any
    """Rank 0's task: the trial's result."""
    followers: list[Any]

    def stop(self) -> None:
        """Cancel the ranks still running and give the placement group's resources back."""
        for ref in self.followers:
            ray.cancel(ref, force=True)
        remove_placement_group(self.group)


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
