"""`build(cfg, num_classes, in_chans)`: a trial's network at the widths its config states, by its registered
backbone. `ablate.nn.factory.create_model` solves `model.match_params` first; the width search
(`ablate.nn.widths`) counts the candidates it tries with what is built here, so neither imports the other."""

from __future__ import annotations

from torch import nn

from ablate.config import TrialConfig
from ablate.registry import BACKBONES


def build(cfg: TrialConfig, num_classes: int, in_chans: int) -> nn.Module:
    """The network of `cfg` at the widths it states (`model.match_params` is not solved here), on the current
    default device (``with torch.device("meta")`` for counting)."""
    backbone = BACKBONES.get(cfg.model.backbone)
    model = backbone.build(cfg.model, cfg.attention, num_classes, in_chans)
    if cfg.model.desync_drop_path:
        from timm.layers import DropPath

        for block in model.modules():
            attention_branch = getattr(block, "drop_path1", None)
            if isinstance(attention_branch, DropPath):
                attention_branch.drop_prob = backbone.attention_drop_path(attention_branch.drop_prob)
    return model


def count_params(model: nn.Module) -> int:
    """Number of parameters (shared ones once); works on meta-device models."""
    return sum(p.numel() for p in model.parameters())
