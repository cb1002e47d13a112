"""Swin (timm SwinTransformer, stage widths embed_dim * 2^i) with every window attention running the trial's
mixer; CSaN-V2's depthwise conv on the attention branches.

The declaration: sizes and shape checks, torch-free (what validation and planning import); the network is in
`layers`, imported when a trial builds its model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ablate.components import Backbone, Mechanism
from ablate.nn.shapes import check_twin, heads_divide, patch_grid, projections_fit
from ablate.registry import register_backbone

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import ModelConfig


class Swin(Backbone):
    name = "swin"
    token_grid = True
    family = "Swin"
    patch_size = 4
    sizes = {
        "swin-min": dict(embed_dim=96, depths=(1, 1, 1, 1), num_heads=(3, 6, 12, 24)),
        "swin-micro": dict(embed_dim=64, depths=(1, 1, 1, 1), num_heads=(2, 4, 8, 16)),
        "swin-tiny": dict(embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
        "swin-small": dict(embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
        "swin-base": dict(embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    }

    def check(self, m: ModelConfig) -> None:
        patch_grid(m)
        assert m.num_heads is not None and m.depths is not None  # set by validation
        if len(m.num_heads) != len(m.depths):
            raise ValueError("swin needs one num_heads entry per stage (len(num_heads) == len(depths))")
        heads_divide(m)
        check_twin(m, self)

    def check_projections(self, m: ModelConfig, projections: str) -> None:
        projections_fit(m, projections)

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """Stage i: width embed_dim * 2^i over num_heads[i] heads."""
        assert m.embed_dim is not None and m.num_heads is not None  # set by validation
        return tuple(m.embed_dim * 2**i // h for i, h in enumerate(m.num_heads))

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """timm SwinTransformer (stage widths embed_dim * 2^i) with every window attention mixed."""
        from ablate.nn.backbones.swin.layers import create

        return create(m, attention, num_classes, in_chans)

    def attention_drop_path(self, rate: float) -> float:
        return rate / 3 if rate >= 0.25 else rate

    def width_step(self, m: ModelConfig) -> int:
        """Stage i has width e * 2^i and num_heads[i] heads: e must make every stage divisible."""
        assert m.num_heads is not None  # set by validation
        return math.lcm(*(h // math.gcd(h, 2**i) for i, h in enumerate(m.num_heads)))


register_backbone(Swin())
