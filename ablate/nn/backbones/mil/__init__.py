"""The Syn paper's multiple-instance network: instance embedding, SynPooling, one logit per bag.

The declaration: sizes and shape checks, torch-free (what validation and planning import); the network is in
`layers`, imported when a trial builds its model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ablate.components import Backbone, Mechanism
from ablate.nn.shapes import no_dwconv, one_stage
from ablate.registry import register_backbone

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import ModelConfig


#: Instances in the nominal bag that MIL FLOPs are counted on (costs grow linearly with the bag).
MIL_BAG = 64


class SynPool(Backbone):
    """The Syn paper's bag classifier: inputs (x (B, N, F), mask (B, N)), one logit per bag."""

    name = "synpool"
    task = "mil"
    family = "SynPool MIL"
    patch_size = 1
    sizes = {"synpool": dict(embed_dim=256, depths=(1,), num_heads=(4,))}

    def check(self, m: ModelConfig) -> None:
        one_stage(m)
        no_dwconv(m)
        if m.stack != "alternating":
            raise ValueError("stack applies to image backbones only")
        assert m.num_heads is not None  # set by validation
        if m.pool_dim % m.num_heads[0]:
            raise ValueError(f"pool_dim {m.pool_dim} is not divisible by num_heads {m.num_heads[0]}")

    def accepts(self, attention: Mechanism) -> None:
        """Mechanisms that calibrate each key from its own query have none here: one pooling query."""
        if attention.self_attention_only:
            raise ValueError(
                f"synpool cannot pool with attention.kind {attention.kind!r}: it calibrates self-attention"
            )

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        """The MIL network; in_chans is the instance feature width F, num_classes 2 (or 1): one logit."""
        if num_classes not in (1, 2):
            raise ValueError(f"synpool is a binary bag classifier (one logit); got num_classes {num_classes}")
        assert m.depths is not None  # set by validation
        if m.depths[0] < 1:
            raise ValueError(f"synpool needs at least one embedding layer (depths [L], L >= 1); got {m.depths}")
        self.accepts(attention)
        from ablate.nn.backbones.mil.layers import SynPoolingNet

        return SynPoolingNet(m, attention, in_chans)

    def example(self, m: ModelConfig, in_chans: int, batch: int, device: Any) -> tuple[Any, ...]:
        import torch

        mask = torch.ones(batch, MIL_BAG, dtype=torch.bool, device=device)
        return torch.randn(batch, MIL_BAG, in_chans, device=device), mask

    def width_step(self, m: ModelConfig) -> int:
        return 1  # the heads split pool_dim, not D

    def describe_size(self, words: str, m: dict[str, Any]) -> str:
        return f"SynPool MIL (D={m.get('embed_dim')})"

    def describe(self, m: dict[str, Any]) -> str:
        depths: tuple[int, ...] = m.get("depths") or ()
        return f"SynPool MIL (D={m.get('embed_dim')}, L={depths[0] if len(depths) == 1 else depths})"


register_backbone(SynPool())
