"""Softmax attention: the baseline every ablation compares against, through torch's fused SDPA kernel."""

from __future__ import annotations

from typing import Any, Literal

import torch.nn.functional as F
from torch import Tensor

from ablate.components import Mechanism
from ablate.nn.mixer import TokenMixer, softmax_rows
from ablate.registry import register_mechanism


@register_mechanism
class SoftmaxAttention(Mechanism):
    """Plain scaled dot-product attention (fused SDPA)."""

    kind: Literal["softmax"] = "softmax"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        return Softmax(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        return "Softmax"

    def published_key(self) -> tuple[Any, ...] | None:
        return (self.kind,)


class Softmax(TokenMixer):
    """Plain attention through the fused SDPA kernel."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        if self.record:
            self._keep(softmax_rows(q, k, bias))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype))
