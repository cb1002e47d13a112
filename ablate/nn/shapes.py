"""Shape rules that backbone declarations check at validation, before anything is built (no torch here):
stage counts, heads dividing widths, and the whole head dims a pure stack's twin attention needs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ablate.config import ModelConfig


@runtime_checkable
class Twinned(Protocol):
    """A backbone whose pure stacks have a twin attention sized by `model.twin_width` (the timm backbones)."""

    def head_dims(self, m: ModelConfig) -> tuple[int, ...]:
        """The head dim of every stage's attention (a twin's are these times `model.twin_width`)."""
        ...


def check_twin(m: ModelConfig, backbone: Twinned) -> None:
    """Raise a ValueError unless every stage's twin has whole head dims (`model.twin_width` is 1 unless the
    stack is pure)."""
    for head_dim in backbone.head_dims(m):
        twin_head_dim(head_dim, m.twin_width)


def twin_head_dim(head_dim: int, width: float) -> int:
    """The head dim of a pure stack's twin, `width` x `head_dim`: a ValueError unless a whole number."""
    scaled = width * head_dim
    if round(scaled) < 1 or abs(scaled - round(scaled)) > 1e-9 * scaled:
        raise ValueError(f"model.twin_width {width:g} makes a head of {head_dim} channels {scaled:g} wide: "
                         "heads must divide the twin's width (a whole head dim at every stage)")  # fmt: skip
    return round(scaled)


def one_stage(m: ModelConfig) -> None:
    assert m.depths is not None and m.num_heads is not None  # set by validation
    if len(m.depths) != 1 or len(m.num_heads) != 1:
        raise ValueError(f"{m.backbone} has one stage: depths and num_heads take one entry each")


def patch_grid(m: ModelConfig) -> None:
    """Patches tile the image: a patch larger than the image has no token, and a remainder would be dropped
    silently (the patch embedding's stride skips the last rows and columns)."""
    assert m.patch_size is not None  # set by validation
    if m.patch_size > m.img_size:
        raise ValueError(f"model.patch_size {m.patch_size} is larger than model.img_size {m.img_size}")
    if m.img_size % m.patch_size:
        raise ValueError(f"model.img_size {m.img_size} is not a multiple of model.patch_size {m.patch_size}: "
                         f"the last {m.img_size % m.patch_size} pixel rows and columns would be dropped")  # fmt: skip


def uniform_head_dims(m: ModelConfig) -> tuple[int, ...]:
    """The head dims of a backbone whose every stage has embed_dim / num_heads[0] (ViT's one stage; Hiera's
    widths and heads double together)."""
    assert m.embed_dim is not None and m.num_heads is not None  # set by validation
    return (m.embed_dim // m.num_heads[0],)


def heads_divide(m: ModelConfig) -> None:
    assert m.embed_dim is not None and m.num_heads is not None  # set by validation
    if m.embed_dim % m.num_heads[0]:
        raise ValueError(f"embed_dim {m.embed_dim} is not divisible by num_heads {m.num_heads[0]}")


def no_dwconv(m: ModelConfig) -> None:
    if m.dwconv:
        raise ValueError(f"dwconv (CSaN-V2) is defined for swin only, not {m.backbone}")


def projections_fit(m: ModelConfig, projections: str, widening: str = "") -> None:
    """The surgery's projections (`ablate.nn.surgery.project`): learned and tied anywhere; identity takes the
    token itself as q, k and v, so every attention must be as wide as its tokens: no pure-stack twin of another
    width, and none where the backbone widens inside an attention (`widening` says where, else "")."""
    if projections != "identity":
        return
    if m.twin_width != 1:
        raise ValueError(f"identity projections take the token itself as q, k and v: a twin attention "
                         f"{m.twin_width:g} x as wide as its tokens cannot (model.twin_width)")  # fmt: skip
    if widening:
        raise ValueError(f"identity projections take the token itself as q, k and v: {widening}")
