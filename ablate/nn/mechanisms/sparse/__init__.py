"""Sparse attention: sparsemax and 1.5-entmax in place of softmax, and sparse coding by unrolled ISTA.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from ablate.components import Mechanism
from ablate.registry import register_mechanism

if TYPE_CHECKING:
    from ablate.nn.mixer import TokenMixer


@register_mechanism
class SparsemaxAttention(Mechanism):
    """sparsemax replaces softmax (entmax package)."""

    kind: Literal["sparsemax"] = "sparsemax"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.sparse.layers import Sparsemax

        return Sparsemax(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        return "sparsemax"


@register_mechanism
class Entmax15Attention(Mechanism):
    """1.5-entmax replaces softmax (entmax package)."""

    kind: Literal["entmax15"] = "entmax15"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.sparse.layers import Entmax15

        return Entmax15(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        return "1.5-entmax"


@register_mechanism
class ISTAAttention(Mechanism):
    """Sparse attention by unrolled ISTA: non-negative sparse coding of queries over keys."""

    kind: Literal["ista"] = "ista"
    said: ClassVar[tuple[str, ...]] = ("steps", "threshold", "signed", "zero_diag")
    steps: int = Field(3, ge=1, le=100)
    """Unrolled ISTA iterations T."""
    threshold: float = Field(0.01, ge=0)
    """Sparsity weight lambda: each step soft-thresholds by step_size * lambda."""
    step_size: float | None = Field(None, gt=0)
    """Step eps; None = 1 / ||K||_F^2 (always below 2 / L). A given value is clipped below 2 / L."""
    signed: bool = False
    """Signed soft-thresholding instead of the non-negative ReLU form."""
    zero_diag: bool = False
    """Forbid a token from coding itself (self-attention only)."""

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.sparse.layers import ISTA

        return ISTA(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        flags = "".join(f", {f.replace('_', ' ')}" for f in ("signed", "zero_diag") if getattr(self, f))
        return f"unrolled ISTA (T={self.steps}, thr={self.threshold}{flags})"
