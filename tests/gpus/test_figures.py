"""What the GPU check measures (`ablate.gpus.figures`), on a CPU: a phase's launch through `ablate.api.launch` and the
figures read back from its store, the plain loop, and the figures' arithmetic. The GPU itself is scripted where it
cannot run here: the memory probe, the NVML readings (a stub pynvml, as in test_busy) and the device a trial
records."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from conftest import TINY, write_sweeps
from rich.console import Console
from stub_nvml import stub_pynvml

from ablate.api import launch
from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.execution.gpu_shares import Footprint
from ablate.gpus.busy import Busy, Sample, Sampler, open_nvml
from ablate.gpus.figures import (
    Memory,
    RecordingProbe,
    Steady,
    Throughput,
    plain_rate,
    read_back,
    run_phase,
    speedups,
    steady,
)
from ablate.gpus.sweep import Phase
from ablate.planning.plan import plan
from ablate.store import Store

pytestmark = pytest.mark.timeout(300)


def test_figures_from_given_measurements() -> None:
    # the first epoch (compiling, warming up) left out; the others' images over their seconds, not a median
    assert steady([10.0, 100.0, 130.0, 90.0], [50.0, 2.0, 1.0, 1.0]) == Steady(4.0, pytest.approx(105.0))
    assert steady([42.0], [3.0]) == Steady(0.0, None)
    rows = [Throughput("softmax", "fp32", 1000.0, 1000.0), Throughput("softmax", "bf16", 2400.0, 2500.0),
            Throughput("softmax", "bf16+compile", 3000.0), Throughput("csan", "bf16", 1500.0)]  # fmt: skip
    assert rows[1].ratio == pytest.approx(0.96) and rows[2].ratio is None
    ups = {s.kind: s for s in speedups(rows)}
    assert ups["softmax"].bf16 == pytest.approx(2.4) and ups["softmax"].compile == pytest.approx(1.25)
    assert ups["csan"].bf16 is None and ups["csan"].compile is None
    assert Memory("k", "csan", predicted=4 * 2**30, peak=3 * 2**30).ratio == 0.75


def test_the_recording_probe_leaves_what_it_measured_per_footprint(tmp_path: Path) -> None:
    """The probe's files are read back by footprint: seeds share one, another mechanism has its own."""
    fake_gpu = lambda cfg: Footprint(3 * 2**30, 80 * 2**30, "fake GPU")  # noqa: E731
    probe = RecordingProbe(str(tmp_path / "probes"), fake_gpu)
    softmax = TrialConfig.model_validate({**TINY, "seed": 1})
    assert probe(softmax) == fake_gpu(softmax)
    assert probe.measured(TrialConfig.model_validate({**TINY, "seed": 2})) == fake_gpu(softmax)
    assert probe.measured(TrialConfig.model_validate({**TINY, "attention": {"kind": "csan"}})) is None


def test_a_phase_launched_on_cpu_reads_its_figures_back(ray_local, tmp_path: Path) -> None:
    """The GPU path's launch and read-back, on CPU through the real launcher, Ray and store: every trial's
    device, steady epochs and peak; a trial on the CPU names no GPU, so no busy figure, and the row says why."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    p = plan(f, "s")
    phase = Phase("cpu", "CPU", "fp32", gpus=0.0, first_seed=False)
    got = run_phase(phase, p, tmp_path / "phase", Sampler(open_nvml()), Console(quiet=True), launch, mlflow=False)
    assert got.unfinished == 0 and [t.key for t in got.trials] == [t.key for t in p.trials]
    with Store(f"sqlite:///{tmp_path / 'phase' / 'ablate.sqlite'}") as store:
        seconds = store.metrics_frame("s", "epoch_s").query("step > 1").groupby("key", observed=True)["value"].sum()
    examples = len(build_data(p.trials[0].config).train) * (TINY["train"]["epochs"] - 1)
    for t in got.trials:  # the epochs after the first: their images over their seconds
        assert t.device == "cpu" and t.state == "done" and t.peak is not None and t.peak > 0
        assert t.steady.seconds == pytest.approx(seconds[t.key])
        assert t.steady.rate is not None and t.steady.rate * t.steady.seconds == pytest.approx(examples)
    assert got.busy == [Busy("cpu", None, 0, None, 0, "no trial of the phase recorded the bus id of a GPU")]
    assert got.predicted == {}  # no gpus: auto, no probe


def test_a_phase_read_back_measures_each_gpu_inside_its_trials_steady_epochs(tmp_path: Path, monkeypatch) -> None:
    """The read-back from a real store whose rows are scripted as GPU trials would write them: two trials on one
    GPU (the bus id in their device, as NVML writes it or not), their epochs' images/s, seconds and end times;
    NVML readings of that GPU and of one no trial used."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    p = plan(f, "s")
    a, b = p.trials
    stub = stub_pynvml(monkeypatch)
    stub.GPUS = {b"00000000:3B:00.0": [], b"00000000:5E:00.0": []}
    sampler = Sampler(open_nvml())
    sampler.samples += [Sample(at, "00000000:3B:00.0", pct) for at, pct in ((1005.0, 0.0), (1015.0, 60.0),
                        (1025.0, 80.0), (1035.0, 100.0), (1050.0, 0.0))]  # fmt: skip
    sampler.samples += [Sample(at, "00000000:5E:00.0", 0.0) for at in range(1000, 1060, 5)]
    with Store(f"sqlite:///{tmp_path / 'ablate.sqlite'}") as store:
        store.add_trials("s", p.trials)
        for t, device, ends in ((a, "cuda:0 NVIDIA H200 pci 00000000:3B:00.0", (1010.0, 1020.0, 1030.0)),
                                (b, "cuda:0 NVIDIA H200 pci 0000:3b:00.0", (1020.0, 1040.0))):  # fmt: skip
            store.mark_running(t.key, host="h", device=device)
            for epoch, end in enumerate(ends, 1):
                store.log_metrics(t.key, epoch, {"samples_per_s": 100.0 * epoch, "epoch_s": 2.0}, wall_time=end)
            store.finish(t.key, "done", peak_memory=2**30)
        probe = RecordingProbe(str(tmp_path))
        got = read_back(Phase("packed", "", "bf16", gpus=None), p, store, sampler, probe)
        whole = read_back(Phase("bf16", "", "bf16"), p, store, sampler, probe)
    assert [(t.kind, t.steady, t.peak, t.shared) for t in got.trials] == [
        ("softmax", Steady(4.0, 250.0), 2**30, ()),  # epochs 2 and 3: (200 x 2 + 300 x 2) / 4
        ("csan", Steady(2.0, 200.0), 2**30, ()),  # packed: sharing a GPU is the point
    ]
    assert [t.shared for t in whole.trials] == [(b.key,), (a.key,)]  # a GPU each, yet one bus id at once
    # 1005 is in a's first epoch; 1015 in a's second; 1025 in both; 1035 in b's second; 1050 after both
    assert got.busy == [Busy("packed", "00000000:3B:00.0", 2, pytest.approx(0.8), 3)]
    assert math.isclose(got.busy[0].fraction or 0, (60 + 80 + 100) / 300)


def test_the_plain_loop_trains_on_cpu() -> None:
    cfg = TrialConfig.model_validate(TINY)
    plain = plain_rate(cfg, torch.device("cpu"), 3)
    assert plain.seconds > 0 and plain.rate is not None and plain.rate > 0
