"""Softmax attention: the baseline every ablation compares against, through torch's fused SDPA kernel."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from ablate.nn.mixer import TokenMixer, softmax_rows


class Softmax(TokenMixer):
    """Plain attention through the fused SDPA kernel."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        if self.record:
            self.keep_attention(softmax_rows(q, k, bias))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype))
