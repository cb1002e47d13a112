"""Tables as the commands print them: fitted to the terminal rather than cut by rich, cells as a person reads them,
and the same cells as Markdown."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from rich.table import Table

from ablate.cli.common import out

if TYPE_CHECKING:
    from ablate.api import Listing


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)


KEY_SHOWN = 10
"""Characters of a trial key that a table too narrow for whole keys shows (a prefix `ablate show` takes)."""
Columns = dict[str, tuple[str, list[str]]]
"""A table to print: per column of the frame, its header and its cells as shown."""


def print_table(
    rows: Listing,
    title: str,
    *,
    compact: Listing | None = None,
    drop: Sequence[str] = (),
    wrap: Collection[str] = (),
    hint: str = "",
) -> None:
    """Print `rows` (an `ablate.store.Listing`) as a table that fits the terminal, rather than one whose headers
    rich cuts to `swe…`.

    Whole where it fits (cells of the `wrap` columns wrap between words); else `compact` (the caller's folded
    form of `rows`, by default `rows`) with axis columns by the shortest end of their path, trial keys cut
    to a prefix and a sweep column of one value said in the title; while that is still too wide, the columns
    of `drop` are left out, in that order, and one line names them and `hint` says how to see them."""
    columns = _columns(rows)
    width = out.width
    left_out = []
    if _needed(columns, wrap) > width:
        columns, title = _compacted(columns if compact is None else _columns(compact), title)
        for name in (c for c in drop if c in columns):
            if _needed(columns, wrap) <= width:
                break
            del columns[name]
            left_out.append(name.removeprefix("axis."))
    table = Table(title=title, title_justify="left")
    for name, (header, _) in columns.items():
        table.add_column(header, no_wrap=name not in wrap)
    for row in zip(*(cells for _, cells in columns.values())):
        table.add_row(*row)
    out.print(table)
    if left_out:
        out.print(f"left out to fit {width} columns: {', '.join(left_out)} ({hint})", highlight=False, soft_wrap=False)


def _columns(rows: Listing) -> Columns:
    return {name: (name, [shown(v) for v in values]) for name, values in rows.columns.items()}


def _needed(columns: Columns, wrap: Collection[str]) -> int:
    """Terminal columns a table takes: each column its widest line of a cell or the header (its longest word
    where it wraps), plus rich's padding and rules."""
    from rich.cells import cell_len

    total = 1
    for name, (header, cells) in columns.items():
        texts = [header, *cells]
        parts = (
            [w for t in texts for w in t.split()] if name in wrap else [line for t in texts for line in t.splitlines()]
        )
        total += max(map(cell_len, parts), default=0) + 3
    return total


def _compacted(columns: Columns, title: str) -> tuple[Columns, str]:
    """`columns` made narrower without leaving one out: axis headers by the shortest end of their path that no
    other column shares (`axis.attention.kind` -> `kind`), keys cut to KEY_SHOWN characters, and a sweep column
    of one value in several rows said once, in the title."""
    axes = [c.removeprefix("axis.") for c in columns if c.startswith("axis.")]
    taken = {header for c, (header, _) in columns.items() if not c.startswith("axis.")}
    narrow: Columns = {}
    for name, (header, cells) in columns.items():
        if name.startswith("axis."):
            header = _axis_header(name.removeprefix("axis."), axes, taken)
        narrow[name] = (header, [c[:KEY_SHOWN] for c in cells] if name == "key" else cells)
    sweeps = set(narrow.get("sweep", ("", []))[1])
    if len(sweeps) == 1 and len(narrow["sweep"][1]) > 1:
        del narrow["sweep"]
        title = f"{title}, sweep {sweeps.pop()}"
    return narrow, title


def _axis_header(path: str, axes: list[str], taken: set[str]) -> str:
    """The shortest end of an axis path that no other of the `axes` ends with and no other column is called."""
    parts = path.split(".")
    for n in range(1, len(parts) + 1):
        end = ".".join(parts[-n:])
        if end not in taken and sum(a == end or a.endswith(f".{end}") for a in axes) == 1:
            return end
    return f"axis.{path}"


def shown(value: Any) -> str:
    """A cell as tables print it: numbers to 4 significant digits, missing values as -."""
    from ablate.api import missing  # asked for here: `ablate --help` never imports the store

    if missing(value):
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else cell(value)


def markdown(rows: Listing) -> str:
    """A listing as a Markdown table (cells as the rich table prints them, `|` escaped)."""
    cells = zip(*(_markdown_cells(values) for values in rows.columns.values()))
    lines = ["| " + " | ".join(rows.names) + " |", "|" + "---|" * len(rows.names)]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines) + "\n"


def _markdown_cells(values: list[Any]) -> list[str]:
    """A column's cells for `markdown`: each distinct value's made once (a plan's columns repeat theirs over
    100,000 rows), a text as itself (`shown` gives it as it is)."""
    made: dict[tuple[type, Any], str] = {}
    out = []
    for v in values:
        if type(v) is str:
            out.append(markdown_cell(v))
            continue
        key = (type(v), v)
        try:
            text = made.get(key)
        except TypeError:  # a list or a mapping: as it is, each time
            out.append(markdown_cell(v))
            continue
        if text is None:
            text = made[key] = markdown_cell(v)
        out.append(text)
    return out


def markdown_cell(value: Any) -> str:
    """A cell of `markdown`: a text as itself, any other value as `shown` gives it; `|` escaped."""
    return _escaped(value if type(value) is str else shown(value))


def _escaped(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def more(shown: int, total: int, what: str, how: str) -> None:
    """Under a listing cut to its first rows: how many more there are and how to see them."""
    if total > shown:
        out.print(f"... and {total - shown} more {what}: {how}", highlight=False)
