"""ViT (timm VisionTransformer, class token, one stage) with every attention running the trial's mixer."""

from __future__ import annotations

from typing import Any

import timm
from timm.layers import Attention
from timm.layers.attention import resolve_self_attn_mask
from timm.models.vision_transformer import Block
from torch import Tensor, nn

from ablate.components import Backbone, Mechanism
from ablate.config import ModelConfig
from ablate.nn.surgery import Mixed, check_twin, mix_blocks, timm_args
from ablate.registry import register_backbone


class MixedAttention(Mixed, Attention):
    """ViT attention; bias = timm's optional attention mask, resolved to an additive bias."""

    @staticmethod
    def blank(attn: nn.Module, head_dim: int) -> Attention:
        assert isinstance(attn, Attention)
        qkv_bias, proj_bias = attn.qkv.bias is not None, attn.proj.bias is not None
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


class ViT(Backbone):
    name = "vit"
    family = "ViT"
    normalization = "inception"  # mean = std = 0.5, as the ViT authors
    patch_size = 16
    sizes = {
        "vit-tiny": dict(embed_dim=192, depths=(12,), num_heads=(3,), patch_size=16),
        "vit-small": dict(embed_dim=384, depths=(12,), num_heads=(6,), patch_size=16),
        "vit-base": dict(embed_dim=768, depths=(12,), num_heads=(12,), patch_size=16),
        "vit-base-slim": dict(embed_dim=512, depths=(12,), num_heads=(8,), patch_size=16),
    }

    def check(self, m: ModelConfig) -> None:
        one_stage(m)
        heads_divide(m)
        no_dwconv(m)
        check_twin(m, self)

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """One stage: embed_dim over num_heads[0]."""
        assert m.embed_dim is not None and m.num_heads is not None  # set by validation
        return (m.embed_dim // m.num_heads[0],)

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """timm VisionTransformer (class token, depth = depths[0]) with every attention mixed."""
        assert m.depths is not None and m.num_heads is not None  # set by validation
        model = timm.create_model("vit_base_patch16_224", **timm_args(m, num_classes, in_chans),
                                  patch_size=m.patch_size, depth=m.depths[0], num_heads=m.num_heads[0])  # fmt: skip
        return mix_blocks(model, Block, MixedAttention, m, attention)

    def describe_size(self, words: str, m: dict[str, Any]) -> str:
        return f"{words}/{m.get('patch_size')}"


def one_stage(m: ModelConfig) -> None:
    assert m.depths is not None and m.num_heads is not None  # set by validation
    if len(m.depths) != 1 or len(m.num_heads) != 1:
        raise ValueError(f"{m.backbone} has one stage: depths and num_heads take one entry each")


def heads_divide(m: ModelConfig) -> None:
    assert m.embed_dim is not None and m.num_heads is not None  # set by validation
    if m.embed_dim % m.num_heads[0]:
        raise ValueError(f"embed_dim {m.embed_dim} is not divisible by num_heads {m.num_heads[0]}")


def no_dwconv(m: ModelConfig) -> None:
    if m.dwconv:
        raise ValueError(f"dwconv (CSaN-V2) is defined for swin only, not {m.backbone}")


register_backbone(ViT())
