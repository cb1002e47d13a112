"""One trial without Ray: real data, real timm models, checkpoints, resume, divergence, determinism."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import TINY

from ablate.config import TrialConfig
from ablate.data import DataError
from ablate.plugins import Plugins
from ablate.training.checkpoints import FILE, Checkpointer
from ablate.training.loop import best_epoch, run_trial
from ablate.training.tasks import shift_images

pytestmark = pytest.mark.timeout(300)

#: The plugin file whose task scores by a script (never imported: its components are loaded as a plugin's).
SCRIPTED = Path(__file__).parents[1] / "scripted.py"


def config(**over) -> TrialConfig:
    raw = {**TINY, **over}
    return TrialConfig.model_validate(raw)


def collect() -> tuple[list, callable]:
    seen: list = []
    return seen, lambda epoch, metrics: seen.append((epoch, metrics))


class Stop(Exception):
    """Raised by `stop_after_two`: the trial ends as a crash after its second epoch's checkpoint."""


def stop_after_two(epoch: int, metrics: dict) -> None:
    if epoch == 2:
        raise Stop


def test_classify_trial_reports_every_epoch_and_tests_once() -> None:
    seen, report = collect()
    res = run_trial(config(train={**TINY["train"], "diagnostics": True}), report)
    assert res.outcome == "done" and res.epochs == 2
    assert [e for e, _ in seen] == [1, 2]
    for name in (
        "train.loss",
        "val.loss",
        "val.top1",
        "val.top5",
        "lr",
        "samples_per_s",
        "epoch_s",
        "peak_mem_mb",
        "diag.entropy",
        "diag.gini",
    ):
        assert name in seen[0][1], name
    assert "diag.winner_transfer" in seen[1][1] and "diag.winner_transfer" not in seen[0][1]
    assert set(res.metrics) == {"test.loss", "test.top1", "test.top5"}
    assert res.params and res.params > 0 and res.flops and res.flops > 0 and res.peak_memory and res.peak_memory > 0
    env = res.environment
    assert env is not None
    assert env["packages"]["torch"] and env["device"].startswith("cpu") and "git_sha" in env
    ran = env["arithmetic"]  # what its bits depend on beyond the key: the kernels torch ran and the pinned threads
    assert ran["capability"] == torch.backends.cpu.get_cpu_capability() and ran["threads"] == 1, ran
    assert ran["torch"] == torch.__version__ and ran["libraries"], ran


def test_select_best_reports_the_test_scores_of_the_best_validation_epoch(tmp_path: Path) -> None:
    """train.select best: the test split is scored every epoch and kept in the checkpoint, never reported per
    epoch, a resume's replay included (the store and MLflow get no test curve to pick an epoch from); the result
    is the test scores of the epoch whose val.top1 is highest (earliest on ties) and says which; a final-epoch
    trial never scores test before the end. The scores are scripted (tests/scripted.py): validation peaks at
    epochs 2 and 3, test rises to epoch 4."""
    Plugins.from_list([str(SCRIPTED)], SCRIPTED.parent).load()
    model = {**TINY["model"], "backbone": "scripted-vit"}
    train = {**TINY["train"], "epochs": 4, "batch_size": 8, "select": "best"}
    cfg = config(task="scripted", data={"name": "noise"}, model=model, train=train)
    with pytest.raises(Stop):
        run_trial(cfg, stop_after_two, tmp_path)
    seen, report = collect()
    res = run_trial(cfg, report, tmp_path)  # replays epochs 1 and 2, trains 3 and 4
    assert [(e, m["val.top1"]) for e, m in seen] == [(1, 30.0), (2, 70.0), (3, 70.0), (4, 50.0)]
    assert not [k for _, m in seen for k in m if k.startswith("test.")]
    assert res.metrics == {"test.loss": 78.0, "test.top1": 22.0, "test.top5": 100.0, "test.epoch": 2.0}
    final, report = collect()
    run_trial(config(), report)
    assert not [k for _, m in final for k in m if k.startswith("test.")]


def test_the_best_epoch_is_chosen_on_validation_never_on_test() -> None:
    """Validation peaks at epoch 2, test at epoch 3, the last is 4; a NaN validation score never wins."""
    history = [(e, {"val.top1": v, "test.top1": t, "train.loss": 1.0})
               for e, v, t in [(1, 50, 50), (2, 70, 60), (3, 65, 80), (4, 60, 70), (5, math.nan, 99)]]  # fmt: skip
    assert best_epoch(history, "val.top1") == {"test.top1": 60, "test.epoch": 2}
    assert best_epoch([(1, {"val.top1": 5, "test.top1": 1}), (2, {"val.top1": 5, "test.top1": 2})],
                      "val.top1")["test.epoch"] == 1  # fmt: skip


def test_select_best_needs_a_validation_split() -> None:
    with pytest.raises(ValueError, match=r"data\.val_fraction must be > 0"):
        config(data={"name": "digits", "val_fraction": 0}, train={**TINY["train"], "select": "best"})


def test_mil_trial_on_shipped_bags() -> None:
    cfg = TrialConfig.model_validate({"task": "mil", "data": {"name": "fox", "folds": 5, "val_fraction": 0.1},
                                      "model": {"size": "synpool", "embed_dim": 32},
                                      "attention": {"kind": "syn", "steps": 2},
                                      "train": {"epochs": 1, "batch_size": 8}})  # fmt: skip
    seen, report = collect()
    res = run_trial(cfg, report)
    assert res.outcome == "done"
    assert {"val.auc", "val.acc", "val.loss"} <= set(seen[0][1])
    assert set(res.metrics) == {"test.loss", "test.auc", "test.acc"} and 0 <= res.metrics["test.auc"] <= 1


def test_same_seed_same_metrics_and_other_seed_differs() -> None:
    """Also at the top of the seeds a config allows (2^63 - 1): every seeded generator takes it."""
    a = run_trial(config())
    b = run_trial(config())
    c = run_trial(config(seed=1))
    top = run_trial(config(seed=2**63 - 1))
    assert a.metrics == b.metrics
    assert a.metrics != c.metrics
    assert top.outcome == "done" and top.metrics != a.metrics


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    cfg = config(train={**TINY["train"], "epochs": 3, "shift": 1, "mixup": 0.2})
    whole_seen, whole_report = collect()
    whole = run_trial(cfg, whole_report, tmp_path / "whole")
    with pytest.raises(Stop):
        run_trial(cfg, stop_after_two, tmp_path / "cut")
    state, problem = Checkpointer(tmp_path / "cut").read()
    assert problem is None and state["epoch"] == 2
    seen, report = collect()
    resumed = run_trial(cfg, report, tmp_path / "cut")
    assert resumed.resumed_from == 2
    assert resumed.metrics == whole.metrics
    # the history is replayed (idempotent writes downstream), then epoch 3 is trained
    assert [e for e, _ in seen] == [1, 2, 3]
    assert seen[2][1]["val.top1"] == whole_seen[2][1]["val.top1"]


def test_a_trial_stopped_mid_epoch_resumes_to_the_same_result(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stop request (the launcher's SIGTERM) lands at step 20 of epoch 2: the trial checkpoints after that
    step and ends `preempted`; the next attempt continues at step 21 and ends exactly where an uninterrupted
    run does (the epoch's order depends only on seed and epoch; the RNGs are in the checkpoint)."""
    import ablate.training.loop
    from ablate.data import build_data
    from ablate.registry import TASKS

    cfg = config(train={**TINY["train"], "epochs": 3, "batch_size": 16, "shift": 1, "mixup": 0.2})
    whole_seen, whole_report = collect()
    whole = run_trial(cfg, whole_report, tmp_path / "whole")
    per_epoch = len(TASKS.get(cfg.task)(cfg, build_data(cfg), torch.device("cpu")).train_steps(0))

    class StopAtCall:
        """The stop channel, asked once per step: true at the 20th step of the second epoch."""

        calls = 0

        def __init__(self, folder: Path | None) -> None:
            pass

        def __call__(self) -> bool:
            StopAtCall.calls += 1
            return StopAtCall.calls == per_epoch + 20

    monkeypatch.setattr(ablate.training.loop, "StopRequest", StopAtCall)
    cut = run_trial(cfg, None, tmp_path / "cut")
    assert cut.outcome == "preempted" and cut.epochs == 1
    state, problem = Checkpointer(tmp_path / "cut").read()
    assert problem is None and (state["epoch"], state["step"]) == (1, 20) and state["partial"][1] == 20 * 16
    monkeypatch.undo()
    seen, report = collect()
    resumed = run_trial(cfg, report, tmp_path / "cut")
    assert resumed.outcome == "done" and resumed.resumed_from == 1
    assert resumed.metrics == whole.metrics
    assert [e for e, _ in seen] == [1, 2, 3]
    assert seen[1][1]["train.loss"] == pytest.approx(whole_seen[1][1]["train.loss"], rel=1e-12)


def test_corrupt_checkpoint_is_reported_and_the_trial_restarts(tmp_path: Path) -> None:
    (tmp_path / FILE).write_bytes(b"not a checkpoint")
    res = run_trial(config(), None, tmp_path)
    assert res.outcome == "done"
    (warning,) = res.warnings
    assert "corrupt checkpoint" in warning and res.resumed_from == 0
    assert run_trial(config()).metrics == res.metrics


def test_checkpoint_loads_with_weights_only(tmp_path: Path) -> None:
    run_trial(config(), None, tmp_path)
    state = torch.load(tmp_path / FILE, weights_only=True)
    assert {"model", "optimizer", "scheduler", "rng", "epoch", "history"} <= set(state)
    assert not list(tmp_path.glob("*.tmp"))


def test_nan_loss_ends_the_trial_as_diverged() -> None:
    res = run_trial(config(train={**TINY["train"], "lr": 1e30, "weight_decay": 0.0}))
    assert res.outcome == "diverged"
    assert res.diverged_at is not None and res.diverged_at.epoch == 1 and res.diverged_at.step >= 1


def test_data_errors_come_before_training(tmp_path: Path) -> None:
    cfg = TrialConfig.model_validate({"task": "mil", "data": {"name": "mil_csv", "path": str(tmp_path / "nope.csv")},
                                      "model": {"size": "synpool"}})  # fmt: skip
    calls = []
    with pytest.raises(DataError, match=re.escape("nope.csv")):
        run_trial(cfg, lambda e, m: calls.append(e))
    assert calls == []


def test_class_count_mismatch_is_a_data_error() -> None:
    with pytest.raises(DataError, match="class"):
        run_trial(config(model={**TINY["model"], "num_classes": 7}))


def translated(img: torch.Tensor, dy: int, dx: int) -> torch.Tensor:
    """`img` (C, H, W) moved by (dy, dx): out[:, r, c] = img[:, r - dy, c - dx], zeros where that is outside."""
    out = torch.zeros_like(img)
    h, w = img.shape[-2:]
    out[:, max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = img[
        :, max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)
    ]
    return out


@pytest.mark.parametrize("shift", [1, 2])
def test_shift_translates_each_image_by_its_own_offset_with_zero_fill(shift: int) -> None:
    """Each image is the original moved by one (dy, dx) in [-shift, shift]^2 (all channels alike), zeros
    coming in at the border; offsets vary across the batch and cover the whole range."""
    torch.manual_seed(0)
    b, c, h, w = 64, 3, 6, 7
    x = torch.randperm(b * c * h * w).float().reshape(b, c, h, w) + 1  # distinct, non-zero pixels
    before = x.clone()
    y = shift_images(x, shift)
    assert y.shape == x.shape and y.dtype == x.dtype
    offsets = []
    for i in range(b):
        hits = [(dy, dx) for dy in range(-shift, shift + 1) for dx in range(-shift, shift + 1)
                if torch.equal(y[i], translated(x[i], dy, dx))]  # fmt: skip
        assert len(hits) == 1, f"image {i} is no zero-filled translation of its original within +-{shift}"
        dy, dx = hits[0]
        # the pixels that stay in view keep their values; exactly the ones moved out are lost
        assert (y[i] != 0).sum() == c * (h - abs(dy)) * (w - abs(dx))
        offsets.append(hits[0])
    assert set(offsets) != {(0, 0)}, "no image moved"
    assert {dy for dy, _ in offsets} == {dx for _, dx in offsets} == set(range(-shift, shift + 1))
    assert len(set(offsets)) > (2 * shift + 1) ** 2 // 2, "offsets are not drawn per image"
    assert torch.equal(x, before), "the input batch was changed in place"


@pytest.fixture
def tf32_flags() -> Iterator[None]:
    """torch's TF32 flags as they were, after the test."""
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


@pytest.mark.parametrize("tf32", [False, True])
def test_a_trial_sets_its_tf32_policy_and_records_it(tf32_flags: None, tf32: bool) -> None:
    """The float32 policy on CUDA (`train.tf32`; that it keys a trial only when on is test_plan.py's). The CPU has no
    TF32, but torch's flags are process-wide and set alike on any device: a trial here sets and reads back the very
    flags a GPU trial's matmuls and convolutions obey. They start the other way (a worker's previous trial, or torch's
    default of TF32 convolutions): the trial sets both and its environment record says what torch held."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = not tf32
    res = run_trial(config(train={**TINY["train"], "epochs": 1, "tf32": tf32}))
    assert torch.backends.cuda.matmul.allow_tf32 is tf32 and torch.backends.cudnn.allow_tf32 is tf32
    assert res.environment is not None and res.environment["tf32"] == {"matmul": tf32, "cudnn": tf32}
