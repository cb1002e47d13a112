"""Kernel-regression attention (the self-expression view): Gaussian and Laplace kernels, bandwidth per head.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field

from ablate.components import Mechanism
from ablate.registry import register_mechanism

if TYPE_CHECKING:
    from ablate.nn.mixer import TokenMixer


class _Kernel(Mechanism):
    """A distance kernel in place of the dot product, with a bandwidth learnt per head."""

    said: ClassVar[tuple[str, ...]] = ("sigma",)
    sigma: float = Field(1.0, gt=0)
    """Initial bandwidth, relative to sqrt(head_dim)."""

    def describe(self) -> str:
        return f"{self.kind.capitalize()} kernel (sigma0={self.sigma})"


@register_mechanism
class GaussianAttention(_Kernel):
    """Gaussian kernel attention softmax(-||q - k||^2 / (2 sigma^2)), learnable sigma per head."""

    kind: Literal["gaussian"] = "gaussian"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.kernel.layers import Gaussian

        return Gaussian(self, dim, num_heads, in_dim)


@register_mechanism
class LaplaceAttention(_Kernel):
    """Laplace kernel attention softmax(-||q - k|| / sigma), learnable sigma per head."""

    kind: Literal["laplace"] = "laplace"

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.kernel.layers import Laplace

        return Laplace(self, dim, num_heads, in_dim)
