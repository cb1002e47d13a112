"""`create_model(cfg, num_classes, in_chans)`: one network for a trial, built by its registered backbone
(`ablate.nn.build`) at the width `model.match_params` solves (`ablate.nn.widths`)."""

from __future__ import annotations

from torch import nn

from ablate.config import TrialConfig
from ablate.nn.build import build
from ablate.nn.widths import match_width


def create_model(cfg: TrialConfig, num_classes: int, in_chans: int) -> nn.Module:
    """The trial's network on the current default device (``with torch.device("meta")`` for counting).

    Image backbones take (B, in_chans, H, W) and return (B, num_classes) logits; synpool takes a padded
    batch of bags (B, N, F = in_chans) and a mask (B, N) and returns (B,) logits.
    """
    return build(match_width(cfg, num_classes, in_chans), num_classes, in_chans)
