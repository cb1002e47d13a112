"""The `ablate` command: a thin typer layer over the library API.

Every command that reads an experiments file validates it whole first; a bad file prints every problem
(file:line: key path: what was expected) and exits with code 2 before anything is written.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from ablate.errors import SpecError

app = typer.Typer(
    help="Ablation studies of attention mechanisms: plan a YAML grid, launch it on Ray, record to SQLite + "
    "MLflow, report paper-style tables.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def fail(message: str, code: int = 2) -> None:
    err.print(f"[bold red]error[/]: {message}", highlight=False, markup=True)
    raise typer.Exit(code)


def plans_of(file: Path, sweeps: list[str] | None) -> list[Any]:
    """Load and plan the named sweeps of `file` (all when none named); exit 2 on any problem."""
    from ablate.planner import expand
    from ablate.spec import load_sweeps

    try:
        loaded = load_sweeps(file)
    except SpecError as e:
        err.print(f"[bold red]{file}: {len(e.problems)} problem(s)[/]")
        for p in e.problems:
            err.print(str(p), markup=False, highlight=False)
        raise typer.Exit(2)
    unknown = [s for s in sweeps or [] if s not in loaded]
    if unknown:
        fail(f"{file}: no sweep named {', '.join(map(repr, unknown))}; the file has {', '.join(loaded)}")
    return [expand(loaded[s]) for s in (sweeps or list(loaded))]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


def plan_rows(plan: Any, costs: bool) -> list[dict[str, Any]]:
    """One row per trial: key, variant, axis values, cost, resolved config (what csv/json print)."""
    rows = []
    cost_of = None
    if costs:
        from ablate.nn.accounting import model_cost

        cost_of = model_cost
    for t in plan.trials:
        row: dict[str, Any] = {"sweep": plan.sweep, "key": t.key, "variant": t.variant, **t.axes}
        if cost_of is not None:
            c = cost_of(t.config)
            row["params"], row["gflops"] = c.params, round(c.gflops, 4)
        row["config"] = t.config.model_dump(mode="json")
        rows.append(row)
    return rows


@app.command()
def plan(
    file: Path = typer.Argument(Path("experiments.yaml"), help="The experiments file."),
    sweep: Optional[list[str]] = typer.Argument(None, help="Sweeps to plan (default: every sweep)."),
    format: Format = typer.Option(Format.table, "--format", "-f", help="table (rich), csv or json rows."),
    costs: bool = typer.Option(True, "--costs/--no-costs", help="Compute params and GFLOPs per trial."),
    limit: int = typer.Option(200, help="Rows shown in the table (csv/json always print every row)."),
) -> None:
    """Expand sweeps into trials: key, axis values, params and GFLOPs; counts per axis."""
    plans = plans_of(file, sweep)
    rows = [r for p in plans for r in plan_rows(p, costs)]
    if format is Format.json:
        sys.stdout.write(json.dumps(rows, indent=1) + "\n")
        return
    if format is Format.csv:
        import csv

        fields = list(dict.fromkeys(k for r in rows for k in r))
        writer = csv.DictWriter(sys.stdout, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in r.items()})
        return
    for p in plans:
        prows = [r for r in rows if r["sweep"] == p.sweep]
        table = Table(title=f"{p.sweep}: {len(p.trials)} trials, {len(p.variants)} variants", title_justify="left")
        table.add_column("key")
        for a in p.axes:
            table.add_column(a)
        table.add_column("seed", justify="right")
        if costs:
            table.add_column("params", justify="right")
            table.add_column("GFLOPs", justify="right")
        for r in prows[:limit]:
            base = "  *" if r["variant"] == p.baseline else ""
            cells = [r["key"][:10] + base] + [_cell(r[a]) for a in p.axes] + [str(r["seed"])]
            if costs:
                cells += [f"{r['params'] / 1e6:.2f}M", f"{r['gflops']:.3f}"]
            table.add_row(*cells)
        out.print(table)
        if len(prows) > limit:
            out.print(f"... {len(prows) - limit} more rows (--limit, or --format csv)")
        counts = "; ".join(
            f"{a}: " + ", ".join(f"{_cell(v)}={n}" for v, n in c.items()) for a, c in p.counts().items()
        )
        out.print(f"total {len(p.trials)}; {counts}; seeds {len(set(t.axes['seed'] for t in p.trials))}")
        if p.baseline:
            out.print("* = baseline variant")


@app.command()
def schema() -> None:
    """Print the JSON schema of experiments.yaml (for editor completion and checking)."""
    from ablate.spec import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2) + "\n")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
