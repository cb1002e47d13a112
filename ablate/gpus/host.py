"""What `ablate gpu-check` finds on this machine before it trains: the NVIDIA devices the driver lists, and whether
this process's torch can use them (issue 52, item 1).

A CPU torch on a node full of GPUs must not pass for "no GPU": the check would print a dry run and exit 0, and the
node would be declared fine. So the devices are read from the driver's side (`nvidia-smi -L` on PATH, and the
driver's folder under /proc), never from torch, and set against what torch says of itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

INSTALL = "make gpu-install (docs/installation.md: With a CUDA torch)"
"""What to run when torch cannot use the GPUs found."""
SMI_SECONDS = 30
"""How long `nvidia-smi -L` may take (a wedged driver can hang it)."""


@dataclass(frozen=True)
class Devices:
    """The NVIDIA devices the driver lists."""

    names: list[str]
    """One line per GPU (`GPU 0: NVIDIA H200 (UUID: ...)`, or the PCI address of a /proc entry)."""
    problem: str | None = None
    """Why nvidia-smi, present on PATH, listed nothing (its exit status and last line)."""


@dataclass(frozen=True)
class TorchBuild:
    """What this process's torch says about CUDA."""

    version: str
    cuda: str | None
    """The CUDA version torch was built for (`torch.version.cuda`); None: a CPU build."""
    usable: bool
    """`torch.cuda.is_available()`."""


def nvidia_devices(root: Path = Path("/")) -> Devices:
    """The GPUs `nvidia-smi -L` lists (found on PATH), else the entries of `root`/proc/driver/nvidia/gpus (the
    driver's folder, there even where nvidia-smi is not installed)."""
    problem = None
    if (smi := shutil.which("nvidia-smi")) is not None:
        try:
            done = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=SMI_SECONDS)
        except subprocess.TimeoutExpired:
            problem = f"{smi} -L did not answer within {SMI_SECONDS} s"
        else:
            listed = [line.strip() for line in done.stdout.splitlines() if line.startswith("GPU ")]
            if listed:
                return Devices(listed)
            last = (done.stderr.strip() or done.stdout.strip() or "no output").splitlines()[-1]
            problem = f"{smi} -L exited {done.returncode} listing no GPU: {last}"
    folder = root / "proc" / "driver" / "nvidia" / "gpus"
    entries = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
    return Devices([f"PCI {name} ({folder})" for name in entries], None if entries else problem)


def torch_build() -> TorchBuild:
    import torch

    return TorchBuild(torch.__version__, torch.version.cuda, torch.cuda.is_available())


def unusable(devices: Devices, build: TorchBuild) -> str | None:
    """Why torch cannot use the GPUs the driver lists, and what to run; None where it can, or where there are
    none (a dry run then)."""
    if build.usable or not devices.names:
        return None
    found = f"{len(devices.names)} NVIDIA GPU(s) found ({devices.names[0]})"
    if build.cuda is None:
        return (
            f"{found}, but torch {build.version} is a CPU build (torch.version.cuda is None), so every trial would "
            f"train on the CPU; install a CUDA torch and the project with: {INSTALL}"
        )
    hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
    why = (
        f"CUDA_VISIBLE_DEVICES={hidden!r} hides them"
        if hidden is not None
        else f"the driver may be older than CUDA {build.cuda} needs: compare `nvidia-smi`'s CUDA version"
    )
    return (
        f"{found}, but torch {build.version} (built for CUDA {build.cuda}) cannot use them "
        f"(torch.cuda.is_available() is False; {why}); install a torch built for this driver's CUDA: "
        f"make gpu-install TORCH_INDEX=https://download.pytorch.org/whl/cuXYZ (docs/installation.md)"
    )
