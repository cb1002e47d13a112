"""Attention variants behind one registry, backbone surgery on timm models, and accounting."""

from ablate import _tv_compat  # noqa: F401  (must precede every timm import)
from ablate.nn import csan, kernel, sparse, syn  # noqa: F401  (importing registers the variants)
from ablate.nn.diagnostics import argmax_keys, recording, summarize, winner_transfer
from ablate.nn.mixer import REGISTRY, TokenMixer, create_mixer, register

__all__ = [
    "REGISTRY",
    "TokenMixer",
    "argmax_keys",
    "create_mixer",
    "recording",
    "register",
    "summarize",
    "winner_transfer",
]
