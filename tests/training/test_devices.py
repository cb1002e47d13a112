"""Where a trial trains without Ray: the CPU, a GPU torch can use, or a clear failure; the text its record carries;
the peak memory it records. CUDA is stubbed where it must be usable (torch's own functions, replaced per test)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import TINY

from ablate.config import TrialConfig
from ablate.training import devices, loop
from ablate.training.devices import FAKE_GPU, VISIBLE, DeviceError, Placement

H200 = SimpleNamespace(name="NVIDIA H200", pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)


@pytest.fixture
def usable_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CUDA build that starts and sees one H200 (its properties as torch gives them)."""
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: H200)


def test_a_trial_without_a_gpu_trains_on_the_cpu() -> None:
    assert devices.resolve(None) == Placement("cpu") and devices.resolve(None).device == torch.device("cpu")
    assert devices.describe(devices.resolve(None)) == "cpu"


def test_a_task_on_the_cpu_resolves_and_describes_its_device_without_importing_torch() -> None:
    """A worker's first task paid torch's import (1.3 s) before a no-op trial could start: the trial imports it if it
    needs it."""
    code = ("import sys; from ablate.training import devices\n"
            "with devices.holding([]) as p: text = devices.describe(p)\n"
            "print(text, 'torch' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["cpu", "False"]


def test_a_gpu_cuda_can_use_is_cuda_0_named_with_nvmls_bus_id(usable_cuda: None, monkeypatch) -> None:
    monkeypatch.delenv(FAKE_GPU, raising=False)
    placement = devices.resolve("Ray gave this task GPU 3")
    assert placement == Placement("cuda:0") and placement.device == torch.device("cuda", 0)
    assert devices.describe(placement) == "cuda:0 NVIDIA H200 pci 00000000:3B:00.0"
    far = SimpleNamespace(name="NVIDIA A100-SXM4-80GB", pci_domain_id=0x10, pci_bus_id=0xAF, pci_device_id=0x1F)
    assert devices.gpu_text(far) == "NVIDIA A100-SXM4-80GB pci 00000010:AF:1F.0"
    assert devices.hardware(devices.describe(placement)) == "NVIDIA H200"
    assert devices.hardware(f"cuda:1 {devices.gpu_text(far)}") == "NVIDIA A100-SXM4-80GB"
    assert [devices.hardware(t) for t in ("cpu", "cpu (ABLATE_FAKE_GPU)")] == ["cpu", "cpu (ABLATE_FAKE_GPU)"]


def test_a_cpu_build_of_torch_fails_a_gpu_trial_naming_node_build_and_visible_devices(monkeypatch) -> None:
    monkeypatch.delenv(FAKE_GPU, raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setenv(VISIBLE, "1")
    with pytest.raises(DeviceError) as e:
        devices.resolve("Ray gave this task GPU 1")
    said = str(e.value)
    for part in ("Ray gave this task GPU 1", f"node {os.uname().nodename}", "CUDA_VISIBLE_DEVICES='1'",
                 f"torch {torch.__version__} is a CPU build", "does not fall back to the CPU", FAKE_GPU):  # fmt: skip
        assert part in said, (part, said)


def test_a_cuda_build_that_sees_no_device_says_what_torch_said(monkeypatch) -> None:
    monkeypatch.delenv(FAKE_GPU, raising=False)
    monkeypatch.delenv(VISIBLE, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "12.8")

    def no_gpu() -> None:
        raise RuntimeError("No CUDA GPUs are available")

    monkeypatch.setattr(torch.cuda, "init", no_gpu)
    with pytest.raises(DeviceError, match=r"VISIBLE_DEVICES='\(unset\)'.*\(CUDA 12.8\) cannot start CUDA: No CUDA"):
        devices.resolve("resources.gpus is 1")
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(DeviceError, match=r"\(CUDA 12.8\) sees no device"):
        devices.resolve("resources.gpus is 1")


def test_the_fake_gpu_opt_in_trains_on_the_cpu_and_says_so(monkeypatch) -> None:
    monkeypatch.setenv(FAKE_GPU, "1")
    placement = devices.resolve("Ray gave this task GPU 0")
    assert placement == Placement("cpu", fake=True)
    assert devices.describe(placement) == "cpu (ABLATE_FAKE_GPU)"


def test_a_task_holding_no_gpu_sees_none_and_the_worker_is_left_as_found(monkeypatch) -> None:
    monkeypatch.setenv(VISIBLE, "0,1")
    with devices.holding([]) as placement:
        assert os.environ[VISIBLE] == "" and placement.device == torch.device("cpu")
        assert devices.for_trial(TrialConfig.model_validate({**TINY, "resources": {"gpus": 1}})) is placement
    assert os.environ[VISIBLE] == "0,1"
    monkeypatch.delenv(VISIBLE)
    with devices.holding([]):
        assert os.environ[VISIBLE] == ""
    assert VISIBLE not in os.environ


def test_outside_ray_the_config_decides_with_the_same_failure(monkeypatch) -> None:
    monkeypatch.delenv(FAKE_GPU, raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    assert devices.for_trial(TrialConfig.model_validate(TINY)).device == torch.device("cpu")
    gpu = TrialConfig.model_validate({**TINY, "resources": {"gpus": 0.5}})
    with pytest.raises(DeviceError, match=r"^resources.gpus is 0.5 on node .* is a CPU build"):
        loop.run_trial(gpu)


def test_the_cuda_peak_is_torchs_reset_at_the_trials_start(monkeypatch) -> None:
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d: calls.append(("reset", d)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d: calls.append(("peak", d)) or 3 * 2**20)
    cuda = torch.device("cuda", 0)
    loop.reset_peak(cuda)
    assert loop.peak_memory_mb(cuda) == 3.0
    assert calls == [("reset", cuda), ("peak", cuda)]


def test_a_trial_never_records_the_peak_of_what_ran_before_it_in_its_process(tmp_path: Path) -> None:
    """A worker process runs trial after trial: the one before (here 1.2 GB, touched, then freed) is not this
    trial's peak (the tiny trial's own is about 300 MB over what the process held, imports included). The CPU's
    high-water mark is reset by the same call that resets CUDA's statistics."""
    held = resident_mb()
    big = np.ones(150 * 2**20)  # 1.2 GB, every page written
    assert loop.peak_memory_mb(torch.device("cpu")) > held + 1100
    del big
    result = loop.run_trial(TrialConfig.model_validate({**TINY, "train": {**TINY["train"], "epochs": 1}}))
    assert result.peak_memory / 2**20 < held + 800, (result.peak_memory / 2**20, held)


def resident_mb() -> float:
    """What this process holds now (VmRSS), not its peak."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024
