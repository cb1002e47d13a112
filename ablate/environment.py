"""What a result was produced with: code version, packages, host, device. Recorded with every trial."""

from __future__ import annotations

import functools
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

PACKAGES = ("ablate", "torch", "timm", "numpy", "ray", "mlflow", "entmax", "pydantic")


@functools.cache
def git_state() -> dict[str, Any]:
    """Commit and dirty flag of the ablate checkout (None outside a git checkout, e.g. a wheel install)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"git_sha": sha, "git_dirty": bool(status) if status is not None else None}


@functools.cache
def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def environment(device: torch.device) -> dict[str, Any]:
    """The record of where and with what a trial ran."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or platform.machine())
    return {
        **git_state(),
        "packages": package_versions(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "device": f"{device.type}:{name}",
        "torch_threads": torch.get_num_threads(),
    }
