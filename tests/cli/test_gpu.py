"""`ablate gpu-check` on a CPU (`ablate.cli.gpu`): the dry run end to end, with or without asking for it, and what it
lists against what `ablate.api.gpu_check` planned."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from ablate.api import gpu_check
from ablate.cli import app

pytestmark = pytest.mark.timeout(300)


def test_without_a_gpu_the_check_is_a_dry_run_that_lists_its_trials_and_writes_nothing(tmp_path, monkeypatch) -> None:
    if torch.cuda.is_available() or Path("/proc/driver/nvidia/gpus").exists():
        pytest.skip("this machine has a GPU: the check would train (its --dry-run is tested below)")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    no_smi = tmp_path / "bin"  # a PATH without nvidia-smi
    no_smi.mkdir()
    result = CliRunner().invoke(app, ["gpu-check", "--seeds", "2"], env={"COLUMNS": "300", "PATH": str(no_smi)})
    assert result.exit_code == 0, result.output
    assert "no GPU found: dry run" in result.output
    planned = gpu_check(seeds=2, dry_run=True).planned
    assert planned is not None
    assert [row.phase.name for row in planned.phases] == ["fp32", "bf16", "bf16+compile", "packed"]
    for row in planned.phases:
        assert len(row.trials) == (2 if row.phase.first_seed else 4)
        for t in row.trials:
            assert t.key[:10] in result.output
    assert "auto (2 probes)" in result.output  # one footprint per mechanism
    assert "then 20 s of steady training" in result.output
    assert list(work.iterdir()) == []


def test_dry_run_on_request_and_without_compile(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["gpu-check", "--dry-run", "--no-compile"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "bf16+compile" not in result.output and "packed" in result.output
    assert list(tmp_path.iterdir()) == []
