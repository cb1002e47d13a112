"""Check before fan-out: build every distinct model of a plan and run one training step on CPU.

A broken mechanism (a mixer that raises, returns the wrong shape or no gradient) fails here in seconds,
before Ray starts, instead of in every trial on the cluster. Each distinct architecture (`model_key`:
model, mechanism, data widths) is checked once per process: a batch of two real-shaped inputs, forward,
loss, backward, every mixer's output held to (B, H, Nq, d) exactly (`ablate.nn.mixer.outputs_checked`), then
the mixer alone on sizes where a transposed output has another shape (`PROBE`). Passing checks are also
remembered in a file under the architecture, the trial's code fingerprint (`ablate.provenance.fingerprint`) and this
module's text (`launch` keeps the file beside the cost cache, `ablate.provenance.cache.folder()`), so a later launch on
this machine, of any sweep or project, does not repeat them, while code the fingerprint sees edited (a
component's modules and what they import, a plugin package's `layers.py` included) is checked again.
torch is imported only to run a step: a launch whose variants are all done or remembered (an idle relaunch)
never imports it.

`ablate check` also builds each distinct dataset once (`check_data`): its classes and widths against what it
declared, every label of a sample of each split a class index, one batch through the model and the loss. A pass is
remembered the same way for a dataset whose examples its code fixes (`Dataset.shipped`, with no `data.path`: the
copies this package ships, a seeded generator), so a launch of remembered variants on them imports no torch (4.1 s of
a three-node launch's start on 2 cores, bench/cluster_overhead.py); one read from a path is checked at every launch,
as its files may change under it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ablate.components import Mechanism
from ablate.config import TrialConfig
from ablate.nn.costs import Cost, data_dims, model_cost
from ablate.nn.widths import model_key
from ablate.provenance import cache
from ablate.provenance.fingerprint import fingerprint as code_fingerprint
from ablate.registry import BACKBONES, DATASETS, MECHANISMS

BATCH = 2
PROBE = (2, 3, 4, 8)
"""(B, H, N, d) of the probe each mechanism's mixer runs alone: all different, so a mixer that returns two axes
swapped ((B, N, H, d) for (B, H, N, d)) returns another shape, whatever sizes the model's own calls have."""
SAMPLE = 32
"""Items of each split that the data check collates, spread over the split (a split sorted by class shows its
last class too)."""


class Planned(Protocol):
    """A planned trial as the check reads it (`ablate.planning.keys.Trial`): the plan sits above this unit."""

    @property
    def key(self) -> str: ...
    @property
    def variant(self) -> str: ...
    @property
    def config(self) -> TrialConfig: ...


class Sweep(Protocol):
    """A sweep's plan as the check reads it (`ablate.planning.plan.Plan`): its name and trials."""

    @property
    def sweep(self) -> str: ...
    @property
    def trials(self) -> Sequence[Planned]: ...


class ModelError(ValueError):
    """A trial's model that cannot be built, counted or run; the message names its mechanism and backbone."""


class UnusedMechanism(ValueError):
    """A network that never calls the configured mechanism's mixer: its variants would all train one model."""


@dataclass(frozen=True)
class Checked:
    """One variant's check: its cost and whether a training step ran."""

    sweep: str
    variant: str
    params: int | None
    gflops: float | None
    """Multiply-accumulates per example (the papers' convention)."""
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


_CACHE: dict[str, str | None] = {}
_DATA: dict[str, str | None] = {}


def failure(cfg: TrialConfig, e: Exception) -> str:
    """A failed model, as `check` and `plan` print it: the mechanism (where it was registered: a plugin file by
    its path) on the backbone (its source too when a plugin's), the error and the innermost line that raised it
    (a mixer's wrong output shape says which forward returned it instead)."""
    from ablate.nn.mixer import MixerShapeError

    backbone = BACKBONES.entry(cfg.model.backbone).source
    on = cfg.model.backbone + ("" if backbone.startswith("ablate.") else f" ({backbone})")
    frame = traceback.extract_tb(e.__traceback__)[-1:]
    where = (
        ""
        if isinstance(e, (MixerShapeError, UnusedMechanism)) or not frame
        else f" ({frame[0].filename}:{frame[0].lineno})"
    )
    return (f"attention.kind {cfg.attention.kind!r} ({MECHANISMS.entry(cfg.attention.kind).source}) on {on}: "
            f"{type(e).__name__}: {e}{where}")  # fmt: skip


def data_failure(cfg: TrialConfig, e: Exception) -> str:
    """A dataset that failed its check, named with where it was registered (a plugin file by its path)."""
    from ablate.data import DataError

    frame = traceback.extract_tb(e.__traceback__)[-1:]
    problem = e.problem if isinstance(e, DataError) else f"{type(e).__name__}: {e}"
    where = f" ({frame[0].filename}:{frame[0].lineno})" if frame and not isinstance(e, DataError) else ""
    at = f" at {cfg.data.path}" if cfg.data.path else ""
    return f"data.name {cfg.data.name!r} ({DATASETS.entry(cfg.data.name).source}){at}: {problem}{where}"


def cost(cfg: TrialConfig, code: str | None = None) -> Cost:
    """`model_cost` (`code`: the digest of `cfg`'s fingerprint, where the caller has it), a failure of the model
    (or of its dataset's declared widths) raised as a ModelError that names the mechanism, backbone or dataset:
    what `ablate plan` reports with exit 2 instead of a traceback."""
    try:
        dims = data_dims(cfg)
    except Exception as e:  # a dataset's `dims`, a plugin's included
        raise ModelError(data_failure(cfg, e)) from e
    try:
        return model_cost(cfg, *dims, code=code)
    except Exception as e:  # anything a component raises while the model is built and counted
        raise ModelError(failure(cfg, e)) from e


def step(cfg: TrialConfig) -> None:
    """One forward and backward pass at batch 2 on CPU, every mixer's output shape checked, then the mechanism's
    mixer alone on the probe's sizes; raise with what went wrong."""
    import torch

    from ablate.nn.mixer import outputs_checked

    model, inputs = trainable(cfg, BATCH)
    with outputs_checked(model) as called:
        out = model(*inputs)
    if cfg.model.attends and not any(m.cfg.kind == cfg.attention.kind for m in called):
        raise UnusedMechanism(
            f"the network of backbone {cfg.model.backbone!r} never called a mixer of attention.kind "
            f"{cfg.attention.kind!r} (every variant would train the same attention): its attention layers must mix "
            "through `create_mixer(cfg.attention, dim, num_heads)` (docs/plugins.md)"
        )
    if out.shape[0] != BATCH or not torch.isfinite(out).all():
        raise ValueError(f"the model returned {tuple(out.shape)} (finite: {bool(torch.isfinite(out).all())}) "
                         f"for a batch of {BATCH}")  # fmt: skip
    out.float().sum().backward()  # a loss with a gradient even at a zero-initialised head (Hiera)
    if not any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()):
        raise ValueError("no parameter received a gradient")
    probe(cfg.attention)


def trainable(cfg: TrialConfig, batch: int) -> tuple[Any, Any]:
    """The trial's model in training mode on CPU and a random batch of `batch` inputs of the shape it takes: what
    the check steps and `ablate.probe.steptime` times."""
    from ablate.nn.accounting import example_input
    from ablate.nn.factory import create_model

    in_chans, num_classes = data_dims(cfg)
    return create_model(cfg, num_classes, in_chans).train(), example_input(cfg, in_chans, batch=batch)


def probe(mechanism: Mechanism) -> None:
    """The mechanism's mixer alone on q, k, v and tokens of `PROBE`'s sizes (no bias), its output checked. Only
    a wrong shape is a finding: a mixer that needs what its backbone gives it (a token grid, a token count)
    may fail alone, and the model's step has run it where it belongs."""
    import torch

    from ablate.nn.mixer import MixerShapeError, create_mixer, outputs_checked

    b, h, n, d = PROBE
    mixer = create_mixer(mechanism, h * d, h).train()
    q, k, v = torch.randn(3, b, h, n, d).unbind(0)
    try:
        with outputs_checked(mixer):
            mixer(q, k, v, None, torch.randn(b, n, h * d))
    except MixerShapeError:
        raise
    except Exception:  # not runnable outside its backbone: not this probe's business
        return


def check_config(cfg: TrialConfig) -> str | None:
    """None when a step runs, else the error naming the mechanism and where it was registered; kept for this
    process under the architecture and its code (`fingerprint`): a plugin edited in a notebook is stepped again."""
    return _remembered(_CACHE, fingerprint(cfg), lambda: step(cfg), lambda e: failure(cfg, e))


def _unless_passed(
    fp: str | None, passed: dict[str, Any], new: dict[str, bool], run: Callable[[], str | None]
) -> str | None:
    """`run`'s error (None: it passed), unless a pass is remembered under `fp` (None: nothing is); a new pass under a
    fingerprint goes into `new`, to be remembered once every check has passed."""
    if fp is not None and fp in passed:
        return None
    error = run()
    if error is None and fp is not None:
        new[fp] = True
    return error


def _remembered(
    cache: dict[str, str | None], key: str, run: Callable[[], Any], fail: Callable[[Exception], str]
) -> str | None:
    """`run`'s outcome under `key`, run once per process: None when it passes, else `fail` of what it raised
    (anything a component or dataset raises is the check's finding)."""
    if key not in cache:
        try:
            run()
            cache[key] = None
        except Exception as e:
            cache[key] = fail(e)
    return cache[key]


def batches(cfg: TrialConfig) -> None:
    """Build the trial's data (`build_data` checks its classes and widths against what the dataset declared),
    collate `SAMPLE` items of each split (its collate checks every label is a class index), and run the first
    `BATCH` of them through the model the trial builds and the task's loss; raise with what does not fit."""
    import numpy as np
    import torch

    from ablate.data import DataError, build_data
    from ablate.nn.accounting import example_input
    from ablate.nn.factory import create_model
    from ablate.registry import TASKS

    data = build_data(cfg)
    task = TASKS.get(cfg.task)(cfg, data, torch.device("cpu"))
    model = create_model(cfg, data.num_classes, data.in_chans).eval()
    takes = [tuple(t.shape) for t in example_input(cfg, data.in_chans, batch=BATCH)]
    for split, ds in (("train", data.train), ("val", data.val), ("test", data.test)):
        if ds is None:
            continue
        n = len(ds)  # type: ignore[arg-type]  # the splits are map-style datasets
        if n == 0:
            raise DataError(cfg.data.name, cfg.data.path, f"its {split} split is empty")
        assert data.collate is not None  # build_data's collate checks the labels
        try:
            batch = data.collate([ds[int(i)] for i in np.unique(np.linspace(0, n - 1, min(n, SAMPLE)).round())])
        except DataError as e:
            raise DataError(e.dataset, e.path, f"its {split} split: {e.problem}") from e
        x, y = task.inputs(batch)
        inputs, labels = [t[:BATCH] for t in x], y[:BATCH]
        got = [tuple(t.shape) for t in inputs]
        try:
            if [len(s) for s in got] != [len(s) for s in takes]:
                raise ValueError(f"{len(got)} inputs of {[len(s) for s in got]} dims")
            with torch.no_grad():
                task.loss(model(*inputs), labels)
        except Exception as e:
            raise DataError(cfg.data.name, cfg.data.path,
                            f"a batch of its {split} split, inputs {', '.join(map(str, got))} and labels "
                            f"{tuple(labels.shape)} {labels.dtype}, does not fit {cfg.model.backbone} (which takes "
                            f"{', '.join(map(str, takes))} for the in_chans {data.in_chans} it declares) and the "
                            f"{cfg.task} loss: {type(e).__name__}: {e}") from e  # fmt: skip


def check_data(cfg: TrialConfig) -> str | None:
    """None when the trial's dataset passes `batches`, else the error naming it (cached per dataset)."""
    return _remembered(_DATA, _dataset(cfg), lambda: batches(cfg), lambda e: data_failure(cfg, e))


def _dataset(cfg: TrialConfig) -> str:
    """What a data check depends on besides the code: the task, the data settings and the model's input."""
    return json.dumps([cfg.task, cfg.data.model_dump(mode="json"), cfg.model.img_size, cfg.model.num_classes])


def data_fingerprint(cfg: TrialConfig) -> str | None:
    """What a passing data check is remembered under, as a model's is (`fingerprint`): the dataset's settings, the
    trial's code fingerprint (the dataset's modules among it) and `_CHECKS`; None, never remembered, for a dataset
    read from a path or one whose examples its code does not fix (`Dataset.shipped`)."""
    if cfg.data.path is not None or not DATASETS.get(cfg.data.name).shipped:
        return None
    key = ["data", _dataset(cfg), code_fingerprint(cfg).digest, _CHECKS]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20]


_CHECKS = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
"""This module's text: a pass is remembered only for the checks that passed it."""


def fingerprint(cfg: TrialConfig) -> str:
    """The architecture, the trial's code fingerprint (`ablate.provenance.fingerprint`) and `_CHECKS`: a pass is
    remembered for exactly the code that a result would be recorded with, so whatever makes a result stale is checked
    again, and so is everything when the checks change."""
    code = code_fingerprint(cfg).digest
    key = [model_key(cfg, *reversed(data_dims(cfg))), code, _CHECKS]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:20]


def check(
    plans: Sequence[Sweep],
    skip: set[str] | None = None,
    remember: Path | None = None,
    data: bool = False,
    models: bool = True,
) -> list[Checked]:
    """Every distinct variant of the plans with a trial not in `skip` (done keys), checked; the first such
    trial of each variant stands for it. `models`: a training step of its model (`check_config`) and its cost.
    `remember`: a JSON file of passing fingerprints (`ablate.provenance.cache`'s format, shared by concurrent
    launchers),
    read, and extended when every variant passes. `data`: each variant's dataset is checked too (`check_data`,
    once per dataset; remembered as the models are for a dataset its code fixes, `data_fingerprint`), unless its
    path is the cluster's (`data.remote`)."""
    passed = cache.entries(remember) if remember is not None else {}
    new: dict[str, bool] = {}
    out = []
    for plan in plans:
        seen: set[str] = set()
        for t in plan.trials:
            if t.variant in seen or t.key in (skip or ()):
                continue
            seen.add(t.variant)
            error = params = gflops = None
            if models:
                fp = fingerprint(t.config) if remember is not None else None
                error = _unless_passed(fp, passed, new, functools.partial(check_config, t.config))
                if error is None:
                    try:
                        counted = cost(t.config)
                        params, gflops = counted.params, counted.gflops / 2
                    except ModelError as e:
                        error = str(e)
            if error is None and data and not t.config.data.remote:  # a remote path is only on the cluster
                fp = data_fingerprint(t.config) if remember is not None else None
                error = _unless_passed(fp, passed, new, functools.partial(check_data, t.config))
            out.append(Checked(plan.sweep, t.variant, params, gflops, error))
    if remember is not None and new and all(c.ok for c in out):  # a failed check exits before anything is written
        cache.keep_all(remember, new)
    return out
