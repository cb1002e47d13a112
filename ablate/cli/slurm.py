"""`ablate slurm`: a sweep's Slurm batch script (`ablate.execution.slurm`), printed or written to a file
(`ablate slurm write`, the group's default: `ablate slurm FILE SWEEP`), or written and submitted
(`ablate slurm submit`: the job id printed, the job recorded for `ablate status`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from ablate.cli.common import DB, MLFLOW, err, fail, out, plans_of

if TYPE_CHECKING:
    from ablate.api import SlurmJob


class _Written(TyperGroup):
    """`ablate slurm FILE ...` is `ablate slurm write FILE ...`: the group's first word, where it names no
    command, is the experiments file of `write`. (`ctx`: typer's own click's Context, which typer does not export.)"""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["write", *args]
        return super().parse_args(ctx, args)


slurm = typer.Typer(
    cls=_Written,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="A sweep as a Slurm batch job: `ablate slurm FILE SWEEP` (that is, `write`) prints or writes the script; "
    "`ablate slurm submit FILE SWEEP` writes it and submits it with sbatch.",
)

FILE = typer.Argument(Path("experiments.yaml"), help="The experiments file.")
NODES = typer.Option(1, min=1, help="Nodes: a Ray head on the first, a Ray worker on each other.")
CPUS = typer.Option(8, min=1, help="CPUs Slurm allocates, and Ray offers trials, on each node.")
GPUS = typer.Option(0, min=0, help="GPUs per node (Slurm's --gpus-per-node; Ray sees those).")
TIME = typer.Option("24:00:00", help="Time limit (Slurm's formats: MM, HH:MM:SS, D-HH:MM:SS, ...).")
PARTITION = typer.Option(None, help="Slurm partition [default: the cluster's].")
ACCOUNT = typer.Option(None, help="Slurm account to charge [default: yours].")
STORAGE = typer.Option(
    "db/checkpoints", help="Checkpoints: a folder every node mounts, or a bucket URL (as for `launch`)."
)
SIGNAL = typer.Option(
    300, min=30, help="Seconds before the time limit at which the launcher is told (SIGTERM) to checkpoint."
)
LEASE = typer.Option(None, min=1, help="`launch --lease`: seconds before another job takes over a killed job's trials.")


def _job(file: Path, sweep: list[str], **shape: Any) -> tuple[SlurmJob, str]:
    """The job and its script (exit 2 where the job could not run the sweeps' trials)."""
    from ablate.api import SlurmJob
    from ablate.api import slurm as batch_script

    plans = plans_of(file, sweep or None, default=True)
    job = SlurmJob(str(file), tuple(sweep or [p.sweep for p in plans]), **shape)
    try:
        return job, batch_script(job, plans)
    except ValueError as e:
        fail(str(e))


@slurm.command("write")
def write(
    file: Path = FILE,
    sweep: list[str] | None = typer.Argument(
        None, help="Sweeps the job launches (default: the file's default sweep, its `default:` or its first)."
    ),
    nodes: int = NODES,
    cpus_per_node: int = CPUS,
    gpus_per_node: int = GPUS,
    time: str = TIME,
    partition: str | None = PARTITION,
    account: str | None = ACCOUNT,
    storage: str = STORAGE,
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
    signal: int = SIGNAL,
    lease: float | None = LEASE,
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the script here [default: print it]."),
) -> None:
    """Write a Slurm batch script that starts Ray across its allocation and runs `ablate launch` on the sweeps;
    submit it with `sbatch`. A requeued or resubmitted job resumes the sweep."""
    _, text = _job(file, sweep or [], nodes=nodes, cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node,
                   time=time, partition=partition, account=account, storage=storage, db=db, mlflow_uri=mlflow_uri,
                   signal=signal, lease=lease)  # fmt: skip
    if output is None:
        out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        return
    output.write_text(text)
    out.print(f"wrote {output}: sbatch {output}", highlight=False)


@slurm.command("submit")
def submit(
    file: Path = FILE,
    sweep: list[str] | None = typer.Argument(
        None,
        help="Sweeps the job launches (default: the file's default sweep), then, after `--`, options for "
        "sbatch as is (`-- --qos=high --mail-type=END`; they win over the script's #SBATCH lines).",
    ),
    nodes: int = NODES,
    cpus_per_node: int = CPUS,
    gpus_per_node: int = GPUS,
    time: str = TIME,
    partition: str | None = PARTITION,
    account: str | None = ACCOUNT,
    storage: str = STORAGE,
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
    signal: int = SIGNAL,
    lease: float | None = LEASE,
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Where the script is written [default: ablate-SWEEPS.sbatch here]."
    ),
) -> None:
    """Write the batch script (as `ablate slurm write`), submit it with `sbatch` from this folder, print the job id
    and return: the job runs without you. It is recorded beside the store, where `ablate status` finds it and asks
    Slurm how it is doing. A job of a SQLite store that another job has not finished with is submitted with a
    warning: SQLite over a shared filesystem takes one job at a time."""
    from ablate.api import slurm_submit

    words = sweep or []
    cut = next((i for i, w in enumerate(words) if w.startswith("-")), len(words))
    job, text = _job(file, words[:cut], nodes=nodes, cpus_per_node=cpus_per_node, gpus_per_node=gpus_per_node,
                     time=time, partition=partition, account=account, storage=storage, db=db,
                     mlflow_uri=mlflow_uri, signal=signal, lease=lease)  # fmt: skip
    path = output or Path(f"{job.name}.sbatch")
    path.write_text(text)
    try:
        done = slurm_submit(job, path, words[cut:])
    except RuntimeError as e:
        fail(str(e))
    if done.warning:
        err.print(f"warning: {done.warning}", markup=False, highlight=False)
    out.print(done.job.job, highlight=False)
