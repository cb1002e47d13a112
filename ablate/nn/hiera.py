"""Hiera (timm Hiera: widths and heads doubling per stage, mask-unit attention, pooled queries) with every
attention running the trial's mixer."""

from __future__ import annotations

import timm
from timm.models.hiera import HieraBlock, MaskUnitAttention
from torch import Tensor, nn

from ablate.components import Backbone, Mechanism
from ablate.config import ModelConfig
from ablate.nn.surgery import Mixed, check_twin, mix_blocks, timm_args
from ablate.nn.vit import heads_divide, no_dwconv
from ablate.registry import register_backbone


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


def check_hiera(m: ModelConfig) -> None:
    """Raise a ValueError when timm's Hiera cannot take this geometry.

    Hiera pools queries 2x2 at every stage transition (q_pool = stages - 1) inside mask units of
    window_size^2 tokens, so the window must be a multiple of 2^(stages-1) and divide the token grid.
    """
    assert m.depths is not None and m.num_heads is not None and m.patch_size is not None  # set by validation
    stages, grid = len(m.depths), m.img_size // m.patch_size
    if len(m.num_heads) != 1:
        raise ValueError(f"hiera takes one num_heads entry (the first stage's, doubled per stage), got {m.num_heads}")
    if m.img_size % m.patch_size or grid % m.window_size or m.window_size % 2 ** (stages - 1):
        raise ValueError(
            f"hiera needs window_size (the mask unit) to be a multiple of 2^(stages-1) = {2 ** (stages - 1)} and to "
            f"divide the token grid img_size / patch_size = {m.img_size}/{m.patch_size}; "
            f"got window_size {m.window_size}"
        )


class Hiera(Backbone):
    name = "hiera"
    family = "Hiera"
    patch_size = 4
    sizes = {
        "hiera-tiny": dict(embed_dim=96, depths=(1, 2, 7, 2), num_heads=(1,), window_size=8),
        "hiera-tiny-plus": dict(embed_dim=96, depths=(1, 2, 7, 2), num_heads=(3,), window_size=8),
        "hiera-small": dict(embed_dim=96, depths=(1, 2, 11, 2), num_heads=(1,), window_size=8),
        "hiera-base": dict(embed_dim=96, depths=(2, 3, 16, 3), num_heads=(1,), window_size=8),
    }

    def check(self, m: ModelConfig) -> None:
        heads_divide(m)
        no_dwconv(m)
        check_twin(m, self)

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """Widths and heads double together: one head dim at every stage."""
        assert m.embed_dim is not None and m.num_heads is not None  # set by validation
        return (m.embed_dim // m.num_heads[0],)

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """timm Hiera (widths and heads doubling per stage; mask-unit attention in the first half of the
        stages, global after; patch embed kernel 2p-1, stride p, padding p-1, i.e. timm's 7/4/3 at p = 4)."""
        check_hiera(m)
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

    def attention_drop_path(self, rate: float) -> float:
        return rate * 0.75 if rate > 0.2 else rate


register_backbone(Hiera())
