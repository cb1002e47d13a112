"""CSaN (Selection-as-Nonlinearity): softmax attention calibrated by a descriptor of its own logits.

Its config (torch-free, what validation and planning import); the torch code is in `layers`, imported when a trial
builds its mixer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator

from ablate.components import Mechanism
from ablate.components import PublishedRow as Row
from ablate.components import PublishedTable as Table
from ablate.config import nokey
from ablate.registry import register_mechanism, register_table

if TYPE_CHECKING:
    from ablate.nn.mixer import TokenMixer


@register_mechanism
class CSaNAttention(Mechanism):
    """CSaN (Selection-as-Nonlinearity): softmax attention calibrated by a descriptor of its own logits."""

    kind: Literal["csan"] = "csan"
    self_attention_only: ClassVar[bool] = True
    said: ClassVar[tuple[str, ...]] = ("tau", "mu", "kappa_pub", "kappa_priv", "bounded")
    tau: bool = True
    """Row temperature: scales each query's logits (kept positive)."""
    mu: bool = True
    """Column amplification: scales each key's column after the softmax."""
    kappa_pub: Literal["unit", "head", "off"] = "unit"
    """Public gain on the attended output: per head x channel (`unit`), per head (`head`), or none."""
    kappa_priv: bool = True
    """Private path: adds the token's own value, gated like the public gain (per unit, or per head)."""

    @field_validator("kappa_pub", mode="before")
    @classmethod
    def _yaml_off(cls, v: Any) -> Any:
        """YAML 1.1 reads a bare `off` as false: take it as the `off` it was written as."""
        return "off" if v is False else v

    bounded: bool = False
    """GELU trunk + tanh heads (gains bounded) instead of the unbounded gated trunk."""
    beta: float = Field(0.25, gt=0)
    """Knee of the positive descriptor map phi_beta."""
    reduction: int = Field(4, ge=1)
    """Descriptor width is dim / reduction."""
    hidden_div: int = Field(8, ge=1)
    """Trunk width is max(dim // hidden_div, hidden_min)."""
    hidden_min: int = Field(24, ge=1)
    """Lower bound of the trunk width."""
    chunk: int = nokey(256, ge=1)
    """Query rows per descriptor chunk; on CPU, queries that fit one chunk take the explicit path (speed and
    memory only: both paths give the same results to float tolerance)."""

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        from ablate.nn.mechanisms.csan.layers import CSaN

        return CSaN(self, dim, num_heads, in_dim)

    def describe(self) -> str:
        parts = [name for name, on in (("tau", self.tau), ("mu", self.mu), ("private", self.kappa_priv)) if on]
        readout = {"unit": "unit readout", "head": "head-wise readout", "off": "no public gain"}[self.kappa_pub]
        extra = "; bounded" if self.bounded else ""
        return f"CSaN ({', '.join(parts) or 'no calibration'}; {readout}{extra})"

    def published_key(self) -> tuple[Any, ...] | None:
        """The paper published CSaN with every component on (unbounded), read out per unit or per head."""
        if self.tau and self.mu and self.kappa_priv and not self.bounded and self.kappa_pub != "off":
            return (self.kind, self.kappa_pub)
        return None


register_table(Table(
    name="csan-imagenet",
    source="CSaN: Selection-as-Nonlinearity (CVPR 2026), ImageNet-1K tables",
    dataset="ImageNet-1K",
    data_ids=frozenset({"imagenet1k", "imagenet", "in1k", "ilsvrc2012"}),
    note="params in millions, FLOPs in G multiply-accumulates (null: not published), top-1 in %",
    recipe={  # the authors' ImageNet command (timm train.py): what a run must share to sit beside these rows
        "model.img_size": 224, "model.desync_drop_path": True, "data.val_fraction": 0.0,
        "data.normalization": "family", "train.batch_size": 2048, "train.lr": 2e-3, "train.opt": "adamw",
        "train.weight_decay": 0.05, "train.epochs": 300, "train.cooldown_epochs": 10, "train.sched": "cosine",
        "train.warmup_epochs": 20, "train.warmup_lr": 1e-6, "train.min_lr": 1e-5, "train.repeated_aug": 3,
        "train.mixup": 0.8, "train.cutmix": 1.0, "train.label_smoothing": 0.1,
        "train.randaugment": "rand-m9-mstd0.5-inc1", "train.color_jitter": 0.4, "train.random_erase": 0.25,
    },
    rows=(
        Row("Swin-Min", "original (attn-FFN)", 11.8, 1.6, 72.2, "swin-min", "alternating", ("softmax",)),
        Row("Swin-Min", "pure attention", 8.6, 1.1, 62.8, "swin-min", "pure", ("softmax",)),
        Row("Swin-Min", "pure attention, diamond", 11.8, 1.6, 67.5, "swin-min", "pure", ("softmax",), diamond=True),
        Row("Swin-Min", "CSaN pure attention", 9.5, 1.3, 72.4, "swin-min", "pure", ("csan", "unit")),
        Row("Swin-Min", "CSaN pure attention, diamond", 13.6, 1.8, 75.9, "swin-min", "pure", ("csan", "unit"),
            diamond=True),
        Row("Swin-Min", "CSaN", 12.2, 1.7, 75.0, "swin-min", "alternating", ("csan", "unit")),
        Row("Swin-Tiny", "original", 28.3, 4.4, 81.3, "swin-tiny", "alternating", ("softmax",)),
        Row("Swin-Tiny", "CSaN head-wise", 29.0, None, 82.5, "swin-tiny", "alternating", ("csan", "head")),
        Row("Swin-Tiny", "CSaN unit-level", 29.5, 4.6, 82.7, "swin-tiny", "alternating", ("csan", "unit")),
        Row("Swin-Base", "original", 87.8, 15.1, 83.5, "swin-base", "alternating", ("softmax",)),
        Row("Swin-Small", "CSaN", 51.8, 8.9, 83.5, "swin-small", "alternating", ("csan", "unit")),
        Row("Swin-Min", "CSaN-V2", 12.3, None, 77.1, "swin-min", "alternating", ("csan", "unit"), dwconv=True),
        Row("Swin-Small", "CSaN-V2", 52.3, None, 83.9, "swin-small", "alternating", ("csan", "unit"), dwconv=True),
        Row("ViT-Base/16", "original", 86.6, 16.9, 81.8, "vit-base", "alternating", ("softmax",)),
        Row("ViT-Base-Slim/16", "CSaN", 40.6, 7.9, 82.1, "vit-base-slim", "alternating", ("csan", "unit")),
        Row("Hiera-Base", "original", 51.5, 8.8, 82.4, "hiera-base", "alternating", ("softmax",)),
        Row("Hiera-Tiny-Plus", "CSaN", 29.1, 4.9, 82.4, "hiera-tiny-plus", "alternating", ("csan", "unit")),
    ),
))  # fmt: skip
