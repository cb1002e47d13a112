"""Data parallelism inside one trial: the global batch split over workers and accumulation steps, and the
gradients summed across workers with torch.distributed (gloo on CPU, NCCL on GPUs).

Every worker builds the same epoch order (seeded by seed and epoch) and cuts the same global batches from
it; worker r takes its contiguous share of each and splits it into `accum_steps` micro-batches. Each
micro-batch's mean loss is weighted by its share of the global batch before backward, and the workers'
gradients are summed after the last micro-batch, so the step equals one process's step on the whole
global batch (up to float summation order) however the batch was split. A worker joins through the
torchrun environment (RANK, WORLD_SIZE, and MASTER_ADDR/MASTER_PORT or a rendezvous file), which the
launcher sets for each worker of a multi-worker trial (`ablate.execution.gangs`); rank 0 reports, evaluates and
checkpoints.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ablate.config import BatchSplit
from ablate.training.messages import RENDEZVOUS, PeerLost

TIMEOUT = datetime.timedelta(minutes=30)
"""How long the rendezvous and a collective wait before they raise: long enough for rank 0 to evaluate a large
validation split while the others wait. Under gloo a peer that dies or leaves closes its connections, and a
collective waiting on it fails at once (`PeerLost`); a rank at the rendezvous, or in an NCCL collective, waits
for the whole timeout. The launcher does not rely on either: it stops every rank as soon as any one fails
(`ablate.execution.gangs`)."""


@dataclass(frozen=True)
class Group:
    """This process's place among a trial's workers (rank 0 of 1 without torch.distributed)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_reduce_grads(self, model: nn.Module) -> None:
        """Sum every parameter's gradient over the workers, as one flat buffer (a missing gradient is 0)."""
        if self.world == 1:
            return
        params = [p for p in model.parameters() if p.requires_grad]
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        _collective(lambda: torch.distributed.all_reduce(flat))
        offset = 0
        for p in params:
            p.grad = flat[offset : offset + p.numel()].view_as(p).clone()
            offset += p.numel()

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Each value summed over the workers."""
        if self.world == 1:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        _collective(lambda: torch.distributed.all_reduce(t))
        return [float(v) for v in t.tolist()]

    def barrier(self) -> None:
        if self.world > 1:
            _collective(torch.distributed.barrier)


def _collective(call: Callable[[], object]) -> None:
    try:
        call()
    except (RuntimeError, torch.distributed.DistError) as e:
        raise PeerLost(f"a worker of this trial stopped answering: {e}") from e


def join(workers: int, device: torch.device) -> Group:
    """This process's group: rank 0 of 1 for one worker; otherwise joined from the torchrun environment."""
    if workers == 1:
        return Group()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != workers:
        raise ValueError(f"resources.workers is {workers} but WORLD_SIZE is {world}")
    if not torch.distributed.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        where = f"file://{os.environ[RENDEZVOUS]}" if RENDEZVOUS in os.environ else "env://"
        torch.distributed.init_process_group(backend, where, rank=rank, world_size=world, timeout=TIMEOUT)
    return Group(rank, world)


def leave(group: Group, failed: bool = False) -> None:
    """Destroy the process group, but not after a failure under NCCL: destroying a communicator waits on the peers'
    pending collectives, which would hold this rank's error back from the launcher for as long as they wait; the
    process ends with its task (a GPU task's worker is its own, `GPU_TASK_CALLS`). Gloo's group is always destroyed:
    a CPU worker process goes on to run another trial, which would otherwise join this one's group."""
    if group.world == 1 or not torch.distributed.is_initialized():
        return
    if failed and torch.distributed.get_backend() == "nccl":
        return
    torch.distributed.destroy_process_group()


@dataclass(frozen=True)
class Step:
    """One optimizer step as this worker sees it."""

    micro: list[list[int]]
    """This worker's micro-batches (example indices; the last step's may be short or empty)."""
    size: int
    """Examples in the whole global batch, over every worker."""


def steps(n: int, split: BatchSplit, rank: int, order: list[int]) -> list[Step]:
    """An epoch's optimizer steps over `order` (a permutation of range(n)) for worker `rank`."""
    per_worker = split.accum_steps * split.device_batch
    batch = split.workers * per_worker
    out = []
    for start in range(0, n, batch):
        whole = order[start : start + batch]
        mine = whole[rank * per_worker : (rank + 1) * per_worker]
        micro = [mine[i : i + split.device_batch] for i in range(0, per_worker, split.device_batch)]
        out.append(Step(micro, len(whole)))
    return out
