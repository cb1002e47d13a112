"""The repository stands alone: no tracked file points at a folder outside it, and the repository files they
name exist (a module moved into a package leaves no script or page naming its old file)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UP = re.compile(r"(?:\.\./)+[\w.\-/]*")
OUTSIDE_NAMES = re.compile(r"\bREFERENCE\.md\b|\bDESIGN\.md\b")
"""Documents that live beside the repository, not in it: cite the papers by title instead."""
TOP = "ablate|tests|bench|examples|workers|docs"
NAMED = re.compile(rf"(?<![\w/.\-])(?:{TOP})/[\w/.\-]+\.(?:py|yaml|sbatch|md|json|toml)\b")
"""A repository file named from its root (`ablate/nn/mechanisms/csan/layers.py`); an absolute path's tail is not one."""
HISTORY = ROOT / "docs" / "changelog.md"
"""Names the files of its time, moved or gone since."""


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


def missing_files(text: str) -> list[str]:
    """The repository files `text` names from the root that do not exist."""
    return [name for name in NAMED.findall(text) if not (ROOT / name).exists()]


def test_every_repository_file_a_tracked_file_names_exists() -> None:
    """bench/mutants.py mutated ablate/nn/csan.py for months after it became a package: mutmut found nothing to
    mutate and the group scored nothing, silently."""
    offenders = {}
    for f in tracked_text_files():
        if f in (HISTORY, Path(__file__).resolve()):
            continue
        if hits := missing_files(f.read_text(errors="replace")):
            offenders[str(f.relative_to(ROOT))] = hits
    assert offenders == {}


def test_the_names_scan_sees_root_paths_only() -> None:
    assert missing_files('["ablate/nn/csan.py", "ablate/nn/mechanisms/csan/layers.py"]') == ["ablate/nn/csan.py"]
    assert missing_files("(/home/me/ablate/ablate/registry.py:61) site/ablate/gone.py") == []
