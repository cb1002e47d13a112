"""Cosine attention as an ablate plugin: a mechanism that is not in ablate, in one file.

Attention logits are cosine similarities scaled by a learnt per-head temperature (as in Swin V2):
softmax(tau_h * cos(q_i, k_j) + bias) v. Knobs: `tau0` (initial temperature) and `learn_tau`.
The experiments file lists this file under `plugins:`; ablate imports it before validating the file and
on every Ray worker, and from then on `attention.kind: cosine` is a mechanism like the built-in ones. It also
adds a section of its own to the report of every sweep that uses it (`temperature_table`).
Installed (`pip install .`, see pyproject.toml) it is found through its entry point instead, with no `plugins:`
key.
"""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from ablate.components import Mechanism, ReportSection
from ablate.nn.mixer import TokenMixer, normalize_rows
from ablate.registry import register_mechanism, register_section
from ablate.reporting.sections import Block, SweepResults, Table


@register_mechanism
class CosineAttention(Mechanism):
    """Cosine-similarity attention with a per-head temperature."""

    kind: Literal["cosine"] = "cosine"
    said: ClassVar[tuple[str, ...]] = ("tau0", "learn_tau")
    tau0: float = Field(10.0, gt=0)
    """Initial temperature multiplying the cosine logits."""
    learn_tau: bool = True
    """Learn the temperature per head (else keep tau0)."""

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        return Cosine(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        return f"Cosine (tau0={self.tau0:g}{'' if self.learn_tau else ', fixed'})"


class Cosine(TokenMixer):
    """softmax(tau_h cos(q_i, k_j) + bias) v, through SDPA on unit-norm queries and keys."""

    cfg: CosineAttention

    def __init__(self, cfg: CosineAttention, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__(cfg, dim, num_heads, in_dim)
        log_tau = torch.full((num_heads, 1, 1), math.log(cfg.tau0))
        self.log_tau = nn.Parameter(log_tau, requires_grad=cfg.learn_tau)

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        q, k = F.normalize(q, dim=-1) * self.log_tau.exp(), F.normalize(k, dim=-1)
        if self.record:
            self.keep_attention(normalize_rows(q @ k.transpose(-2, -1) + (0 if bias is None else bias), bias))
        mask = None if bias is None else bias.to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0)


def temperature_table(results: SweepResults) -> list[Block]:
    """The cosine variants by temperature: whether it was learnt, its initial value, the metric's mean over the
    replicates and the paired difference to the sweep's baseline (from the report's variant table)."""
    cells = results.cells(["attention.kind", "attention.learn_tau", "attention.tau0"])
    cosine = cells[cells["attention.kind"] == "cosine"].join(results.table[["delta"]])
    rows = [[("learnt" if r["attention.learn_tau"] else "fixed"), f"{r['attention.tau0']:g}", f"{r['mean']:.2f}",
             str(int(r["n"])), f"{r['delta']:+.2f}"] for _, r in cosine.iterrows()]  # fmt: skip
    caption = f"Cosine attention by its temperature: mean {results.data.metric} and the difference to the baseline."
    return [Table(caption, ["temperature", "tau0", results.data.metric, "n", "Δ"], rows)]


register_section(ReportSection("Cosine attention: temperature", "cosine", temperature_table))
