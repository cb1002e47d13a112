"""Tuned sweeps (issue 30) wired into the product: the `tune:` block checked against its sweep (the refusals
are files of tests/specs/bad), the searches run in rounds by real launches (a relaunch trains nothing, a
larger budget runs only the new configurations, a killed launch resumes), and the report's tuning section on
a simulated study whose answer is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TINY, write_sweeps

from ablate.errors import SpecError
from ablate.planner import plan
from ablate.registry import TASKS

TUNE = {"space": {"train.lr": {"log": [1e-4, 3e-2]}}, "budget": 4, "batch": 2, "metric": "val.top1"}
ARMS = {"attention.kind": ["softmax", "sparsemax"]}


def tuned(tmp_path: Path, name: str = "e.yaml", **over: Any) -> Path:
    """A tuned sweep of two arms on the tiny digits model, 1 epoch; `over` replaces its keys."""
    base = {**TINY, "train": {**TINY["train"], "epochs": 1}, "resources": {"cpus": 1}}
    sweep = {"base": base, "grid": ARMS, "baseline": {"attention.kind": "softmax"}, "seeds": 2, "tune": TUNE, **over}
    return write_sweeps(tmp_path / name, {"t": sweep})


# --------------------------------------------------------------------------------------------------- spec
def test_a_tuned_sweep_plans_its_arms_and_runs_nothing_before_its_searches(tmp_path: Path) -> None:
    p = plan(tuned(tmp_path))
    assert p.tuning is not None and p.tuning.spec.budget == 4 and p.tuning.baseline == 0
    assert p.trials == [] and len(p.arms) == 4  # 2 arms x 2 seeds at the base's values, for the rounds to use
    assert [t.axes["attention.kind"] for t in p.arms] == ["softmax", "softmax", "sparsemax", "sparsemax"]


def test_an_override_may_not_set_a_searched_path(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"override 'train.lr=0.001'.*searches train.lr in its tune: space"):
        plan(tuned(tmp_path), overrides=["train.lr=0.001"])


@pytest.mark.parametrize("task", ["classify", "mil"])
def test_a_task_declares_the_scores_it_reports(task: str) -> None:
    """What `tune.metric` is checked against is what `score` returns."""
    outs, targets = (
        (torch.randn(8, 3), torch.arange(8) % 3) if task == "classify" else (torch.randn(8), torch.arange(8.0) % 2)
    )
    cls = TASKS.get(task)
    assert tuple(cls.score(cls.__new__(cls), outs, targets)) == cls.scores
