"""`ablate slurm`: a sweep's Slurm batch script (`ablate.execution.slurm`), printed or written to a file
(`ablate slurm write`, the group's default: `ablate slurm FILE SWEEP`), or written and submitted
(`ablate slurm submit`: the job id printed, the job recorded for `ablate status`)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_type_hints

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
TYPER = "typer"
"""A JobOptions field's metadata key: its typer option."""


def _option(info: Any) -> Any:
    """A JobOptions field whose default is its typer option's."""
    return field(default=info.default, metadata={TYPER: info})


@dataclass(frozen=True)
class JobOptions:
    """The job's options, which `write` and `submit` share: SlurmJob's shape (`_shared` makes each an option of the
    command, in this order)."""

    nodes: int = _option(typer.Option(1, min=1, help="Nodes: a Ray head on the first, a Ray worker on each other."))
    cpus_per_node: int = _option(
        typer.Option(8, min=1, help="CPUs Slurm allocates, and Ray offers trials, on each node.")
    )
    gpus_per_node: int = _option(
        typer.Option(0, min=0, help="GPUs per node (Slurm's --gpus-per-node; Ray sees those).")
    )
    time: str = _option(typer.Option("24:00:00", help="Time limit (Slurm's formats: MM, HH:MM:SS, D-HH:MM:SS, ...)."))
    partition: str | None = _option(typer.Option(None, help="Slurm partition [default: the cluster's]."))
    account: str | None = _option(typer.Option(None, help="Slurm account to charge [default: yours]."))
    storage: str = _option(typer.Option(
        "db/checkpoints", help="Checkpoints: a folder every node mounts, or a bucket URL (as for `launch`)."
    ))  # fmt: skip
    db: str | None = _option(DB)
    mlflow_uri: str | None = _option(MLFLOW)
    signal: int = _option(typer.Option(
        300, min=30, help="Seconds before the time limit at which the launcher is told (SIGTERM) to checkpoint."
    ))  # fmt: skip
    lease: float | None = _option(typer.Option(
        None, min=1, help="`launch --lease`: seconds before another job takes over a killed job's trials."
    ))  # fmt: skip


def _shared(command: Callable[..., None]) -> Callable[..., None]:
    """`command`, whose parameter `options` is a JobOptions, as typer sees it: each of JobOptions' fields an option of
    its own in that parameter's place (so `--help` lists them there), gathered into one JobOptions for the call."""
    hints = get_type_hints(JobOptions)
    shared = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.metadata[TYPER],
                                annotation=hints[f.name]) for f in fields(JobOptions)]  # fmt: skip
    params: list[inspect.Parameter] = []
    for p in inspect.signature(command, eval_str=True).parameters.values():
        params += shared if p.name == "options" else [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)]

    @functools.wraps(command)
    def called(**given: Any) -> None:
        command(options=JobOptions(**{f.name: given.pop(f.name) for f in fields(JobOptions)}), **given)

    called.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    called.__annotations__ = {p.name: p.annotation for p in params}
    return called


def _job(file: Path, sweep: list[str], options: JobOptions) -> tuple[SlurmJob, str]:
    """The job and its script (exit 2 where the job could not run the sweeps' trials)."""
    from ablate.api import SlurmJob
    from ablate.api import slurm as batch_script

    plans = plans_of(file, sweep or None, default=True)
    job = SlurmJob(str(file), tuple(sweep or [p.sweep for p in plans]), **asdict(options))
    try:
        return job, batch_script(job, plans)
    except ValueError as e:
        fail(str(e))


@slurm.command("write")
@_shared
def write(
    file: Path = FILE,
    sweep: list[str] | None = typer.Argument(
        None, help="Sweeps the job launches (default: the file's default sweep, its `default:` or its first)."
    ),
    options: JobOptions = JobOptions(),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the script here [default: print it]."),
) -> None:
    """Write a Slurm batch script that starts Ray across its allocation and runs `ablate launch` on the sweeps;
    submit it with `sbatch`. A requeued or resubmitted job resumes the sweep."""
    _, text = _job(file, sweep or [], options)
    if output is None:
        out.print(text, end="", markup=False, highlight=False, soft_wrap=True)
        return
    output.write_text(text)
    out.print(f"wrote {output}: sbatch {output}", highlight=False)


@slurm.command("submit")
@_shared
def submit(
    file: Path = FILE,
    sweep: list[str] | None = typer.Argument(
        None,
        help="Sweeps the job launches (default: the file's default sweep), then, after `--`, options for "
        "sbatch as is (`-- --qos=high --mail-type=END`; they win over the script's #SBATCH lines).",
    ),
    options: JobOptions = JobOptions(),
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
    job, text = _job(file, words[:cut], options)
    path = output or Path(f"{job.name}.sbatch")
    path.write_text(text)
    try:
        done = slurm_submit(job, path, words[cut:])
    except RuntimeError as e:
        fail(str(e))
    if done.warning:
        err.print(f"warning: {done.warning}", markup=False, highlight=False)
    out.print(done.job.job, highlight=False)
