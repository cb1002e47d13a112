"""What a result was produced with: code version, packages, host, device. Recorded with every trial."""

from __future__ import annotations

import functools
import platform
import socket
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ablate.provenance.fingerprint import git_state

PACKAGES = ("ablate", "torch", "timm", "numpy", "ray", "mlflow", "entmax", "pydantic")


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
        **{f"git_{k}": v for k, v in git_state(Path(__file__).resolve().parent.parent).items()},
        "packages": package_versions(),
        "python": platform.python_version(),
        "host": socket.gethostname(),
        "device": f"{device.type}:{name}",
        "torch_threads": torch.get_num_threads(),
    }
