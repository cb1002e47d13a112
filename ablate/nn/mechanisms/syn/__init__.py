"""Syn layer (synergetic attention, for multiple-instance learning): a cubic map iterated on attention rows.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer; the paper's tables, the section Syn adds to a report, are in `report`, imported when one is written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from ablate.components import Mechanism, ReportSection
from ablate.registry import register_mechanism, register_section

if TYPE_CHECKING:
    from ablate.components import Block
    from ablate.nn.mixer import TokenMixer
    from ablate.reporting.sections import SweepResults


@register_mechanism
class SynAttention(Mechanism):
    """Syn layer: a polynomial map iterated on each attention row (concentrate or distract)."""

    kind: Literal["syn"] = "syn"
    said: ClassVar[tuple[str, ...]] = ("steps", "gamma", "bypass", "renormalize")
    steps: int = Field(0, ge=-1000, le=1000)
    """Iterations I: > 0 concentrate (forward steps), < 0 distract (backward steps), 0 none."""
    gamma: float = Field(0.5, gt=0, le=1)
    """Cubic weight of the map a' = gamma a^3 + (1 - gamma) a, in (0, 1]."""
    bypass: bool = True
    """Gradient bypass (straight-through): gradients flow as if no steps were taken."""
    renormalize: bool = False
    """L2-normalise the rows after the last step as well (not in the paper, whose last step is unnormalised)."""

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.syn.layers import Syn

        return Syn(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        mode = "concentrate" if self.steps > 0 else "distract" if self.steps < 0 else "no steps"
        bypass = "" if self.bypass else ", no bypass"
        renormalized = ", renormalised" if self.renormalize else ""
        return f"Syn (I={self.steps}: {mode}; gamma={self.gamma}{bypass}{renormalized})"


def _paper_tables(results: SweepResults) -> list[Block]:
    from ablate.nn.mechanisms.syn.report import paper_tables

    return paper_tables(results)


register_section(ReportSection("Syn: the paper's tables", "syn", _paper_tables))
