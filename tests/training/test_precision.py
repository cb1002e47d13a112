"""The float32 policy on CUDA (`train.tf32`): set at every trial's start and recorded (that it keys a trial only when
on is tests/planning/test_plan.py's: the golden keys, and every result-relevant leaf).

The CPU has no TF32, but torch's flags are process-wide and set the same on any device: a trial here sets and reads
back the very flags a GPU trial's matmuls and convolutions obey.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from conftest import TINY

from ablate.config import TrialConfig
from ablate.training.loop import run_trial


@pytest.fixture
def flags() -> Iterator[None]:
    """torch's TF32 flags as they were, after the test."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def config(**train: object) -> TrialConfig:
    return TrialConfig.model_validate({**TINY, "train": {**TINY["train"], "epochs": 1, **train}})


@pytest.mark.parametrize("tf32", [False, True])
def test_a_trial_sets_its_tf32_policy_and_records_it(flags: None, tf32: bool) -> None:
    """The flags start the other way (a worker's previous trial, or torch's default of TF32 convolutions): the trial
    sets both and its environment record says what torch held."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not tf32
    res = run_trial(config(tf32=tf32))
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    assert res.environment is not None and res.environment["tf32"] == {"matmul": tf32, "cudnn": tf32}
