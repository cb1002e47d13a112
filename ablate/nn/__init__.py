"""Networks: the token-mixer interface, mechanisms and backbones (each a registered component module),
backbone surgery on timm models, param/FLOP accounting and attention diagnostics."""

import ablate._tv_compat  # noqa: F401  (the torchvision shim: before timm, which every module here imports)

from ablate.nn.diagnostics import argmax_keys, recording, summarize, winner_transfer
from ablate.nn.mixer import TokenMixer, create_mixer

__all__ = ["TokenMixer", "argmax_keys", "create_mixer", "recording", "summarize", "winner_transfer"]
