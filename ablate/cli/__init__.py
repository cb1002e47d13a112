"""The `ablate` command: a thin typer layer over the library API (`ablate.api`). Each command parses its arguments,
calls the library and formats what it returns; one module per group of commands, registered here in the order
`ablate --help` lists them. Of the library it imports `ablate.api` and `ablate.errors` alone (the GPU check aside)
(tests/project/test_imports.py), so what a command does a notebook can do.

- `ablate.cli.common`: the app, its consoles, the shared options, failing with an exit code
- `ablate.cli.tables`: tables fitted to the terminal
- `ablate.cli.plan`: plan, check, schema, plugins (the file, before anything runs)
- `ablate.cli.launch`: launch (and its dry run)
- `ablate.cli.slurm`: slurm write, slurm submit (a sweep's batch script; submitted)
- `ablate.cli.inspect`: status, runs, show (the store, read)
- `ablate.cli.report`: report, sync
- `ablate.cli.maintenance`: forget
- `ablate.cli.transfer`: import, export
- `ablate.cli.ui`: ui
- `ablate.cli.gpu`: gpu-check
"""

from __future__ import annotations

import os
import sys

from rich.markup import escape

from ablate.cli import gpu, inspect, launch, maintenance, plan, report, slurm, transfer, ui
from ablate.cli.common import app, err
from ablate.cli.inspect import ROWS

__all__ = ["ROWS", "app", "main"]

for name, command in (
    ("plan", plan.plan),
    ("launch", launch.launch),
    ("sync", report.sync),
    ("check", plan.check),
    ("gpu-check", gpu.gpu_check),
    ("status", inspect.status),
    ("runs", inspect.runs),
    ("show", inspect.show),
    ("forget", maintenance.forget),
    ("import", transfer.import_runs),
    ("export", transfer.export),
    ("ui", ui.ui),
    ("report", report.report),
    ("schema", plan.schema),
    ("plugins", plan.plugins),
):
    app.command(name)(command)
app.add_typer(slurm.slurm, name="slurm")


def main() -> None:
    """The `ablate` command: the typer app, with an unavailable results store as a one-paragraph error. MLflow
    logs at WARNING unless MLFLOW_LOGGING_LEVEL says otherwise (read when mlflow is first imported, which no
    command has done yet): its INFO lines (creating a store's tables) are not the console's."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")
    try:
        app()
    except RuntimeError as e:  # the store's module is imported only here: `ablate --help` never pays for it
        from ablate.api import EXIT_CODE, StoreUnavailable

        if not isinstance(e, StoreUnavailable):
            raise
        err.print(f"[bold red]error[/]: {escape(str(e))}", highlight=False)
        sys.exit(EXIT_CODE)
