"""Rows read from the store as plain Python values, column by column: what `ablate status` and `ablate runs` read,
filter and print without pandas (importing it was a third of their start-up at 100,000 trials). Frames for
analysis are built from a listing (`ablate.store.queries.Queries.trials_frame`)."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any


@dataclass(frozen=True)
class Listing:
    """Named columns of equal length (a value per row; None where a row has none), in order."""

    columns: dict[str, list[Any]]

    @classmethod
    def of_records(cls, records: Sequence[dict[str, Any]]) -> Listing:
        """Rows given as mappings; columns in the order they first appear."""
        names: dict[str, None] = {}
        for record in records:
            names.update(dict.fromkeys(record))
        return cls({n: [r.get(n) for r in records] for n in names})

    @classmethod
    def of_rows(cls, names: Sequence[str], rows: Iterable[Sequence[Any]]) -> Listing:
        """Rows given as sequences of the `names`' values."""
        columns: list[list[Any]] = [[] for _ in names]
        for row in rows:
            for values, value in zip(columns, row, strict=True):
                values.append(value)
        return cls(dict(zip(names, columns, strict=True)))

    @classmethod
    def of_frame(cls, frame: Any) -> Listing:
        """A pandas DataFrame's columns (pandas is not imported here: the frame brings it)."""
        return cls({str(c): frame[c].tolist() for c in frame.columns})

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()), []))

    def __contains__(self, name: object) -> bool:
        return name in self.columns

    def __getitem__(self, name: str) -> list[Any]:
        return self.columns[name]

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def select(self, names: Iterable[str]) -> Listing:
        return Listing({n: self.columns[n] for n in names})

    def rows(self, keep: Iterable[bool]) -> Listing:
        """The rows where `keep` is true, in order."""
        chosen = [i for i, k in enumerate(keep) if k]
        return Listing({n: [values[i] for i in chosen] for n, values in self.columns.items()})

    def first_of(self, name: str) -> Listing:
        """Each value of column `name` once: the first row with it."""
        first: dict[Any, int] = {}
        for i, v in enumerate(self.columns[name]):
            first.setdefault(v, i)
        chosen = set(first.values())
        return self.rows(i in chosen for i in range(len(self)))

    def records(self) -> Iterator[dict[str, Any]]:
        for row in zip(*self.columns.values()):
            yield dict(zip(self.columns, row))

    def write_csv(self, out: IO[str]) -> None:
        """As pandas' to_csv writes a frame: a header, missing values empty, times in ISO form with a space."""
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows([("" if missing(v) else v) for v in row] for row in zip(*self.columns.values()))

    def write_json(self, out: IO[str]) -> None:
        """One object per row; missing values null, times in ISO 8601."""
        rows = [{n: None if missing(v) else v for n, v in r.items()} for r in self.records()]
        out.write(json.dumps(rows, indent=1, default=_iso) + "\n")


def missing(value: Any) -> bool:
    """None, NaN, and pandas' NA and NaT (told by type name: pandas need not be imported)."""
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or type(value).__name__ in ("NAType", "NaTType")
    )


def _iso(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON")
