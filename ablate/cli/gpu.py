"""`ablate gpu-check`: a short sweep on this machine's GPUs and its figures (`ablate.api.gpu_check`)."""

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
    from ablate.api import gpu_check as check
    from ablate.cli import gpuprint

    done = check(seconds, seeds, compile, keep, dry_run, out)
    if done.unusable is not None:
        fail(done.unusable)
    if done.planned is not None:
        if done.devices is not None:
            found = f" ({done.devices.problem})" if done.devices.problem else ""
            out.print(f"no GPU found{found}: dry run (planned and checked; nothing trains)", highlight=False)
        else:
            out.print("dry run (planned and checked; nothing trains)")
        out.print(gpuprint.plan_table(done.planned))
        return
    assert done.figures is not None
    for table in gpuprint.tables(done.figures):
        out.print(table)
    if done.figures.unfinished:
        fail(f"trials not done, their figures missing: {done.figures.unfinished}", code=1)
