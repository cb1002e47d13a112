"""`ablate plan`, `check`, `schema` and `plugins`: the experiments file and what it can use, before anything runs."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import typer
from rich.table import Table

from ablate.api import units
from ablate.cli.common import MAX_TRIALS, SET, Format, fail, out, plans_of
from ablate.cli.tables import cell, markdown_cell
from ablate.errors import SpecError

T = TypeVar("T")


def plan(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: list[str] | None = typer.Argument(None, help="Sweeps to plan (default: every sweep)."),
    format: Format = typer.Option(
        Format.table,
        "--format",
        "-f",
        help="table (rich), csv rows, json (`sweeps`: each sweep's design; `trials`: the rows), or markdown (without "
        "the config).",
    ),
    costs: bool = typer.Option(True, "--costs/--no-costs", help="Compute params and GFLOPs per trial."),
    limit: int = typer.Option(200, help="Rows shown in the table (csv/json always print every row)."),
    max_trials: int = MAX_TRIALS,
    overrides: list[str] | None = SET,
) -> None:
    """Expand sweeps into trials: key, axis values, params and GFLOPs; counts per axis."""
    from ablate.api import ModelError, described, rows, variant_costs, write_csv, write_json, write_markdown

    plans = plans_of(file, sweep, max_trials=max_trials, overrides=overrides)
    try:
        cost = variant_costs(plans) if costs else None
    except ModelError as e:
        fail(f"{e}\n(`ablate check` steps every variant; --no-costs plans without building models)")
    if format is Format.json:
        write_json(plans, cost, sys.stdout)
        return
    if format is Format.markdown:
        write_markdown(plans, cost, sys.stdout, markdown_cell)
        return
    if format is Format.csv:
        write_csv(plans, cost, sys.stdout)
        return
    for p in plans:
        if p.tuning and not p.trials:
            out.print(f"{p.sweep}: {described(p)}")
            continue
        prows = rows(p, cost, limit)
        view = Table(title=f"{p.sweep}: {len(p.trials)} trials, {len(p.variants)} variants", title_justify="left")
        view.add_column("key")
        for a in p.axes:
            view.add_column(a)
        view.add_column("seed", justify="right")
        if costs:
            view.add_column("params", justify="right")
            view.add_column("GFLOPs", justify="right")
            view.add_column("w/o attn matmuls", justify="right")
        for r in prows:
            base = "  *" if r["variant"] == p.baseline else ""
            cells = [r["key"][:10] + base] + [cell(r[a]) for a in p.axes] + [str(r["seed"])]
            if costs:
                cells += [units.params(r["params"]), units.gflops(r["gflops"]), units.gflops(r["gflops_no_attn"])]
            view.add_row(*cells)
        out.print(view)
        if len(p.trials) > limit:
            out.print(f"... {len(p.trials) - limit} more rows (--limit, or --format csv)")
        counts = "; ".join(f"{a}: " + ", ".join(f"{cell(v)}={n}" for v, n in c.items()) for a, c in p.counts().items())
        out.print(f"total {len(p.trials)}; {counts}; seeds {p.seeds}")
        for line in p.design.lines(p.seeds) if p.design else []:
            out.print(line, markup=False, highlight=False)
        if p.adaptive:
            s = p.adaptive
            out.print(f"adaptive seeds: {s.min} per cell now; up to {len(p.reserve)} more trials ({s.max} seeds) for "
                      f"cells still undecided at threshold {s.threshold:g} on {p.metric}")  # fmt: skip
        if p.baseline:
            out.print("* = baseline variant")


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
    from ablate.api import check as run_check

    plans = plans_of(file, sweep, max_trials=max_trials, overrides=overrides)
    results = run_check(plans, data=data)
    view = Table(title="pre-launch check: one training step per variant (batch 2, CPU)", title_justify="left")
    for col in ("sweep", "variant", "params", "GFLOPs", "Δ params vs baseline", "status"):
        # a label too long for its column folds onto more lines: cut to `attention.kind=so…`, it named nothing
        view.add_column(col, justify="right" if col in ("params", "GFLOPs", "Δ params vs baseline") else "left",
                         overflow="fold")  # fmt: skip
    for r in results:
        c = r.checked
        delta = "-" if r.delta is None else units.params(r.delta, sign=True)
        params, gflops = units.params(c.params), units.gflops(c.gflops)
        status = "ok" if c.ok else f"[red]error[/]: {c.error}"
        label = ", ".join(f"{k}={cell(v)}" for k, v in r.axes.items()) or c.variant[:10]
        view.add_row(c.sweep, label, params, gflops, delta, status)
    out.print(view)
    if not all(r.checked.ok for r in results):
        raise typer.Exit(2)


def loaded(read: Callable[[], T]) -> T:
    """What `read` returns after loading plugins (`ablate.api.load_plugins`); exit 2 naming the plugin if one
    fails."""
    try:
        return read()
    except SpecError as e:
        fail("; ".join(str(p) for p in e.problems))
    except ValueError as e:  # PluginError from an entry point
        fail(str(e))


def schema(
    file: Path | None = typer.Argument(None, help="An experiments file whose plugins' configs to include."),
) -> None:
    """Print the JSON schema of experiments.yaml (for editor completion and checking), plugins included."""
    from ablate.api import schema as read

    sys.stdout.write(json.dumps(loaded(lambda: read(file)), indent=2) + "\n")


def plugins(
    file: Path | None = typer.Argument(None, help="An experiments file whose `plugins:` to load too."),
) -> None:
    """Every registered component: kind, name and where it came from (built-in, entry point or plugin)."""
    from ablate.api import components

    found = loaded(lambda: components(file))
    view = Table(title="registered components", title_justify="left")
    view.add_column("kind", no_wrap=True)
    view.add_column("name", no_wrap=True)
    view.add_column("source", overflow="fold")  # a plugin file's path wraps whole onto more lines, never cut
    for c in found:
        view.add_row(c.kind, c.name, c.source)
    out.print(view)
