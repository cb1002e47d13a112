"""`ablate report` and `sync`: what the store holds, written as reports or sent to MLflow."""

from __future__ import annotations

import gc
from pathlib import Path

import typer

from ablate.cli.common import DB, MLFLOW, existing_store, fail, out


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
    interval: str = typer.Option(
        "policy",
        help="Intervals beside the variant table's tests: policy (t or exact sign-flip, by the number of pairs) or "
        "bca (also scipy's paired bootstrap BCa interval, where the policy gives a t-test over seeds).",
    ),
    time: bool = typer.Option(
        False,
        "--time",
        help="Also time each architecture's training step side by side on this CPU at the trials' batch "
        "(relative cost, in the Cost section).",
    ),
    all_trials: bool = typer.Option(
        False, "--all-trials", help="Also the trials launched before under other settings, labelled by what differs."
    ),
    db: str | None = DB,
) -> None:
    """Paper-style tables, design-aware statistics, effects of each knob and plots: HTML, Markdown, CSV, LaTeX."""
    from ablate.api import FORMATS, ReportError, compare_reports
    from ablate.api import report as write

    gc.freeze()  # the imports' objects live until exit: no collection walks them again (0.3 s of 2.2, 10,000 trials)
    formats = [f.strip() for item in format or FORMATS for f in item.split(",") if f.strip()] + ["tex"] * latex
    with existing_store(db) as store:
        try:
            if compare:
                if sweep:
                    fail("--compare takes its two sweeps itself: give no SWEEP argument with it")
                if interval != "policy":
                    fail("--interval is the variant table's: --compare's tables give the policy's intervals")
                files = compare_reports(*compare, store=store, out=out_dir, metric=metric, formats=set(formats),
                                         correction=correction)  # fmt: skip
            else:
                files = write(sweep or None, store=store, out=out_dir, metric=metric, baseline=baseline,
                              formats=formats, correction=correction, time=time, all_trials=all_trials,
                              interval=interval)  # fmt: skip
        except ReportError as e:
            fail(str(e))
    pages = [f for f in files if f.name == "index.html"]
    for f in pages or [f for f in files if f.suffix != ".json"]:
        out.print(str(f), highlight=False)


def sync(
    sweep: list[str] | None = typer.Argument(None, help="Sweeps (default: all in the store)."),
    db: str | None = DB,
    mlflow_uri: str | None = MLFLOW,
) -> None:
    """Bring MLflow up to date with the store: runs, params, metric points and states it lacks (after MLflow
    was down during a launch). Safe to repeat: nothing is sent twice."""
    from ablate.api import ReportFailed, Synced, Tracker, from_mlflow
    from ablate.api import sync as run_sync

    with existing_store(db) as store:
        tracker = Tracker(mlflow_uri)
        try:
            done = run_sync(sweep, store, tracker)
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
