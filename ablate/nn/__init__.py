"""Attention variants behind one registry, backbone surgery on timm models, and accounting."""

from ablate import _tv_compat  # noqa: F401  (must precede every timm import)
from ablate.nn.mixer import REGISTRY, TokenMixer, create_mixer, register

__all__ = ["REGISTRY", "TokenMixer", "create_mixer", "register"]
