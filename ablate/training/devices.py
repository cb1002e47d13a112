"""Where a trial trains (`resolve`), and the text its record carries about it (`describe`).

A trial trains on a GPU when it holds one: in a Ray task, when Ray gave the task GPU ids (the share the launcher
submitted, `--gpus` included, whatever the config says); outside Ray (`run_trial` as a plain function), when its
`resources.gpus` asks for one. It then trains on `cuda:0`, the one device CUDA_VISIBLE_DEVICES leaves its process,
or fails with what torch says: a fall back to the CPU trained a GPU sweep there, for days, while its records said
cuda. Only the tests' fake GPUs (Ray's logical `num_gpus` on a machine without CUDA) train such a trial on the
CPU, by the explicit opt-in `ABLATE_FAKE_GPU=1`, and its record says so. A task that holds no GPU sees none: Ray
2.60 leaves CUDA_VISIBLE_DEVICES unset for it (it would see every GPU of its node), so `holding` sets it empty.

torch is imported where a GPU is resolved or the device is handed to torch: the launcher imports this module (through
the task's) without it, and a task on the CPU resolves its device without it.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from ablate.config import TrialConfig

FAKE_GPU = "ABLATE_FAKE_GPU"
"""Environment variable: `1` trains a trial that holds a GPU on the CPU (tests on Ray's logical GPUs only). Read where
the trial runs: set it before `ray.init` or `ray start`, whose workers inherit their environment."""
VISIBLE = "CUDA_VISIBLE_DEVICES"


class DeviceError(RuntimeError):
    """A trial holds a GPU and torch cannot use one: one paragraph naming the node and what torch says."""


@dataclass(frozen=True)
class Placement:
    """The device a trial trains on, by name: a task on the CPU resolves it without importing torch (1.3 s of a
    worker's first task at load 2, before a no-op trial could start), which the trial imports where it needs it."""

    name: str = "cpu"
    """`cpu` or `cuda:<index>`, as torch names a device."""
    fake: bool = False
    """The trial holds a fake GPU (`FAKE_GPU`) and trains on the CPU."""

    @property
    def device(self) -> torch.device:
        """The device, for torch."""
        import torch

        return torch.device(self.name)


def resolve(gpu: str | None) -> Placement:
    """The trial's device: the CPU for `gpu` None; else `cuda:0`, where `gpu` says why the trial holds a GPU (quoted
    in the DeviceError raised when CUDA cannot be used here)."""
    if gpu is None:
        return Placement()
    if os.environ.get(FAKE_GPU) == "1":
        return Placement(fake=True)
    if (problem := cuda_problem()) is not None:
        raise DeviceError(
            f"{gpu} on node {socket.gethostname()} ({VISIBLE}={os.environ.get(VISIBLE, '(unset)')!r}), but torch "
            f"cannot use a GPU: {problem}. The trial does not fall back to the CPU. Tests on Ray's logical GPUs set "
            f"{FAKE_GPU}=1 to train on the CPU"
        )
    return Placement("cuda:0")


def cuda_problem() -> str | None:
    """Why torch cannot train on CUDA in this process, in torch's words; None when it can."""
    import torch

    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (torch.version.cuda is None): install a CUDA build"
    try:
        torch.cuda.init()
    except Exception as e:
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot start CUDA: {e}"
    if torch.cuda.device_count() == 0:
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no device"
    return None


def describe(placement: Placement) -> str:
    """The store's `trials.device`: `cpu`, `cpu (ABLATE_FAKE_GPU)`, or `cuda:<index> <name> pci <bus id>`, the bus id
    as NVML writes it, so a reader matches a trial to NVML's samples of its GPU."""
    if placement.name == "cpu":
        return f"cpu ({FAKE_GPU})" if placement.fake else "cpu"
    import torch

    index = placement.device.index or 0
    return f"cuda:{index} {gpu_text(torch.cuda.get_device_properties(index))}"


def hardware(text: str) -> str:
    """What a record's device text names, without which one: `NVIDIA H200` for any `cuda:<i> NVIDIA H200 pci <bus>`
    (a report lists the kinds of device its trials ran on, not every GPU of the cluster); other texts as they are."""
    found = re.fullmatch(r"cuda:\d+ (.+) pci [0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0", text)
    return found[1] if found else text


def gpu_text(props: Any) -> str:
    """`<name> pci <domain>:<bus>:<device>.0` from torch's device properties, upper-case hex as NVML."""
    return f"{props.name} pci {props.pci_domain_id:08X}:{props.pci_bus_id:02X}:{props.pci_device_id:02X}.0"


_pinned: list[Placement] = []
"""The device of the Ray task running in this process (`holding`), for `for_trial`."""


@contextmanager
def holding(gpu_ids: Sequence[str]) -> Iterator[Placement]:
    """A Ray task's device while the task runs, resolved from the GPU ids Ray gave it; with none, no GPU is visible
    (`no_gpu_visible`): entered before anything in the task can start CUDA."""
    with no_gpu_visible() if not gpu_ids else nullcontext():
        _pinned.append(resolve(f"Ray gave this task GPU {','.join(gpu_ids)}" if gpu_ids else None))
        try:
            yield _pinned[-1]
        finally:
            _pinned.pop()


@contextmanager
def no_gpu_visible() -> Iterator[None]:
    """CUDA_VISIBLE_DEVICES empty, as it was after (Ray's RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=1 does this only where
    every node's `ray start` had it in its environment)."""
    before = os.environ.get(VISIBLE)
    os.environ[VISIBLE] = ""
    try:
        yield
    finally:
        if before is None:
            del os.environ[VISIBLE]
        else:
            os.environ[VISIBLE] = before


def for_trial(cfg: TrialConfig) -> Placement:
    """Where `cfg` trains: the device its Ray task resolved (`holding`), else (outside Ray) from `resources.gpus`."""
    if _pinned:
        return _pinned[-1]
    return resolve(f"resources.gpus is {cfg.resources.gpus}" if cfg.resources.uses_gpu else None)
