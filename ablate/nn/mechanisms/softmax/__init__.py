"""Softmax attention, the baseline every ablation compares against.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ablate.components import Mechanism
from ablate.registry import register_mechanism

if TYPE_CHECKING:
    from ablate.nn.mixer import TokenMixer


@register_mechanism
class SoftmaxAttention(Mechanism):
    """Plain scaled dot-product attention (fused SDPA)."""

    kind: Literal["softmax"] = "softmax"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.softmax.layers import Softmax

        return Softmax(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        return "Softmax"

    def published_key(self) -> tuple[Any, ...] | None:
        return (self.kind,)
