"""`create_model(cfg, num_classes, in_chans)`: one network for a trial, built by its registered backbone.

`model.match_params` is solved here: the embed dim is searched (every stage keeping its heads dividing its
width) until the parameter count lands within MATCH_TOLERANCE of the target, a number or the count of a
reference model described by dotted overrides of the same config. Solutions are cached per process.
"""

from __future__ import annotations

import json
from typing import Any

import torch
from torch import nn

from ablate.config import TrialConfig, identity, size_preset
from ablate.registry import BACKBONES

MATCH_TOLERANCE = 0.02
MAX_MULTIPLE = 2**16
"""The width search stops doubling here (embed_dim = MAX_MULTIPLE x step): a target no width reaches."""
_SOLVED: dict[str, int] = {}


def create_model(cfg: TrialConfig, num_classes: int, in_chans: int) -> nn.Module:
    """The trial's network on the current default device (``with torch.device("meta")`` for counting).

    Image backbones take (B, in_chans, H, W) and return (B, num_classes) logits; synpool takes a padded
    batch of bags (B, N, F = in_chans) and a mask (B, N) and returns (B,) logits.
    """
    cfg = match_width(cfg, num_classes, in_chans)
    backbone = BACKBONES.get(cfg.model.backbone)
    model = backbone.build(cfg.model, cfg.attention, num_classes, in_chans)
    if cfg.model.desync_drop_path:
        from timm.layers import DropPath

        for block in model.modules():
            attention_branch = getattr(block, "drop_path1", None)
            if isinstance(attention_branch, DropPath):
                attention_branch.drop_prob = backbone.attention_drop_path(attention_branch.drop_prob)
    return model


def model_key(cfg: TrialConfig, num_classes: int, in_chans: int) -> str:
    """Everything that fixes the network's architecture: model and attention identity, data widths."""
    return json.dumps([identity(cfg.model), identity(cfg.attention), num_classes, in_chans], sort_keys=True)


def count_params(model: nn.Module) -> int:
    """Number of parameters (shared ones once); works on meta-device models."""
    return sum(p.numel() for p in model.parameters())


def meta_params(cfg: TrialConfig, num_classes: int, in_chans: int) -> int:
    """Parameter count of the config's network, built on the meta device (no memory, no init cost)."""
    with torch.device("meta"):
        return count_params(create_model(cfg, num_classes, in_chans))


def reference_config(cfg: TrialConfig, overrides: dict[str, Any]) -> TrialConfig:
    """The reference model of a dict `match_params`: `cfg` with the dotted overrides applied, unmatched.

    A new `attention.kind` starts that section from the kind's defaults (other attention.* overrides then
    apply); a new `model.size` drops the fields its preset defines, so the preset takes effect.
    """
    data = cfg.model_dump()
    data["model"]["match_params"] = None
    for key in sorted(overrides, key=lambda k: k not in ("attention.kind", "model.size")):
        if key.startswith("model.match_params"):
            raise ValueError("model.match_params: the reference model cannot itself be matched")
        *path, leaf = key.split(".")
        node = data
        for part in path:
            if not isinstance(node.get(part), dict):
                raise ValueError(f"model.match_params: {key!r} is not a dotted config path (e.g. 'model.stack')")
            node = node[part]
        value = overrides[key]
        if key == "attention.kind" and value != node["kind"]:
            node.clear()
        if key == "model.size":
            for preset_field in ("backbone", *size_preset(value)[1]):
                node.pop(preset_field, None)
        node[leaf] = value
    try:
        return TrialConfig.model_validate(data)
    except ValueError as e:
        raise ValueError(f"model.match_params {overrides} does not describe a valid reference model: {e}") from e


def match_width(cfg: TrialConfig, num_classes: int, in_chans: int) -> TrialConfig:
    """`cfg` with embed_dim solved for `model.match_params` (unchanged when it is None).

    Parameter counts grow with the width, so a doubling search brackets the target and a bisection over
    multiples of `width_step` finds the two widths around it; the nearer one wins. A ValueError names the
    target and the nearest counts when neither lands within MATCH_TOLERANCE.
    """
    target = cfg.model.match_params
    if target is None:
        return cfg
    key = model_key(cfg, num_classes, in_chans)
    if key not in _SOLVED:
        if isinstance(target, dict):
            target = meta_params(reference_config(cfg, target), num_classes, in_chans)
        solved = cfg if cfg.model.match_as is None else reference_config(cfg, cfg.model.match_as)
        _SOLVED[key] = _solve(solved, target, num_classes, in_chans)
    return _with_width(cfg, _SOLVED[key])


def _with_width(cfg: TrialConfig, embed_dim: int) -> TrialConfig:
    model = cfg.model.model_copy(update={"embed_dim": embed_dim, "match_params": None, "match_as": None})
    return cfg.model_copy(update={"model": model})


def _solve(cfg: TrialConfig, goal: float, num_classes: int, in_chans: int) -> int:
    step = BACKBONES.get(cfg.model.backbone).width_step(cfg.model)
    counts: dict[int, int | None] = {}

    def params(mult: int) -> int | None:
        """Parameter count at embed_dim mult * step; None where the mechanism rejects that width."""
        if mult not in counts:
            try:
                counts[mult] = meta_params(_with_width(cfg, mult * step), num_classes, in_chans)
            except ValueError:
                counts[mult] = None
        return counts[mult]

    def below(mult: int) -> bool:
        """Rejected widths count as too small: mechanisms refuse widths under a minimum (e.g. CSaN's gates)."""
        n = params(mult)
        return n is None or n < goal

    assert cfg.model.embed_dim is not None  # set by validation
    lo, hi = 0, max(1, cfg.model.embed_dim // step)  # invariant: below(lo) and not below(hi)
    while below(hi) and hi < MAX_MULTIPLE:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    near = {m: n for m in range(max(1, lo - 2), hi + 3) if (n := params(m)) is not None}
    if not near:
        raise ValueError(f"model.match_params: {cfg.attention.kind} takes no embed_dim near {hi * step} "
                         f"for a target of {goal:,.0f} parameters")  # fmt: skip
    best = min(near, key=lambda m: abs(near[m] - goal))
    if abs(near[best] - goal) > MATCH_TOLERANCE * goal:
        closest = ", ".join(f"embed_dim {m * step} -> {near[m]:,} ({near[m] / goal - 1:+.1%})"
                            for m in sorted(near, key=lambda m: abs(near[m] - goal))[:2])  # fmt: skip
        raise ValueError(
            f"model.match_params: no embed_dim (a multiple of {step}, so heads {cfg.model.num_heads} divide every "
            f"stage) lands within {MATCH_TOLERANCE:.0%} of the target {goal:,.0f} parameters; closest: {closest}"
        )
    return best * step
