"""The library API with the CLI's defaults: what `ablate launch`, `status`, `show` and `report` do, from a notebook.

    import ablate
    plan = ablate.plan("experiments.yaml", overrides=["train.epochs=1"])   # the default sweep
    ablate.launch(plan)                          # Ray; db/ablate.sqlite and MLflow at db/mlflow.sqlite
    ablate.api.status().counts                   # trials per state per sweep, as `ablate status` prints them
    ablate.api.show("3f2a").attempts             # one trial whole, as `ablate show 3f2a`
    ablate.api.runs(where=["seed<3"]).rows       # the trials `ablate runs --where 'seed<3'` lists
    ablate.report(plan.sweep)                    # reports/<sweep>/index.html
    with ablate.Store() as store: store.runs()   # the trials, as `ablate runs --all-columns`

`ablate.execution.launcher.launch` and `ablate.reporting.report` are the engines under these: they record and read
only where they are told (no MLflow unless given a tracker), which is what tests and benchmarks want. What lives
here only composes them (the store, the planner, provenance, the tracker), which is why it lives at the top: the
CLI (`ablate.cli`) parses, calls these and formats, so a notebook gets the same facts the commands print; it imports
nothing else of the library (tests/project/test_imports.py), and takes the library's names it uses as they are
from here (`_LAZY`).

- `ablate.api.stores`: the one rule for a store that is only read (`existing`, `NoDatabase`)
- `ablate.api.trials`: `status`, `runs`, `show`, `forget`
- `ablate.api.tracking`: the tracker a function is given, `sync`, the MLflow UI's `sweep_page`
- `ablate.api.experiments`: `check`, `schema`, `components` (the file, before anything runs)
- `ablate.api.plan_rows`: what `ablate plan` prints per trial
- `ablate.api.transfer`: `export`, `import_runs`, `import_file` (runs ablate did not train)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate import units
from ablate.api.experiments import CheckedVariant, Component, check, components, load_plugins, schema
from ablate.api.stores import NoDatabase, absent, existing, existing_or_none, open_store, reading
from ablate.api.tracking import sweep_page, sync, tracker_of
from ablate.api.transfer import Imported, export, import_file, import_runs
from ablate.api.trials import (
    Attempt,
    Forgotten,
    MlflowRun,
    Runs,
    Shown,
    Status,
    UnknownColumn,
    forget,
    matching,
    runs,
    show,
    status,
)  # fmt: skip

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.api.plan_rows import Costs, document, rows, variant_costs, write_csv, write_json, write_markdown
    from ablate.config import REPLICATES
    from ablate.execution.launcher import Cluster, LaunchResult, RunConfig
    from ablate.execution.preflight import Checks, PreflightError, Workload
    from ablate.execution.progress import Display
    from ablate.execution.selection import Select, Selection, SelectionError
    from ablate.execution.slurm import JobState, SlurmJob, Submission, Submitted
    from ablate.execution.stopped import Stopped
    from ablate.gpus.check import GpuCheck
    from ablate.gpus.figures import Figures
    from ablate.gpus.sweep import PlannedCheck
    from ablate.planning.plan import Plan
    from ablate.planning.rounds import Rounds
    from ablate.plugins import PluginWarning
    from ablate.probe.check import ModelError
    from ablate.provenance.fingerprint import git_words
    from ablate.reporting import FORMATS, ReportError
    from ablate.store import STATES, Listing, Store, divergence
    from ablate.store.faults import EXIT_CODE, StoreUnavailable
    from ablate.store.listing import missing
    from ablate.store.queries import Page
    from ablate.tracking.mirror import ReportFailed, Synced, from_mlflow
    from ablate.tracking.tracker import DEFAULT_URI, Tracker
    from ablate.tracking.ui import UiServer
    from ablate.transfer.export import Exported, ExportError
    from ablate.transfer.runs import ImportProblem

_LAZY = {
    **dict.fromkeys(("Costs", "document", "rows", "variant_costs", "write_csv", "write_json", "write_markdown"),
                    "ablate.api.plan_rows"),
    "REPLICATES": "ablate.config", "ModelError": "ablate.probe.check", "git_words": "ablate.provenance.fingerprint",
    **dict.fromkeys(("Cluster", "LaunchResult", "RunConfig"), "ablate.execution.launcher"),
    **dict.fromkeys(("Checks", "PreflightError", "Workload"), "ablate.execution.preflight"),
    "Display": "ablate.execution.progress", "Stopped": "ablate.execution.stopped",
    **dict.fromkeys(("Select", "Selection", "SelectionError"), "ablate.execution.selection"),
    **dict.fromkeys(("JobState", "SlurmJob", "Submission", "Submitted"), "ablate.execution.slurm"),
    "FORMATS": "ablate.reporting", "ReportError": "ablate.reporting",
    **dict.fromkeys(("STATES", "Listing", "Store", "divergence"), "ablate.store"), "missing": "ablate.store.listing",
    "EXIT_CODE": "ablate.store.faults", "StoreUnavailable": "ablate.store.faults",
    **dict.fromkeys(("ReportFailed", "Synced", "from_mlflow"), "ablate.tracking.mirror"),
    "DEFAULT_URI": "ablate.tracking.tracker", "Tracker": "ablate.tracking.tracker", "UiServer": "ablate.tracking.ui",
    "PluginWarning": "ablate.plugins", "Plan": "ablate.planning.plan", "Page": "ablate.store.queries",
    "Rounds": "ablate.planning.rounds", "GpuCheck": "ablate.gpus.check", "Figures": "ablate.gpus.figures",
    "PlannedCheck": "ablate.gpus.sweep", "ExportError": "ablate.transfer.export", "Exported": "ablate.transfer.export",
    "ImportProblem": "ablate.transfer.runs",
}  # fmt: skip
"""The library's names that the API's callers (the CLI) use as they are, imported where first asked for (as the
package's facade does): `ablate --help` imports this module, and pays for none of them."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ablate.api' has no attribute {name!r}")


__all__ = [
    "DEFAULT_URI",
    "EXIT_CODE",
    "FORMATS",
    "REPLICATES",
    "STATES",
    "STORE_PATIENCE",
    "Attempt",
    "CheckedVariant",
    "Checks",
    "Cluster",
    "Component",
    "Costs",
    "Display",
    "DryRun",
    "ExportError",
    "Exported",
    "Figures",
    "Forgotten",
    "GpuCheck",
    "ImportProblem",
    "Imported",
    "JobState",
    "LaunchResult",
    "Listing",
    "MlflowRun",
    "ModelError",
    "NoDatabase",
    "Page",
    "Plan",
    "PlannedCheck",
    "PluginWarning",
    "PreflightError",
    "ReportError",
    "ReportFailed",
    "Rounds",
    "RunConfig",
    "Runs",
    "Select",
    "Selection",
    "SelectionError",
    "Shown",
    "SlurmJob",
    "Status",
    "Stopped",
    "Store",
    "StoreUnavailable",
    "Submission",
    "Submitted",
    "Synced",
    "Tracker",
    "UiServer",
    "UnknownColumn",
    "UnknownSweep",
    "Workload",
    "check",
    "compare_reports",
    "components",
    "described",
    "divergence",
    "document",
    "dry_run",
    "existing",
    "export",
    "forget",
    "from_mlflow",
    "git_words",
    "gpu_check",
    "import_file",
    "import_runs",
    "launch",
    "load",
    "load_plugins",
    "matching",
    "missing",
    "report",
    "rounds",
    "rows",
    "runs",
    "schema",
    "show",
    "slurm",
    "slurm_submit",
    "status",
    "sweep_page",
    "sync",
    "unfinished",
    "units",
    "variant_costs",
    "workload",
    "write_csv",
    "write_json",
    "write_markdown",
]  # fmt: skip


STORE_PATIENCE = 30.0
"""Seconds a launch waits for a database server that does not answer as it starts (one restarting), before it gives
up with exit code 3: a launcher started by a scheduler (Slurm's requeue, cron) should not fail for a restart."""


def launch(
    plans: Plan | Sequence[Plan] | Rounds,
    store: Store | str | None = None,
    tracker: Tracker | str | bool = True,
    *,
    cluster: Cluster | None = None,
    run: RunConfig | None = None,
    progress: Display | None = None,
    choice: Select | None = None,
    checks: Checks | None = None,
) -> LaunchResult:
    """Run every unfinished trial of `plans` as `ablate launch` does: recorded to `store` (a Store, a database
    URL, or None: the CLI's db/ablate.sqlite) and to MLflow through `tracker` (a Tracker, a tracking URI,
    True: the CLI's db/mlflow.sqlite, False: no MLflow). `cluster`, `run` and `choice` as for
    `ablate.execution.launcher.launch` (default: an embedded local Ray, checkpoints in db/checkpoints, every unfinished
    trial). First the launch's pre-flight (`ablate.execution.preflight`, `checks`: by default every model and dataset to
    run): what it refuses is a PreflightError, raised before a store is created or anything is written. A SIGINT or
    SIGTERM while Ray starts or is joined is `ablate.execution.stopped.Stopped`, also before anything is written.
    `plans` may be the `Rounds` that chose them (`rounds`): a tuned sweep's searches then go on where they went."""
    from ablate.execution.launcher import Cluster, RunConfig
    from ablate.execution.launcher import launch as run_plans
    from ablate.execution.preflight import Checks, preflight
    from ablate.execution.selection import Select
    from ablate.planning.plan import Plan
    from ablate.planning.rounds import Rounds

    chosen = plans if isinstance(plans, Rounds) else Rounds([plans] if isinstance(plans, Plan) else plans)
    cluster, run, choice = cluster or Cluster(), run or RunConfig(), choice or Select()
    preflight(chosen.plans, _done_keys(store, STORE_PATIENCE), cluster, run, checks or Checks(), choice)
    first = absent(store) and any(p.trials for p in chosen.plans)
    with _ray_first(cluster) if first else nullcontext(), open_store(store, STORE_PATIENCE) as opened:
        return run_plans(chosen, opened, tracker_of(tracker, lazy=True), cluster=cluster, run=run,
                         progress=progress, choice=choice)  # fmt: skip


@contextmanager
def _ray_first(cluster: Cluster) -> Iterator[None]:
    """Ray started (or joined) before a first launch creates its results database: a Ray that cannot start
    (`ablate.execution.fanout.RayStartError`) leaves nothing written. The launch then finds Ray running; it is stopped
    here when the launch ends, if this started it."""
    from ablate.execution import fanout

    ours = fanout.connect(cluster)
    try:
        yield
    finally:
        if ours:
            fanout.shutdown()


def _done_keys(store: Store | str | None, patience: float = 0.0) -> set[str]:
    """The done trials of `store`, without creating a database where there is none."""
    with existing_or_none(store, patience) as opened:
        return opened.done_keys() if opened else set()


def report(
    sweeps: str | Iterable[str] | None = None, *, store: Store | str | None = None, **options: Any
) -> list[Path]:
    """Write the reports of `sweeps` (default: every sweep in the store) as `ablate report` does, from `store`
    (a Store, a database URL, or None: the CLI's db/ablate.sqlite); the files written. `options` as for
    `ablate.reporting.report` (out, metric, baseline, formats, ...). A database that does not exist is a
    ReportError, and is not created."""
    from ablate.reporting import report as write

    with _reported(store) as opened:
        return write(sweeps, store=opened, **options)


def compare_reports(a: str, b: str, *, store: Store | str | None = None, **options: Any) -> list[Path]:
    """Write the side-by-side report of sweeps `a` and `b` as `ablate report --compare A B` does, from `store` (as
    for `report`); the files written. `options` as for `ablate.reporting.compare` (out, metric, formats,
    correction). A database that does not exist is a ReportError, and is not created."""
    from ablate.reporting import compare

    with _reported(store) as opened:
        return compare(a, b, store=opened, **options)


@contextmanager
def _reported(store: Store | str | None) -> Iterator[Store]:
    """The store a report reads (`reading`), its absence a ReportError as every other failure to report is."""
    from ablate.reporting import ReportError

    try:
        with reading(store) as opened:
            yield opened
    except NoDatabase as e:
        raise ReportError(str(e)) from None


class UnknownSweep(LookupError):
    """A sweep asked for by name that the experiments file does not have."""


def load(
    file: Path, sweeps: Sequence[str] | None = None, *, default: bool = False, max_trials: int = 10_000,
    overrides: Sequence[str] = (),
) -> Rounds:  # fmt: skip
    """The rounds (`rounds`) of the named sweeps of `file` (none named: all, or with `default` the file's default
    sweep, its `default:` or its first), `overrides` set on them, a tuned sweep's first configurations chosen: what
    every command that reads an experiments file plans (`.plans`), and what one launch carries from the file to what
    it left. A bad file is a SpecError with every problem; a name it lacks, `UnknownSweep`."""
    from ablate.planning.plan import load_plans, plan

    if default and not sweeps:
        return rounds([plan(file, None, max_trials, overrides)])
    loaded = load_plans(file, max_trials, overrides, sweeps)
    unknown = [s for s in sweeps or [] if s not in loaded]
    if unknown:
        raise UnknownSweep(f"{file}: no sweep named {', '.join(map(repr, unknown))}; the file has {', '.join(loaded)}")
    return rounds([loaded[s] for s in (sweeps or list(loaded))])


def described(plan: Plan) -> str:
    """A tuned sweep whose searches have no trials yet, in words (`ablate.planning.tuning.describe`)."""
    from ablate.planning.tuning import describe

    return describe(plan)


def rounds(plans: Sequence[Plan] | Rounds, store: Store | None = None) -> Rounds:
    """The rounds that choose `plans`' trials (`ablate.planning.rounds.Rounds`; a Rounds given is itself, its
    searches where they went), their first round chosen as far as `store`'s results go (none: the searches' first
    configurations): `.plans` holds each tuned sweep followed by its companion sweep of tuning trials
    (`ablate.planning.tuning`), other plans as they are; the tuner (optuna) is imported only for a tuned sweep.
    Passed on to `workload`, `dry_run`, `launch` and `unfinished`, it lets a launch replay each search once."""
    from ablate.planning.rounds import Rounds

    chosen = plans if isinstance(plans, Rounds) else Rounds(plans)
    chosen.first(store)
    return chosen


def workload(
    plans: Sequence[Plan] | Rounds, store: Store | str | None = None, choice: Select | None = None
) -> Workload:
    """What launching `plans` would train, as far as `store`'s results grow them, its later rounds included
    (`ablate.execution.preflight.workload`): what `ablate launch --ask-above` weighs (`Workload.asks`), as a launch's
    first look at the store, so as patient with it. Reads the store where it exists, writes nothing; a choice that
    names unknown trials is a SelectionError."""
    from ablate.execution.preflight import workload as weigh
    from ablate.execution.selection import Select

    with existing_or_none(store, STORE_PATIENCE) as opened:
        return weigh(rounds(plans, opened).plans, opened, choice or Select())


@dataclass(frozen=True)
class DryRun:
    """What `ablate launch --dry-run` prints: the plans as far as the store grows them, and what the launch would
    do with each of their trials (`ablate.execution.selection.Selection`: states, stale ones, `action(key)`)."""

    plans: list[Plan]
    chosen: Selection
    outside: list[str] = field(default_factory=list)
    """What the launch would say of trials its sweeps hold that their plans no longer make
    (`ablate.execution.outside`)."""

    def counts(self) -> tuple[int, int, int]:
        """Planned trials the launch would run, would skip, and of those skipped the stale ones it keeps."""
        planned = [t.key for p in self.plans for t in p.trials]
        run = sum(k in self.chosen.run for k in planned)
        kept = sum(k in self.chosen.stale and k not in self.chosen.run for k in planned)
        return run, len(planned) - run, kept


def dry_run(plans: Sequence[Plan] | Rounds, store: Store | str | None = None, choice: Select | None = None) -> DryRun:
    """What a launch of `plans` with `choice` would run and skip, writing nothing (`ablate launch --dry-run`)."""
    from ablate.execution import outside
    from ablate.execution.selection import Select, select

    with existing_or_none(store) as opened:
        grew = rounds(plans, opened).plans  # a tuned sweep's searches as the store's results take them
        earlier = [line for p in grew for line in outside.lines(p, opened)] if opened is not None else []
        return DryRun(grew, select(grew, opened, choice or Select()), earlier)


def unfinished(plans: Sequence[Plan] | Rounds, store: Store) -> Listing:
    """The trials of `plans` (a tuned sweep's as its searches went) that `store` says are not done, one row each:
    what a launch left, rather than what its launcher stopped (some never started)."""
    from ablate.planning.rounds import Rounds
    from ablate.store import STATES

    sweeps = [p.sweep for p in (plans.plans if isinstance(plans, Rounds) else plans)]
    planned = {t.key for p in rounds(plans, store).plans for t in p.trials}
    rows = store.trial_rows(sweeps, states=[s for s in STATES if s != "done"]).first_of("key")
    return rows.rows(k in planned for k in rows["key"])


def slurm(job: SlurmJob, plans: Sequence[Plan]) -> str:
    """The Slurm batch script of `job` for `plans` (`ablate.execution.slurm.script`); a ValueError saying why
    where the job cannot run them."""
    from ablate.execution.slurm import refusal, script

    if problem := refusal(job, list(plans)):
        raise ValueError(problem)
    return script(job)


def slurm_submit(job: SlurmJob, script_file: Path, sbatch: Sequence[str] = ()) -> Submission:
    """`sbatch` the script written to `script_file` (`sbatch`: options before it, which win over its #SBATCH lines)
    from the current folder, and record the job beside the store, where `status` finds it
    (`ablate.execution.slurm.submit`); a RuntimeError with sbatch's words where it refused. `warning`: why the job
    may break a SQLite store another job of it is using."""
    from ablate.execution.slurm import submit

    return submit(job, script_file, sbatch)


def gpu_check(
    seconds: float = 20.0,
    seeds: int = 3,
    compile: bool = True,
    keep: Path | None = None,
    dry_run: bool = False,
    console: Console | None = None,
) -> GpuCheck:
    """What `ablate gpu-check` does: a short sweep on this machine's GPUs through `launch` (`seconds` of steady
    training per trial, `seeds` per mechanism packed, the compile phase unless not `compile`, stores in `keep` or
    a temporary folder), its figures in `GpuCheck.figures`; a dry run's listing instead where asked or without a
    GPU; the reason where the driver lists GPUs this torch cannot use (`ablate.gpus.check`). Progress on
    `console` (default: stdout)."""
    from rich.console import Console

    from ablate.gpus.check import check
    from ablate.gpus.sweep import SweepSpec

    return check(SweepSpec(seconds, seeds, compile), launch, console or Console(), keep, dry_run)
