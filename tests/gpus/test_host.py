"""`ablate gpu-check` on a node whose driver lists GPUs that torch cannot use: exit 2 with the reason and what to run,
never the dry run that passes for "no GPU". The driver's side is a stub `nvidia-smi` on PATH and a /proc root of the
test's own; torch is this machine's CPU build."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.cli import app
from ablate.gpus.host import Devices, TorchBuild, nvidia_devices, unusable

H200 = "GPU 0: NVIDIA H200 (UUID: GPU-5e1f0c7a-0000-0000-0000-000000000000)"
CPU_TORCH = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine's torch can use a GPU")


def smi(folder: Path, body: str) -> Path:
    """A stub `nvidia-smi` in `folder` running `body` (sh), checked to run as a program; the folder, to put first on
    PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    subprocess.run([script, "-L"], capture_output=True, timeout=30)
    return folder


def on_path(folder: Path) -> str:
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def test_the_devices_are_read_from_nvidia_smi_or_the_drivers_folder(tmp_path, monkeypatch) -> None:
    lister = smi(tmp_path / "bin", f"echo '{H200}'; echo '  MIG 1g.18gb Device 0: (UUID: MIG-1)'")
    monkeypatch.setenv("PATH", on_path(lister))
    assert nvidia_devices(tmp_path) == Devices([H200])  # a MIG line is not another GPU
    failing = smi(tmp_path / "broken", "echo 'NVIDIA-SMI has failed because it could not communicate with the "
                                       "NVIDIA driver.' >&2; exit 9")  # fmt: skip
    monkeypatch.setenv("PATH", on_path(failing))
    found = nvidia_devices(tmp_path)
    assert found.names == [] and found.problem is not None
    assert "exited 9 listing no GPU: NVIDIA-SMI has failed" in found.problem
    gpus = tmp_path / "proc" / "driver" / "nvidia" / "gpus"
    (gpus / "0000:3b:00.0").mkdir(parents=True)
    assert nvidia_devices(tmp_path).names == [f"PCI 0000:3b:00.0 ({gpus})"]  # no nvidia-smi answer, still a GPU
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert nvidia_devices(tmp_path / "elsewhere") == Devices([])


def test_what_torch_cannot_use_is_said_with_what_to_run(monkeypatch) -> None:
    gpus = Devices([H200])
    cpu = unusable(gpus, TorchBuild("2.13.0+cpu", None, False))
    assert cpu is not None and "torch 2.13.0+cpu is a CPU build" in cpu and "make gpu-install" in cpu
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    old = unusable(gpus, TorchBuild("2.13.0", "13.0", False))
    assert old is not None and "(built for CUDA 13.0) cannot use them" in old and "driver may be older" in old
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cu" in old
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    hidden = unusable(gpus, TorchBuild("2.13.0", "13.0", False))
    assert hidden is not None and "CUDA_VISIBLE_DEVICES='' hides them" in hidden
    assert unusable(gpus, TorchBuild("2.13.0", "13.0", True)) is None
    assert unusable(Devices([]), TorchBuild("2.13.0+cpu", None, False)) is None  # no GPU: the dry run


@CPU_TORCH
def test_a_cpu_torch_on_a_gpu_node_fails_the_check_and_writes_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    lister = smi(tmp_path.parent / f"{tmp_path.name}-bin", f"echo '{H200}'")
    result = CliRunner().invoke(app, ["gpu-check"], env={"PATH": on_path(lister), "COLUMNS": "400"})
    assert result.exit_code == 2, result.output
    assert f"1 NVIDIA GPU(s) found ({H200}), but torch {torch.__version__} is a CPU build" in result.output
    assert "make gpu-install" in result.output and "dry run" not in result.output
    assert list(tmp_path.iterdir()) == []


@CPU_TORCH
def test_an_nvidia_smi_that_lists_nothing_is_named_in_the_dry_run(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    failing = smi(tmp_path.parent / f"{tmp_path.name}-bin", "echo 'No devices were found'; exit 6")
    result = CliRunner().invoke(app, ["gpu-check", "--no-compile"], env={"PATH": on_path(failing), "COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert "no GPU found (" in result.output and "exited 6 listing no GPU: No devices were found): dry run" in (
        result.output
    )
