"""GPU packing by measured memory: the share of a GPU each trial with `resources.gpus: auto` asks Ray for.

A fixed `gpus: 0.5` is a guess: too small and trials run out of memory, too large and GPUs idle. Instead,
before fan-out, one probe per distinct footprint (architecture, data widths, device batch, precision,
optimizer) runs on a whole GPU: a few real training steps at the trial's device batch on a batch of its
input shape, then the device memory the probe's process holds (CUDA context plus the caching allocator's
reserve, so fragmentation counts). A trial asks for that fraction of the probed device times
(1 + `resources.gpu_headroom`), rounded up to a hundredth; Ray then places as many trials on one GPU as
their shares fit. Shares are fractions of the probed device, so the cluster's GPUs should be one model.
A trial that still runs out of CUDA memory (`out_of_memory`) is requeued once on a whole GPU (the launcher's
`Attempts.oom`); an out-of-memory error on a whole GPU fails the trial with advice to lower its device
batch.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ablate.config import TrialConfig, identity
from ablate.planning.keys import Trial
from ablate.plugins import Plugins

PROBE_STEPS = 3
"""Optimizer steps a probe runs: the first allocates the optimizer's state, later ones reach the peak."""


@dataclass(frozen=True)
class Footprint:
    """What a probe measured on one GPU."""

    used: int
    """Bytes of device memory the probe's process held after its steps (context and allocator reserve)."""
    total: int
    """Bytes the device has."""
    device: str = "cuda"

    def share(self, headroom: float) -> float:
        """The fraction of a device to ask for: used x (1 + headroom) of total, up to a hundredth, at most 1."""
        return min(1.0, max(0.01, math.ceil(self.used * (1 + headroom) / self.total * 100 - 1e-9) / 100))


Probe = Callable[[TrialConfig], Footprint]
"""Measures one trial's footprint on the GPU its Ray task holds (default `measure`; tests fake it on CPU)."""


GPU_TASK_CALLS = 1
"""`ray.remote`'s max_calls for a task that holds any share of a GPU: a worker process of its own, ended after the task.
CUDA reads CUDA_VISIBLE_DEVICES once per process, so a reused worker would run the next task on the device Ray gave
the last one, and keep its memory. Ray sets this itself only for `num_gpus` given to `@ray.remote`, and refuses it in
`.options()`, where ablate gives each task its resources."""


OUT_OF_MEMORY = re.compile(r"CUDA error: out of memory|CUDA out of memory|\bCU[A-Z_]*_ALLOC_FAILED\b")
"""How CUDA's own out-of-memory reads in a RuntimeError that is not torch's OutOfMemoryError: the runtime's
cudaErrorMemoryAllocation (`CUDA error: out of memory`, torch's AcceleratorError), and a CUDA library that could not
allocate its workspace or handle (`CUBLAS_STATUS_ALLOC_FAILED`, `CUDNN_STATUS_ALLOC_FAILED`, cuFFT's, cuSPARSE's). Not
cuDNN's NOT_SUPPORTED or workspace statuses: they also mean a shape or setting the library cannot run, which a whole
GPU would not fix."""


def out_of_memory(error: BaseException | None) -> bool:
    """Whether a trial's error is CUDA running out of memory: torch's OutOfMemoryError (its caching allocator), or
    the runtime or a CUDA library failing to allocate (`OUT_OF_MEMORY`). By name, so the launcher need not import
    torch: the error arrives unpickled from the trial's worker."""
    if error is None:
        return False
    if any(t.__name__ == "OutOfMemoryError" for t in type(error).__mro__):
        return True
    return isinstance(error, RuntimeError) and OUT_OF_MEMORY.search(str(error)) is not None


def footprint_key(cfg: TrialConfig) -> str:
    """What decides a trial's training memory: trials equal here share one probe."""
    t = cfg.train
    parts = [identity(cfg.model), identity(cfg.attention), cfg.task, cfg.data.name, cfg.batch_split().device_batch,
             t.amp, t.opt, t.channels_last]  # fmt: skip
    return json.dumps(parts, sort_keys=True)


def measure(cfg: TrialConfig) -> Footprint:
    """The probe on a real GPU: `train_steps` on CUDA, then the memory the process holds there."""
    import torch

    device = torch.device("cuda")
    train_steps(cfg, device)
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    return Footprint(total - free, total, torch.cuda.get_device_name(device))


def train_steps(cfg: TrialConfig, device: Any, steps: int = PROBE_STEPS) -> None:
    """`steps` optimizer steps of the trial's model, optimizer and precision at its device batch, on a
    batch of its input shape (the loss is the output's mean: its memory is the real loss's)."""
    import torch
    from timm.optim import create_optimizer_v2

    from ablate.nn.accounting import example_input
    from ablate.nn.costs import data_dims
    from ablate.nn.factory import create_model
    from ablate.training.loop import autocast

    in_chans, num_classes = data_dims(cfg)
    model = create_model(cfg, num_classes, in_chans).to(device)
    t = cfg.train
    optimizer = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    inputs = example_input(cfg, in_chans, cfg.batch_split().device_batch, device)
    args = (inputs,) if isinstance(inputs, torch.Tensor) else tuple(inputs)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        with autocast(cfg, device):
            out = model(*args)
        out.float().mean().backward()
        optimizer.step()


def probe_task(probe: Probe, config: dict[str, Any], plugins: Plugins) -> Footprint:
    """Body of the Ray task (one whole GPU) that probes one footprint."""
    plugins.load()
    return probe(TrialConfig.model_validate(config))


@dataclass(frozen=True)
class Admission:
    """The GPU share of each `gpus: auto` trial, and what the launcher tells the user about it."""

    shares: dict[str, float]
    """Trial key -> fraction of a GPU per worker."""
    lines: list[str]


def admit(trials: list[Trial], probe: Probe, plugins: Plugins) -> Admission:
    """Probe every distinct footprint among `trials` (those with `gpus: auto`) in parallel, one whole GPU
    each, and turn the measurements into shares. A trial of several workers is not probed: each of its workers
    gets a whole GPU (`ablate.config.SPLIT_GPU`: shares could put two of its ranks on one device). Needs a
    connected Ray."""
    import ray

    if not ray.cluster_resources().get("GPU"):
        raise RuntimeError(
            f"resources.gpus: auto ({len(trials)} trials) measures memory on a GPU, and this Ray cluster has none"
        )
    ganged = whole_gpus([t for t in trials if t.config.resources.workers > 1])
    groups: dict[str, list[Trial]] = {}
    for t in trials:
        if t.key not in ganged.shares:
            groups.setdefault(footprint_key(t.config), []).append(t)
    task = ray.remote(max_calls=GPU_TASK_CALLS)(probe_task).options(
        num_gpus=1, num_cpus=1, max_retries=0, name="gpu-memory-probe"
    )
    refs = {fp: task.remote(probe, ts[0].config.model_dump(mode="json"), plugins) for fp, ts in groups.items()}
    shares, lines = dict(ganged.shares), list(ganged.lines)
    for fp, ts in groups.items():
        cfg = ts[0].config
        try:
            found: Footprint = ray.get(refs[fp])
        except ray.exceptions.RayTaskError as e:
            share, what = 1.0, f"probe failed ({type(e.cause).__name__}); a whole GPU each"
        else:
            share = found.share(cfg.resources.gpu_headroom)
            what = (f"{found.used / 2**30:.1f} of {found.total / 2**30:.0f} GiB on {found.device} -> "
                    f"{share:.2f} GPU each ({math.floor(1 / share)} per GPU)")  # fmt: skip
        shares.update({t.key: share for t in ts})
        lines.append(f"GPU packing: {ts[0].variant} ({len(ts)} trials, device batch {cfg.batch_split().device_batch}): "
                     f"{what}")  # fmt: skip
    return Admission(shares, lines)


def whole_gpus(trials: list[Trial]) -> Admission:
    """A whole GPU per worker for each multi-worker trial among `trials`, said once per variant."""
    variants: dict[str, list[Trial]] = {}
    for t in trials:
        variants.setdefault(t.variant, []).append(t)
    lines = [f"GPU packing: {variant} ({len(ts)} trials, {ts[0].config.resources.workers} workers each): a whole "
             "GPU per worker, not probed (ranks of one trial cannot share a device)"
             for variant, ts in variants.items()]  # fmt: skip
    return Admission({t.key: 1.0 for t in trials}, lines)
