"""Non-local means (Buades et al. 2005) as attention, the prior art "Attention: self-expression is all you need"
relates attention to: Gaussian kernel weights on the tokens themselves, q = k = v = the token, no projections.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, field_validator

from ablate.components import Backbone, KnobError, Mechanism, added
from ablate.registry import register_mechanism

if TYPE_CHECKING:
    from ablate.config import ModelConfig
    from ablate.nn.mixer import TokenMixer


@register_mechanism
class NonLocalMeansAttention(Mechanism):
    """Non-local means: out_i = sum_j softmax_j(-||P_i - P_j||^2 / (2 n sigma^2)) y_j, y the tokens, P their
    neighbourhoods (the token alone at patch 1), n the channels compared; one bandwidth per head."""

    kind: Literal["nlm"] = "nlm"
    self_attention_only: ClassVar[bool] = True
    """Its queries are the tokens themselves: there is no learnt pooling query for it to compare."""
    said: ClassVar[tuple[str, ...]] = ("sigma", "learn_sigma", "patch")
    projections: Literal["identity"] = added("identity")
    """Always identity: queries, keys and values are the tokens themselves (split into heads)."""
    sigma: float = Field(1.0, gt=0)
    """Bandwidth per channel: the weights are exp(-mean_c (P_ic - P_jc)^2 / (2 sigma^2)) over the n channels
    compared (a head's, times the patch's tokens), so sigma reads in the units of one normalised channel.
    Where it is learnt, its start."""
    learn_sigma: bool = True
    """Learn log sigma per head (a kernel method's one tuned parameter); false: fixed at `sigma`."""
    patch: int = Field(1, ge=1)
    """Side of the neighbourhood of tokens compared, odd: 1 compares each token alone (the paper's simplest
    form, eq. 8); 3 its 3 x 3 neighbourhood, tokens outside the grid counting as zeros (the patch form). Needs
    a backbone with a token grid (vit: the patches, the class token compared alone; swin: each window)."""

    @field_validator("patch")
    @classmethod
    def _odd(cls, v: int) -> int:
        if v % 2 == 0:
            raise ValueError(f"a neighbourhood is centred on its token: patch must be odd, got {v}")
        return v

    def fits(self, backbone: Backbone, m: ModelConfig) -> None:
        """Identity projections where the backbone applies them, and a token grid for the patch form."""
        try:
            backbone.check_projections(m, self.projections)
        except ValueError as e:
            raise KnobError("kind", f"nlm cannot run on this {backbone.name}: {e}") from None
        if self.patch > 1 and not backbone.token_grid:
            raise KnobError("patch", f"patch {self.patch} compares neighbourhoods on a token grid; {backbone.name} "
                                     "tells its attentions none (vit and swin do): use patch 1")  # fmt: skip

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.nlm.layers import NonLocalMeans

        return NonLocalMeans(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        bandwidth = f"sigma0={self.sigma} learnt" if self.learn_sigma else f"sigma={self.sigma} fixed"
        form = f"; {self.patch}x{self.patch} patches" if self.patch > 1 else ""
        return f"Non-local means ({bandwidth}{form})"
