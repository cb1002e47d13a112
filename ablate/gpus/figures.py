"""What the GPU check measures (`Figures`), and how: each phase of its sweep (`ablate.gpus.sweep`) launched through
`ablate.api.launch` on an embedded Ray, into a store, MLflow and checkpoints of its own (a temporary folder unless
told), then read back from its store. After the launches, a hand-written timm loop trains the same model on the same
data at each setting in this process (not before: its CUDA context would count in the packing probe's measurement).

Figures: per trial the device it trained on (its stored `device`) and its steady seconds and images/s; images/s of
the launched trials against the plain loop; each GPU's busy fraction inside its trials' steady epochs
(`ablate.gpus.busy`), packed against one per GPU; the probe's predicted memory against each packed trial's peak;
and the bf16 and compile speed-ups of softmax and CSaN. The API sits above this unit, so `ablate.api.gpu_check`
hands its `launch` in (`Launch`): the check runs `ablate launch`'s path, not a copy of it.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from rich.console import Console

from ablate.config import TrialConfig
from ablate.execution import gpu_shares
from ablate.gpus.busy import Busy, Sampler, busy, open_nvml, together, trained_on
from ablate.gpus.sweep import PLAIN_SECONDS, SETTINGS, Phase, SweepSpec, plan_phases
from ablate.planning.plan import Plan

if TYPE_CHECKING:
    import torch

    from ablate.execution.launcher import LaunchResult, RunConfig
    from ablate.execution.progress import Display
    from ablate.store import Store


class Launch(Protocol):
    """`ablate.api.launch`, as the check calls it for each phase."""

    def __call__(
        self, plans: Plan, store: Store, tracker: str | bool, *, run: RunConfig, progress: Display
    ) -> LaunchResult: ...


@dataclass(frozen=True)
class Steady:
    """A run's epochs after the first (which compiles and warms up), as one figure."""

    seconds: float
    rate: float | None
    """Images/s: the steady epochs' images over their seconds. None: no steady epoch."""


def steady(rates: Sequence[float], seconds: Sequence[float]) -> Steady:
    """From each epoch's images/s and seconds, in order."""
    spent = sum(seconds[1:])
    images = sum(r * s for r, s in zip(rates[1:], seconds[1:], strict=True))
    return Steady(spent, images / spent if spent else None)


@dataclass(frozen=True)
class Throughput:
    """Images/s of one mechanism at one setting, launched (median over its trials) and by the plain loop."""

    kind: str
    setting: str
    launched: float
    plain: float | None = None

    @property
    def ratio(self) -> float | None:
        """Launched over plain (issue 28's target: at least 0.97)."""
        return self.launched / self.plain if self.plain else None


@dataclass(frozen=True)
class Memory:
    """A packed trial: what its footprint's probe measured against the peak the trial itself reached."""

    key: str
    kind: str
    predicted: int
    """Bytes the probe's process held (CUDA context and allocator reserve included)."""
    peak: int
    """Bytes the trial's torch allocated at its peak (`torch.cuda.max_memory_allocated`: no context, no reserve)."""

    @property
    def ratio(self) -> float:
        return self.peak / self.predicted


@dataclass(frozen=True)
class SpeedUp:
    kind: str
    bf16: float | None
    """bf16 images/s over fp32's."""
    compile: float | None
    """bf16 + compile images/s over bf16's."""


def speedups(throughput: Sequence[Throughput]) -> list[SpeedUp]:
    rate = {(t.kind, t.setting): t.launched for t in throughput}

    def over(kind: str, a: str, b: str) -> float | None:
        return rate[kind, a] / rate[kind, b] if (kind, a) in rate and (kind, b) in rate else None

    kinds = dict.fromkeys(t.kind for t in throughput)
    return [SpeedUp(k, over(k, "bf16", "fp32"), over(k, "bf16+compile", "bf16")) for k in kinds]


@dataclass(frozen=True)
class TrialRun:
    """One launched trial as its store recorded it."""

    phase: str
    key: str
    kind: str
    seed: int
    device: str | None
    """Where it trained, as the trial recorded it (`cuda:0 NVIDIA H200 pci 00000000:3B:00.0`, or `cpu`)."""
    state: str
    steady: Steady
    peak: int | None
    """Bytes its torch allocated at its peak."""
    shared: tuple[str, ...] = ()
    """Keys of trials of its phase, one trial per GPU, that trained on its GPU at the same time (should be none)."""


@dataclass(frozen=True)
class Figures:
    """What `run` measured; None wherever it could not be."""

    device: str
    seconds: float
    """The steady seconds each trial was sized for (`SweepSpec.seconds`)."""
    trials: list[TrialRun]
    throughput: list[Throughput]
    busy: list[Busy]
    memory: list[Memory]
    unfinished: dict[str, int] = field(default_factory=dict)
    """Phase -> trials that did not end `done` (their figures are missing)."""

    @property
    def speedups(self) -> list[SpeedUp]:
        """Each mechanism's bf16 and compile speed-ups (`speedups`)."""
        return speedups(self.throughput)


# ------------------------------------------------------------------------------------------- what runs
@dataclass(frozen=True)
class RecordingProbe:
    """The launcher's packing probe that also leaves what it measured in `folder` (a JSON file per footprint):
    the probe runs in a Ray task, and the check reads the files after the launch."""

    folder: str
    measure: gpu_shares.Probe = gpu_shares.measure

    def __call__(self, cfg: TrialConfig) -> gpu_shares.Footprint:
        found = self.measure(cfg)
        path = self._path(cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(found)))
        return found

    def measured(self, cfg: TrialConfig) -> gpu_shares.Footprint | None:
        """What the probe of `cfg`'s footprint measured, if it ran."""
        path = self._path(cfg)
        return gpu_shares.Footprint(**json.loads(path.read_text())) if path.exists() else None

    def _path(self, cfg: TrialConfig) -> Path:
        return Path(self.folder) / f"{hashlib.sha256(gpu_shares.footprint_key(cfg).encode()).hexdigest()[:16]}.json"


@dataclass(frozen=True)
class PhaseRun:
    """One phase's launch as its store recorded it."""

    trials: list[TrialRun]
    predicted: dict[str, int]
    """Trial key -> bytes its packing probe measured (packed phase only)."""
    busy: list[Busy]
    """Each GPU that hosted a trial of the phase."""

    @property
    def unfinished(self) -> int:
        return sum(t.state != "done" for t in self.trials)


def run_phase(
    phase: Phase,
    planned: Plan,
    folder: Path,
    sampler: Sampler,
    console: Console,
    launch: Launch,
    mlflow: bool = True,
) -> PhaseRun:
    """Launch `planned` through `launch` as `phase` says into `folder` (store, MLflow, checkpoints, probe records)
    while `sampler` reads the GPUs, then read the phase's figures back from the store."""
    from ablate.execution.launcher import RunConfig
    from ablate.execution.progress import Display
    from ablate.store import Store

    folder.mkdir(parents=True, exist_ok=True)
    probe = RecordingProbe(str(folder / "probes"))
    settings = RunConfig(folder / "checkpoints", gpus=phase.gpus, probe=probe)
    tracker: str | bool = f"sqlite:///{folder / 'mlflow.sqlite'}" if mlflow else False
    with Store(f"sqlite:///{folder / 'ablate.sqlite'}") as store:
        with sampler:
            result = launch(planned, store, tracker, run=settings, progress=Display(live=False, console=console))
        if result.interrupted:  # Ctrl-C or SIGTERM: no later phase either
            raise KeyboardInterrupt
        return read_back(phase, planned, store, sampler, probe)


def read_back(phase: Phase, planned: Plan, store: Store, sampler: Sampler, probe: RecordingProbe) -> PhaseRun:
    """A launched phase's figures from its store: each trial's device, steady epochs and peak, each hosting GPU's
    busy fraction inside its trials' steady epochs (their epoch end times), and the probes' measurements."""
    import pandas as pd

    rows = store.trials_frame(planned.sweep).set_index("key")
    epochs = store.metrics_frame(planned.sweep, ["samples_per_s", "epoch_s"], wall_time=True)
    runs, ends = [], {}
    for t in planned.trials:
        row = rows.loc[t.key]
        mine = epochs[epochs["key"] == t.key].sort_values("step")
        rates, seconds = (list(mine[mine["name"] == name]["value"]) for name in ("samples_per_s", "epoch_s"))
        ends[t.key] = list(mine[mine["name"] == "epoch_s"]["wall_time"])
        device, peak = row["device"], row["peak_memory"]
        runs.append(TrialRun(phase.name, t.key, t.config.attention.kind, t.config.seed,
                             device if isinstance(device, str) else None, str(row["state"]), steady(rates, seconds),
                             None if pd.isna(peak) else int(peak)))  # fmt: skip
    hosts = {r.key: trained_on(r.device) for r in runs}
    if phase.gpus is not None and phase.gpus >= 1:
        crowded = together(hosts, ends)
        runs = [replace(r, shared=tuple(crowded.get(r.key, ()))) for r in runs]
    problems = {gpu: why for gpu in set(hosts.values()) if gpu is not None and (why := sampler.problem(gpu))}
    return PhaseRun(
        runs,
        {t.key: found.used for t in planned.trials if (found := probe.measured(t.config)) is not None},
        busy(phase.name, sampler.samples, hosts, ends, problems),
    )


def plain_rate(cfg: TrialConfig, device: torch.device, epochs: int) -> Steady:
    """Images/s of a hand-written timm training loop on the trial's model, data, optimizer and precision:
    a shuffling DataLoader, forward under autocast, cross-entropy, backward, step; no scheduler, no per-step
    sync, no evaluation (`steady` of its `epochs`, timed as the trial times them), under the trials' TF32 policy."""
    import torch
    import torch.nn.functional as F
    from timm.optim import create_optimizer_v2
    from torch.utils.data import DataLoader

    from ablate.data import build_data
    from ablate.nn.factory import create_model
    from ablate.training.loop import autocast, set_tf32

    torch.manual_seed(cfg.seed)
    set_tf32(cfg.train.tf32)  # the trials' float32 policy: torch's default runs convolutions in TF32
    data = build_data(cfg)
    model = create_model(cfg, data.num_classes, data.in_chans).to(device)
    t = cfg.train
    optimizer = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    step = torch.compile(model) if t.compile else model
    loader = DataLoader(data.train, batch_size=t.batch_size, shuffle=True, collate_fn=data.collate,
                        num_workers=cfg.data.workers, pin_memory=device.type == "cuda")  # fmt: skip
    cuda = device.type == "cuda"
    rates, seconds = [], []
    model.train()
    for _ in range(epochs):
        seen, t0 = 0, time.perf_counter()
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            if cuda and t.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast(cfg, device):
                loss = F.cross_entropy(step(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            seen += len(y)
        if cuda:
            torch.cuda.synchronize(device)
        seconds.append(time.perf_counter() - t0)
        rates.append(seen / seconds[-1])
    return steady(rates, seconds)


@contextmanager
def _embedded_ray() -> Iterator[None]:
    """The check measures this machine's GPUs: an embedded Ray whatever RAY_ADDRESS says."""
    address = os.environ.pop("RAY_ADDRESS", None)
    try:
        yield
    finally:
        if address is not None:
            os.environ["RAY_ADDRESS"] = address


def run(spec: SweepSpec, console: Console, launch: Launch, keep: Path | None = None) -> Figures:
    """Every phase on this machine's GPUs through `launch`, then the plain loop at each setting: the figures.
    Stores, MLflow and checkpoints go to `keep` (e.g. for `ablate report --db sqlite:///KEEP/packed/ablate.sqlite`),
    else to a temporary folder removed after."""
    import torch

    with tempfile.TemporaryDirectory(prefix="ablate-gpu-check-") as tmp, _embedded_ray():
        root = keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        planned = plan_phases(root, spec)
        nvml = open_nvml()
        runs = {}
        for phase, p in planned:
            console.rule(f"{phase.name}: {phase.what}")
            folder = root / phase.name.replace("+", "-")
            runs[phase.name] = run_phase(phase, p, folder, Sampler(nvml), console, launch)
    device = torch.device("cuda")
    plans = {phase.name: p for phase, p in planned}
    throughput = []
    for setting in (s for s in SETTINGS if s in plans):
        for kind in dict.fromkeys(t.config.attention.kind for t in plans[setting].trials):
            launched = [t.steady.rate for t in runs[setting].trials if t.kind == kind and t.state == "done"]
            rates = [r for r in launched if r is not None]
            if rates:
                console.print(f"plain timm loop: {kind} {setting}")
                cfg = next(t.config for t in plans[setting].trials if t.config.attention.kind == kind)
                plain = plain_rate(cfg, device, spec.epochs(setting, PLAIN_SECONDS))
                throughput.append(Throughput(kind, setting, statistics.median(rates), plain.rate))
    got = runs["packed"]
    memory = [Memory(t.key, t.kind, got.predicted[t.key], t.peak)
              for t in got.trials if t.key in got.predicted and t.peak is not None]  # fmt: skip
    return Figures(torch.cuda.get_device_name(device), spec.seconds, [t for r in runs.values() for t in r.trials],
                   throughput,
                   [b for r in runs.values() for b in r.busy], memory,
                   {name: r.unfinished for name, r in runs.items() if r.unfinished})  # fmt: skip
