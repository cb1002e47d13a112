"""Hiera (timm Hiera: widths and heads doubling per stage, mask-unit attention, pooled queries) with every
attention running the trial's mixer.

The declaration: sizes and shape checks, torch-free (what validation and planning import); the network is in
`layers`, imported when a trial builds its model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ablate.components import Backbone, Mechanism
from ablate.nn.shapes import check_twin, heads_divide, no_dwconv, patch_grid, projections_fit, uniform_head_dims
from ablate.registry import register_backbone

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import ModelConfig


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
        patch_grid(m)
        heads_divide(m)
        no_dwconv(m)
        check_twin(m, self)

    def check_projections(self, m: ModelConfig, projections: str) -> None:
        assert m.depths is not None and m.embed_dim is not None  # set by validation
        widens = len(m.depths) > 1
        projections_fit(m, projections, f"the first attention of each later stage widens its tokens ({m.embed_dim} "
                          f"-> {2 * m.embed_dim} at stage 2)" if widens else "")  # fmt: skip

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """Widths and heads double together: one head dim at every stage."""
        return uniform_head_dims(m)

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """timm Hiera (widths and heads doubling per stage; mask-unit attention in the first half of the
        stages, global after; patch embed kernel 2p-1, stride p, padding p-1, i.e. timm's 7/4/3 at p = 4)."""
        check_hiera(m)
        from ablate.nn.backbones.hiera.layers import create

        return create(m, attention, num_classes, in_chans)

    def attention_drop_path(self, rate: float) -> float:
        return rate * 0.75 if rate > 0.2 else rate


register_backbone(Hiera())
