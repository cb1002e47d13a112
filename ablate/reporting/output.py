"""Where a report's files go and how they are written: the formats a caller may ask for, a sweep's safe folder
under the output folder, and a page in each asked-for markup. Shared by the sweep report (`ablate.reporting`)
and the two-sweep comparison (`ablate.reporting.compare`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from ablate.reporting import render, stats
from ablate.reporting.frames import ReportError
from ablate.reporting.render import Section
from ablate.spec.schema import SAFE_NAME

FORMATS = ("html", "md", "csv")
"""Written unless the caller names others."""
ALL_FORMATS = (*FORMATS, "tex")


def check(formats: Iterable[str], correction: str, interval: str = "policy") -> set[str]:
    """The formats asked for, as a set; ReportError for an unknown format, correction or interval."""
    wanted = set(formats)
    if not wanted or wanted - set(ALL_FORMATS):
        raise ReportError(
            f"formats must be some of {', '.join(ALL_FORMATS)}, not {', '.join(sorted(wanted)) or 'none'}"
        )
    if correction not in stats.CORRECTIONS:
        raise ReportError(f"correction must be one of {', '.join(stats.CORRECTIONS)}, not {correction!r}")
    if interval not in stats.INTERVALS:
        raise ReportError(f"interval must be one of {', '.join(stats.INTERVALS)}, not {interval!r}")
    return wanted


def folder(sweep: str) -> str:
    """The sweep's folder under `out`: its name when that is a safe name (what the planner accepts), else a
    sanitised name with a hash, so `..`, `.`, `index.html` or `a/b` (a store written by other means) can
    never leave `out` or overwrite its index."""
    if SAFE_NAME.fullmatch(sweep):
        return sweep
    return f"sweep-{re.sub(r'[^A-Za-z0-9_-]', '_', sweep)[:40]}-{hashlib.sha256(sweep.encode()).hexdigest()[:8]}"


def write_file(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def csv(frame: pd.DataFrame, index: bool = True) -> str:
    """`frame.to_csv(index=index)`, the same text, with its UTC timestamp columns formatted a column at a time
    (`utc_text`): pandas formats tz-aware timestamps one by one, half the time of a large sweep's trials.csv."""
    utc = {
        c: utc_text(frame[c])
        for c, t in frame.dtypes.items()
        if isinstance(t, pd.DatetimeTZDtype) and str(t.tz) == "UTC"
    }
    text: str = frame.assign(**utc).to_csv(index=index)
    return text


def utc_text(col: pd.Series) -> pd.Series:
    """A UTC timestamp column as pandas writes it: date, time with the decimals its finest value needs (none,
    3, 6 or 9, the same for the whole column), `+00:00`; None where missing."""
    wall = col.dt.tz_localize(None).to_numpy()  # UTC wall time, in the column's unit
    known = ~np.isnat(wall)
    text = np.full(len(wall), None, dtype=object)
    if known.any():
        stamps = np.datetime_as_string(wall[known], unit=_finest(wall[known]))
        text[known] = np.strings.add(np.strings.replace(stamps, "T", " "), "+00:00")
    return pd.Series(text, index=col.index, dtype=object)


def _finest(wall: np.ndarray) -> Literal["s", "ms", "us", "ns"]:
    """The coarsest of s, ms, us and ns that writes every time exactly."""
    base, _ = np.datetime_data(wall.dtype)
    ticks = wall.view("int64")
    for unit in ("s", "ms", "us"):
        per = int(np.array(1, f"m8[{unit}]").astype(f"m8[{base}]").view("int64"))  # 0 where the column is coarser
        if per <= 1 or not (ticks % per).any():
            return unit
    return "ns"


def write_pages(where: Path, formats: set[str], title: str, meta: list[str], sections: list[Section]) -> list[Path]:
    """The page in each asked-for markup: index.html, report.md (figures as links beside it), tables.tex."""
    pages = {"html": ("index.html", render.html_page), "md": ("report.md", render.markdown),
             "tex": ("tables.tex", render.latex)}  # fmt: skip
    return [
        write_file(where / name, make(title, meta, sections)) for fmt, (name, make) in pages.items() if fmt in formats
    ]
