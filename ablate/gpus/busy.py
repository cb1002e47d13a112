"""`ablate gpu-check`'s busy figure: how busy each GPU that hosted trials was while they trained (issue 52, item 8).

A mean over every GPU of the node says little when packed trials sit on one of eight, and a mean over a phase's
whole span counts Ray's start, the probes and the plain loop. So NVML is read per GPU, keyed by its PCI bus id
(the text NVML writes, `00000000:3B:00.0`), and a GPU's figure is the mean of its readings taken inside the steady
epochs of the trials whose stored device names that bus id: from one epoch's end to the next (the training, the
evaluation and the checkpoint of that epoch), the first epoch left out as it warms up.

NVML can fail in ways other than a missing module (no driver, MIG or vGPU where utilization is not supported): the
check then goes on, and the figure says it is unavailable and why, never a silent gap.
"""

from __future__ import annotations

import importlib
import itertools
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SAMPLE_EVERY = 0.2
"""Seconds between NVML readings (NVML's own sample period is 1/6 to 1 s)."""
EVERY_GPU = ""
"""The key of `Sampler.problems` for a failure that leaves no GPU readable (NVML did not open)."""
NO_NVML = "no NVML: pip install nvidia-ml-py (make gpu-install does)"


def bus_id(text: str) -> str:
    """A PCI address as NVML writes a bus id: domain in 8 hex digits, then bus, device and function, upper case
    (`00000000:3B:00.0`), from that form, the 4-digit domain of /proc and lspci, or lower case."""
    domain, bus, rest = text.strip().split(":")
    device, function = rest.split(".")
    return f"{int(domain, 16):08X}:{int(bus, 16):02X}:{int(device, 16):02X}.{int(function, 16):X}"


def trained_on(device: str | None) -> str | None:
    """The bus id in a trial's stored device (`cuda:0 NVIDIA H200 pci 00000000:3B:00.0`, see
    ablate.training.devices.describe); None for a CPU, or a record that names no bus id."""
    if not device or " pci " not in device:
        return None
    return bus_id(device.rsplit(" pci ", 1)[1])


@dataclass(frozen=True)
class Sample:
    """One NVML reading of one GPU."""

    at: float
    """Unix time."""
    gpu: str
    """Bus id."""
    percent: float
    """Percent of the last sample period in which a kernel ran (`nvmlDeviceGetUtilizationRates().gpu`)."""


class Nvml:
    """NVML opened once: every GPU of the machine by bus id. Reading by handle creates no CUDA context."""

    def __init__(self, module: Any) -> None:
        self.module = module
        module.nvmlInit()
        self.handles = {}
        for index in range(module.nvmlDeviceGetCount()):
            handle = module.nvmlDeviceGetHandleByIndex(index)
            found = module.nvmlDeviceGetPciInfo(handle).busId
            self.handles[bus_id(found.decode() if isinstance(found, bytes) else found)] = handle

    def read(self, gpu: str) -> float:
        return float(self.module.nvmlDeviceGetUtilizationRates(self.handles[gpu]).gpu)


def open_nvml() -> Nvml | str:
    """NVML, or why it cannot be read."""
    try:
        pynvml = importlib.import_module("pynvml")  # untyped: Any (nvidia-ml-py ships no types)
    except ModuleNotFoundError:
        return NO_NVML
    try:
        return Nvml(pynvml)
    except Exception as e:  # any NVML failure (no driver, MIG, vGPU) becomes the figure's reason
        return failure(e)


def failure(e: BaseException) -> str:
    return f"NVML {type(e).__name__}: {e}"


class Sampler:
    """Reads every GPU's busy percent every `every` seconds in a thread while the context is open. A GPU whose
    reading fails is read no more, and the failure is kept as that GPU's problem."""

    def __init__(self, nvml: Nvml | str, every: float = SAMPLE_EVERY) -> None:
        self.nvml, self.every = nvml, every
        self.samples: list[Sample] = []
        self.problems: dict[str, str] = {EVERY_GPU: nvml} if isinstance(nvml, str) else {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ablate-gpu-busy", daemon=True)

    def take(self) -> None:
        """One reading of every GPU still readable."""
        if isinstance(self.nvml, str):
            return
        at = time.time()
        for gpu in self.nvml.handles:
            if gpu in self.problems:
                continue
            try:
                self.samples.append(Sample(at, gpu, self.nvml.read(gpu)))
            except Exception as e:  # kept as the reason this GPU's figure is missing
                self.problems[gpu] = failure(e)

    def problem(self, gpu: str) -> str | None:
        """Why `gpu`'s readings are missing or stopped, if they are."""
        if isinstance(self.nvml, Nvml) and gpu not in self.nvml.handles:
            return f"NVML lists no GPU at bus id {gpu} (it lists {', '.join(self.nvml.handles) or 'none'})"
        return self.problems.get(gpu) or self.problems.get(EVERY_GPU)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.take()

    def __enter__(self) -> Sampler:
        if not isinstance(self.nvml, str):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def steady_windows(ends: Sequence[float]) -> list[tuple[float, float]]:
    """A trial's steady epochs as time spans, from its epoch end times in order: each epoch after the first runs
    from the previous epoch's end to its own."""
    return list(itertools.pairwise(ends))


def together(hosts: Mapping[str, str | None], ends: Mapping[str, Sequence[float]]) -> dict[str, list[str]]:
    """Trials that trained on one GPU at the same time (their steady epochs overlap on one bus id): key -> the
    others' keys. In a phase of one trial per GPU there should be none: a trial CUDA put on another's device."""
    spans = {key: (e[0], e[-1]) for key, e in ends.items() if len(e) > 1 and hosts.get(key)}
    found = {}
    for key, (start, end) in spans.items():
        others = [k for k, (a, b) in spans.items() if k != key and hosts[k] == hosts[key] and a < end and start < b]
        if others:
            found[key] = others
    return found


@dataclass(frozen=True)
class Busy:
    """One GPU's busy fraction in one phase."""

    phase: str
    gpu: str | None
    """Bus id; None: no trial of the phase recorded one."""
    trials: int
    """Trials of the phase that trained on it."""
    fraction: float | None
    samples: int
    """Readings inside the trials' steady epochs."""
    reason: str | None = None
    """Why `fraction` is None."""


def busy(
    phase: str,
    samples: Iterable[Sample],
    hosts: Mapping[str, str | None],
    ends: Mapping[str, Sequence[float]],
    problem: Mapping[str, str],
) -> list[Busy]:
    """Each GPU that hosted a trial of the phase: the mean of its readings inside those trials' steady epochs.
    `hosts`: trial key -> the bus id it trained on; `ends`: trial key -> its epoch end times; `problem`: bus id
    -> why its readings are missing or stopped (a figure from part of the phase would pass for the whole)."""
    readings = list(samples)
    gpus = sorted({gpu for gpu in hosts.values() if gpu is not None})
    if not gpus:
        return [Busy(phase, None, 0, None, 0, "no trial of the phase recorded the bus id of a GPU")]
    rows = []
    for gpu in gpus:
        keys = [key for key, host in hosts.items() if host == gpu]
        windows = [w for key in keys for w in steady_windows(ends.get(key, ()))]
        inside = [s.percent for s in readings if s.gpu == gpu and any(a <= s.at <= b for a, b in windows)]
        if gpu in problem:
            rows.append(Busy(phase, gpu, len(keys), None, len(inside), problem[gpu]))
        elif not inside:
            why = "no steady epoch (a trial needs 2 epochs)" if not windows else "no NVML reading inside them"
            rows.append(Busy(phase, gpu, len(keys), None, 0, why))
        else:
            rows.append(Busy(phase, gpu, len(keys), sum(inside) / len(inside) / 100, len(inside)))
    return rows
