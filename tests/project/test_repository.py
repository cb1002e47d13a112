"""The repository stands alone: no tracked file points at a folder outside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UP = re.compile(r"(?:\.\./)+[\w.\-/]*")
OUTSIDE_NAMES = re.compile(r"\bREFERENCE\.md\b|\bDESIGN\.md\b")
"""Documents that live beside the repository, not in it: cite the papers by title instead."""


def tracked_text_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    files = []
    for name in filter(None, names.split("\0")):
        path = ROOT / name
        if path.is_file() and b"\0" not in path.read_bytes()[:4096]:
            files.append(path)
    return files


def leaving_paths(path: Path, text: str) -> list[str]:
    """`../` paths in `text` that, taken from `path`'s folder, resolve outside the repository."""
    found = []
    for m in UP.finditer(text):
        target = (path.parent / m.group()).resolve()
        if not target.is_relative_to(ROOT):
            found.append(m.group())
    return found + OUTSIDE_NAMES.findall(text)


def test_no_tracked_file_refers_outside_the_repository() -> None:
    files = tracked_text_files()
    assert any(f.name == "experiments.yaml" for f in files)
    offenders = {}
    for f in files:
        if f == Path(__file__).resolve():
            continue
        hits = leaving_paths(f, f.read_text(errors="replace"))
        if hits:
            offenders[str(f.relative_to(ROOT))] = hits
    assert offenders == {}


def test_the_scan_catches_a_path_that_leaves() -> None:
    """The scan itself: the old MIL folder reference is caught; a path that stays inside is not."""
    assert leaving_paths(ROOT / "experiments.yaml", "data: {path: ../elsewhere/bags}") == ["../elsewhere/bags"]
    assert leaving_paths(ROOT / "tests" / "x.py", "path: ../ablate/data") == []
    assert leaving_paths(ROOT / "README.md", "see REFERENCE.md") == ["REFERENCE.md"]
