"""`ablate status`, `runs` and `show`: the store read, as tables. The facts come from the library (`ablate.api.status`,
`ablate.api.runs`, `ablate.api.show`); what is here is how a terminal shows them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import typer

from ablate.cli.common import DB, MLFLOW, Format, existing_store, fail, out
from ablate.cli.tables import markdown, more, print_table

if TYPE_CHECKING:
    from ablate.api import Listing, Page, Store

T = TypeVar("T")


def status(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps (default: all in the store)."),
    db: str | None = DB,
) -> None:
    """Per sweep: trials per state, epochs left and the ETA at the pace of the unfinished trials; running
    trials, failures with the first line of their error (`ablate show KEY`: the whole traceback), stale results
    (a listing shows its first rows and counts the rest); the Slurm jobs `ablate slurm submit` sent, and their
    state in Slurm."""
    from ablate.api import STATES, Listing, NoDatabase, divergence
    from ablate.api import status as read

    try:
        now = read(sweep, db)
    except NoDatabase as e:
        fail(str(e))
    if now.jobs:
        print_table(Listing({"job": [j.job.job for j in now.jobs], "sweeps": [" ".join(j.job.sweeps) for j in now.jobs],
                             "Slurm state": [j.state for j in now.jobs], "restarts": [j.restarts for j in now.jobs],
                             "nodes": [j.nodes for j in now.jobs], "reason": [j.reason for j in now.jobs]}),
                    "Slurm jobs (`ablate slurm submit`)", drop=("reason", "nodes", "restarts"),
                    wrap=("reason",), hint=WIDER)  # fmt: skip
    if not now.counts:
        out.print("no results of these sweeps in the store yet" if now.jobs else "no sweeps in the store")
        return
    paces = [now.pace.get(s) for s in now.counts]
    table = Listing({"sweep": list(now.counts), **{c: [n[c] for n in now.counts.values()] for c in [*STATES, "total"]},
                     "epochs left": [p.epochs_left if p else 0 for p in paces],
                     "s/epoch": [p.epoch_s if p else None for p in paces],
                     "ETA": [_duration(p.eta_s) if p else "-" for p in paces]})  # fmt: skip
    print_table(table, "trials per state", compact=_folded(table), drop=("s/epoch", "epochs left"),
                wrap=("trials",), hint=WIDER)  # fmt: skip
    if len(now.running):
        print_table(now.running.select(["sweep", "key", "host", "started_at", "lease_host", "lease_expires"]),
                    "running", drop=("lease_expires", "lease_host", "started_at", "host"), hint=WIDER)  # fmt: skip
        more(len(now.running), now.total("running"), "running trials", "`ablate runs --state running` lists them")
    if len(now.failed):
        failed = now.failed
        said = [divergence(e, s) if state == "diverged" else None
                for state, e, s in zip(failed["state"], failed["diverged_epoch"], failed["diverged_step"])]  # fmt: skip
        errors = [words or error for words, error in zip(said, failed["error"])]
        failures = Listing({c: failed[c] for c in ("sweep", "key", "state")} | {"error": errors})
        print_table(failures, "failures", wrap=("error",))
        more(len(now.failed), now.total("failed", "diverged"), "failures",
             "`ablate runs --state failed` (or diverged) lists them")  # fmt: skip
    if now.code.changed:
        stale = now.stale
        changed = [", ".join(c) for c in stale["changed"]]
        print_table(Listing({"sweep": stale["sweep"], "key": stale["key"], "changed": changed}),
                    f"{now.code.trials} stale (done with other code than now; `launch --rerun stale` retrains)",
                    wrap=("changed",))  # fmt: skip
        more(len(set(stale["key"])), now.code.trials, "stale trials", "`ablate runs --format csv` marks every one")
    if unchecked := now.code.unchecked():
        out.print(unchecked, highlight=False)


WIDER = "`COLUMNS=200 ablate status` shows them"
"""How to see what `status` left out to fit the terminal."""


def _folded(counts: Listing) -> Listing:
    """`status`'s counts with the states in one column that wraps, `4/32 done, 1 running, 27 pending`: a
    narrow terminal fits that where it cannot fit a column per state. States no trial is in say nothing."""
    from ablate.api import STATES, Listing

    trials = [", ".join([f"{row['done']}/{row['total']} done",
                         *(f"{row[s]} {s}" for s in STATES if s != "done" and row[s])])
              for row in counts.records()]  # fmt: skip
    rest = [c for c in counts.names if c not in (*STATES, "total")]
    return Listing({rest[0]: counts[rest[0]], "trials": trials, **{c: counts[c] for c in rest[1:]}})


WHERE_HELP = (
    "Only trials where PATH OP VALUE holds: =, !=, <, >, <=, >= or 'PATH in [A, B]' on an axis path, a result "
    "(test.top1), a column or a config path (train.epochs); VALUE is typed (1 matches 1.0 across sweeps, true only "
    "booleans). Repeatable: all hold."
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
    from ablate.api import REPLICATES
    from ablate.api import runs as read

    shown = None if every else limit if limit is not None or format is not Format.table else ROWS
    chosen = [c.strip() for c in columns.split(",") if c.strip()] if columns else None
    with existing_store(db) as store:
        found = _listed(lambda: read(sweep, store, state=state, where=where or (), columns=chosen,
                                     every_column=all_columns, limit=shown))  # fmt: skip
    rows = found.rows
    if format is Format.csv:
        rows.write_csv(sys.stdout)
    elif format is Format.json:
        rows.write_json(sys.stdout)
    elif format is Format.markdown:
        sys.stdout.write(markdown(rows))
    else:
        axes = [c for c in reversed(rows.names) if c.startswith("axis.")]  # the sweeps' last axes go first
        drop = [] if columns or all_columns else [*sorted(axes, key=lambda c: c[5:] not in REPLICATES), "key", "sweep"]
        title = f"{found.total} trials" if len(rows) == found.total else f"first {len(rows)} of {found.total} trials"
        print_table(rows, title, drop=drop, wrap=("stale",),
                     hint="`--columns` picks columns, `--format csv` prints them all")  # fmt: skip
        more(len(rows), found.total, "trials", "`--limit N` or `--all` shows them, `--format csv` prints every one")


def matching(
    store: Store, sweep: list[str] | None, state: str | None, where: list[str] | None, limit: int | None = None
) -> Page:
    """`ablate.api.matching` for `runs` and `forget`; exit 2 naming a bad condition or an unknown column."""
    from ablate.api import matching as chosen

    return _listed(lambda: chosen(store, sweep, state, where or (), limit))


def _listed(read: Callable[[], T]) -> T:
    """What `read` returns; exit 2 with the line naming a condition or a column it could not read."""
    from ablate.api import UnknownColumn

    try:
        return read()
    except UnknownColumn as e:
        fail(f"--{e.given}: {e.args[0]}")
    except ValueError as e:
        fail(str(e))


def show(
    key: str = typer.Argument(..., help="A trial key or a unique prefix of one."),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
) -> None:
    """One trial whole: config, code fingerprint and the modules it covers, attempts with what each ran with (CPU
    capability, threads, builds) and their tracebacks, metrics, MLflow run."""
    from ablate.api import divergence, git_words
    from ablate.api import show as read

    with existing_store(db) as store:
        try:
            shown = read(key, store, mlflow_uri or True)
        except LookupError as e:
            fail(str(e))
    trial = shown.trial
    diverged = divergence(trial.diverged_epoch, trial.diverged_step) if trial.state == "diverged" else None
    state = diverged or trial.state
    out.print(f"[bold]trial {trial.key}[/]  sweeps: {', '.join(shown.sweeps)}  state: {state}  "
              f"attempts: {trial.attempts}  resumed from epoch {trial.resumed_from or 0}")  # fmt: skip
    if trial.source:  # a run ablate did not train (`ablate import`)
        src = trial.source
        out.print(f"[bold]imported[/] from {src.get('kind')} {src.get('experiment')} ({src.get('uri')}), run "
                  f"{src.get('run_id')}: never trained again nor stale", highlight=False)  # fmt: skip
    out.print("[bold]config[/]")
    out.print_json(json.dumps(trial.config))
    code = trial.code or {}
    out.print(f"[bold]code[/] digest {code.get('digest', 'not recorded')}  {git_words(code.get('git'))}  "
              f"versions {code.get('versions', {})}")  # fmt: skip
    for name, digest in code.get("components", {}).items():
        out.print(f"  {name} {digest}: {', '.join(shown.covered.get(name, []))}")
    for i, attempt in enumerate(shown.attempts, 1):
        why = f" (kept when retrained: {attempt.reason})" if attempt.kept else ""
        out.print(f"[bold]result {i}[/]{why}: {attempt.state}, finished {attempt.finished_at}, "
                  f"result {attempt.result}")  # fmt: skip
        if attempt.arithmetic:
            out.print(f"  ran with {attempt.arithmetic.text()}", highlight=False, markup=False)
        elif attempt.result is not None:
            out.print("  ran with: not recorded (trained before ablate recorded its CPU capability and threads)")
        if attempt.traceback:
            out.print(attempt.traceback, highlight=False, markup=False)
    if len(shown.metrics):
        print_table(shown.metrics, "metrics (steps recorded, last value)")
    if run := shown.mlflow:
        out.print(f"MLflow run: {run.url}" if run.url else f"MLflow run {run.run_id}: not in {run.uri} (give the "
                  "--mlflow-uri the launch logged to)")  # fmt: skip
