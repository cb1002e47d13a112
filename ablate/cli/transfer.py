"""`ablate export` and `ablate import`: a store's sweeps out to Parquet or CSV files, and runs ablate did not train
in, from an MLflow experiment, a table or an export (`ablate.api.export`, `ablate.api.import_runs`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from ablate.cli.common import DB, existing_store, fail, out, problems
from ablate.errors import SpecError

if TYPE_CHECKING:
    from ablate.api import Imported


def export(
    folder: Path = typer.Argument(..., help="Folder to write (created): one file per table and manifest.json."),
    sweep: list[str] | None = typer.Argument(None, help="Sweeps to export (default: the whole store)."),
    fmt: str = typer.Option("parquet", "--format", help="parquet or csv."),
    db: str | None = DB,
) -> None:
    """Write sweeps (or the whole store) to Parquet or CSV: sweeps, trials with their configs and results
    flattened to columns, memberships, per-epoch metrics, previous results and provenance (docs/export.md).
    `ablate import FOLDER` reads it back into a store."""
    from ablate.api import ExportError
    from ablate.api import export as write

    with existing_store(db) as store:
        try:
            done = write(folder, sweep, store=store, fmt=fmt)
        except (ExportError, LookupError) as e:
            fail(str(e))
    counts = ", ".join(f"{n} {name}" for name, n in done.rows.items())
    out.print(f"exported {counts} to {done.folder}", highlight=False)


def import_runs(
    source: str | None = typer.Argument(
        None,
        help="An MLflow tracking URI, mlruns folder or SQLite file (with "
        "--experiment), a CSV or Parquet table, or a folder `ablate export` wrote.",
    ),
    file: Path | None = typer.Option(
        None,
        "--file",
        "-f",
        help="An experiments file whose `import:` block says what to import, instead of a SOURCE and flags "
        "(--sweep: only that entry).",
    ),
    experiment: str | None = typer.Option(None, "--experiment", "-e", help="MLflow experiment, by name or id."),
    sweep: str | None = typer.Option(None, help="Sweep to import into [default: the experiment's or file's name]."),
    seed: str = typer.Option("seed", help="Parameter, tag or column holding each run's seed (an integer)."),
    axis: list[str] | None = typer.Option(
        None,
        help="A parameter or column that is an axis (repeatable, or "
        "a,b) [default: MLflow: every parameter but the seed].",
    ),
    metrics: list[str] | None = typer.Option(
        None,
        "--metrics",
        help="A table's metric columns (repeatable, or a,b) [default: the columns that are not axes].",
    ),
    metric: str | None = typer.Option(None, help="Headline metric [default: the first by name]."),
    direction: str | None = typer.Option(
        None, help="max or min: which way the headline metric is better [default: what its name says]."
    ),
    select: str = typer.Option(
        "last", help="last: each run's last epoch is its result; best: the epoch where the headline metric is best."
    ),
    baseline: list[str] | None = typer.Option(None, help="The baseline cell, PARAM=VALUE (repeatable)."),
    ignore: list[str] | None = typer.Option(None, help="MLflow parameters that are not axes (repeatable)."),
    run_id: str | None = typer.Option(None, "--run-id", help="A table's column naming each run."),
    epoch: str | None = typer.Option(None, help="A long table's epoch column (one row per run and epoch)."),
    status: str | None = typer.Option(None, help="A table's status column (failed, error or killed: failed)."),
    duplicates: str = typer.Option(
        "refuse", help="Runs claiming one cell and seed: refuse, or keep the first or last started."
    ),
    db: str | None = DB,
) -> None:
    """Add runs ablate did not train to the store, as a sweep's trials: `report`, `runs` and `compare` then read
    them as any sweep. Parameters become axes, the seed parameter the replicate, metric histories the epochs.
    Imported trials are never trained again nor stale, and a second import of the same runs adds nothing. A
    column or parameter it lacks, a missing seed or two runs in one cell and seed: exit 2, nothing written."""
    from ablate.api import ExportError, ImportProblem, import_file
    from ablate.api import import_runs as add

    if (file is None) == (source is None):
        fail("give a SOURCE or --file FILE (an experiments file with an `import:` block)")
    if file is not None:
        try:
            for done in import_file(file, [sweep] if sweep else None, store=db):
                _said(done)
        except SpecError as e:
            problems(file, e)
        except ImportProblem as e:
            fail(str(e).replace("\n", "\n  "))
        return
    chosen = {}
    for item in baseline or []:
        name, eq, value = item.partition("=")
        if not eq:
            fail(f"--baseline {item!r}: expected PARAM=VALUE")
        chosen[name.strip()] = _typed(value.strip())
    try:
        done = add(str(source), store=db, experiment=experiment, sweep=sweep, seed=seed, axes=_listed(axis),
                   metrics=_listed(metrics), metric=metric, direction=direction, select=select,
                   baseline=chosen or None, ignore=_listed(ignore) or (), run_id=run_id, epoch=epoch, status=status,
                   duplicates=duplicates)  # fmt: skip
    except (ImportProblem, ExportError) as e:
        fail(str(e).replace("\n", "\n  "))
    _said(done)


def _said(done: Imported) -> None:
    """What an import did: its notes, the trials added and those the store held already."""
    for note in done.notes:
        out.print(f"note: {note}", highlight=False)
    known = f"; {len(done.known)} already in the store" if done.known else ""
    out.print(f"imported {len(done.added)} trials into {', '.join(done.sweeps)}{known}", highlight=False)


def _listed(names: list[str] | None) -> list[str] | None:
    """Flags given as a list (`--axis a --axis b`, or `a,b`), None where none were."""
    if not names:
        return None
    return [n.strip() for name in names for n in name.split(",") if n.strip()]


def _typed(text: str) -> object:
    import yaml

    try:
        value: object = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    return value
