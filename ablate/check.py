"""Check before fan-out: build every distinct model of a plan and run one training step on CPU.

A broken mechanism (a mixer that raises, returns the wrong shape or no gradient) fails here in seconds,
before Ray starts, instead of in every trial on the cluster. Each distinct architecture (`model_key`:
model, mechanism, data widths) is checked once per process: a batch of two real-shaped inputs, forward,
loss, backward. Passing checks are also remembered in a file under the architecture and the trial's code
fingerprint (`ablate.fingerprint`; `launch` keeps the file beside the cost cache, `ablate.cache.folder()`), so a
later launch on this machine, of any sweep or project, does not repeat them, while code the fingerprint sees
edited (a component's modules and what they import, a plugin package's `layers.py` included) is checked again.
torch is imported only to run a step: a launch whose variants are all done or remembered (an idle relaunch)
never imports it.
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

from ablate.config import TrialConfig
from ablate.fingerprint import fingerprint as code_fingerprint
from ablate.nn.costs import data_dims, model_cost
from ablate.nn.widths import model_key
from ablate.planner import Plan
from ablate.registry import MECHANISMS

BATCH = 2


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


def step(cfg: TrialConfig) -> None:
    """One forward and backward pass at batch 2 on CPU; raise with what went wrong."""
    import torch

    from ablate.nn.accounting import example_input
    from ablate.nn.factory import create_model

    in_chans, num_classes = data_dims(cfg)
    model = create_model(cfg, num_classes, in_chans).train()
    inputs = example_input(cfg, in_chans, batch=BATCH)
    out = model(*inputs)
    if out.shape[0] != BATCH or not torch.isfinite(out).all():
        raise ValueError(f"the model returned {tuple(out.shape)} (finite: {bool(torch.isfinite(out).all())}) "
                         f"for a batch of {BATCH}")  # fmt: skip
    out.float().sum().backward()  # a loss with a gradient even at a zero-initialised head (Hiera)
    if not any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters()):
        raise ValueError("no parameter received a gradient")


def check_config(cfg: TrialConfig) -> str | None:
    """None when a step runs, else the error naming the mechanism and where it was registered (cached)."""
    key = model_key(cfg, *reversed(data_dims(cfg)))
    if key not in _CACHE:
        try:
            step(cfg)
            _CACHE[key] = None
        except Exception as e:  # anything a component raises is the check's finding
            frame = traceback.extract_tb(e.__traceback__)[-1]
            source = MECHANISMS.entry(cfg.attention.kind).source
            _CACHE[key] = (f"attention.kind {cfg.attention.kind!r} ({source}) on {cfg.model.backbone}: "
                           f"{type(e).__name__}: {e} ({frame.filename}:{frame.lineno})")  # fmt: skip
    return _CACHE[key]


def fingerprint(cfg: TrialConfig) -> str:
    """The architecture and the trial's code fingerprint (`ablate.fingerprint`): a pass is remembered for
    exactly the code that a result would be recorded with, so whatever makes a result stale is checked again."""
    code = code_fingerprint(cfg).digest
    return hashlib.sha256(json.dumps([model_key(cfg, *reversed(data_dims(cfg))), code]).encode()).hexdigest()[:20]


class Remembered:
    """Fingerprints of architectures that passed, in a JSON file (written atomically; unreadable: empty)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.passed: set[str] = set()
        if path is not None and path.exists():
            try:
                self.passed = set(json.loads(path.read_text()))
            except (OSError, ValueError):
                self.passed = set()

    def save(self) -> None:
        """Add what passed here to what the file holds now (another launcher may have added to it meanwhile)."""
        if self.path is None:
            return
        self.passed |= Remembered(self.path).passed
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted(self.passed)))
        tmp.replace(self.path)


def check(plans: list[Plan], skip: set[str] | None = None, remember: Path | None = None) -> list[Checked]:
    """Every distinct variant of the plans with a trial not in `skip` (done keys), checked; the first such
    trial of each variant stands for it. `remember`: a file of passing fingerprints, read, and extended when
    every variant passes."""
    memory = Remembered(remember)
    out = []
    for plan in plans:
        seen: set[str] = set()
        for t in plan.trials:
            if t.variant in seen or t.key in (skip or ()):
                continue
            seen.add(t.variant)
            fp = fingerprint(t.config) if remember is not None else None
            error = None if fp in memory.passed else check_config(t.config)
            if error is None and fp is not None:
                memory.passed.add(fp)
            params = gflops = None
            if error is None:
                cost = model_cost(t.config)
                params, gflops = cost.params, cost.gflops / 2
            out.append(Checked(plan.sweep, t.variant, params, gflops, error))
    if all(c.ok for c in out):  # a failed check exits before anything is written
        memory.save()
    return out
