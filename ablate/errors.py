"""Errors a user can act on: each names the file, the key path, the line (when known) and what was expected."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


def format_path(path: Sequence[str | int]) -> str:
    """`sweeps.cpu.grid["model.stack"][1]`: dotted keys are quoted so the path reads back unambiguously."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "." in part or " " in part or not part:
            out += f'["{part}"]'
        else:
            out += f".{part}" if out else part
    return out or "<top>"


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a spec file."""

    file: str
    path: tuple[str | int, ...]
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {format_path(self.path)}: {self.message}"


class SpecError(ValueError):
    """All problems of a spec file at once (the CLI prints them and exits with code 2)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(dict.fromkeys(problems))
        super().__init__("\n".join(str(p) for p in self.problems))
