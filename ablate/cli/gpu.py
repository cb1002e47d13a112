"""`ablate gpu-check`: a short sweep on this machine's GPUs and its figures (`ablate.cli.gpucheck`)."""

from __future__ import annotations

from pathlib import Path

import typer

from ablate.cli.common import fail, out


def gpu_check(
    seconds: float = typer.Option(
        20.0, min=1.0, help="Steady training per trial, after a warm-up epoch, at the estimated images/s."
    ),
    seeds: int = typer.Option(3, min=1, help="Seeds per mechanism in the packed phase (the trials that share a GPU)."),
    compile: bool = typer.Option(True, "--compile/--no-compile", help="Also run the bf16 + torch.compile phase."),
    keep: Path | None = typer.Option(
        None, help="Folder for the check's stores, MLflow and checkpoints [default: a temporary one, removed]."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan, check and list the sweep; train nothing."),
) -> None:
    """A short sweep on this machine's GPUs through `ablate launch`'s path (embedded Ray, gpus: auto packing,
    bf16, compile), then its figures: where each trial trained, images/s vs a plain timm loop, each GPU's busy
    fraction packed vs one per GPU, the probe's memory vs each trial's peak, bf16 and compile speed-ups. Without
    a GPU: a dry run that plans and checks the sweep and lists it. Exit 2 if the driver lists a GPU that torch
    cannot use (a CPU build, or a driver too old), exit 1 if a trial did not finish."""
    from ablate.cli import gpucheck, gpuhost, gpuprint

    spec = gpucheck.SweepSpec(seconds, seeds, compile)
    build = gpuhost.torch_build()
    if not dry_run and not build.usable:
        devices = gpuhost.nvidia_devices()
        if (why := gpuhost.unusable(devices, build)) is not None:
            fail(why)
        found = f" ({devices.problem})" if devices.problem else ""
        out.print(f"no GPU found{found}: dry run (planned and checked; nothing trains)", highlight=False)
    if dry_run:
        out.print("dry run (planned and checked; nothing trains)")
    if dry_run or not build.usable:
        out.print(gpuprint.plan_table(spec, gpucheck.dry_run(spec)))
        return
    figures = gpucheck.run(spec, out, keep)
    for table in gpuprint.tables(figures):
        out.print(table)
    if figures.unfinished:
        fail(f"trials not done, their figures missing: {figures.unfinished}", code=1)
