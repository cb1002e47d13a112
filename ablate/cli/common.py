"""What every command shares: the typer app, its consoles, the options that mean the same in every command, and how a
command fails (one line on stderr, an exit code). Every command that reads an experiments file validates it whole
first; a bad file prints every problem (file:line: key path: what was expected) and exits with code 2 before anything
is written."""

from __future__ import annotations

import os
import warnings
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from ablate.errors import SpecError

if TYPE_CHECKING:
    from ablate.api import Plan, Rounds, Store

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
    from ablate.api import PluginWarning

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


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error[/]: {message}", highlight=False, markup=True)
    raise typer.Exit(code)


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


def plans_of(
    file: Path,
    sweeps: list[str] | None,
    default: bool = False,
    max_trials: int = 10_000,
    overrides: list[str] | None = None,
) -> list[Plan]:
    """Load and plan the named sweeps of `file` (when none is named: all, or with `default` the file's default
    sweep, its `default:` or its first), `overrides` set on them, a tuned sweep's first configurations chosen;
    exit 2 on any problem."""
    return rounds_of(file, sweeps, default, max_trials, overrides).plans


def rounds_of(
    file: Path,
    sweeps: list[str] | None,
    default: bool = False,
    max_trials: int = 10_000,
    overrides: list[str] | None = None,
) -> Rounds:
    """The rounds that choose the trials of `plans_of`'s plans (`ablate.api.load`): what one launch carries from
    the file to what it left, so that it replays each tuned sweep's searches once."""
    from ablate.api import UnknownSweep, load

    try:
        return load(file, sweeps, default=default, max_trials=max_trials, overrides=overrides or ())
    except UnknownSweep as e:
        fail(str(e))
    except SpecError as e:
        problems(file, e)


def problems(file: Path, error: SpecError) -> NoReturn:
    """Every problem of a bad experiments file, one per line (the first SHOWN_PROBLEMS), and exit code 2."""
    err.print(f"[bold red]{file}: {len(error.problems)} problem(s)[/]")
    for p in error.problems[:SHOWN_PROBLEMS]:
        err.print(str(p), markup=False, highlight=False)
    if len(error.problems) > SHOWN_PROBLEMS:
        err.print(f"... and {len(error.problems) - SHOWN_PROBLEMS} more", highlight=False)
    raise typer.Exit(2) from None


def existing_store(db: str | None) -> Store:
    """The results store for reading (`ablate.api.existing`); exit 2, creating nothing, when there is no database
    yet."""
    from ablate.api import NoDatabase, existing

    try:
        return existing(db)
    except NoDatabase as e:
        fail(str(e))
