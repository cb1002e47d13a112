"""The `ablate` command: a thin typer layer over the library API.

Every command that reads an experiments file validates it whole first; a bad file prints every problem
(file:line: key path: what was expected) and exits with code 2 before anything is written.

Long because it still holds every command group, until issue 40 item 4 gives each group a module of its own.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings
from collections import Counter
from collections.abc import Collection, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ablate.errors import SpecError
from ablate.planning import units

app = typer.Typer(
    help="Ablation studies of attention mechanisms: plan a YAML grid, launch it on Ray, record to SQLite + "
    "MLflow, report paper-style tables.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # markdown, not rich markup: rich markup takes `[default: ...]` in a help text for a tag and drops it
    rich_markup_mode="markdown",
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

UMASK = "ABLATE_UMASK"
"""Environment variable: the file-creation mask of ablate's commands, octal (default 077: files 0600 and
folders 0700, for the owner alone; `ABLATE_UMASK=022` shares them read-only with the group and others)."""


def _version(show: bool) -> None:
    if show:
        from ablate import __version__

        out.print(f"ablate {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _least_exposure(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version of ablate and exit."
    ),
) -> None:
    """Results, checkpoints, MLflow stores and reports are created for their owner alone (the embedded Ray's
    workers inherit the mask), unless ABLATE_UMASK says otherwise."""
    text = os.environ.get(UMASK, "077")
    try:
        os.umask(int(text, 8) & 0o777)
    except ValueError:
        fail(f"{UMASK}={text!r}: expected an octal mask such as 077 or 022")
    warnings.showwarning = _warned


_SHOW_WARNING = warnings.showwarning


def _warned(message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any) -> None:
    """A plugin that failed to load where results are only read (`ablate.plugins.PluginWarning`): one paragraph
    saying what is shown without it; any other warning as Python shows it."""
    from ablate.plugins import PluginWarning

    if not issubclass(category, PluginWarning):
        _SHOW_WARNING(message, category, *args, **kwargs)
        return
    err.print(f"warning: {message}. Results are shown without it: its components are taken from where they are "
              "registered now, and trials whose code cannot be compared are not marked stale.", markup=False,
              highlight=False)  # fmt: skip


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


class StalePolicy(str, Enum):
    warn = "warn"
    rerun = "rerun"
    reuse = "reuse"


class RerunWhat(str, Enum):
    failed = "failed"
    diverged = "diverged"
    stale = "stale"
    all = "all"


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error[/]: {message}", highlight=False, markup=True)
    raise typer.Exit(code)


CONFIRM_ABOVE = 2_000
"""Trial-epochs a launch runs without asking (the repository's CPU sweeps stay below it, the paper-scale
ones and `--all` go above)."""
SHOWN_PROBLEMS = 50
"""Problems of a file printed one per line; the rest are counted."""
MAX_TRIALS = typer.Option(
    10_000, "--max-trials", min=1, help="Most trials a sweep may plan (checked before expanding)."
)


SET = typer.Option(
    None,
    "--set",
    "-s",
    help="PATH=VALUE set on every trial of the sweeps, VALUE as YAML (`-s train.epochs=3 -s 'model.depths=[2]'`); "
    "checked like the file, and it changes trial keys as an edit of the file would. Repeatable.",
)


def plans_of(
    file: Path,
    sweeps: list[str] | None,
    default: bool = False,
    max_trials: int = 10_000,
    overrides: list[str] | None = None,
) -> list[Any]:
    """Load and plan the named sweeps of `file` (when none is named: all, or with `default` the file's default
    sweep, its `default:` or its first), `overrides` set on them; exit 2 on any problem."""
    from ablate.planning.plan import load_plans, plan

    try:
        if default and not sweeps:
            return grown([plan(file, None, max_trials, overrides or ())])
        loaded = load_plans(file, max_trials, overrides or (), sweeps)
    except SpecError as e:
        err.print(f"[bold red]{file}: {len(e.problems)} problem(s)[/]")
        for p in e.problems[:SHOWN_PROBLEMS]:
            err.print(str(p), markup=False, highlight=False)
        if len(e.problems) > SHOWN_PROBLEMS:
            err.print(f"... and {len(e.problems) - SHOWN_PROBLEMS} more", highlight=False)
        raise typer.Exit(2) from None
    unknown = [s for s in sweeps or [] if s not in loaded]
    if unknown:
        fail(f"{file}: no sweep named {', '.join(map(repr, unknown))}; the file has {', '.join(loaded)}")
    return grown([loaded[s] for s in (sweeps or list(loaded))])


def grown(plans: list[Any], store: Any = None) -> list[Any]:
    """`plans` with each tuned sweep's searches as far as `store`'s results go (none: their first rounds), each
    followed by its companion sweep of tuning trials (`ablate.planning.tuned`)."""
    if not any(p.tuning for p in plans):
        return plans
    from ablate.planning.tuned import Rounds

    return Rounds(plans).start(store).plans


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


@app.command()
def plan(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: list[str] | None = typer.Argument(None, help="Sweeps to plan (default: every sweep)."),
    format: Format = typer.Option(
        Format.table, "--format", "-f", help="table (rich), csv or json rows, or markdown (without the config)."
    ),
    costs: bool = typer.Option(True, "--costs/--no-costs", help="Compute params and GFLOPs per trial."),
    limit: int = typer.Option(200, help="Rows shown in the table (csv/json always print every row)."),
    max_trials: int = MAX_TRIALS,
    overrides: list[str] | None = SET,
) -> None:
    """Expand sweeps into trials: key, axis values, params and GFLOPs; counts per axis."""
    from ablate.planning import table as plan_table
    from ablate.planning.check import ModelError

    plans = plans_of(file, sweep, max_trials=max_trials, overrides=overrides)
    try:
        cost = plan_table.variant_costs(plans) if costs else None
    except ModelError as e:
        fail(f"{e}\n(`ablate check` steps every variant; --no-costs plans without building models)")
    if format is Format.json:
        sys.stdout.write(json.dumps(plan_table.records(plans, cost), indent=1) + "\n")
        return
    if format is Format.markdown:
        import pandas as pd

        sys.stdout.write(_markdown(pd.DataFrame([r for p in plans for r in plan_table.rows(p, cost)])))
        return
    if format is Format.csv:
        plan_table.write_csv(plans, cost, sys.stdout)
        return
    for p in plans:
        if p.tuning and not p.trials:
            from ablate.planning.tuned import describe

            out.print(f"{p.sweep}: {describe(p)}")
            continue
        prows = plan_table.rows(p, cost, limit)
        table = Table(title=f"{p.sweep}: {len(p.trials)} trials, {len(p.variants)} variants", title_justify="left")
        table.add_column("key")
        for a in p.axes:
            table.add_column(a)
        table.add_column("seed", justify="right")
        if costs:
            table.add_column("params", justify="right")
            table.add_column("GFLOPs", justify="right")
            table.add_column("w/o attn matmuls", justify="right")
        for r in prows:
            base = "  *" if r["variant"] == p.baseline else ""
            cells = [r["key"][:10] + base] + [_cell(r[a]) for a in p.axes] + [str(r["seed"])]
            if costs:
                cells += [units.params(r["params"]), units.gflops(r["gflops"]), units.gflops(r["gflops_no_attn"])]
            table.add_row(*cells)
        out.print(table)
        if len(p.trials) > limit:
            out.print(f"... {len(p.trials) - limit} more rows (--limit, or --format csv)")
        counts = "; ".join(f"{a}: " + ", ".join(f"{_cell(v)}={n}" for v, n in c.items()) for a, c in p.counts().items())
        out.print(f"total {len(p.trials)}; {counts}; seeds {len(set(t.axes['seed'] for t in p.trials))}")
        if p.adaptive:
            a = p.adaptive
            out.print(f"adaptive seeds: {a.min} per cell now; up to {len(p.reserve)} more trials ({a.max} seeds) for "
                      f"cells still undecided at threshold {a.threshold:g} on {p.metric}")  # fmt: skip
        if p.baseline:
            out.print("* = baseline variant")


DB = typer.Option(
    None,
    "--db",
    envvar="ABLATE_DB",
    help="Results database: a URL or a SQLite file [default: sqlite:///db/ablate.sqlite].",
)
MLFLOW = typer.Option(
    None,
    "--mlflow-uri",
    envvar="ABLATE_MLFLOW_URI",
    help="MLflow tracking URI [default: sqlite:///db/mlflow.sqlite]; a server URL on a cluster.",
)


@app.command()
def launch(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: list[str] | None = typer.Argument(
        None, help="Sweeps to launch (default: the file's default sweep, its `default:` or its first)."
    ),
    every: bool = typer.Option(False, "--all", help="Launch every sweep of the file."),
    address: str | None = typer.Option(
        None, envvar="RAY_ADDRESS", help="Ray cluster address; none: an embedded local Ray."
    ),
    storage: str = typer.Option(
        "db/checkpoints",
        help="Checkpoint folder (on a cluster, one every node mounts) or a bucket URL such as s3://bucket/prefix"
        " (any fsspec filesystem; credentials from its usual environment on every node).",
    ),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="Also record to MLflow."),
    cpus: float | None = typer.Option(None, help="CPUs per trial (overrides the sweep's resources.cpus)."),
    gpus: float | None = typer.Option(None, help="GPUs per trial, fractions allowed (overrides resources.gpus)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would run and what is skipped; write nothing."),
    live: bool | None = typer.Option(
        None, "--live/--plain", help="Live table or log lines [default: live on a terminal]."
    ),
    lease: float = typer.Option(
        60.0, min=1, help="Seconds a crashed launcher's trials stay claimed before another launcher takes them over."
    ),
    check: bool = typer.Option(
        True,
        "--check/--no-check",
        help="One training step of every architecture to run, on CPU, before anything is written or submitted.",
    ),
    stale: StalePolicy | None = typer.Option(
        None,
        help="Done trials whose code changed since they ran: warn (reuse and list them), rerun (train again, the "
        "old result kept), reuse (silently) [default: each sweep's stale:, else warn].",
    ),
    rerun: RerunWhat | None = typer.Option(
        None, help="Run only failed, diverged or stale trials, or all (done ones again; old results kept)."
    ),
    only: list[str] | None = typer.Option(None, help="Run only this trial (a key or a unique prefix); repeatable."),
    max_trials: int = MAX_TRIALS,
    overrides: list[str] | None = SET,
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Launch a large plan without asking (needed without a terminal)."
    ),
    ask_above: int = typer.Option(
        CONFIRM_ABOVE, "--ask-above", min=0, help="Trial-epochs to run (trials x epochs) above which launch asks first."
    ),
) -> None:
    """Run every unfinished trial of the sweeps on Ray; record to the store and MLflow."""
    plans = plans_of(file, sweep, default=not every, max_trials=max_trials, overrides=overrides)
    if not sweep and not every:
        out.print(f"sweep {plans[0].sweep} (the file's default; name sweeps, or --all for every one)")
    from ablate.execution.selection import Select, SelectionError

    choice = Select(rerun.value if rerun else None, tuple(only or ()), stale.value if stale else None)
    if dry_run:
        _dry_run(plans, db, choice)
        return
    if not yes:
        _confirm_size(plans, db, ask_above, choice)
    from ablate.api import launch as run
    from ablate.execution.launcher import Cluster, RunConfig
    from ablate.execution.preflight import Checks, PreflightError
    from ablate.execution.progress import Progress
    from ablate.store import STATES, Store

    tracker = mlflow_uri or True if mlflow else False  # a URI, the default one, or none
    try:
        settings = RunConfig(storage, cpus, gpus, lease=lease)
        result = run(plans, db, tracker, cluster=Cluster(address), run=settings, progress=Progress(live=live,
                     console=out), choice=choice, checks=Checks(models=check, data=check))  # fmt: skip
    except (PreflightError, ConnectionError, SelectionError) as e:
        fail(str(e))
    with Store(db) as store:
        if result.store_error:
            fail(f"{result.store_error} What it missed waits in {result.journal}; the next launch writes it.", code=3)
        plans = grown(plans, store)  # a tuned sweep's trials as its searches went
        planned = {t.key for p in plans for t in p.trials}
        rows = store.trial_rows([p.sweep for p in plans], states=[s for s in STATES if s != "done"]).first_of("key")
        unfinished = rows.rows(k in planned for k in rows["key"])
    if result.interrupted:  # what the store says is left, not what the launcher stopped: some never started
        ended = {k: v for k, v in result.counts.items() if k not in ("interrupted", "preempted")}
        counts = ", ".join(f"{k} {v}" for k, v in sorted(ended.items())) or "none finished"
        left = ", ".join(f"{k} {v}" for k, v in sorted(Counter(unfinished["state"]).items()))
        out.print(f"{counts}; not done: {left or 'none'}; {result.skipped} already done; "
                  f"{result.seconds:.1f} s")  # fmt: skip
        raise typer.Exit(128 + (result.signal or signal.SIGINT))  # the shell's code for death by the signal
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items())) or "nothing run"
    out.print(f"{counts}; {result.skipped} already done; {result.seconds:.1f} s")
    if len(unfinished):
        _print_table(unfinished.select(["sweep", "key", "state", "error"]), f"{len(unfinished)} trials not done")
        raise typer.Exit(1)


def _confirm_size(plans: list[Any], db: str | None, above: int, choice: Any) -> None:
    """Ask before a launch of more than `above` trial-epochs, its later rounds included
    (`ablate.execution.preflight.workload`);
    without a terminal, refuse it (exit 2) unless --yes was given."""
    from ablate.execution.preflight import workload
    from ablate.execution.selection import SelectionError
    from ablate.store import database_exists

    try:
        if database_exists(db):
            with existing_store(db) as store:
                work = workload(grown(plans, store), store, choice)
        else:
            work = workload(plans, None, choice)
    except SelectionError as e:
        fail(str(e))
    if work.most <= above:
        return
    what = f"{work.words()}, above --ask-above {above:,}"
    if not sys.stdin.isatty():
        fail(f"this launch would run {what}: pass --yes to launch it without a terminal")
    typer.confirm(f"launch {what}?", abort=True)


@app.command()
def sync(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps (default: all in the store)."),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
) -> None:
    """Bring MLflow up to date with the store: runs, params, metric points and states it lacks (after MLflow
    was down during a launch). Safe to repeat: nothing is sent twice."""
    from ablate.tracking.mirror import ReportFailed, Synced, from_mlflow
    from ablate.tracking.mirror import sync as run_sync
    from ablate.tracking.records import Tracker

    with existing_store(db) as store:
        tracker = Tracker(mlflow_uri)
        try:
            done = run_sync(store, tracker, sweep or None)
        except ReportFailed as e:  # MLflow answered: blaming it would send the user to wait for nothing
            synced = e.synced or Synced(0, 0)
            summaries = "the sweep's summary" if len(e.errors) == 1 else "the sweeps' summaries"
            fail(f"{e}, not MLflow at {tracker.uri}: {e.left} trials and {summaries} wait for the report "
                 f"({synced.trials} trials synced, {synced.points} metric points sent); `ablate report "
                 f"{' '.join(e.errors)}` shows its traceback, then run `ablate sync` again", code=1)  # fmt: skip
        except Exception as e:
            if not from_mlflow(e):  # the store (exit 3, by `main`) or a bug: as itself
                raise
            fail(f"MLflow at {tracker.uri} is failing ({type(e).__name__}: {str(e)[:300]}); nothing lost: "
                 "run `ablate sync` again once it is back", code=1)  # fmt: skip
    out.print(f"MLflow at {tracker.uri} is up to date: {done.trials} trials synced, {done.points} metric points sent")


@app.command()
def check(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: list[str] | None = typer.Argument(None, help="Sweeps to check (default: every sweep)."),
    max_trials: int = MAX_TRIALS,
    overrides: list[str] | None = SET,
    data: bool = typer.Option(
        True, "--data/--no-data", help="Also build a batch of each dataset (--no-data: where the data is elsewhere)."
    ),
) -> None:
    """Build every distinct model of the plan and run one forward and backward step on CPU, and a batch of each
    dataset through it (labels, shapes and classes as the dataset declared them); exit 2 on failure."""
    from ablate.config import REPLICATES
    from ablate.planning.check import check as run_check

    plans = plans_of(file, sweep, max_trials=max_trials, overrides=overrides)
    results = run_check(plans, data=data)
    table = Table(title="pre-launch check: one training step per variant (batch 2, CPU)", title_justify="left")
    for col in ("sweep", "variant", "params", "GFLOPs", "Δ params vs baseline", "status"):
        table.add_column(col, justify="right" if col in ("params", "GFLOPs", "Δ params vs baseline") else "left")
    base = {p.sweep: next((c.params for c in results if c.sweep == p.sweep and c.variant == p.baseline), None)
            for p in plans}  # fmt: skip
    labels: dict[tuple[str, str], str] = {}
    for p in plans:  # a variant is a cell without its replicates
        for t in p.trials:
            words = ", ".join(f"{k}={_cell(v)}" for k, v in t.axes.items() if k not in REPLICATES)
            labels.setdefault((p.sweep, t.variant), words)
    for c in results:
        ref = base.get(c.sweep)
        delta = "-" if c.params is None or ref is None else units.params(c.params - ref, sign=True)
        params, gflops = units.params(c.params), units.gflops(c.gflops)
        status = "ok" if c.ok else f"[red]error[/]: {c.error}"
        table.add_row(c.sweep, labels.get((c.sweep, c.variant)) or c.variant[:10], params, gflops, delta, status)
    out.print(table)
    if not all(c.ok for c in results):
        raise typer.Exit(2)


@app.command("gpu-check")
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


def existing_store(db: str | None) -> Any:
    """The results store for reading; exit 2, creating nothing, when there is no database yet."""
    from ablate.store import DEFAULT_URL, Store, database_exists

    if not database_exists(db):
        fail(f"no results database at {db or DEFAULT_URL}: run `ablate launch` first (or pass --db)")
    return Store(db)


def _dry_run(plans: list[Any], db: str | None, choice: Any) -> None:
    """Each planned trial's state (a done one with other code than now: stale) and what this launch would do
    with it (`ablate.execution.selection.Selection.action`), then what changed in stale trials; writes nothing."""
    from ablate.execution.selection import SelectionError, select
    from ablate.store import database_exists

    try:
        if database_exists(db):
            with existing_store(db) as store:
                plans = grown(plans, store)  # a tuned sweep's searches as the store's results take them
                chosen = select(plans, store, choice)
        else:
            chosen = select(plans, None, choice)
    except SelectionError as e:
        fail(str(e))
    for p in plans:
        table = Table(title=f"{p.sweep} (dry run)", title_justify="left")
        for col in ("key", *p.axes, "seed", "state", "action"):
            table.add_column(col)
        for t in p.trials:
            state = "stale" if t.key in chosen.stale else chosen.states.get(t.key, "new")
            table.add_row(t.key[:10], *[_cell(t.axes[a]) for a in p.axes], str(t.axes["seed"]), state,
                          chosen.action(t.key))  # fmt: skip
        out.print(table)
    for line in chosen.lines({t.key: t for p in plans for t in p.trials}):
        out.print(line)
    planned = [t.key for p in plans for t in p.trials]
    todo, kept = sum(k in chosen.run for k in planned), sum(k in chosen.stale and k not in chosen.run for k in planned)
    out.print(f"would run {todo}, skip {len(planned) - todo}" + (f" ({kept} of them stale, kept)" if kept else ""))


@app.command()
def status(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps (default: all in the store)."),
    db: str | None = DB,
) -> None:
    """Per sweep: trials per state, epochs left and the ETA at the pace of the unfinished trials; running
    trials, failures with the first line of their error (`ablate show KEY`: the whole traceback), stale results
    (a listing shows its first rows and counts the rest)."""
    from ablate.provenance.stale import LISTED, stale_code
    from ablate.store import STATES, Listing

    sweeps = sweep or None
    with existing_store(db) as store:
        counts = store.state_counts(sweeps)
        if not counts:
            out.print("no sweeps in the store")
            return
        pace = store.progress(sweeps)
        running = store.trial_rows(sweeps, states=("running",), limit=LISTED)
        failed = store.trial_rows(sweeps, states=("failed", "diverged"), limit=LISTED)
        code = stale_code(store, sweeps)
        stale = store.with_code(code.changed, sweeps, limit=LISTED) if code.changed else None
    paces = [pace.get(s) for s in counts]
    table = Listing({"sweep": list(counts), **{c: [n[c] for n in counts.values()] for c in [*STATES, "total"]},
                     "epochs left": [p.epochs_left if p else 0 for p in paces],
                     "s/epoch": [p.epoch_s if p else None for p in paces],
                     "ETA": [_duration(p.eta_s) if p else "-" for p in paces]})  # fmt: skip
    _print_table(table, "trials per state", compact=_folded(table), drop=("s/epoch", "epochs left"),
                 wrap=("trials",), hint=WIDER)  # fmt: skip
    total = {s: sum(n[s] for n in counts.values()) for s in STATES}
    if len(running):
        _print_table(running.select(["sweep", "key", "host", "started_at", "lease_host", "lease_expires"]), "running",
                     drop=("lease_expires", "lease_host", "started_at", "host"), hint=WIDER)  # fmt: skip
        _more(len(running), total["running"], "running trials", "`ablate runs --state running` lists them")
    if len(failed):
        _print_table(failed.select(["sweep", "key", "state", "error"]), "failures", wrap=("error",))
        _more(len(failed), total["failed"] + total["diverged"], "failures",
              "`ablate runs --state failed` (or diverged) lists them")  # fmt: skip
    if stale is not None:
        changed = [", ".join(code.changed[d]) for d in stale["digest"]]
        _print_table(Listing({"sweep": stale["sweep"], "key": stale["key"], "changed": changed}),
                     f"{code.trials} stale (done with other code than now; `launch --rerun stale` retrains)",
                     wrap=("changed",))  # fmt: skip
        _more(len(set(stale["key"])), code.trials, "stale trials", "`ablate runs --format csv` marks every one")
    if unchecked := code.unchecked():
        out.print(unchecked, highlight=False)


def _more(shown: int, total: int, what: str, how: str) -> None:
    """Under a listing cut to its first rows: how many more there are and how to see them."""
    if total > shown:
        out.print(f"... and {total - shown} more {what}: {how}", highlight=False)


WIDER = "`COLUMNS=200 ablate status` shows them"
"""How to see what `status` left out to fit the terminal."""


def _folded(counts: Any) -> Any:
    """`status`'s counts with the states in one column that wraps, `4/32 done, 1 running, 27 pending`: a
    narrow terminal fits that where it cannot fit a column per state. States no trial is in say nothing."""
    from ablate.store import STATES, Listing

    trials = [", ".join([f"{row['done']}/{row['total']} done",
                         *(f"{row[s]} {s}" for s in STATES if s != "done" and row[s])])
              for row in counts.records()]  # fmt: skip
    rest = [c for c in counts.names if c not in (*STATES, "total")]
    return Listing({rest[0]: counts[rest[0]], "trials": trials, **{c: counts[c] for c in rest[1:]}})


WHERE_HELP = (
    "Only trials where PATH OP VALUE holds: =, !=, <, >, <=, >= or 'PATH in [A, B]' on an axis path, a result "
    "(test.top1) or a column; VALUE is typed (1 matches 1.0 across sweeps, true only booleans). Repeatable: all hold."
)


def _duration(seconds: float) -> str:
    """4h05m, 12m30s, 40s; - when unknown."""
    if seconds != seconds:
        return "-"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


ROWS = 50
"""Trials `ablate runs` prints as a table unless told (`--limit`, `--all`): what a person reads in a terminal."""
LIMIT_HELP = f"At most N trials, in plan order [default: {ROWS} in a table, all in csv, json and markdown]."


@app.command()
def runs(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps (default: all)."),
    state: str | None = typer.Option(None, help="Only trials in this state."),
    where: list[str] | None = typer.Option(None, help=WHERE_HELP),
    columns: str | None = typer.Option(
        None, "--columns", "-c", help="Comma list of columns (axis paths, results, any of --all-columns)."
    ),
    all_columns: bool = typer.Option(False, "--all-columns", help="Every column: attempts, hosts, times, costs..."),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table, csv, json or markdown."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help=LIMIT_HELP),
    every: bool = typer.Option(False, "--all", help="Every trial in the table too."),
    db: str | None = DB,
) -> None:
    """Trials with their axis values, state and their sweep's metric (`--columns`, `--all-columns` for more).
    A table shows the first trials in plan order and says how many more there are; a table that does not fit
    the terminal leaves out replicate axes, then other axes, key and sweep, and says which; state, stale and
    the metrics stay."""
    from ablate.config import REPLICATES
    from ablate.provenance.stale import stale_in_store
    from ablate.store import Listing
    from ablate.store.queries import column_of

    shown = None if every else limit if limit is not None or format is not Format.table else ROWS
    with existing_store(db) as store:
        page = _matching(store, sweep, state, where, limit=shown)
        rows = page.rows
        part = rows["key"] if len(rows) < page.total else None  # a page: its own trials' code
        stale = stale_in_store(store, sweep or None, part) if len(rows) else {}
        names = rows.names
        rows = Listing({**rows.select(names[:2]).columns, "stale": [", ".join(stale.get(k, [])) for k in rows["key"]],
                        **rows.select(names[2:]).columns})  # fmt: skip
        if columns:
            try:
                rows = rows.select([column_of(rows, c.strip()) for c in columns.split(",") if c.strip()])
            except KeyError as e:
                fail(f"--columns: {e.args[0]}")
        elif not all_columns:
            rows = rows.select(store.shown_columns(rows))
    if format is Format.csv:
        rows.write_csv(sys.stdout)
    elif format is Format.json:
        rows.write_json(sys.stdout)
    elif format is Format.markdown:
        sys.stdout.write(_markdown(rows))
    else:
        axes = [c for c in reversed(rows.names) if c.startswith("axis.")]  # the sweeps' last axes go first
        drop = [] if columns or all_columns else [*sorted(axes, key=lambda c: c[5:] not in REPLICATES), "key", "sweep"]
        title = f"{page.total} trials" if len(rows) == page.total else f"first {len(rows)} of {page.total} trials"
        _print_table(rows, title, drop=drop, wrap=("stale",),
                     hint="`--columns` picks columns, `--format csv` prints them all")  # fmt: skip
        _more(len(rows), page.total, "trials", "`--limit N` or `--all` shows them, `--format csv` prints every one")


def _matching(
    store: Any, sweep: list[str] | None, state: str | None, where: list[str] | None, limit: int | None = None
) -> Any:
    """The store's trials of `sweep` in `state` where every `--where` condition holds, the first `limit` (None:
    all) and how many there are (`ablate.store.queries.Page`); exit 2 naming a bad condition or an unknown
    column."""
    from ablate.store.queries import Condition

    try:
        conditions = [Condition.parse(w) for w in where or []]
        return store.page({"state": state} if state else None, sweep or None, where=conditions, limit=limit)
    except ValueError as e:
        fail(str(e))
    except KeyError as e:
        fail(f"--where: {e.args[0]}")
    raise AssertionError  # fail() exits


def _markdown(rows: Any) -> str:
    """A listing as a Markdown table (cells as the rich table prints them, `|` escaped)."""
    cells = [[_shown(v).replace("|", "\\|").replace("\n", " ") for v in row] for row in zip(*rows.columns.values())]
    lines = ["| " + " | ".join(rows.names) + " |", "|" + "---|" * len(rows.names)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


@app.command()
def show(
    key: str = typer.Argument(..., help="A trial key or a unique prefix of one."),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
) -> None:
    """One trial whole: config, code fingerprint and the modules it covers, attempts with their tracebacks,
    metrics, MLflow run."""
    import json

    from ablate.config import TrialConfig
    from ablate.plugins import Plugins
    from ablate.provenance.fingerprint import modules_of
    from ablate.store import Listing

    with existing_store(db) as store:
        keys = [k for k in store.states() if k.startswith(key)]
        if len(keys) != 1:
            fail(f"{key!r} matches {len(keys)} trials" + (": give more of the key" if keys else ""))
        trial, sweeps = store.trial(keys[0]), store.sweeps_of(keys[0])
        previous = store.previous(keys[0])
        metrics = store.metrics_frame(keys=[keys[0]])
        for name in sweeps:
            record = store.sweep(name)
            Plugins.from_json((record.spec or {}).get("plugins") if record else None).load(strict=False)
    assert trial is not None
    out.print(f"[bold]trial {trial.key}[/]  sweeps: {', '.join(sweeps)}  state: {trial.state}  "
              f"attempts: {trial.attempts}  resumed from epoch {trial.resumed_from or 0}")  # fmt: skip
    out.print("[bold]config[/]")
    out.print_json(json.dumps(trial.config))
    code = trial.code or {}
    out.print(f"[bold]code[/] digest {code.get('digest', 'not recorded')}  git {code.get('git', {})}  "
              f"versions {code.get('versions', {})}")  # fmt: skip
    try:
        covered = modules_of(TrialConfig.model_validate(trial.config))
    except ValueError:
        covered = {}
    for name, digest in code.get("components", {}).items():
        out.print(f"  {name} {digest}: {', '.join(covered.get(name, []))}")
    for i, attempt in enumerate([*previous, _as_record(trial)], 1):
        why = f" (kept when retrained: {attempt['reason']})" if "reason" in attempt else ""
        out.print(f"[bold]result {i}[/]{why}: {attempt['state']}, finished {attempt['finished_at']}, "
                  f"result {attempt['result']}")  # fmt: skip
        if attempt.get("traceback"):
            out.print(attempt["traceback"], highlight=False, markup=False)
    if len(metrics):
        last = metrics.groupby("name", observed=True).agg(steps=("step", "count"), last=("value", "last"))
        _print_table(Listing.of_frame(last.reset_index()), "metrics (steps recorded, last value)")
    if trial.mlflow_run_id:
        from ablate.tracking.records import Tracker

        tracker = Tracker(mlflow_uri)
        url = tracker.run_url(trial.mlflow_run_id)
        out.print(f"MLflow run: {url}" if url else f"MLflow run {trial.mlflow_run_id}: not in {tracker.uri} (give the "
                  "--mlflow-uri the launch logged to)")  # fmt: skip


def _as_record(trial: Any) -> dict[str, Any]:
    return {c: getattr(trial, c) for c in ("state", "finished_at", "result", "traceback")}


@app.command()
def forget(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps whose trials to delete (default: all)."),
    state: str | None = typer.Option(None, help="Only trials in this state."),
    where: list[str] | None = typer.Option(None, help="Only trials where PATH OP VALUE holds (as for `runs`)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Delete without asking (needed without a terminal)."),
    storage: str = typer.Option("db/checkpoints", help="Where the trials' checkpoints are (as for `launch`)."),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
    mlflow: bool = typer.Option(True, "--mlflow/--no-mlflow", help="Also delete the trials' MLflow runs."),
) -> None:
    """Delete trials whole: store rows, metrics and previous results, checkpoints and MLflow runs. Lists them
    and asks first. A trial planned by several sweeps leaves all of them."""
    from ablate.training.storage import Storage

    with existing_store(db) as store:
        rows = _matching(store, sweep, state, where).rows.first_of("key")
        if not len(rows):
            out.print("no trials match: nothing deleted")
            return
        axes = [c for c in rows.names if c.startswith("axis.")]
        _print_table(rows.select(["sweep", "key", "state", *axes]), f"{len(rows)} trials to delete")
        if not yes:
            if not sys.stdin.isatty():
                fail("forget deletes results: pass --yes to confirm without a terminal")
            typer.confirm(f"delete these {len(rows)} trials?", abort=True)
        keys = rows["key"]
        runs = [r for k in keys for r in _run_ids(store, k)]
        n = store.forget(keys)
    where_ = Storage(storage)
    for key in keys:
        where_.forget(key)
    if mlflow and runs:
        from ablate.tracking.records import Tracker

        tracker = Tracker(mlflow_uri)
        for run_id in runs:
            tracker.client.delete_run(run_id)
    out.print(f"deleted {n} trials, their checkpoints and {len(runs) if mlflow else 0} MLflow runs")


def _run_ids(store: Any, key: str) -> list[str]:
    """MLflow runs of a trial: its own and those of its previous results."""
    trial = store.trial(key)
    ids = [trial.mlflow_run_id] + [p.get("mlflow_run_id") for p in store.previous(key)]
    return [i for i in ids if i]


KEY_SHOWN = 10
"""Characters of a trial key that a table too narrow for whole keys shows (a prefix `ablate show` takes)."""
Columns = dict[str, tuple[str, list[str]]]
"""A table to print: per column of the frame, its header and its cells as shown."""


def _print_table(
    rows: Any, title: str, *, compact: Any = None, drop: Sequence[str] = (), wrap: Collection[str] = (), hint: str = ""
) -> None:
    """Print `rows` (an `ablate.store.Listing`) as a table that fits the terminal, rather than one whose headers
    rich cuts to `swe…`.

    Whole where it fits (cells of the `wrap` columns wrap between words); else `compact` (the caller's folded
    form of `rows`, by default `rows`) with axis columns by the shortest end of their path, trial keys cut
    to a prefix and a sweep column of one value said in the title; while that is still too wide, the columns
    of `drop` are left out, in that order, and one line names them and `hint` says how to see them."""
    columns = _columns(rows)
    width = out.width
    left_out = []
    if _needed(columns, wrap) > width:
        columns, title = _compacted(columns if compact is None else _columns(compact), title)
        for name in (c for c in drop if c in columns):
            if _needed(columns, wrap) <= width:
                break
            del columns[name]
            left_out.append(name.removeprefix("axis."))
    table = Table(title=title, title_justify="left")
    for name, (header, _) in columns.items():
        table.add_column(header, no_wrap=name not in wrap)
    for row in zip(*(cells for _, cells in columns.values())):
        table.add_row(*row)
    out.print(table)
    if left_out:
        out.print(f"left out to fit {width} columns: {', '.join(left_out)} ({hint})", highlight=False, soft_wrap=False)


def _columns(rows: Any) -> Columns:
    return {name: (name, [_shown(v) for v in values]) for name, values in rows.columns.items()}


def _needed(columns: Columns, wrap: Collection[str]) -> int:
    """Terminal columns a table takes: each column its widest line of a cell or the header (its longest word
    where it wraps), plus rich's padding and rules."""
    from rich.cells import cell_len

    total = 1
    for name, (header, cells) in columns.items():
        texts = [header, *cells]
        parts = (
            [w for t in texts for w in t.split()] if name in wrap else [line for t in texts for line in t.splitlines()]
        )
        total += max(map(cell_len, parts), default=0) + 3
    return total


def _compacted(columns: Columns, title: str) -> tuple[Columns, str]:
    """`columns` made narrower without leaving one out: axis headers by the shortest end of their path that no
    other column shares (`axis.attention.kind` -> `kind`), keys cut to KEY_SHOWN characters, and a sweep column
    of one value in several rows said once, in the title."""
    axes = [c.removeprefix("axis.") for c in columns if c.startswith("axis.")]
    taken = {header for c, (header, _) in columns.items() if not c.startswith("axis.")}
    narrow: Columns = {}
    for name, (header, cells) in columns.items():
        if name.startswith("axis."):
            header = _axis_header(name.removeprefix("axis."), axes, taken)
        narrow[name] = (header, [c[:KEY_SHOWN] for c in cells] if name == "key" else cells)
    sweeps = set(narrow.get("sweep", ("", []))[1])
    if len(sweeps) == 1 and len(narrow["sweep"][1]) > 1:
        del narrow["sweep"]
        title = f"{title}, sweep {sweeps.pop()}"
    return narrow, title


def _axis_header(path: str, axes: list[str], taken: set[str]) -> str:
    """The shortest end of an axis path that no other of the `axes` ends with and no other column is called."""
    parts = path.split(".")
    for n in range(1, len(parts) + 1):
        end = ".".join(parts[-n:])
        if end not in taken and sum(a == end or a.endswith(f".{end}") for a in axes) == 1:
            return end
    return f"axis.{path}"


def _shown(value: Any) -> str:
    """A cell as tables print it: numbers to 4 significant digits, missing values as -."""
    from ablate.store.listing import missing

    if missing(value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else _cell(value)


@app.command()
def ui(
    sweep: str | None = typer.Argument(None, help="Sweep whose runs page to open [default: the one launched last]."),
    mlflow_uri: str | None = MLFLOW,
    host: str = typer.Option("127.0.0.1", help="Interface to bind; 0.0.0.0 exposes the UI on purpose."),
    port: int = typer.Option(5000, help="Port."),
    browser: bool = typer.Option(True, help="Open the page in a browser, where this machine has a display."),
    db: str | None = DB,
) -> None:
    """Serve the MLflow UI on the MLflow store and print the sweep's page: its trials grouped by variant, best first,
    and charts comparing them (the view the tracker keeps on its experiment); Ctrl-C or SIGTERM stops the server and
    waits for it."""
    from ablate.tracking.records import DEFAULT_URI
    from ablate.tracking.ui import UiServer, sweep_page

    uri = mlflow_uri or DEFAULT_URI
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    with UiServer(uri, host, port) as server:  # first: reading the store overlaps the server's start-up
        from ablate.store import Store, database_exists

        try:
            if database_exists(db):
                with Store(db) as store:
                    page = sweep_page(base, store, sweep)
            else:
                page = sweep_page(base, None, sweep)
        except LookupError as e:
            fail(str(e))
        out.print(f"MLflow UI on store {uri}: {page} (Ctrl-C stops it)", highlight=False)
        if (seconds := server.ready()) is not None:
            out.print(f"serving after {seconds:.1f} s")
            if browser and (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY") or sys.platform == "darwin"):
                import webbrowser

                webbrowser.open(page)
        code = server.wait()
    raise typer.Exit(code)


@app.command()
def report(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps to report (default: every sweep in the store)."),
    metric: str | None = typer.Option(None, help="Headline metric, e.g. test.top5 [default: the sweep's]."),
    baseline: str | None = typer.Option(
        None, help="Baseline: PATH=VALUE[,PATH=VALUE] on axis values, or a variant key (prefix) [default: the sweep's]."
    ),
    out_dir: Path = typer.Option(
        Path("reports"), "--out", help="Output folder: `<out>/<sweep>/` per sweep and `<out>/index.html`."
    ),
    format: list[str] | None = typer.Option(
        None, "--format", "-f", help="html, md, csv, tex; repeat or comma list [default: html, md, csv]."
    ),
    latex: bool = typer.Option(False, "--latex", help="Also write tables.tex: booktabs tables for a paper."),
    compare: tuple[str, str] | None = typer.Option(
        None, "--compare", help="SWEEP_A SWEEP_B: their shared variants side by side, paired B - A differences."
    ),
    correction: str = typer.Option("holm", help="Multiple-comparison correction of each table: holm or bh."),
    time: bool = typer.Option(
        False, "--time", help="Also time each architecture's training step side by side on this CPU (relative cost)."
    ),
    db: str | None = DB,
) -> None:
    """Paper-style tables, design-aware statistics, effects of each knob and plots: HTML, Markdown, CSV, LaTeX."""
    from ablate.reporting import FORMATS, ReportError
    from ablate.reporting import compare as write_comparison
    from ablate.reporting import report as write

    formats = [f.strip() for item in format or FORMATS for f in item.split(",") if f.strip()] + ["tex"] * latex
    with existing_store(db) as store:
        try:
            if compare:
                if sweep:
                    fail("--compare takes its two sweeps itself: give no SWEEP argument with it")
                files = write_comparison(*compare, store=store, out=out_dir, metric=metric, formats=set(formats),
                                         correction=correction)  # fmt: skip
            else:
                files = write(sweep or None, store=store, out=out_dir, metric=metric, baseline=baseline,
                              formats=formats, correction=correction, time=time)  # fmt: skip
        except ReportError as e:
            fail(str(e))
    pages = [f for f in files if f.name == "index.html"]
    for f in pages or [f for f in files if f.suffix != ".json"]:
        out.print(str(f), highlight=False)


def file_plugins(file: Path | None) -> None:
    """Load the built-ins, entry points and `file`'s plugins (exit 2 naming the plugin if one fails)."""
    from ablate.plugins import load_builtins, load_entry_points
    from ablate.spec.sweeps import load_plugins
    from ablate.spec.yaml_doc import read_yaml

    try:
        load_builtins()
        load_entry_points()
        if file is not None:
            doc = read_yaml(file)
            load_plugins(doc.data.get("plugins") if isinstance(doc.data, dict) else None, file, doc.lines)
    except SpecError as e:
        fail("; ".join(str(p) for p in e.problems))
    except ValueError as e:  # PluginError from an entry point
        fail(str(e))


@app.command()
def schema(
    file: Path | None = typer.Argument(None, help="An experiments file whose plugins' configs to include."),
) -> None:
    """Print the JSON schema of experiments.yaml (for editor completion and checking), plugins included."""
    from ablate.spec.schema import json_schema

    file_plugins(file)
    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")


@app.command()
def plugins(
    file: Path | None = typer.Argument(None, help="An experiments file whose `plugins:` to load too."),
) -> None:
    """Every registered component: kind, name and where it came from (built-in, entry point or plugin)."""
    from ablate.registry import BACKBONES, DATASETS, MECHANISMS, TABLES, TASKS

    file_plugins(file)
    table = Table(title="registered components", title_justify="left")
    table.add_column("kind", no_wrap=True)
    table.add_column("name", no_wrap=True)
    table.add_column("source", overflow="fold")  # a plugin file's path wraps whole onto more lines, never cut
    for registry in (MECHANISMS, BACKBONES, DATASETS, TASKS, TABLES):
        for entry in registry.entries():
            table.add_row(registry.kind, entry.name, entry.source)
    out.print(table)


def main() -> None:
    """The `ablate` command: the typer app, with an unavailable results store as a one-paragraph error."""
    try:
        app()
    except RuntimeError as e:  # the store's module is imported only here: `ablate --help` never pays for it
        from ablate.store.faults import EXIT_CODE, StoreUnavailable

        if not isinstance(e, StoreUnavailable):
            raise
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        sys.exit(EXIT_CODE)
