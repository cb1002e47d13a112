"""`create_model(cfg, num_classes, in_chans)`: one network for a trial, built by its registered backbone at the
width `model.match_params` solves (`ablate.nn.widths`)."""

from __future__ import annotations

import ablate._tv_compat  # noqa: F401  (the torchvision shim, before timm)

from torch import nn

from ablate.config import TrialConfig
from ablate.nn.widths import match_width
from ablate.registry import BACKBONES


def create_model(cfg: TrialConfig, num_classes: int, in_chans: int) -> nn.Module:
    """The trial's network on the current default device (``with torch.device("meta")`` for counting).

    Image backbones take (B, in_chans, H, W) and return (B, num_classes) logits; synpool takes a padded
    batch of bags (B, N, F = in_chans) and a mask (B, N) and returns (B,) logits.
    """
    cfg = match_width(cfg, num_classes, in_chans)
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
