"""The GPU check's sweep (`ablate.gpus.sweep`): what each phase plans, how long each trial is sized to train, and
the dry run's listing of them."""

from __future__ import annotations

from pathlib import Path

from ablate.config import TrialConfig
from ablate.data import build_data
from ablate.gpus.sweep import ESTIMATED, PLAIN_SECONDS, TRAIN_IMAGES, SweepSpec, dry_run, plan_phases


def test_the_phases_plan_what_they_say(tmp_path: Path) -> None:
    spec = SweepSpec(seconds=30, seeds=3)
    planned = dict((phase.name, p) for phase, p in plan_phases(tmp_path, spec))
    amp = {name: {t.config.train.amp for t in p.trials} for name, p in planned.items()}
    assert amp == {"fp32": {False}, "bf16": {True}, "bf16+compile": {True}, "packed": {True}}
    assert {t.config.train.compile for t in planned["bf16+compile"].trials} == {True}
    assert {t.config.resources.gpus for p in planned.values() for t in p.trials} == {"auto"}
    assert [t.config.attention.kind for t in planned["fp32"].trials] == ["softmax", "csan"]
    assert [len(p.trials) for p in planned.values()] == [2, 2, 2, 6]
    epochs = {name: {t.config.train.epochs for t in p.trials} for name, p in planned.items()}
    settings = {"fp32": "fp32", "bf16": "bf16", "bf16+compile": "bf16+compile", "packed": "bf16"}
    assert epochs == {name: {spec.epochs(setting)} for name, setting in settings.items()}
    # resources are not part of a trial's key: the packed phase needs a store of its own
    assert [t.key for t in planned["bf16"].trials] == [t.key for t in planned["packed"].trials[::3]]


def test_each_trial_is_sized_for_its_steady_seconds_at_the_estimated_rate() -> None:
    """The fewest epochs after the warm-up one whose images take `seconds` at the estimate; TRAIN_IMAGES is what a
    trial of the check trains on an epoch."""
    for seconds in (20.0, 30.0, 0.001):
        for setting, rate in ESTIMATED.items():
            steady = SweepSpec(seconds=seconds).epochs(setting) - 1
            assert steady * TRAIN_IMAGES / rate >= seconds and (
                steady == 1 or (steady - 1) * TRAIN_IMAGES / rate < seconds
            )
    assert SweepSpec().epochs("bf16", 5.0) < SweepSpec().epochs("bf16")
    cfg = TrialConfig.model_validate(SweepSpec().file()["sweeps"]["gpu-check"]["base"])
    assert len(build_data(cfg).train) == TRAIN_IMAGES


def test_the_dry_run_lists_each_phases_trials_probes_and_estimates() -> None:
    """What the dry run lists: each phase's trials as planned, the probes a `gpus: auto` phase runs (one per
    footprint: seeds share one), each trial's steady seconds at its setting's estimate, and the estimates that sized
    them; no bf16+compile phase, nor its estimate, without compile."""
    spec = SweepSpec(seconds=30, seeds=2, compile=False)
    listed = dry_run(spec)
    assert [row.phase.name for row in listed.phases] == ["fp32", "bf16", "packed"]
    assert listed.estimated == {"fp32": ESTIMATED["fp32"], "bf16": ESTIMATED["bf16"]}
    assert (listed.seconds, listed.images, listed.plain_seconds) == (30, TRAIN_IMAGES, PLAIN_SECONDS)
    assert [row.probes for row in listed.phases] == [2, 2, 2]  # softmax and CSaN, whatever the seeds
    packed = listed.phases[-1]
    assert [(t.kind, t.seed) for t in packed.trials] == [("softmax", 0), ("softmax", 1), ("csan", 0), ("csan", 1)]
    for row in listed.phases:
        for t in row.trials:
            assert t.epochs == spec.epochs(row.phase.setting) and t.amp == (row.phase.name != "fp32")
            assert t.steady == (t.epochs - 1) * TRAIN_IMAGES / ESTIMATED[row.phase.setting] >= 30
