"""gpu-check's busy figure on scripted inputs: bus ids as NVML and trials write them, each hosting GPU's readings
inside its trials' steady epochs, and NVML failures (a stub pynvml that raises, the real one with no driver) that
become the figure's stated reason instead of a crash or a silent gap."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from conftest import needs
from stub_nvml import stub_pynvml

from ablate.gpus.busy import (
    NO_NVML,
    Busy,
    Nvml,
    Sample,
    Sampler,
    bus_id,
    busy,
    open_nvml,
    steady_windows,
    together,
    trained_on,
)

A, B, IDLE = "00000000:3B:00.0", "00000000:5E:00.0", "00000000:86:00.0"


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return stub_pynvml(monkeypatch)


def test_bus_ids_read_as_nvml_writes_them() -> None:
    assert bus_id("0000:3b:00.0") == A  # /proc and lspci: a 4-digit domain, lower case
    assert bus_id("00000000:3B:00.0") == A
    assert trained_on("cuda:1 NVIDIA H200 pci 00000000:3B:00.0") == A
    assert trained_on("cuda:0 NVIDIA A100-SXM4-80GB pci 0001:5e:00.0") == "00000001:5E:00.0"
    for no_gpu in ("cpu", "cpu (ABLATE_FAKE_GPU)", "cuda", "", None):
        assert trained_on(no_gpu) is None


def test_steady_epochs_run_from_one_epoch_end_to_the_next() -> None:
    assert steady_windows([10.0, 20.0, 35.0]) == [(10.0, 20.0), (20.0, 35.0)]
    assert steady_windows([10.0]) == []


def test_busy_counts_only_hosting_gpus_inside_their_trials_steady_epochs() -> None:
    """Two trials packed on A, one on B, none on IDLE (read at 0% all along): IDLE gets no row, and readings in the
    first epochs, between trials or after them count nowhere."""
    hosts = {"a1": A, "a2": A, "b1": B, "cpu": None}
    ends = {"a1": [10.0, 20.0, 30.0], "a2": [25.0, 40.0], "b1": [100.0, 110.0], "cpu": [1.0, 2.0]}
    percents = {
        A: [(5.0, 0.0), (12.0, 80.0), (22.0, 100.0), (35.0, 90.0), (45.0, 0.0)],  # 5: a1's first; 45: after
        B: [(50.0, 0.0), (105.0, 60.0), (110.0, 70.0)],  # 50: between a's and b's; 110: the window's end counts
        IDLE: [(t, 0.0) for t in range(0, 120, 5)],
    }
    samples = [Sample(at, gpu, p) for gpu, read in percents.items() for at, p in read]
    rows = busy("packed", samples, hosts, ends, {})
    assert rows == [
        Busy("packed", A, 2, pytest.approx(0.9), 3),
        Busy("packed", B, 1, pytest.approx(0.65), 2),
    ]


def test_trials_that_trained_on_one_gpu_at_once_are_found() -> None:
    hosts = {"a1": A, "a2": A, "a3": A, "b1": B, "cpu": None, "once": A}
    ends = {"a1": [10.0, 20.0, 30.0], "a2": [25.0, 40.0], "a3": [40.0, 50.0], "b1": [10.0, 30.0], "cpu": [10.0, 30.0],
            "once": [15.0]}  # fmt: skip
    assert together(hosts, ends) == {"a1": ["a2"], "a2": ["a1"]}  # a3 starts as a2 ends; b1 on another GPU


def test_a_gpu_without_readings_says_why() -> None:
    hosts, ends = {"a1": A, "b1": B}, {"a1": [10.0, 20.0], "b1": [10.0]}
    rows = {r.gpu: r for r in busy("bf16", [Sample(15.0, A, 50.0)], hosts, ends, {A: "NVML NVMLError: stopped"})}
    assert (rows[A].fraction, rows[A].samples, rows[A].reason) == (None, 1, "NVML NVMLError: stopped")
    assert (rows[B].fraction, rows[B].reason) == (None, "no steady epoch (a trial needs 2 epochs)")
    assert busy("fp32", [], {"k": None}, {"k": [1.0, 2.0]}, {}) == [
        Busy("fp32", None, 0, None, 0, "no trial of the phase recorded the bus id of a GPU")
    ]


def test_nvml_that_fails_to_open_is_the_figures_reason(stub: ModuleType) -> None:
    stub.INIT_ERROR = stub.NVMLError_DriverNotLoaded("Driver Not Loaded")
    nvml = open_nvml()
    assert nvml == "NVML NVMLError_DriverNotLoaded: Driver Not Loaded"
    sampler = Sampler(nvml)
    with sampler:  # starts no thread, raises nothing
        sampler.take()
    assert sampler.samples == [] and sampler.problem(A) == nvml


def test_a_gpu_whose_reading_fails_keeps_its_reason_and_the_others_go_on(stub: ModuleType) -> None:
    """Utilization not supported on one device (MIG): that GPU's figure is unavailable with the reason, even with
    readings from before; the other GPU is still read."""
    stub.GPUS = {A.encode(): [50.0, 60.0], B.lower(): [10.0, 20.0, 30.0]}  # bytes and str, as bindings differ
    nvml = open_nvml()
    assert isinstance(nvml, Nvml) and set(nvml.handles) == {A, B}
    sampler = Sampler(nvml)
    for _ in range(3):
        sampler.take()
    assert [(s.gpu, s.percent) for s in sampler.samples if s.gpu == B] == [(B, 10.0), (B, 20.0), (B, 30.0)]
    assert [s.percent for s in sampler.samples if s.gpu == A] == [50.0, 60.0]
    assert sampler.problem(A) == "NVML NVMLError_NotSupported: Not Supported" and sampler.problem(B) is None
    assert sampler.problem(IDLE) == f"NVML lists no GPU at bus id {IDLE} (it lists {A}, {B})"


def test_the_sampler_thread_outlives_a_failing_gpu(stub: ModuleType) -> None:
    stub.GPUS = {A.encode(): [], B.encode(): [40.0] * 10_000}
    with Sampler(open_nvml(), every=0.001) as sampler:
        deadline = time.monotonic() + 60
        while len(sampler.samples) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(sampler.samples) >= 3 and {s.gpu for s in sampler.samples} == {B}
    assert sampler.problem(A) == "NVML NVMLError_NotSupported: Not Supported"


def test_without_the_module_the_figure_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ModuleNotFoundError
    assert open_nvml() == NO_NVML
    assert Sampler(NO_NVML).problem(A) == NO_NVML


def test_the_real_bindings_without_a_driver_give_a_reason() -> None:
    """nvidia-ml-py (a dev dependency) on a machine with no NVIDIA driver: its error, not a crash."""
    needs(not Path("/proc/driver/nvidia").exists(), "this machine has an NVIDIA driver")
    reason = open_nvml()
    assert isinstance(reason, str) and reason.startswith("NVML NVMLError_"), reason
