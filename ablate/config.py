"""Typed configuration of one trial: everything `run_trial` needs, validated by pydantic.

A trial's identity (its key, see `ablate.plan`) is computed from these models, minus the fields marked
`nokey` (paths, worker counts, logging, resources): they change where or how fast a trial runs, never its
result. Field docstrings become the descriptions in `ablate schema`. This module imports no torch, so
planning and validation stay fast.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: Marks a field as not part of the trial key (``json_schema_extra``); read by :func:`identity`.
NOKEY = {"x-nokey": True}


def nokey(default: Any = None, **kw: Any) -> Any:
    """A field that does not change a trial's result, so it is left out of the trial key."""
    return Field(default, json_schema_extra=NOKEY, **kw)


class Strict(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings are field descriptions."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True)


# ----------------------------------------------------------------------------------------------- attention
class SoftmaxAttention(Strict):
    """Plain scaled dot-product attention (fused SDPA)."""

    kind: Literal["softmax"] = "softmax"


class CSaNAttention(Strict):
    """CSaN (Selection-as-Nonlinearity): softmax attention calibrated by a descriptor of its own logits."""

    kind: Literal["csan"] = "csan"
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


class SynAttention(Strict):
    """Syn layer: a polynomial map iterated on each attention row (concentrate or distract)."""

    kind: Literal["syn"] = "syn"
    steps: int = Field(0, ge=-1000, le=1000)
    """Iterations I: > 0 concentrate (forward steps), < 0 distract (backward steps), 0 none."""
    gamma: float = Field(0.5, gt=0, le=1)
    """Cubic weight of the map a' = gamma a^3 + (1 - gamma) a, in (0, 1]."""
    bypass: bool = True
    """Gradient bypass (straight-through): gradients flow as if no steps were taken."""


class GaussianAttention(Strict):
    """Gaussian kernel attention softmax(-||q - k||^2 / (2 sigma^2)), learnable sigma per head."""

    kind: Literal["gaussian"] = "gaussian"
    sigma: float = Field(1.0, gt=0)
    """Initial bandwidth, relative to sqrt(head_dim)."""


class LaplaceAttention(Strict):
    """Laplace kernel attention softmax(-||q - k|| / sigma), learnable sigma per head."""

    kind: Literal["laplace"] = "laplace"
    sigma: float = Field(1.0, gt=0)
    """Initial bandwidth, relative to sqrt(head_dim)."""


class SparsemaxAttention(Strict):
    """sparsemax replaces softmax (entmax package)."""

    kind: Literal["sparsemax"] = "sparsemax"


class Entmax15Attention(Strict):
    """1.5-entmax replaces softmax (entmax package)."""

    kind: Literal["entmax15"] = "entmax15"


class ISTAAttention(Strict):
    """Sparse attention by unrolled ISTA: non-negative sparse coding of queries over keys."""

    kind: Literal["ista"] = "ista"
    steps: int = Field(3, ge=1, le=100)
    """Unrolled ISTA iterations T."""
    threshold: float = Field(0.01, ge=0)
    """Sparsity weight lambda: each step soft-thresholds by step_size * lambda."""
    step_size: float | None = Field(None, gt=0)
    """Step eps; None = 1 / ||K||_F^2 (always below 2 / L). A given value is clipped below 2 / L."""
    signed: bool = False
    """Signed soft-thresholding instead of the non-negative ReLU form."""
    zero_diag: bool = False
    """Forbid a token from coding itself (self-attention only)."""


AttentionConfig = Annotated[
    Union[
        SoftmaxAttention,
        CSaNAttention,
        SynAttention,
        GaussianAttention,
        LaplaceAttention,
        SparsemaxAttention,
        Entmax15Attention,
        ISTAAttention,
    ],
    Field(discriminator="kind"),
]
ATTENTION_KINDS = ("softmax", "csan", "syn", "gaussian", "laplace", "sparsemax", "entmax15", "ista")

# ------------------------------------------------------------------------------------------------- model
#: Named sizes (CSaN paper and timm). depths: blocks per stage (ViT: one stage); num_heads: per stage
#: (ViT: one; Hiera: the initial heads, doubled per stage by timm).
SIZES: dict[str, dict[str, Any]] = {
    "swin-min": dict(backbone="swin", embed_dim=96, depths=(1, 1, 1, 1), num_heads=(3, 6, 12, 24)),
    "swin-micro": dict(backbone="swin", embed_dim=64, depths=(1, 1, 1, 1), num_heads=(2, 4, 8, 16)),
    "swin-tiny": dict(backbone="swin", embed_dim=96, depths=(2, 2, 6, 2), num_heads=(3, 6, 12, 24)),
    "swin-small": dict(backbone="swin", embed_dim=96, depths=(2, 2, 18, 2), num_heads=(3, 6, 12, 24)),
    "swin-base": dict(backbone="swin", embed_dim=128, depths=(2, 2, 18, 2), num_heads=(4, 8, 16, 32)),
    "vit-tiny": dict(backbone="vit", embed_dim=192, depths=(12,), num_heads=(3,), patch_size=16),
    "vit-small": dict(backbone="vit", embed_dim=384, depths=(12,), num_heads=(6,), patch_size=16),
    "vit-base": dict(backbone="vit", embed_dim=768, depths=(12,), num_heads=(12,), patch_size=16),
    "vit-base-slim": dict(backbone="vit", embed_dim=512, depths=(12,), num_heads=(8,), patch_size=16),
    "hiera-tiny": dict(backbone="hiera", embed_dim=96, depths=(1, 2, 7, 2), num_heads=(1,), window_size=8),
    "hiera-tiny-plus": dict(backbone="hiera", embed_dim=96, depths=(1, 2, 7, 2), num_heads=(3,), window_size=8),
    "hiera-small": dict(backbone="hiera", embed_dim=96, depths=(1, 2, 11, 2), num_heads=(1,), window_size=8),
    "hiera-base": dict(backbone="hiera", embed_dim=96, depths=(2, 3, 16, 3), num_heads=(1,), window_size=8),
    "synpool": dict(backbone="synpool", embed_dim=256, depths=(1,), num_heads=(4,)),
}
_PATCH = {"swin": 4, "vit": 16, "hiera": 4, "synpool": 1}


class ModelConfig(Strict):
    """The network: a timm backbone (swin | vit | hiera) or the Syn paper's MIL network (synpool)."""

    backbone: Literal["swin", "vit", "hiera", "synpool"] = "vit"
    size: str | None = nokey(None)
    """A named size (e.g. swin-min, swin-tiny, vit-base-slim, hiera-tiny-plus); fields given beside it
    override it. A label only: the resolved fields make the key."""
    embed_dim: int | None = Field(None, ge=1)
    """Width of the first stage (MIL: the instance embedding width D)."""
    depths: tuple[int, ...] | None = None
    """Blocks per stage (ViT: one entry; MIL: [L] hidden layers before pooling)."""
    num_heads: tuple[int, ...] | None = None
    """Heads per stage (ViT: one entry; Hiera: initial heads; MIL: pooling heads H)."""
    patch_size: int | None = Field(None, ge=1)
    window_size: int = Field(7, ge=1)
    """Swin attention window (Hiera: mask unit size)."""
    mlp_ratio: float = Field(4.0, gt=0)
    img_size: int = Field(224, ge=1)
    """Input resolution; images are resized to it."""
    stack: Literal["alternating", "pure"] = "alternating"
    """`alternating` attention/FFN blocks, or `pure`: every FFN replaced by an attention block."""
    dwconv: bool = False
    """CSaN-V2: a 7x7 depthwise conv on the attention branch (Swin only)."""
    match_params: float | dict[str, Any] | None = None
    """Solve embed_dim so the parameter count lands within 2% of a target: a number, or dotted overrides
    of this config that describe the reference model (e.g. {model.stack: alternating, attention.kind: softmax})."""
    drop_path: float = Field(0.0, ge=0, lt=1)
    num_classes: int | None = Field(None, ge=1)
    """Must match the dataset when given (None: taken from the data)."""
    pool_dim: int = Field(32, ge=1)
    """MIL: total inner width M of the SynPooling projections, over all heads."""
    pool_scale: float = Field(10.0, gt=0)
    """MIL: logit scale S of SynPooling (used instead of 1/sqrt(d))."""
    input_dropout: float = Field(0.75, ge=0, lt=1)
    """MIL: dropout on the raw instance features."""

    @model_validator(mode="before")
    @classmethod
    def _apply_size(cls, data: Any) -> Any:
        """Expand a named size into explicit fields so `size: swin-min` and its values share a key."""
        if not isinstance(data, dict) or data.get("size") is None:
            return data
        name = data["size"]
        if name not in SIZES:
            raise ValueError(f"unknown model size {name!r}; expected one of {sorted(SIZES)}")
        preset = SIZES[name]
        if "backbone" in data and data["backbone"] != preset["backbone"]:
            raise ValueError(f"size {name!r} is a {preset['backbone']} size, not {data['backbone']}")
        return {**preset, **data}

    @model_validator(mode="after")
    def _complete(self) -> ModelConfig:
        missing = [f for f in ("embed_dim", "depths", "num_heads") if getattr(self, f) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} required (or a named `size`)")
        if self.patch_size is None:
            self.patch_size = _PATCH[self.backbone]
        if self.backbone in ("vit", "synpool") and (len(self.depths) != 1 or len(self.num_heads) != 1):
            raise ValueError(f"{self.backbone} has one stage: depths and num_heads take one entry each")
        if self.backbone == "swin" and len(self.num_heads) != len(self.depths):
            raise ValueError("swin needs one num_heads entry per stage (len(num_heads) == len(depths))")
        if self.dwconv and self.backbone != "swin":
            raise ValueError(f"dwconv (CSaN-V2) is defined for swin only, not {self.backbone}")
        if self.backbone == "synpool" and self.stack != "alternating":
            raise ValueError("stack applies to image backbones only")
        heads0 = self.num_heads[0]
        if self.backbone != "synpool" and self.embed_dim % heads0:
            raise ValueError(f"embed_dim {self.embed_dim} is not divisible by num_heads {heads0}")
        if self.backbone == "synpool" and self.pool_dim % heads0:
            raise ValueError(f"pool_dim {self.pool_dim} is not divisible by num_heads {heads0}")
        return self


# -------------------------------------------------------------------------------------------------- data
IMAGE_DATASETS = ("mnist5k", "digits", "imagefolder", "cifar10", "cifar100")
MIL_DATASETS = ("musk1", "musk2", "elephant", "ucsb_breast_cancer", "web_recommendation_1", "fox", "tiger", "mil_csv")


class DataConfig(Strict):
    """Where the examples come from and how they are split (the split is part of the key)."""

    name: Literal[IMAGE_DATASETS + MIL_DATASETS] = "mnist5k"  # type: ignore[valid-type]
    path: str | None = nokey(None)
    """Data location (imagefolder, cifar*, mil_csv file; for a MIL benchmark, a bag file or its directory
    in place of the shipped copy). Relative paths are
    resolved against the experiments file's folder. Not in the key: moving data keeps the trial."""
    id: str | None = None
    """Identity of the data at `path` for the key; defaults to the path's last component."""
    val_fraction: float = Field(0.1, ge=0, lt=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)
    split_seed: int = 0
    """Seed of the train/val/test split or of the k-fold assignment (MIL: the CV repeat)."""
    folds: int = Field(10, ge=2)
    """MIL: k of stratified k-fold cross-validation."""
    fold: int = Field(0, ge=0)
    """MIL: which fold is the test fold."""
    workers: int = nokey(0, ge=0)
    """DataLoader worker processes."""

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if self.name in ("imagefolder", "cifar10", "cifar100", "mil_csv") and self.path is None:
            raise ValueError(f"data.path is required for {self.name}")
        if self.path is not None and self.id is None:
            self.id = PurePath(self.path).name
        if self.fold >= self.folds:
            raise ValueError(f"fold {self.fold} out of range for {self.folds} folds")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        return self

    @property
    def is_mil(self) -> bool:
        return self.name in MIL_DATASETS


# ---------------------------------------------------------------------------------------------- training
class TrainConfig(Strict):
    """The optimisation recipe (timm optimizer and scheduler factories)."""

    epochs: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1)
    """Images per step (MIL: bags per step; the reference uses 1)."""
    opt: str = "adamw"
    """timm optimizer name."""
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.05, ge=0)
    sched: Literal["cosine", "step", "none"] = "cosine"
    warmup_epochs: int = Field(0, ge=0)
    cooldown_epochs: int = Field(0, ge=0)
    min_lr: float = Field(1e-6, ge=0)
    label_smoothing: float = Field(0.0, ge=0, lt=1)
    mixup: float = Field(0.0, ge=0)
    """Mixup alpha (0 = off)."""
    cutmix: float = Field(0.0, ge=0)
    """CutMix alpha (0 = off)."""
    randaugment: str | None = None
    """timm auto-augment string, e.g. rand-m9-mstd0.5-inc1 (imagefolder only)."""
    random_erase: float = Field(0.0, ge=0, le=1)
    shift: int = Field(0, ge=0)
    """Random translation of training images by up to `shift` pixels (zero padding), applied per batch."""
    grad_clip: float | None = Field(None, gt=0)
    amp: bool = False
    """bf16 autocast (CUDA only; ignored on CPU)."""
    compile: bool = nokey(False)
    """torch.compile the model (speed only)."""
    channels_last: bool = nokey(True)
    """channels_last memory format on CUDA (speed only)."""
    diagnostics: bool = nokey(False)
    """Record attention diagnostics (entropy, winner transfer, column load) every epoch."""
    eval_batch_size: int = nokey(256, ge=1)

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.warmup_epochs and self.warmup_epochs >= self.epochs:
            raise ValueError("warmup_epochs must be smaller than epochs")
        return self


class Resources(Strict):
    """What one trial asks Ray for. Not part of the key."""

    cpus: float = nokey(1.0, gt=0)
    gpus: float = nokey(0.0, ge=0)
    """Fractional values share a GPU between trials."""
    retries: int = nokey(0, ge=0)
    """Re-runs after an application error (worker or node death is always retried)."""

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: float) -> float:
        if v > 1 and not float(v).is_integer():
            raise ValueError("more than one GPU must be a whole number")
        return v


# ------------------------------------------------------------------------------------------------- trial
class TrialConfig(Strict):
    """One fully resolved trial: what `run_trial` trains and evaluates."""

    task: Literal["classify", "mil"] = "classify"
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig(size="vit-tiny")
    attention: AttentionConfig = SoftmaxAttention()
    train: TrainConfig = TrainConfig()
    resources: Resources = nokey(Resources())
    seed: int = 0

    @field_validator("attention", mode="before")
    @classmethod
    def _default_kind(cls, v: Any) -> Any:
        """An attention section without `kind` is softmax (so `attention.tau` on it is an unknown key)."""
        return {"kind": "softmax", **v} if isinstance(v, dict) and "kind" not in v else v

    @model_validator(mode="after")
    def _check(self) -> TrialConfig:
        mil = self.task == "mil"
        if mil != self.data.is_mil:
            raise ValueError(f"task {self.task} cannot use dataset {self.data.name}")
        if mil != (self.model.backbone == "synpool"):
            raise ValueError(f"task {self.task} cannot use backbone {self.model.backbone}")
        return self


def identity(model: BaseModel) -> dict[str, Any]:
    """The key-relevant part of a config as plain JSON data: every field not marked `nokey`."""
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        if field.json_schema_extra == NOKEY:
            continue
        out[name] = _plain(getattr(model, name))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return identity(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
