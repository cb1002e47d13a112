"""`ablate launch`: parse, ask before a large launch, call `ablate.api.launch` and print what it left. Every check
that can refuse a launch is the library's pre-flight (`ablate.execution.preflight`), the same for `ablate.launch()`;
what this adds is the question a person answers (`--ask-above`, `--yes`), whose decision is `Workload.asks`."""

from __future__ import annotations

import os
import signal
import sys
from collections import Counter
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from ablate.cli.common import DB, MAX_TRIALS, MLFLOW, SET, err, fail, out, rounds_of
from ablate.cli.tables import cell, print_table

if TYPE_CHECKING:
    from ablate.api import LaunchResult, Rounds, Select


class StalePolicy(str, Enum):
    warn = "warn"
    rerun = "rerun"
    reuse = "reuse"


class RerunWhat(str, Enum):
    failed = "failed"
    diverged = "diverged"
    stale = "stale"
    all = "all"


CONFIRM_ABOVE = 2_000
"""Trial-epochs a launch runs without asking (the repository's CPU sweeps stay below it, the paper-scale
ones and `--all` go above)."""


FILE = typer.Argument(Path("experiments.yaml"), help="The experiments file.")
SWEEPS = typer.Argument(None, help="Sweeps to launch (default: the file's default sweep, its `default:` or its first).")
EVERY = typer.Option(False, "--all", help="Launch every sweep of the file.")
ADDRESS = typer.Option(None, envvar="RAY_ADDRESS", help="Ray cluster address; none: an embedded local Ray.")
STORAGE = typer.Option(
    "db/checkpoints",
    help="Checkpoint folder (on a cluster, one every node mounts) or a bucket URL such as s3://bucket/prefix"
    " (any fsspec filesystem; credentials from its usual environment on every node).",
)
RECORD = typer.Option(True, "--mlflow/--no-mlflow", help="Also record to MLflow.")
CPUS = typer.Option(None, help="CPUs per trial (overrides the sweep's resources.cpus).")
GPUS = typer.Option(
    None, help="GPUs per trial, fractions allowed (overrides resources.gpus); trials train there (0: on the CPU)."
)
DRY_RUN = typer.Option(False, "--dry-run", help="Print what would run and what is skipped; write nothing.")
LIVE = typer.Option(None, "--live/--plain", help="Live table or log lines [default: live on a terminal].")
LEASE = typer.Option(
    60.0, min=1, help="Seconds a crashed launcher's trials stay claimed before another launcher takes them over."
)
CHECK = typer.Option(
    True,
    "--check/--no-check",
    help="One training step of every architecture to run, on CPU, before anything is written or submitted.",
)
STALE = typer.Option(
    None,
    help="Done trials whose code changed since they ran: warn (reuse and list them), rerun (train again, the "
    "old result kept), reuse (silently) [default: each sweep's stale:, else warn].",
)
RERUN = typer.Option(
    None, help="Run only failed, diverged or stale trials, or all (done ones again; old results kept)."
)
ONLY = typer.Option(None, help="Run only this trial (a key or a unique prefix); repeatable.")
YES = typer.Option(False, "--yes", "-y", help="Launch a large plan without asking (needed without a terminal).")
ASK_ABOVE = typer.Option(
    CONFIRM_ABOVE, "--ask-above", min=0, help="Trial-epochs to run (trials x epochs) above which launch asks first."
)


def launch(
    file: Path = FILE, sweep: list[str] | None = SWEEPS, every: bool = EVERY, address: str | None = ADDRESS,
    storage: str = STORAGE, db: str | None = DB, mlflow_uri: str | None = MLFLOW, mlflow: bool = RECORD,
    cpus: float | None = CPUS, gpus: float | None = GPUS, dry_run: bool = DRY_RUN, live: bool | None = LIVE,
    lease: float = LEASE, check: bool = CHECK, stale: StalePolicy | None = STALE, rerun: RerunWhat | None = RERUN,
    only: list[str] | None = ONLY, max_trials: int = MAX_TRIALS, overrides: list[str] | None = SET, yes: bool = YES,
    ask_above: int = ASK_ABOVE,
) -> None:  # fmt: skip
    """Run every unfinished trial of the sweeps on Ray; record to the store and MLflow."""
    plans = rounds_of(file, sweep, default=not every, max_trials=max_trials, overrides=overrides)  # one per launch
    if not sweep and not every:
        out.print(f"sweep {plans.plans[0].sweep} (the file's default; name sweeps, or --all for every one)")
    from ablate.api import Checks, Cluster, Display, RunConfig, Select
    from ablate.api import launch as run

    choice = Select(rerun.value if rerun else None, tuple(only or ()), stale.value if stale else None)
    if dry_run:
        _dry_run(plans, db, choice)
        return
    if not yes:
        _confirm_size(plans, db, ask_above, choice)
    tracker = mlflow_uri or True if mlflow else False  # a URI, the default one, or none
    result = _launched(lambda: run(plans, db, tracker, cluster=Cluster(address), choice=choice,
                                   run=RunConfig(storage, cpus, gpus, lease=lease, detach=True),
                                   progress=Display(live=live, console=out),
                                   checks=Checks(models=check, data=check)))  # fmt: skip
    _ended(plans, db, result)


def _launched(launched: Callable[[], LaunchResult]) -> LaunchResult:
    """What `launched` returns; exit 2 on what the launch refused before writing, and at once, with the signal's
    code, on a signal that stopped it while Ray started."""
    from ablate.api import PreflightError, SelectionError, Stopped

    try:
        return launched()
    except (PreflightError, ConnectionError, SelectionError) as e:
        fail(str(e))
    except Stopped as e:
        err.print(str(e), markup=False, highlight=False)
        sys.stdout.flush()
        sys.stderr.flush()
        # Ray stopped inside its driver's start can abort the interpreter's exit (a half-made core worker: exit -6
        # or -11, not 143); nothing is left to do or to close, so the process ends here.
        os._exit(128 + e.signal)


def _ended(plans: Rounds, db: str | None, result: LaunchResult) -> None:
    """What the launch left, as the store says (`ablate.api.unfinished`): exit 3 where the store failed during
    it, the signal's code where one interrupted it, 1 where trials are not done."""
    from ablate.api import Store, unfinished

    with Store(db) as store:
        if result.store_error:
            fail(f"{result.store_error} What it missed waits in {result.journal}; the next launch writes it.", code=3)
        left = unfinished(plans, store)
    if result.interrupted:  # what the store says is left, not what the launcher stopped: some never started
        ended = {k: v for k, v in result.counts.items() if k not in ("interrupted", "preempted")}
        counts = ", ".join(f"{k} {v}" for k, v in sorted(ended.items())) or "none finished"
        states = ", ".join(f"{k} {v}" for k, v in sorted(Counter(left["state"]).items()))
        out.print(f"{counts}; not done: {states or 'none'}; {result.skipped} already done; "
                  f"{result.seconds:.1f} s")  # fmt: skip
        raise typer.Exit(128 + (result.signal or signal.SIGINT))  # the shell's code for death by the signal
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())) or "nothing run"
    out.print(f"{counts}; {result.skipped} already done; {result.seconds:.1f} s")
    if len(left):
        print_table(left.select(["sweep", "key", "state", "error"]), f"{len(left)} trials not done")
        raise typer.Exit(1)


def _confirm_size(plans: Rounds, db: str | None, above: int, choice: Select) -> None:
    """Ask before a launch of more than `above` trial-epochs, its later rounds included (`ablate.api.workload`);
    without a terminal, refuse it (exit 2) unless --yes was given."""
    from ablate.api import SelectionError, workload

    try:
        work = workload(plans, db, choice)
    except SelectionError as e:
        fail(str(e))
    if not work.asks(above):
        return
    what = f"{work.words()}, above --ask-above {above:,}"
    if not sys.stdin.isatty():
        fail(f"this launch would run {what}: pass --yes to launch it without a terminal")
    typer.confirm(f"launch {what}?", abort=True)


def _dry_run(plans: Rounds, db: str | None, choice: Select) -> None:
    """Each planned trial's state (a done one with other code than now: stale) and what this launch would do
    with it (`ablate.api.dry_run`), then what changed in stale trials; writes nothing."""
    from ablate.api import SelectionError, dry_run

    try:
        would = dry_run(plans, db, choice)
    except SelectionError as e:
        fail(str(e))
    chosen = would.chosen
    for p in would.plans:
        table = Table(title=f"{p.sweep} (dry run)", title_justify="left")
        for col in ("key", *p.axes, "seed", "state", "action"):
            table.add_column(col)
        for t in p.trials:
            state = "stale" if t.key in chosen.stale else chosen.states.get(t.key, "new")
            table.add_row(t.key[:10], *[cell(t.axes[a]) for a in p.axes], str(t.axes["seed"]), state,
                          chosen.action(t.key))  # fmt: skip
        out.print(table)
        for line in p.design.lines(p.seeds) if p.design else []:
            out.print(line, markup=False, highlight=False)
    for line in [*chosen.lines({t.key: t for p in would.plans for t in p.trials}), *would.outside]:
        out.print(line, markup=False, highlight=False)
    todo, skip, kept = would.counts()
    out.print(f"would run {todo}, skip {skip}" + (f" ({kept} of them stale, kept)" if kept else ""))
