"""ViT's network: timm's VisionTransformer with every attention re-classed to run the trial's mixer."""

from __future__ import annotations

import timm
from timm.layers import Attention
from timm.layers.attention import resolve_self_attn_mask
from timm.models.vision_transformer import Block, VisionTransformer
from torch import Tensor, nn

from ablate.components import Mechanism
from ablate.config import ModelConfig
from ablate.nn.mixer import TokenGrid
from ablate.nn.surgery import Mixed, has_qkv_bias, mix_blocks, set_grid, timm_args


class MixedAttention(Mixed, Attention):
    """ViT attention; bias = timm's optional attention mask, resolved to an additive bias."""

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> Attention:
        assert isinstance(attn, Attention)
        qkv_bias, proj_bias = has_qkv_bias(attn), attn.proj.bias is not None
        dim = attn.qkv.in_features
        return Attention(dim, attn.num_heads, attn_head_dim=head_dim, qkv_bias=qkv_bias, proj_bias=proj_bias)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        out = self.mixer(q, k, v, bias=resolve_self_attn_mask(N, q, attn_mask, is_causal), x=x)
        out = self.norm(out.transpose(1, 2).reshape(B, N, self.attn_dim))
        if self.gate is not None:
            out = out * self.gate(x).sigmoid()
        y: Tensor = self.proj_drop(self.proj(out))
        return y


def create(m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
    """timm VisionTransformer (class token, depth = depths[0]) with every attention mixed, its mixers told the
    patch grid."""
    assert m.depths is not None and m.num_heads is not None  # set by validation
    model = timm.create_model("vit_base_patch16_224", **timm_args(m, num_classes, in_chans),
                              patch_size=m.patch_size, depth=m.depths[0], num_heads=m.num_heads[0])  # fmt: skip
    assert isinstance(model, VisionTransformer)
    mix_blocks(model, Block, MixedAttention, m, attention)
    rows, cols = model.patch_embed.grid_size
    set_grid(model, TokenGrid(model.num_prefix_tokens, rows, cols))
    return model
