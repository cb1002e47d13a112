"""`ablate slurm`: a sweep's Slurm batch script (`ablate.execution.slurm`), printed or written to a file."""

from __future__ import annotations

from pathlib import Path

import typer

from ablate.cli.common import DB, MLFLOW, fail, out, plans_of


def slurm(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: list[str] | None = typer.Argument(
        None, help="Sweeps the job launches (default: the file's default sweep, its `default:` or its first)."
    ),
    nodes: int = typer.Option(1, min=1, help="Nodes: a Ray head on the first, a Ray worker on each other."),
    cpus_per_node: int = typer.Option(8, min=1, help="CPUs Slurm allocates, and Ray offers trials, on each node."),
    gpus_per_node: int = typer.Option(0, min=0, help="GPUs per node (Slurm's --gpus-per-node; Ray sees those)."),
    time: str = typer.Option("24:00:00", help="Time limit (Slurm's formats: MM, HH:MM:SS, D-HH:MM:SS, ...)."),
    partition: str | None = typer.Option(None, help="Slurm partition [default: the cluster's]."),
    account: str | None = typer.Option(None, help="Slurm account to charge [default: yours]."),
    storage: str = typer.Option(
        "db/checkpoints", help="Checkpoints: a folder every node mounts, or a bucket URL (as for `launch`)."
    ),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
    signal: int = typer.Option(
        300, min=30, help="Seconds before the time limit at which the launcher is told (SIGTERM) to checkpoint."
    ),
    lease: float | None = typer.Option(
        None, min=1, help="`launch --lease`: seconds before another job takes over a killed job's trials."
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the script here [default: print it]."),
) -> None:
    """Write a Slurm batch script that starts Ray across its allocation and runs `ablate launch` on the sweeps;
    submit it with `sbatch`. A requeued or resubmitted job resumes the sweep."""
    from ablate.api import SlurmJob
    from ablate.api import slurm as batch_script

    plans = plans_of(file, sweep, default=True)
    job = SlurmJob(str(file), tuple(sweep or [p.sweep for p in plans]), nodes, cpus_per_node, gpus_per_node, time,
                   partition, account, storage, db, mlflow_uri, signal, lease)  # fmt: skip
    try:
        text = batch_script(job, plans)
    except ValueError as e:
        fail(str(e))
    if output is None:
        out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        return
    output.write_text(text)
    out.print(f"wrote {output}: sbatch {output}", highlight=False)
