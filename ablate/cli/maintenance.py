"""`ablate forget`: trials deleted whole (`ablate.api.forget`), after listing them and asking."""

from __future__ import annotations

import sys

import typer

from ablate.cli.common import DB, MLFLOW, existing_store, fail, out
from ablate.cli.inspect import matching
from ablate.cli.tables import print_table


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
    from ablate.api import forget as delete

    with existing_store(db) as store:
        rows = matching(store, sweep, state, where).rows.first_of("key")
        if not len(rows):
            out.print("no trials match: nothing deleted")
            return
        axes = [c for c in rows.names if c.startswith("axis.")]
        print_table(rows.select(["sweep", "key", "state", *axes]), f"{len(rows)} trials to delete")
        if not yes:
            if not sys.stdin.isatty():
                fail("forget deletes results: pass --yes to confirm without a terminal")
            typer.confirm(f"delete these {len(rows)} trials?", abort=True)
        gone = delete(rows["key"], store, storage, (mlflow_uri or True) if mlflow else False)
    out.print(f"deleted {gone.trials} trials, their checkpoints and {gone.runs} MLflow runs")
