"""`ablate gpu-check` on a CPU: the dry run end to end, what it shares with the GPU path (planning, a phase's
launch and the figures read back from its store, the plain loop, printing), and the figures' arithmetic.
The GPU itself is faked where it cannot run here: the memory probe and the NVML reading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import TINY, write_sweeps
from rich.console import Console
from typer.testing import CliRunner

from ablate.cli import app, gpucheck
from ablate.cli.gpucheck import Busy, Figures, Memory, Phase, RecordingProbe, SweepSpec, Throughput
from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.execution.gpu_shares import Footprint
from ablate.planning.plan import plan
from ablate.store import Store

pytestmark = pytest.mark.timeout(300)


def test_without_a_gpu_the_check_is_a_dry_run_that_lists_its_trials_and_writes_nothing(tmp_path, monkeypatch) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the check would train (its --dry-run is tested below)")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = CliRunner().invoke(app, ["gpu-check", "--seeds", "2"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "no GPU found: dry run" in result.output
    planned = gpucheck.plan_phases(tmp_path, SweepSpec(seeds=2))
    assert [phase.name for phase, _ in planned] == ["fp32", "bf16", "bf16+compile", "packed"]
    for phase, p in planned:
        assert len(p.trials) == (2 if phase.first_seed else 4)
        for t in p.trials:
            assert t.key[:10] in result.output
    assert "auto (2 probes)" in result.output  # one footprint per mechanism
    assert list(work.iterdir()) == []


def test_dry_run_on_request_and_without_compile(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["gpu-check", "--dry-run", "--no-compile"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "bf16+compile" not in result.output and "packed" in result.output
    assert list(tmp_path.iterdir()) == []


def test_the_phases_plan_what_they_say(tmp_path: Path) -> None:
    planned = dict((phase.name, p) for phase, p in gpucheck.plan_phases(tmp_path, SweepSpec(epochs=4, seeds=3)))
    amp = {name: {t.config.train.amp for t in p.trials} for name, p in planned.items()}
    assert amp == {"fp32": {False}, "bf16": {True}, "bf16+compile": {True}, "packed": {True}}
    assert {t.config.train.compile for t in planned["bf16+compile"].trials} == {True}
    assert {t.config.resources.gpus for p in planned.values() for t in p.trials} == {"auto"}
    assert [t.config.attention.kind for t in planned["fp32"].trials] == ["softmax", "csan"]
    assert {t.config.train.epochs for p in planned.values() for t in p.trials} == {4}
    # compile is not part of a trial's key: the compile phase needs a store of its own
    assert [t.key for t in planned["bf16+compile"].trials] == [t.key for t in planned["bf16"].trials[::3]]


def test_figures_from_given_measurements() -> None:
    assert gpucheck.steady_rate([10.0, 100.0, 130.0, 90.0]) == 100.0  # a median; the first epoch compiles
    assert gpucheck.steady_rate([42.0]) == 42.0
    samples = [(0.0, 100.0), (1.0, 20.0), (2.0, 70.0), (3.0, 90.0), (9.0, 0.0)]
    assert gpucheck.busy_fraction(samples, 1.0, 3.0) == pytest.approx(0.6)  # the window's ends included
    assert gpucheck.busy_fraction(samples, 4.0, 5.0) is None
    rows = [Throughput("softmax", "fp32", 1000.0, 1000.0), Throughput("softmax", "bf16", 2400.0, 2500.0),
            Throughput("softmax", "bf16+compile", 3000.0), Throughput("csan", "bf16", 1500.0)]  # fmt: skip
    assert rows[1].ratio == pytest.approx(0.96) and rows[2].ratio is None
    ups = {s.kind: s for s in gpucheck.speedups(rows)}
    assert ups["softmax"].bf16 == pytest.approx(2.4) and ups["softmax"].compile == pytest.approx(1.25)
    assert ups["csan"].bf16 is None and ups["csan"].compile is None
    assert Memory("k", "csan", predicted=4 * 2**30, peak=3 * 2**30).ratio == 0.75


def test_tables_print_every_figure() -> None:
    figures = Figures(
        "NVIDIA H100",
        [Throughput("softmax", "bf16", 2400.0, 2500.0)],
        [Busy("bf16", 0.412, 50), Busy("packed", 0.93, 40), Busy("fp32", None, 0)],
        [Memory("abcdef0123456789", "csan", 2 * 2**30, 2**30)],
    )
    console = Console(record=True, width=200)
    for table in gpucheck.tables(figures):
        console.print(table)
    text = console.export_text()
    for shown in ("NVIDIA H100", "2400", "2500", "0.96", "0.41", "0.93", "no NVML", "abcdef0123", "2.00", "1.00",
                  "0.50"):  # fmt: skip
        assert shown in text, shown


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
    images/s and peak, and the busy fraction of samples (a fake NVML reading) taken while trials ran."""
    f = write_sweeps(tmp_path / "e.yaml", {"s": {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}}})
    p = plan(f, "s")
    phase = Phase("cpu", "CPU", gpus=0.0, first_seed=False)
    got = gpucheck.run_phase(phase, p, tmp_path / "phase", lambda: 40.0, Console(quiet=True), mlflow=False)
    keys = {t.key for t in p.trials}
    assert got.unfinished == 0 and set(got.rates) == keys
    with Store(f"sqlite:///{tmp_path / 'phase' / 'ablate.sqlite'}") as store:
        seconds = store.metrics_frame("s", "epoch_s").query("step == 2").set_index("key")["value"]
    examples = len(build_data(p.trials[0].config).train)
    for key, rate in got.rates.items():  # the second epoch's images/s (the first is left out)
        assert rate * seconds[key] == pytest.approx(examples)
    assert set(got.peaks) == keys and all(b > 0 for b in got.peaks.values())
    assert got.busy.phase == "cpu" and got.busy.fraction == pytest.approx(0.4) and got.busy.samples > 0
    assert got.predicted == {}  # no gpus: auto, no probe


def test_the_plain_loop_trains_on_cpu() -> None:
    cfg = TrialConfig.model_validate(TINY)
    assert gpucheck.plain_rate(cfg, torch.device("cpu")) > 0
