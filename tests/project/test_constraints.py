"""constraints.txt installs on a machine whose pip reaches PyPI alone: no pin names a build PyPI never carries, and
the install lines (the Makefile's, the installation page's) ask for exactly what it pins."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from conftest import needs
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
#: A `name==version` the install lines name on the command line, beside `-c constraints.txt`.
PINNED = re.compile(r"\b([A-Za-z][\w.\-]*)==(\S+)")
#: Where a user's install line stands, and how to find it there (the Makefile's continues on the next line).
LINES = {
    "Makefile": r"pip install [^\n]*-c constraints.txt \\\n[^\n]*",
    "docs/installation.md": r"pip install -c constraints.txt [^\n]*",
}


def pins(text: str) -> dict[str, Version]:
    """The `name==version` lines of a constraints file, by name (comments and blank lines skipped)."""
    found = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"constraints.txt: {line!r} is not a pin (name==version)"
            found[req.name.lower()] = Version(spec.version)
    return found


def labelled(text: str) -> list[str]:
    """Pins with a local version label (`+cpu`, `+cu128`): a build of one index, which PyPI never carries (PEP 440)."""
    return [f"{name}=={v}" for name, v in pins(text).items() if v.local is not None]


def install_lines() -> dict[str, str]:
    """The lines a user runs to install with the constraints, by where they stand."""
    found = {}
    for where, pattern in LINES.items():
        match = re.search(pattern, (ROOT / where).read_text())
        assert match is not None, f"{where}: no install line with -c constraints.txt"
        found[where] = match.group()
    return found


def test_no_pin_names_a_build_that_pypi_never_carries() -> None:
    text = (ROOT / "constraints.txt").read_text()
    assert "torch" in pins(text)
    assert labelled(text) == []
    assert labelled(text + "torch==2.13.0+cpu\n") == ["torch==2.13.0+cpu"]


def test_the_unlabelled_torch_pin_keeps_this_machines_build() -> None:
    """`torch==2.13.0` matches the local CPU build installed here (`2.13.0+cpu`) as well as PyPI's `2.13.0`."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    for name in ("torch", "torchvision"):
        assert Requirement(f"{name}=={pinned[name]}").specifier.contains(version(name))


def test_the_install_lines_ask_for_what_constraints_pins() -> None:
    pinned = pins((ROOT / "constraints.txt").read_text())
    for where, line in install_lines().items():
        named = {name.lower(): Version(v) for name, v in PINNED.findall(line)}
        assert set(named) == {"torch", "torchvision"}, where
        assert named == {n: pinned[n] for n in named}, f"{where}: {line}"


def test_pypi_carries_the_install_lines_pins() -> None:
    """pip as a user's machine has it (no configuration, so PyPI alone) lists each version the install lines name."""
    pinned = pins((ROOT / "constraints.txt").read_text())
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    for name in ("torch", "torchvision"):
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", name, "--isolated"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        needs(out.returncode == 0, f"PyPI unreachable: {out.stderr.strip()[-300:]}")
        versions = re.search(r"Available versions: (.*)", out.stdout)
        assert versions is not None, out.stdout
        assert str(pinned[name]) in versions.group(1).split(", "), f"PyPI has no {name}=={pinned[name]}"
