"""The export format, both ways: a store's rows (`ablate.store.dump.Dump`) as Parquet or CSV files in a folder, and
such a folder read back into rows (what `ablate import FOLDER` adds to a store).

One file per table (`sweeps`, `trials`, `members`, `metrics`, `previous`) and `manifest.json` (the format, the
store's schema revision, what was exported and when). Each column is typed from the store's schema: JSON columns as
JSON text, times as UTC timestamps (microseconds), counts as int64. The trials file also carries each trial's config
and result flattened to columns (`config.model.embed_dim`, `result.test.top1`) for tools that read tables; reading
an export back takes the JSON columns, which hold the same values whole. docs/export.md is the schema, column by
column.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import JSON, Boolean, DateTime, Float, Integer

from ablate.spec.paths import flatten
from ablate.store import dump
from ablate.store.dump import Dump
from ablate.store.queries import MEMBERS, METRICS, PREVIOUS, SWEEPS, TRIALS

if TYPE_CHECKING:
    import pyarrow as pa

FORMATS = ("parquet", "csv")
MANIFEST = "manifest.json"
FORMAT_NAME = "ablate-export"
FORMAT_VERSION = 1
TABLES = {
    "sweeps": (SWEEPS, dump.SWEEP_COLUMNS),
    "trials": (TRIALS, dump.TRIAL_COLUMNS),
    "members": (MEMBERS, dump.MEMBER_COLUMNS),
    "metrics": (METRICS, dump.METRIC_COLUMNS),
    "previous": (PREVIOUS, dump.PREVIOUS_COLUMNS),
}
"""Each exported table: the store's table and the columns exported."""
FLATTENED = ("config", "result")
"""The trials' JSON columns also written flattened, one column per path."""


class ExportError(ValueError):
    """A folder that is not an export ablate can read back, or an export asked for in an unknown format."""


@dataclass(frozen=True)
class Exported:
    """What `write` wrote: the folder, its files and the rows per table."""

    folder: Path
    files: list[Path]
    rows: dict[str, int]


def is_export(folder: Path) -> bool:
    """Whether `folder` holds an export (its manifest)."""
    return (folder / MANIFEST).is_file()


def _arrow_type(column: Any) -> pa.DataType:
    import pyarrow as pa

    kind = column.type
    if isinstance(kind, JSON):
        return pa.string()
    if isinstance(kind, DateTime):
        return pa.timestamp("us", tz="UTC")
    if isinstance(kind, Boolean):
        return pa.bool_()
    if isinstance(kind, Integer):
        return pa.int64()
    if isinstance(kind, Float):
        return pa.float64()
    return pa.string()


def schema(name: str) -> pa.Schema:
    """The Arrow schema of one exported table (its flattened columns aside)."""
    import pyarrow as pa

    table, columns = TABLES[name]
    return pa.schema([pa.field(c, _arrow_type(table.c[c])) for c in columns])


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, allow_nan=False)


def _utc(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


def _to_arrow(name: str, rows: Sequence[dict[str, Any]]) -> pa.Table:
    import pyarrow as pa

    shape = schema(name)
    table, columns = TABLES[name]
    data: dict[str, list[Any]] = {}
    for c in columns:
        values = [r[c] for r in rows]
        if isinstance(table.c[c].type, JSON):
            values = [_json_text(v) for v in values]
        elif isinstance(table.c[c].type, DateTime):
            values = [_utc(v) for v in values]
        data[c] = values
    out = pa.Table.from_pydict(data, schema=shape)
    if name == "trials":
        for column in FLATTENED:
            flat = [flatten(r[column] or {}, column) for r in rows]
            for path in sorted({p for f in flat for p in f}):
                out = out.append_column(path, _loose([f.get(path) for f in flat]))
    return out


def _loose(values: list[Any]) -> pa.Array:
    """A flattened column: numbers as float64 (int64 where every value is an integer), booleans as bool, anything
    else (text, lists, a mix of types) as text, lists and mappings as JSON."""
    import pyarrow as pa

    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.array(values, pa.bool_())
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.array(values, pa.int64())
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return pa.array([None if v is None else float(v) for v in values], pa.float64())
    text = [v if v is None or isinstance(v, str) else _json_text(v) for v in values]
    return pa.array(text, pa.string())


def write(rows: Dump, folder: Path, fmt: str = "parquet", *, revision: str, sweeps: Iterable[str] | None = None,
          version: str = "") -> Exported:  # fmt: skip
    """Write `rows` to `folder` (created) as `fmt` files, one per table, and the manifest last: a folder without
    a manifest is no export (an interrupted one is never read back)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; expected one of {', '.join(FORMATS)}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    files, counts = [], {}
    for name in TABLES:
        got: list[dict[str, Any]] = getattr(rows, name)
        table = _to_arrow(name, got)
        path = folder / f"{name}.{fmt}"
        if fmt == "parquet":
            pq.write_table(table, path)
        else:
            pacsv.write_csv(table, path, pacsv.WriteOptions(quoting_style="all_valid"))  # null: an empty field
        files.append(path)
        counts[name] = len(got)
    manifest = {"format": FORMAT_NAME, "version": FORMAT_VERSION, "files": fmt, "schema_revision": revision,
                "ablate": version, "exported_at": datetime.now(timezone.utc).isoformat(),
                "sweeps": sorted(r["name"] for r in rows.sweeps) if sweeps is None else sorted(sweeps),
                "rows": counts}  # fmt: skip
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return Exported(folder, [*files, folder / MANIFEST], counts)


def read(folder: Path) -> Dump:
    """The rows of the export in `folder` (as `write` left them); ExportError when it is not one ablate reads."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"{folder}: no readable {MANIFEST} ({e}): not an export of `ablate export`") from None
    if manifest.get("format") != FORMAT_NAME or manifest.get("version") != FORMAT_VERSION:
        found = f"format {manifest.get('format')!r} version {manifest.get('version')!r}"
        raise ExportError(f"{folder / MANIFEST}: {found}; this ablate reads {FORMAT_NAME!r} version {FORMAT_VERSION}")
    fmt = manifest.get("files")
    out = Dump()
    for name, (table, columns) in TABLES.items():
        path = folder / f"{name}.{fmt}"
        shape = schema(name)
        try:
            if fmt == "parquet":
                read_table = pq.read_table(path, columns=columns).cast(shape)
            else:
                options = pacsv.ConvertOptions(
                    column_types=shape,
                    include_columns=columns,
                    strings_can_be_null=True,
                    quoted_strings_can_be_null=False,
                )
                read_table = pacsv.read_csv(path, convert_options=options)
        except (OSError, ValueError, KeyError) as e:
            raise ExportError(f"{path}: cannot read it as the export's {name} table: {e}") from None
        json_columns = [c for c in columns if isinstance(table.c[c].type, JSON)]
        rows = read_table.to_pylist()
        for r in rows:
            for c in json_columns:
                r[c] = None if r[c] is None else json.loads(r[c])
            for c, v in r.items():
                if isinstance(v, float) and math.isnan(v) and c not in ("value", "wall_time"):
                    r[c] = None
        setattr(out, name, rows)
    return out
