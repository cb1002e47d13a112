"""What an architecture costs to train, measured side by side: one process builds every distinct architecture
on CPU and times their training steps in turn, so the machine's load and the process's warm-up hit them alike
and their ratio is the architectures' (`ablate report --time`).

A trial's own samples/s (`reporting.frames.throughput`) is measured where and when it ran: by a worker that may
be warming up, on a machine others load. Here each architecture takes one untimed warm-up step, then `ROUNDS`
rounds time one step of each (forward, a sum loss, backward) in a fixed order, at the batch the sweep's trials
train at (`batch_of`: a worker's micro-batch; at another batch the ratio is another, as per-call overheads weigh
more in a small batch); an architecture's figure is the median of its rounds, relative to the fastest. Torch runs
on one CPU thread while timing: with several, an OpenMP barrier waiting on a descheduled thread adds a time slice
to every op and punishes mixers with many small ops (bench/attention.py). torch is imported only when timing runs.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ablate.config import TrialConfig
from ablate.nn.costs import data_dims
from ablate.nn.widths import model_key

ROUNDS = 15
"""Timed rounds. The shipped cpu sweep's four architectures at the trials' batch (32), under a load of 12-16 on
two cores: 5 rounds changed their order in 4 of 8 runs, 15 in none of 6 (`bench/steptime.py`). What timing costs
grows with them, the model and the batch: each architecture takes ROUNDS + 1 training steps on one CPU thread."""
THREADS = 1


@dataclass(frozen=True)
class StepTimes:
    """Training steps of each architecture, timed in turn in one process."""

    variants: Mapping[str, str]
    """Each variant's architecture (`ablate.nn.widths.model_key`): variants that differ in a recipe share one."""
    order: tuple[str, ...]
    """The architectures in the order their timed steps ran: the protocol, round after round."""
    seconds: Mapping[str, tuple[float, ...]]
    """Each architecture's timed steps, one per round."""
    batch: int
    """Examples per timed step."""
    threads: int = THREADS

    def median(self) -> dict[str, float]:
        """Seconds per step of each architecture: the median of its rounds."""
        return {arch: statistics.median(s) for arch, s in self.seconds.items()}

    def relative(self) -> dict[str, float]:
        """Each variant's step time over the fastest architecture's (1.0 = the fastest)."""
        median = self.median()
        fastest = min(median.values())
        return {variant: median[arch] / fastest for variant, arch in self.variants.items()}


def architectures(configs: Mapping[str, TrialConfig]) -> dict[str, str]:
    """Each variant's architecture key (model, mechanism, data widths)."""
    return {v: model_key(cfg, *reversed(data_dims(cfg))) for v, cfg in configs.items()}


def batch_of(configs: Mapping[str, TrialConfig]) -> int:
    """The examples one training step of the sweep's trials takes: a worker's micro-batch (`train.device_batch`,
    from `TrialConfig.batch_split`); where variants differ, the most common (the smallest of equally common)."""
    counts = Counter(cfg.batch_split().device_batch for cfg in configs.values())
    return min(counts, key=lambda b: (-counts[b], b))


def side_by_side(configs: Mapping[str, TrialConfig], rounds: int = ROUNDS, batch: int | None = None) -> StepTimes:
    """Time the training step of every distinct architecture among `configs` (variant -> config) in turn, in this
    process on CPU, at `batch` examples (default: the trials' own, `batch_of`) (`StepTimes`)."""
    import torch

    from ablate.probe.check import trainable

    batch = batch_of(configs) if batch is None else batch
    variants = architectures(configs)
    first: dict[str, TrialConfig] = {}
    for variant, arch in variants.items():
        first.setdefault(arch, configs[variant])
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    try:
        built = {arch: trainable(cfg, batch) for arch, cfg in first.items()}
        order = tuple(arch for _ in range(rounds + 1) for arch in built)
        seconds: dict[str, list[float]] = {arch: [] for arch in built}
        for i, arch in enumerate(order):
            model, inputs = built[arch]
            t0 = time.perf_counter()
            model(*inputs).float().sum().backward()
            elapsed = time.perf_counter() - t0
            model.zero_grad(set_to_none=True)
            if i >= len(built):  # the first round warms each architecture up: not timed
                seconds[arch].append(elapsed)
    finally:
        torch.set_num_threads(threads)
    return StepTimes(variants, order[len(built) :], {a: tuple(s) for a, s in seconds.items()}, batch, THREADS)
