"""`model.match_params`: the width (`model.match_by`) at which a network has a target parameter count.

`model.match_by` is searched, the embed dim (every stage keeping its heads dividing its width) or a pure stack's
twin width (every twin keeping whole head dims), until the parameter count lands within MATCH_TOLERANCE of the
target, a number or the count of a reference model described by dotted overrides of the same config. Counts come
from the cost cache (`ablate.provenance.cache`), so a plan whose widths were solved before imports no torch; solutions
are also kept per process.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from ablate.config import TrialConfig, identity, size_preset
from ablate.nn.shapes import Twinned
from ablate.registry import BACKBONES

MATCH_TOLERANCE = 0.02
MAX_MULTIPLE = 2**16
"""The width search stops doubling here (MAX_MULTIPLE x step): a target no width reaches."""
_SOLVED: dict[str, int | float] = {}


def model_key(cfg: TrialConfig, num_classes: int, in_chans: int) -> str:
    """Everything that fixes the network's architecture: model and attention identity, data widths."""
    return json.dumps([identity(cfg.model), identity(cfg.attention), num_classes, in_chans], sort_keys=True)


def meta_params(cfg: TrialConfig, num_classes: int, in_chans: int) -> int:
    """Parameter count of the config's network, built on the meta device (no memory), kept in the cost cache
    (`ablate.provenance.cache`) with the ValueError of a width the mechanism rejects: a width search builds each
    candidate once per code version, not once per process."""
    from ablate.provenance.cache import remembered
    from ablate.provenance.fingerprint import fingerprint

    def count() -> int | str:
        import torch

        from ablate.nn.build import build, count_params

        try:
            with torch.device("meta"):
                return count_params(build(match_width(cfg, num_classes, in_chans), num_classes, in_chans))
        except ValueError as e:
            return str(e)

    found = remembered(
        "params", fingerprint(cfg).digest, model_key(cfg, num_classes, in_chans), count, "ablate.nn.build"
    )
    if isinstance(found, str):
        raise ValueError(found)
    return int(found)


def reference_config(cfg: TrialConfig, overrides: dict[str, Any]) -> TrialConfig:
    """The reference model of a dict `match_params`: `cfg` with the dotted overrides applied, unmatched.

    A new `attention.kind` starts that section from the kind's defaults (other attention.* overrides then
    apply); a new `model.size` drops the fields its preset defines, so the preset takes effect; a stack other
    than `pure` drops `twin_width` (it has no twin).
    """
    data = cfg.model_dump()
    data["model"].update(match_params=None, match_by="embed_dim")
    for key in sorted(overrides, key=lambda k: k not in ("attention.kind", "model.size", "model.stack")):
        if key.startswith(("model.match_params", "model.match_by")):
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
        if key == "model.stack" and value != "pure":
            node.pop("twin_width")
        node[leaf] = value
    try:
        return TrialConfig.model_validate(data)
    except ValueError as e:
        raise ValueError(f"model.match_params {overrides} does not describe a valid reference model: {e}") from e


def match_width(cfg: TrialConfig, num_classes: int, in_chans: int) -> TrialConfig:
    """`cfg` with `model.match_by` (embed_dim or twin_width) solved for `model.match_params` (unchanged when
    that is None); with `model.match_as`, solved on that reference and applied to `cfg`.

    Parameter counts grow with either width, so a doubling search brackets the target and a bisection over
    the width's grid finds the two widths around it; the nearer one wins. A ValueError names the target and
    the nearest counts when neither lands within MATCH_TOLERANCE.
    """
    target = cfg.model.match_params
    if target is None:
        return cfg
    by = cfg.model.match_by
    key = model_key(cfg, num_classes, in_chans)
    if key not in _SOLVED:
        if isinstance(target, dict):
            target = meta_params(reference_config(cfg, target), num_classes, in_chans)
        solved = cfg if cfg.model.match_as is None else reference_config(cfg, cfg.model.match_as)
        _SOLVED[key] = _solve(solved, by, target, num_classes, in_chans)
    return _with(cfg, by, _SOLVED[key])


def _with(cfg: TrialConfig, by: str, width: float) -> TrialConfig:
    """`cfg` built at `width` for its `by` field, no longer matched."""
    update = {by: width, "match_params": None, "match_as": None, "match_by": "embed_dim"}
    return cfg.model_copy(update={"model": cfg.model.model_copy(update=update)})


def _grid(cfg: TrialConfig, by: str) -> tuple[Callable[[int], int | float], int, str]:
    """(the width at grid point n, cfg's own grid point, what the grid is) of the `by` search."""
    backbone = BACKBONES.get(cfg.model.backbone)
    if by == "embed_dim":
        step = backbone.width_step(cfg.model)
        assert cfg.model.embed_dim is not None  # set by validation
        grid = f"a multiple of {step}, so heads {cfg.model.num_heads} divide every stage"
        return (lambda n: n * step), cfg.model.embed_dim // step, grid
    if not isinstance(backbone, Twinned):
        raise ValueError(f"model.match_params: {cfg.model.backbone} has no twin attention to widen")
    unit = math.gcd(*backbone.head_dims(cfg.model))  # twin_width n / unit keeps every twin head dim whole
    return (lambda n: n / unit), unit, f"a multiple of 1/{unit}, so every twin's head dim is whole"


def _solve(cfg: TrialConfig, by: str, goal: float, num_classes: int, in_chans: int) -> int | float:
    width, start, grid = _grid(cfg, by)
    counts: dict[int, int | None] = {}

    def params(mult: int) -> int | None:
        """Parameter count at grid point mult; None where the mechanism rejects that width."""
        if mult not in counts:
            try:
                counts[mult] = meta_params(_with(cfg, by, width(mult)), num_classes, in_chans)
            except ValueError:
                counts[mult] = None
        return counts[mult]

    def below(mult: int) -> bool:
        """Rejected widths count as too small: mechanisms refuse widths under a minimum (e.g. CSaN's gates)."""
        n = params(mult)
        return n is None or n < goal

    lo, hi = 0, max(1, start)  # invariant: below(lo) and not below(hi)
    while below(hi) and hi < MAX_MULTIPLE:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    near = {m: n for m in range(max(1, lo - 2), hi + 3) if (n := params(m)) is not None}
    if not near:
        raise ValueError(f"model.match_params: {cfg.attention.kind} takes no {by} near {width(hi)} "
                         f"for a target of {goal:,.0f} parameters")  # fmt: skip
    best = min(near, key=lambda m: abs(near[m] - goal))
    if abs(near[best] - goal) > MATCH_TOLERANCE * goal:
        closest = ", ".join(f"{by} {width(m)} -> {near[m]:,} ({near[m] / goal - 1:+.1%})"
                            for m in sorted(near, key=lambda m: abs(near[m] - goal))[:2])  # fmt: skip
        raise ValueError(
            f"model.match_params: no {by} ({grid}) lands within {MATCH_TOLERANCE:.0%} of the target "
            f"{goal:,.0f} parameters; closest: {closest}"
        )
    return width(best)
