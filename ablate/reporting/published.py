"""Published numbers (the CSaN paper's ImageNet-1K tables, `published.json`) matched to measured variants.

A variant corresponds to a published row when backbone size, stack, token mixer (softmax, or CSaN with
all components on and the same readout), diamond (param-matched) and DWConv agree and it was trained on
ImageNet-1K: then the numbers are comparable. A variant that agrees on everything but size or dataset
gets the nearest row (same size, else same family, else the first) for orientation only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).with_name("published.json")
IMAGENET_IDS = {"imagenet1k", "imagenet", "in1k", "ilsvrc2012"}


@dataclass(frozen=True)
class Row:
    model: str
    setting: str
    params_m: float
    gflops: float | None
    top1: float
    size: str
    stack: str
    kind: str
    readout: str = "unit"
    diamond: bool = False
    dwconv: bool = False

    def signature(self) -> tuple[Any, ...]:
        return (self.stack, self.kind, self.readout if self.kind == "csan" else None, self.diamond, self.dwconv)


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    """published.json: source, dataset and rows."""
    return json.loads(DATA.read_text())


def rows() -> list[Row]:
    return [Row(**r) for r in table()["rows"]]


def signature(cfg: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a published row is keyed on, minus the size; None for mixers the paper did not publish
    (other kinds, or CSaN with a component switched off)."""
    m, a = cfg.get("model", {}), cfg.get("attention", {})
    kind = a.get("kind", "softmax")
    if kind == "csan" and not (a.get("tau") and a.get("mu") and a.get("kappa_priv") and not a.get("bounded")):
        return None
    if kind not in ("softmax", "csan") or (kind == "csan" and a.get("kappa_pub") not in ("unit", "head")):
        return None
    readout = a.get("kappa_pub") if kind == "csan" else None
    return (m.get("stack", "alternating"), kind, readout, m.get("match_params") is not None, bool(m.get("dwconv")))


def is_imagenet(cfg: dict[str, Any]) -> bool:
    d = cfg.get("data", {})
    ident = re.sub(r"[^a-z0-9]", "", str(d.get("id") or "").lower())
    return d.get("name") == "imagefolder" and ident in IMAGENET_IDS


def match(cfg: dict[str, Any]) -> tuple[Row | None, bool]:
    """(the published row for this variant, whether it is comparable); (None, False) when none fits."""
    sig = signature(cfg)
    if sig is None:
        return None, False
    size = cfg.get("model", {}).get("size")
    family = cfg.get("model", {}).get("backbone", "")
    same = [r for r in rows() if r.signature() == sig]
    if not same:
        return None, False
    best = min(same, key=lambda r: (r.size != size, not r.size.startswith(family)))
    return best, best.size == size and is_imagenet(cfg)
