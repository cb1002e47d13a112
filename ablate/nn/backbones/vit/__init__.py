"""ViT (timm VisionTransformer, class token, one stage) with every attention running the trial's mixer.

The declaration: sizes and shape checks, torch-free (what validation and planning import); the network is in
`layers`, imported when a trial builds its model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ablate.components import Backbone, Mechanism
from ablate.nn.shapes import (
    check_twin,
    heads_divide,
    no_dwconv,
    one_stage,
    patch_grid,
    projections_fit,
    uniform_head_dims,
)
from ablate.registry import register_backbone

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import ModelConfig


class ViT(Backbone):
    name = "vit"
    token_grid = True
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
        patch_grid(m)
        one_stage(m)
        heads_divide(m)
        no_dwconv(m)
        check_twin(m, self)

    def check_projections(self, m: ModelConfig, projections: str) -> None:
        projections_fit(m, projections)

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """One stage: embed_dim over num_heads[0]."""
        return uniform_head_dims(m)

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """timm VisionTransformer (class token, depth = depths[0]) with every attention mixed."""
        from ablate.nn.backbones.vit.layers import create

        return create(m, attention, num_classes, in_chans)

    def describe_size(self, words: str, m: dict[str, Any]) -> str:
        return f"{words}/{m.get('patch_size')}"


register_backbone(ViT())
