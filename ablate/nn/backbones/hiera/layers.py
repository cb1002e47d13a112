"""Hiera's network: timm's Hiera with every attention (mask-unit or global, pooled queries) re-classed to run
the trial's mixer."""

from __future__ import annotations

import timm
from timm.models.hiera import HieraBlock, MaskUnitAttention
from torch import Tensor, nn

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.surgery import Mixed, mix_blocks, timm_args


class MixedMaskUnitAttention(Mixed, MaskUnitAttention):
    """Hiera attention, mask-unit (windows folded into the batch) or global, with optional query pooling.

    Pooled-query blocks: timm max-pools q over the q_stride positions of each output token; the tokens the
    mixer sees (`x`, for variants whose gates read the token, e.g. CSaN's descriptor gates) are the block's
    normalised input tokens, not pooled: one per key, in the keys' order, of width in_dim = the block's
    input width (the mixer's dim is the output width). So CSaN's gates run on every input token, as the
    authors' Hiera-CSaN does (its published 4.9G FLOPs on Hiera-Tiny-Plus count them).
    """

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> MaskUnitAttention:
        """timm's MaskUnitAttention projects back to its inner width (dim_out): a twin of another inner width
        gets an output projection to the block's width."""
        assert isinstance(attn, MaskUnitAttention)
        inner = attn.heads * head_dim
        fresh = MaskUnitAttention(attn.dim_out, inner, attn.heads, 1, attn.window_size, attn.use_mask_unit_attn)
        if inner != attn.dim_out:
            fresh.proj = nn.Linear(inner, attn.dim_out)
        return fresh

    def forward(self, x: Tensor) -> Tensor:
        B, N, C = x.shape
        nw = N // (self.q_stride * self.window_size) if self.use_mask_unit_attn else 1
        # token n = t * nw + w (Hiera's unrolled order); fold windows into the batch: (B * nw, H, t, d)
        qkv = self.qkv(x).reshape(B, -1, nw, 3, self.heads, self.head_dim).permute(3, 0, 2, 4, 1, 5)
        q, k, v = qkv.reshape(3, B * nw, self.heads, -1, self.head_dim).unbind(0)
        tokens = x.view(B, -1, nw, C).transpose(1, 2).reshape(B * nw, -1, C)
        if self.q_stride > 1:
            q = q.view(B * nw, self.heads, self.q_stride, -1, self.head_dim).amax(dim=2)
        out = self.mixer(q, k, v, x=tokens)
        out = out.view(B, nw, self.heads, -1, self.head_dim).permute(0, 3, 1, 2, 4).reshape(B, -1, self.dim_out)
        y: Tensor = self.proj(out)
        return y


def create(m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
    """timm Hiera with every attention mixed (the geometry is checked by the declaration)."""
    assert m.depths is not None and m.num_heads is not None and m.patch_size is not None  # set by validation
    stages, p = len(m.depths), m.patch_size
    model = timm.create_model(
        "hiera_base_224",
        **timm_args(m, num_classes, in_chans),
        num_heads=m.num_heads[0],
        stages=m.depths,
        q_pool=stages - 1,
        mask_unit_size=(m.window_size, m.window_size),
        mask_unit_attn=tuple(i < stages // 2 for i in range(stages)),
        patch_kernel=(2 * p - 1,) * 2,
        patch_stride=(p, p),
        patch_padding=(p - 1,) * 2,
    )
    return mix_blocks(model, HieraBlock, MixedMaskUnitAttention, m, attention)
