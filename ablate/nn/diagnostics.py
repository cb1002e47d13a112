"""Attention diagnostics read after a forward pass: row entropy, column load, arg-max keys.

Only when asked: inside ``with recording(model):`` every token mixer keeps its last attention rows
(otherwise none materialises them); read them inside the block, the rows are dropped on exit::

    with recording(model):
        model(probe)
        stats, winners = summarize(model), argmax_keys(model)

Rows are compared as distributions: |a| normalised to unit sum, since some variants' rows are not
(CSaN's mu-scaled columns, Syn's unit-L2 rows, ISTA's free coefficients); all-zero rows (fully masked,
or ISTA codes thresholded away) are left out.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from ablate.nn.mixer import TokenMixer


@contextmanager
def recording(model: nn.Module) -> Iterator[nn.Module]:
    """Turn recording on for every token mixer of ``model``; off again, and the rows dropped, on exit."""
    mixers = [m for m in model.modules() if isinstance(m, TokenMixer)]
    for m in mixers:
        m.record = True
    try:
        yield model
    finally:
        for m in mixers:
            m.record = False
            m.last_attn = None


def _recorded(model: nn.Module) -> dict[str, Tensor]:
    mixers = {n: m for n, m in model.named_modules() if isinstance(m, TokenMixer)}
    rows = {n: m.last_attn for n, m in mixers.items() if m.last_attn is not None}
    if mixers and not rows:  # (a model without any mixer, MIL mean pooling, has nothing to record)
        raise RuntimeError("no attention recorded: run a forward pass inside `with recording(model):`")
    return rows


def _distributions(a: Tensor) -> tuple[Tensor, Tensor]:
    """(rows as distributions, mask of rows that carry any mass)."""
    a = a.abs().float()
    mass = a.sum(-1, keepdim=True)
    return a / mass.clamp_min(torch.finfo(a.dtype).tiny), mass.squeeze(-1) > 0


def row_entropy(a: Tensor) -> float:
    """Mean entropy (nats) of the rows that carry mass: 0 for one-hot rows, log(Nk) for uniform ones."""
    p, live = _distributions(a)
    h = -torch.special.xlogy(p, p).sum(-1)
    return h[live].mean().item() if live.any() else float("nan")


def gini(c: Tensor) -> Tensor:
    """Gini coefficient along the last dim of non-negative c: 0 equal, (n - 1) / n all on one entry."""
    c, _ = c.sort(-1)
    n = c.shape[-1]
    i = torch.arange(1, n + 1, device=c.device, dtype=c.dtype)
    return 2 * (i * c).sum(-1) / (n * c.sum(-1)) - (n + 1) / n


def column_gini(a: Tensor) -> float:
    """Column load: Gini of the column sums (attention mass each key receives), mean over batch x head."""
    p, live = _distributions(a)
    cols = p.sum(-2)  # (B, H, Nk)
    used = live.any(-1)
    return gini(cols[used]).mean().item() if used.any() else float("nan")


def summarize(model: nn.Module) -> dict[str, float]:
    """``entropy/<layer>`` and ``gini/<layer>`` for every recording mixer, plus their means over layers (none for
    a model without attention, such as a MIL network with mean pooling)."""
    out: dict[str, float] = {}
    for name, a in _recorded(model).items():
        out[f"entropy/{name}"] = row_entropy(a)
        out[f"gini/{name}"] = column_gini(a)
    for metric in ("entropy", "gini"):
        if values := [v for k, v in out.items() if k.startswith(metric + "/")]:
            out[metric] = sum(values) / len(values)
    return out


def argmax_keys(model: nn.Module) -> dict[str, Tensor]:
    """The arg-max key of every query, (B, H, Nq) on the CPU, per layer: keep them to compare epochs."""
    return {name: a.abs().argmax(-1).cpu() for name, a in _recorded(model).items()}


def winner_transfer(prev: dict[str, Tensor], cur: dict[str, Tensor]) -> float:
    """Fraction of queries whose arg-max key changed (the Syn paper's winner transfer rate), over layers.

    Both must come from the same probe batch: layers or shapes that differ are an error, not skipped.
    """
    if prev.keys() != cur.keys():
        raise ValueError(f"different layers: {sorted(prev.keys() ^ cur.keys())}")
    changed: float = 0
    total = 0
    for name, p in prev.items():
        c = cur[name]
        if p.shape != c.shape:
            raise ValueError(f"{name}: arg-max shapes differ, {tuple(p.shape)} vs {tuple(c.shape)}")
        changed += (p != c).sum().item()
        total += p.numel()
    return changed / total if total else float("nan")
