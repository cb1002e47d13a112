"""`ablate ui`: the MLflow UI (`ablate.tracking.ui.UiServer`) served on the MLflow store, opened on a
sweep's page."""

from __future__ import annotations

import os
import sys

import typer

from ablate.cli.common import DB, MLFLOW, fail, out


def ui(
    sweep: str | None = typer.Argument(None, help="Sweep whose runs page to open [default: the one launched last]."),
    mlflow_uri: str | None = MLFLOW,
    host: str = typer.Option("127.0.0.1", help="Interface to bind; 0.0.0.0 exposes the UI on purpose."),
    port: int = typer.Option(5000, help="Port."),
    browser: bool = typer.Option(True, help="Open the page in a browser, where this machine has a display."),
    db: str | None = DB,
) -> None:
    """Serve the MLflow UI on the MLflow store and print the sweep's page: a run per variant holding its report's
    numbers, best first, as bars and a table (the view the tracker keeps on its experiment); Ctrl-C or SIGTERM stops
    the server and waits for it."""
    from ablate.api import DEFAULT_URI, UiServer, sweep_page

    uri = mlflow_uri or DEFAULT_URI
    base = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
    with UiServer(uri, host, port) as server:  # first: reading the store overlaps the server's start-up
        try:
            page = sweep_page(base, sweep, db)
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
