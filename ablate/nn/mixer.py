"""The token-mixer interface every attention variant implements, and the registry that selects one.

A mixer sees what an attention module has after its q/k/v projection and returns the mixed values; the
module around it (timm's, patched by `ablate.nn.backbones`) keeps its projections, bias and output
projection. So one variant works unchanged in ViT, Swin windows and Hiera's pooled-query blocks.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ablate.config import AttentionConfig, SoftmaxAttention


class TokenMixer(nn.Module):
    """Base class: ``forward(q, k, v, bias, x) -> out``.

    q: (B, H, Nq, d); k, v: (B, H, Nk, d); bias: additive, broadcastable to (B, H, Nq, Nk) (Swin's
    relative-position bias plus shift mask; -inf or a large negative value masks), or None; x: the
    tokens the queries were projected from, (B, Nq, in_dim), for variants whose gates read the token
    (CSaN; Hiera's pooled-query blocks pass the pooled tokens). Returns (B, H, Nq, d).
    Constructor: dim = H * d (the attention width), in_dim = width of x (Hiera's stage transitions
    project dim -> dim_out, so in_dim can differ from dim; defaults to dim).

    Diagnostics: when ``self.record`` is True, a variant stores the attention rows of its last forward
    in ``self.last_attn`` (B, H, Nq, Nk, detached); otherwise it must not materialise them.
    """

    def __init__(self, cfg: AttentionConfig, dim: int, num_heads: int, in_dim: int | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.dim = dim
        self.num_heads = num_heads
        self.in_dim = in_dim or dim
        self.record = False
        self.last_attn: Tensor | None = None

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        raise NotImplementedError

    def _keep(self, attn: Tensor) -> None:
        if self.record:
            self.last_attn = attn.detach()


REGISTRY: dict[str, type[TokenMixer]] = {}


def register(kind: str) -> Callable[[type[TokenMixer]], type[TokenMixer]]:
    """Class decorator: make a mixer selectable as ``attention.kind: <kind>``."""

    def deco(cls: type[TokenMixer]) -> type[TokenMixer]:
        REGISTRY[kind] = cls
        return cls

    return deco


def create_mixer(cfg: AttentionConfig, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
    """The mixer for ``cfg.kind`` (the timm ``create_model`` pattern)."""
    return REGISTRY[cfg.kind](cfg, dim, num_heads, in_dim)


def softmax_rows(q: Tensor, k: Tensor, bias: Tensor | None) -> Tensor:
    """Explicit softmax(q k^T / sqrt(d) + bias): for diagnostics and reference implementations."""
    s = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if bias is not None:
        s = s + bias
    return s.softmax(-1)


@register("softmax")
class Softmax(TokenMixer):
    """Plain attention through the fused SDPA kernel."""

    def forward(self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None = None, x: Tensor | None = None) -> Tensor:
        if self.record:
            self._keep(softmax_rows(q, k, bias))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if bias is None else bias.to(q.dtype))
