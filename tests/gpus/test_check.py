"""`ablate gpu-check` as one call (`ablate.gpus.check`): what this machine has decides between the dry run and the
reason torch cannot train, and the answer says which. This CPU machine has no GPU; the driver's side is a stub
`nvidia-smi` on PATH (test_host's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rich.console import Console
from test_host import H200, on_path, smi

from ablate.api import launch
from ablate.gpus.check import check
from ablate.gpus.host import Devices
from ablate.gpus.sweep import SweepSpec

NO_GPU = pytest.mark.skipif(
    torch.cuda.is_available() or Path("/proc/driver/nvidia/gpus").exists(), reason="this machine has a GPU"
)
QUIET = Console(quiet=True)


def test_a_dry_run_asked_for_lists_the_sweep_and_reads_no_driver() -> None:
    done = check(SweepSpec(seeds=1), launch, QUIET, dry=True)
    assert done.planned is not None and done.figures is None and done.unusable is None and done.devices is None
    assert [len(row.trials) for row in done.planned.phases] == [2, 2, 2, 2]


@NO_GPU
def test_without_a_gpu_the_check_lists_the_sweep_and_says_what_the_driver_listed(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(smi(tmp_path / "bin", "echo 'No devices were found'; exit 6")))
    done = check(SweepSpec(seeds=1, compile=False), launch, QUIET)
    assert done.devices is not None and done.devices.names == [] and "exited 6" in (done.devices.problem or "")
    assert done.planned is not None and [row.phase.name for row in done.planned.phases] == ["fp32", "bf16", "packed"]
    assert done.figures is None and done.unusable is None


@NO_GPU
def test_gpus_this_torch_cannot_use_are_the_answer_and_nothing_is_planned(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", on_path(smi(tmp_path / "bin", f"echo '{H200}'")))
    done = check(SweepSpec(), launch, QUIET)
    assert done.devices == Devices([H200])
    assert done.unusable is not None and "1 NVIDIA GPU(s) found" in done.unusable
    assert done.planned is None and done.figures is None
