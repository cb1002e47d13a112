"""Where a report's files go and how they are written: the formats a caller may ask for, a sweep's safe folder
under the output folder, and a page in each asked-for markup. Shared by the sweep report (`ablate.reporting`)
and the two-sweep comparison (`ablate.reporting.compare`)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from ablate.reporting import render, stats
from ablate.reporting.frames import ReportError
from ablate.reporting.render import Section
from ablate.spec import SAFE_NAME

FORMATS = ("html", "md", "csv")
"""Written unless the caller names others."""
ALL_FORMATS = (*FORMATS, "tex")


def check(formats: Iterable[str], correction: str) -> set[str]:
    """The formats asked for, as a set; ReportError for an unknown format or correction."""
    wanted = set(formats)
    if not wanted or wanted - set(ALL_FORMATS):
        raise ReportError(
            f"formats must be some of {', '.join(ALL_FORMATS)}, not {', '.join(sorted(wanted)) or 'none'}"
        )
    if correction not in stats.CORRECTIONS:
        raise ReportError(f"correction must be one of {', '.join(stats.CORRECTIONS)}, not {correction!r}")
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


def write_pages(where: Path, formats: set[str], title: str, meta: list[str], sections: list[Section]) -> list[Path]:
    """The page in each asked-for markup: index.html, report.md (figures as links beside it), tables.tex."""
    pages = {"html": ("index.html", render.html_page), "md": ("report.md", render.markdown),
             "tex": ("tables.tex", render.latex)}  # fmt: skip
    return [
        write_file(where / name, make(title, meta, sections)) for fmt, (name, make) in pages.items() if fmt in formats
    ]
