"""`ablate gpu-check` as one call (`check`): what this machine has decides between training the check's sweep and
listing it, and the answer (`GpuCheck`) holds what the CLI prints."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from ablate.gpus.figures import Figures, Launch, run
from ablate.gpus.host import Devices, nvidia_devices, torch_build, unusable
from ablate.gpus.sweep import PlannedCheck, SweepSpec, dry_run


@dataclass(frozen=True)
class GpuCheck:
    """What the check found, and what it listed or measured."""

    unusable: str | None = None
    """Why torch cannot use the GPUs the driver lists, and what to run: nothing was planned or trained."""
    devices: Devices | None = None
    """The driver's GPUs, read where torch could use none and no dry run was asked for."""
    planned: PlannedCheck | None = None
    """A dry run's (asked for, or no GPU): what the check would launch."""
    figures: Figures | None = None
    """What the trained sweep measured."""


def check(spec: SweepSpec, launch: Launch, console: Console, keep: Path | None = None, dry: bool = False) -> GpuCheck:
    """Train `spec` through `launch` on this machine's GPUs and measure it (progress on `console`, stores in `keep`,
    see `ablate.gpus.figures.run`), or, asked to (`dry`) or without a GPU torch can use, plan and list it. Where the
    driver lists GPUs that this torch cannot use, neither: the reason (a dry run would pass for "no GPU")."""
    if dry:
        return GpuCheck(planned=dry_run(spec))
    build = torch_build()
    if build.usable:
        return GpuCheck(figures=run(spec, console, launch, keep))
    devices = nvidia_devices()
    if (why := unusable(devices, build)) is not None:
        return GpuCheck(unusable=why, devices=devices)
    return GpuCheck(devices=devices, planned=dry_run(spec))
