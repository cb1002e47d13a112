"""Runs from a table (CSV or Parquet): one row per run (axis columns, a seed column, metric columns), or the long
format with an epoch column (one row per run and epoch; the last epoch's values are the run's result unless the
mapping selects the best).

Which columns are which: the axes or the metrics named (the other columns are the rest), the seed, and optionally
a run id, an epoch and a status column (done, or failed / error / killed for a failed run). A column named that
the table lacks is an ImportProblem naming the file and its columns. Types are the table's: an axis column may mix
numbers and text (each value is kept as it is); a metric column must hold numbers (a cell of text is an
ImportProblem naming its row); an empty metric cell is a value the run lacks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.transfer.runs import ImportProblem, Point, Run, Source

FAILED = frozenset({"failed", "error", "killed", "crashed", "diverged"})
DONE = frozenset({"done", "finished", "ok", "success", "completed"})


@dataclass(frozen=True)
class Columns:
    """The table's columns by role; `axes` or `metrics` may be left to be the other columns."""

    seed: str
    axes: tuple[str, ...] | None = None
    metrics: tuple[str, ...] | None = None
    run_id: str | None = None
    epoch: str | None = None
    status: str | None = None


def read_frame(path: Path) -> Any:
    """The table at `path` as a pandas frame (Parquet by its suffix, else CSV)."""
    import pandas as pd

    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            return pd.read_parquet(path)
        return pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise ImportProblem([f"{path}: cannot read it as a table: {e}"]) from None


def _native(value: Any) -> Any:
    """A cell as Python data: None for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.item() if hasattr(value, "item") else value


def _cells(column: Any) -> list[Any]:
    """A column's cells as Python data, None where a value is missing (a whole column at once: `tolist` makes
    Python's numbers and text without a call per cell)."""
    missing = column.isna().tolist()
    return [None if gone else value for value, gone in zip(column.tolist(), missing)]


def _number(value: Any) -> bool:
    """Whether a cell of a text column is a number all the same (a CSV column that holds one word among numbers)."""
    if isinstance(value, bool):
        return False
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def runs(path: Path, columns: Columns) -> tuple[list[Run], Source, tuple[str, ...]]:
    """The runs of the table at `path`, its source, and its axis columns."""
    import pandas as pd
    from pandas.api.types import is_bool_dtype, is_numeric_dtype

    frame = read_frame(path)
    names = [str(c) for c in frame.columns]
    roles = [c for c in (columns.seed, columns.run_id, columns.epoch, columns.status) if c]
    named = [*roles, *(columns.axes or ()), *(columns.metrics or ())]
    problems = [f"{path}: no column {c!r} (columns: {', '.join(names)})" for c in dict.fromkeys(named)
                if c not in names]  # fmt: skip
    if columns.axes is None and columns.metrics is None:
        problems.append(f"{path}: name the axis columns (--axis) or the metric columns (--metric)")
    if problems:
        raise ImportProblem(problems)
    rest = [c for c in names if c not in roles]
    axes = (
        tuple(columns.axes) if columns.axes is not None else tuple(c for c in rest if c not in (columns.metrics or ()))
    )
    metrics = tuple(columns.metrics) if columns.metrics is not None else tuple(c for c in rest if c not in axes)
    bad = []
    for m in metrics:
        if not is_numeric_dtype(frame[m]) or is_bool_dtype(frame[m]):
            text = [(i, v) for i, v in enumerate(frame[m]) if _native(v) is not None and not _number(v)]
            if text:
                i, v = text[0]
                bad.append(f"{path}: metric column {m!r} holds text ({v!r} in row {i + 1}, and "
                           f"{len(text) - 1} more); a metric takes numbers")  # fmt: skip
    if bad:
        raise ImportProblem(bad)
    cells = {c: _cells(frame[c]) for c in dict.fromkeys([*axes, *roles])}  # a column at a time, not a cell
    values = {m: _cells(pd.to_numeric(frame[m], errors="coerce")) for m in metrics}
    seeds, ids = cells[columns.seed], cells[columns.run_id] if columns.run_id else None
    epochs, states = cells[columns.epoch] if columns.epoch else None, cells[columns.status] if columns.status else None
    grouped: dict[Any, Run] = {}
    for i, seed in enumerate(seeds):
        params = {a: cells[a][i] for a in axes}
        if ids is not None:
            ident = str(ids[i])
        else:
            ident = repr((sorted(params.items(), key=str), seed)) if epochs is not None else f"row {i + 1}"
        run = grouped.get(ident)
        if run is None:
            run = grouped[ident] = Run(ident if ids is not None or epochs is None else f"row {i + 1}",
                                       {**params, columns.seed: seed}, {})  # fmt: skip
        step = int(epochs[i]) if epochs is not None else 0
        for m in metrics:
            if (value := values[m][i]) is not None:
                run.metrics.setdefault(m, []).append(Point(step, float(value)))
        if states is not None:
            run.state = "failed" if str(states[i] or "done").lower() in FAILED else "done"
    if epochs is not None:
        for run in grouped.values():
            for points in run.metrics.values():
                points.sort(key=lambda p: p.step)
    return list(grouped.values()), Source("table", str(path.resolve()), path.name), axes
