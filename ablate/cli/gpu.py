"""`ablate gpu-check`: a short sweep on this machine's GPUs and its figures (`ablate.cli.gpucheck`)."""

from __future__ import annotations

from pathlib import Path

import typer

from ablate.cli.common import fail, out


def gpu_check(
    epochs: int = typer.Option(3, min=2, help="Epochs per trial (images/s: the median of those after the first)."),
    seeds: int = typer.Option(4, min=1, help="Seeds per mechanism in the bf16 and packed phases."),
    compile: bool = typer.Option(True, "--compile/--no-compile", help="Also run the bf16 + torch.compile phase."),
    keep: Path | None = typer.Option(
        None, help="Folder for the check's stores, MLflow and checkpoints [default: a temporary one, removed]."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Plan, check and list the sweep; train nothing."),
) -> None:
    """A short sweep on this machine's GPUs through `ablate launch`'s path (embedded Ray, gpus: auto packing,
    bf16, compile), then its figures: images/s vs a plain timm loop, GPU busy fraction packed vs one per GPU,
    the probe's memory vs each trial's peak, bf16 and compile speed-ups. Without a GPU: a dry run that plans
    and checks the sweep and lists it. Exit 1 if a trial did not finish."""
    from ablate.cli import gpucheck

    spec = gpucheck.SweepSpec(epochs, seeds, compile)
    if dry_run or not gpucheck.has_cuda():
        out.print(f"{'dry run' if dry_run else 'no GPU found: dry run'} (planned and checked; nothing trains)")
        out.print(gpucheck.dry_run(spec))
        return
    figures = gpucheck.run(spec, out, keep)
    for table in gpucheck.tables(figures):
        out.print(table)
    if figures.unfinished:
        fail(f"trials not done, their figures missing: {figures.unfinished}", code=1)
