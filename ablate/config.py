"""Typed configuration of one trial: everything `run_trial` needs, validated by pydantic.

A trial's identity (its key, see `ablate.plan`) is computed from these models, minus the fields marked
`nokey` (paths, worker counts, logging, resources): they change where or how fast a trial runs, never its
result. Field docstrings become the descriptions in `ablate schema`. This module imports no torch, so
planning and validation stay fast: what a mechanism, backbone, dataset or task is comes from its registry
(`ablate.registry`), whose built-ins load on the first validation.

Long because the trial config is one tree of pydantic models, read whole by `identity` and `ablate schema`:
split, the fields a key covers and the validators that check them would sit apart.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import PurePath
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.config import JsonDict
from pydantic_core import InitErrorDetails, PydanticCustomError, core_schema

from ablate.components import ADDED, KnobError, Mechanism, Strict, added
from ablate.registry import BACKBONES, DATASETS, MECHANISMS, TASKS, Registry

T = TypeVar("T")

#: Marks a field as not part of the trial key (``json_schema_extra``); read by :func:`identity`.
NOKEY: JsonDict = {"x-nokey": True}


COMMON_OPTIMIZERS = frozenset({"adamw", "adam", "sgd", "momentum", "nesterov", "lamb", "lion", "rmsprop",
                               "rmsproptf", "adafactor", "radam", "nadam", "adan", "lars", "sgdw"})  # fmt: skip
"""timm optimizers a config names without importing timm to check them."""


def nokey(default: Any = None, **kw: Any) -> Any:
    """A field that does not change a trial's result, so it is left out of the trial key."""
    return Field(default, json_schema_extra=NOKEY, **kw)


class AnyMechanism:
    """Annotation marker: a field holding the config of any registered mechanism, discriminated by `kind`.

    The tagged union is built from the registry when pydantic builds the model's schema (after loading the
    built-ins), and again whenever a plugin registers a mechanism (see `_rebuild_on_registration`).
    """

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        from ablate.plugins import load_builtins

        load_builtins()
        choices = {kind: handler.generate_schema(cls) for kind, cls in MECHANISMS.items()}
        return core_schema.tagged_union_schema(choices, discriminator="kind")


AttentionConfig = Annotated[Mechanism, AnyMechanism()]
"""The type of `TrialConfig.attention`: any registered mechanism's config."""


# ------------------------------------------------------------------------------------------------- model
NAMED: dict[str, Registry[Any]] = {
    "task": TASKS,
    "data.name": DATASETS,
    "model.backbone": BACKBONES,
    "attention.kind": MECHANISMS,
}
"""Config paths whose value names a registered component: a name nothing registered is a config's first
problem, as the keys beside it (a mechanism's knobs) cannot be checked without the component."""


def known(registry: Registry[T], name: str) -> str:
    """`name` if `registry` has it (built-ins loaded first), else a ValueError saying so (`unregistered`)."""
    from ablate.plugins import load_builtins

    load_builtins()
    if name not in registry:
        raise ValueError(unregistered(registry, name))
    return name


def unregistered(registry: Registry[Any], name: str) -> str:
    """Why `name` names nothing in `registry`: the nearest registered name, every registered one and the plugins
    loaded, as a plugin neither installed nor listed in `plugins:` is the usual cause. Says "(got ...)" so that
    a problem at a grid value does not repeat the value."""
    path = next(p for p, r in NAMED.items() if r is registry)
    close = difflib.get_close_matches(name, registry.names(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return (f"{path} names no registered {registry.kind} (got {name!r}){hint} (registered: "
            f"{', '.join(registry.names())}; plugins loaded: {', '.join(loaded_plugins()) or 'none'})")  # fmt: skip


def loaded_plugins() -> list[str]:
    """The plugins that registered components in this process, a file plugin by its path, in order."""
    found = []
    for registry in NAMED.values():
        for entry in registry.entries():
            declared, _, file = entry.source.partition(" (")
            if not declared.startswith("ablate."):
                found.append(file.removesuffix(")") or declared.partition(":")[0])
    return list(dict.fromkeys(found))


def size_preset(name: str) -> tuple[str, dict[str, Any]]:
    """(backbone, fields) of a named size, searched over every registered backbone's `sizes`."""
    from ablate.plugins import load_builtins

    load_builtins()
    for backbone in BACKBONES.names():
        sizes = BACKBONES.get(backbone).sizes
        if name in sizes:
            return backbone, sizes[name]
    every = sorted(n for b in BACKBONES.names() for n in BACKBONES.get(b).sizes)
    raise ValueError(f"unknown model size {name!r}; expected one of {every}")


class ModelConfig(Strict):
    """The network: a timm backbone (swin | vit | hiera) or the Syn paper's MIL network (synpool)."""

    backbone: str = "vit"
    """A registered backbone: swin, vit, hiera (timm), synpool (MIL), or a plugin's."""
    size: str | None = nokey(None)
    """A named size (e.g. swin-min, swin-tiny, vit-base-slim, hiera-tiny-plus); fields given beside it
    override it. A label only: the resolved fields make the key."""
    embed_dim: int | None = Field(None, ge=1)
    """Width of the first stage (MIL: the instance embedding width D)."""
    depths: tuple[Annotated[int, Field(ge=1)], ...] | None = None
    """Blocks per stage (ViT: one entry; MIL: [L] hidden layers before pooling)."""
    num_heads: tuple[Annotated[int, Field(ge=1)], ...] | None = None
    """Heads per stage (ViT: one entry; Hiera: initial heads; MIL: pooling heads H)."""
    patch_size: int | None = Field(None, ge=1)
    window_size: int = Field(7, ge=1)
    """Swin attention window (Hiera: mask unit size)."""
    mlp_ratio: float = Field(4.0, gt=0)
    img_size: int = Field(224, ge=1)
    """Input resolution; images are resized to it."""
    stack: Literal["alternating", "pure"] = "alternating"
    """`alternating` attention/FFN blocks, or `pure`: every FFN replaced by an attention block."""
    twin_width: float = added(1.0, gt=0)
    """`pure` stacks: the inner (q, k, v and output projection) width of the attention that takes the FFN's
    place, as a multiple of the block width (heads kept, head dims scaled; its output projection maps back to
    the block width). At 2 it has the mlp_ratio-4 FFN's weights (3C x 2C + 2C x C = 8C^2): how the CSaN
    paper's diamond rows widen a pure stack (`match_by: twin_width`)."""
    dwconv: bool = False
    """CSaN-V2: a 7x7 depthwise conv on the attention branch (Swin only)."""
    match_params: float | dict[str, Any] | None = None
    """Solve `match_by` (embed_dim) so the parameter count lands within 2% of a target: a number, or dotted
    overrides of this config that describe the reference model (e.g. {model.stack: alternating, attention.kind:
    softmax})."""
    match_by: Literal["embed_dim", "twin_width"] = added("embed_dim")
    """What `match_params` solves: the embed dim, or (pure stacks) `twin_width` at the given embed dim."""
    match_as: dict[str, Any] | None = added(None)
    """With `match_params`: dotted overrides of this config whose width (`match_by`) is solved instead, this
    config then built at that width (the CSaN paper's diamond CSaN row is CSaN on the width solved for softmax:
    {attention.kind: softmax})."""
    drop_path: float = Field(0.0, ge=0, lt=1)
    desync_drop_path: bool = added(False)
    """Drop path on each block's attention branch by the backbone's rule (Swin: a third of the block's rate
    where it is >= 0.25; Hiera: 0.75 of it above 0.2), as the CSaN recipe; off: one rate for both branches."""
    num_classes: int | None = Field(None, ge=1)
    """Must match the dataset when given (None: taken from the data)."""
    pool_dim: int = Field(32, ge=1)
    """MIL: total inner width M of the SynPooling projections, over all heads."""
    pool_scale: float = Field(10.0, gt=0)
    """MIL: logit scale S of SynPooling (used instead of 1/sqrt(d))."""
    input_dropout: float = Field(0.75, ge=0, lt=1)
    """MIL: dropout on the raw instance features."""
    pool: Literal["attention", "mean"] = added("attention")
    """MIL: how a bag's instances become one vector: SynPooling (attention with the sweep's mechanism), or their
    mean (SynPooling ablated, the Syn paper's Table 3: the mechanism is then not used)."""

    @property
    def attends(self) -> bool:
        """Whether the network uses the sweep's mechanism: all do but a MIL model that mean-pools its bags."""
        return self.pool == "attention"

    @field_validator("backbone")
    @classmethod
    def _backbone(cls, v: str) -> str:
        return known(BACKBONES, v)

    @model_validator(mode="before")
    @classmethod
    def _apply_size(cls, data: Any) -> Any:
        """Expand a named size into explicit fields so `size: swin-min` and its values share a key."""
        if not isinstance(data, dict) or data.get("size") is None:
            return data
        name = data["size"]
        if not isinstance(name, str):
            raise ValueError(f"size: expected the name of a size such as vit-tiny, got {name!r}")
        backbone, preset = size_preset(name)
        if "backbone" in data and data["backbone"] != backbone:
            raise ValueError(f"size {name!r} is a {backbone} size, not {data['backbone']}")
        return {"backbone": backbone, **preset, **data}

    @model_validator(mode="after")
    def _complete(self) -> ModelConfig:
        missing = [f for f in ("embed_dim", "depths", "num_heads") if getattr(self, f) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} required (or a named `size`)")
        if self.twin_width != 1 and self.stack != "pure":
            raise ValueError("twin_width sizes the attention that replaces the FFN: it needs stack: pure")
        if self.match_by == "twin_width":
            if self.match_params is None or self.stack != "pure":
                raise ValueError("match_by: twin_width solves a pure stack's twin width: it needs match_params "
                                 "and stack: pure")  # fmt: skip
            if self.twin_width != 1:
                raise ValueError("twin_width is what match_by: twin_width solves: leave it unset")
        backbone = BACKBONES.get(self.backbone)
        if self.pool != "attention" and backbone.task != "mil":
            raise ValueError(f"pool: {self.pool} pools a MIL bag's instances; {self.backbone} is not a MIL backbone")
        if self.patch_size is None:
            self.patch_size = backbone.patch_size
        backbone.check(self)
        return self


# -------------------------------------------------------------------------------------------------- data
class DataConfig(Strict):
    """Where the examples come from and how they are split (the split is part of the key)."""

    name: str = "mnist5k"
    """A registered dataset (mnist5k, digits, imagefolder, cifar10/100, the MIL benchmarks, or a plugin's)."""
    path: str | None = nokey(None)
    """Data location (imagefolder, cifar*, mil_csv file; for a MIL benchmark, a bag file or its directory
    in place of the shipped copy). Relative paths are
    resolved against the experiments file's folder. Not in the key: moving data keeps the trial."""
    remote: bool = nokey(False)
    """`path` is a path on the cluster's nodes, not on the launching machine: planning does not look for it."""
    id: str | None = None
    """Identity of the data at `path` for the key; defaults to the path's last component."""
    normalization: Literal["imagenet", "inception", "family"] = added("imagenet")
    """Mean and std of image-folder inputs: ImageNet's, Inception's (0.5 each), or the backbone family's
    (ViT: Inception's, Swin and Hiera: ImageNet's, as the CSaN recipe)."""
    val_fraction: float = Field(0.1, ge=0, lt=1)
    """Share held out from training for per-epoch validation curves (never for selection). Default: the
    dataset's (0.1 for images; 0 for the MIL benchmarks, whose protocol trains on every training bag)."""
    test_fraction: float = Field(0.2, gt=0, lt=1)
    split_seed: int = Field(0, ge=0, lt=2**63)
    """Seed of the train/val/test split or of the k-fold assignment (MIL: the CV repeat)."""
    folds: int = Field(10, ge=2)
    """MIL: k of stratified k-fold cross-validation."""
    fold: int = Field(0, ge=0)
    """MIL: which fold is the test fold."""
    workers: int = nokey(0, ge=0)
    """DataLoader worker processes."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return known(DATASETS, v)

    @model_validator(mode="before")
    @classmethod
    def _dataset_defaults(cls, data: Any) -> Any:
        """The dataset's own val_fraction when the config gives none (an unknown name fails at `name`)."""
        if not isinstance(data, dict) or "val_fraction" in data:
            return data
        from ablate.plugins import load_builtins

        load_builtins()
        name = data.get("name", cls.model_fields["name"].default)
        if not isinstance(name, str) or name not in DATASETS:
            return data
        return {**data, "val_fraction": DATASETS.get(name).val_fraction}

    @model_validator(mode="after")
    def _check(self) -> DataConfig:
        if DATASETS.get(self.name).needs_path and self.path is None:
            raise ValueError(f"data.path is required for {self.name}")
        if self.path is not None and self.id is None:
            self.id = PurePath(self.path).name
        if self.fold >= self.folds:
            raise ValueError(f"fold {self.fold} out of range for {self.folds} folds")
        if self.val_fraction + self.test_fraction >= 1:
            raise ValueError("val_fraction + test_fraction must be < 1")
        return self

    @property
    def task(self) -> str:
        """The task this dataset's splits are made for (classify, mil, ...)."""
        return DATASETS.get(self.name).task


# ---------------------------------------------------------------------------------------------- training
class TrainConfig(Strict):
    """The optimisation recipe (timm optimizer and scheduler factories)."""

    epochs: int = Field(10, ge=1)
    batch_size: int = Field(64, ge=1)
    """Global batch: examples per optimizer step over every worker and accumulation step (MIL: bags; the
    reference uses 1). A result does not depend on how it is split (`accum_steps`, `device_batch`, workers)."""
    accum_steps: int | None = nokey(None, ge=1)
    """Micro-batches accumulated per optimizer step (default: from `device_batch`, else 1)."""
    device_batch: int | None = nokey(None, ge=1)
    """Examples per worker per micro-batch (default: batch_size / (workers x accum_steps))."""
    opt: str = "adamw"
    """timm optimizer name (`timm.optim.list_optimizers()`; a `lookahead_` prefix wraps it)."""
    lr: float = Field(1e-3, gt=0)
    weight_decay: float = Field(0.05, ge=0)
    sched: Literal["cosine", "step", "none"] = "cosine"
    warmup_epochs: int = Field(0, ge=0)
    warmup_lr: float | None = added(None, gt=0)
    """Learning rate the warmup starts from (default: min_lr; the CSaN recipe warms up from 1e-6)."""
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
    color_jitter: float = added(0.4, ge=0)
    """timm's colour jitter strength for image-folder training (timm applies it only without RandAugment)."""
    repeated_aug: int = added(1, ge=1)
    """Repeated augmentation: each example appears this many times in a row of the epoch's order, each copy
    augmented anew; the epoch keeps its length (timm's RepeatAugSampler; 1: off)."""
    shift: int = Field(0, ge=0)
    """Random translation of training images by up to `shift` pixels (zero padding), applied per batch."""
    grad_clip: float | None = Field(None, gt=0)
    amp: bool = False
    """bf16 autocast (CUDA only; ignored on CPU)."""
    tf32: bool = added(False)
    """TensorFloat-32 for CUDA's float32 matmuls and cuDNN convolutions (Ampere and later): faster, their inputs
    rounded to 10 bits of mantissa. Off, float32 stays float32 (torch's own default rounds cuDNN's convolutions).
    Applies to what runs in float32 (under `amp`, what autocast leaves there); the CPU has no TF32."""
    compile: bool = nokey(False)
    """torch.compile the model (speed only)."""
    channels_last: bool = nokey(True)
    """channels_last memory format on CUDA (speed only)."""
    diagnostics: bool = nokey(False)
    """Record attention diagnostics (entropy, winner transfer, column load) every epoch."""
    eval_batch_size: int = nokey(256, ge=1)
    select: Literal["final", "best"] = added("final")
    """Which epoch's model the test split scores: the final one, or the one with the best validation score
    (the task's headline metric, e.g. val.top1; the test split is scored every epoch, but only validation
    chooses). Needs a validation split."""

    @field_validator("opt")
    @classmethod
    def _known_optimizer(cls, v: str) -> str:
        name = v.lower().removeprefix("lookahead_")
        if name in COMMON_OPTIMIZERS:
            return v
        from timm.optim import list_optimizers

        if name not in list_optimizers():
            raise ValueError(f"unknown optimizer {v!r}; timm has e.g. {', '.join(sorted(COMMON_OPTIMIZERS))}")
        return v

    @model_validator(mode="after")
    def _check(self) -> TrainConfig:
        if self.warmup_epochs and self.warmup_epochs >= self.epochs:
            raise ValueError("warmup_epochs must be smaller than epochs")
        return self


class Resources(Strict):
    """What one trial asks Ray for. Not part of the key."""

    cpus: float = nokey(1.0, gt=0)
    gpus: float | Literal["auto"] = nokey(0.0)
    """GPUs per worker; fractions share a GPU between trials. `auto`: the share a memory probe measures
    for the trial's architecture (see `ablate.execution.gpu_shares`)."""
    gpu_headroom: float = nokey(0.1, ge=0, le=1)
    """With `gpus: auto`, the share asked for is the probed memory times (1 + this)."""
    retries: int = nokey(0, ge=0)
    """Re-runs after an application error (worker or node death is always retried)."""
    workers: int = nokey(1, ge=1)
    """Data-parallel processes of one trial, each with these cpus and gpus (gloo on CPU, NCCL on GPUs); with
    more than one, each holds whole GPUs (`splits_a_gpu`; `gpus: auto` gives each worker a whole one)."""

    @field_validator("workers")
    @classmethod
    def _whole_gpus(cls, v: int, info: ValidationInfo) -> int:
        gpus = info.data.get("gpus")
        if gpus is not None and splits_a_gpu(v, gpus):
            raise ValueError(f"{v} workers cannot each hold resources.gpus {gpus:g} of a GPU: {SPLIT_GPU}")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: float | Literal["auto"]) -> float | Literal["auto"]:
        if isinstance(v, str):
            return v
        if v < 0:
            raise ValueError("must be at least 0 (or auto)")
        if v > 1 and not float(v).is_integer():
            raise ValueError("more than one GPU must be a whole number")
        return v

    @property
    def uses_gpu(self) -> bool:
        return isinstance(self.gpus, str) or self.gpus > 0


SPLIT_GPU = ("Ray may give two ranks of one trial the same device, which NCCL refuses (Duplicate GPU detected); "
             "give each worker whole GPUs (gpus: 1, or auto) or run the trial as one worker")  # fmt: skip
"""Why a multi-worker trial cannot hold a fraction of a GPU per worker (`splits_a_gpu`)."""


def splits_a_gpu(workers: int, gpus: float | str) -> bool:
    """Whether `workers` ranks of one trial would each hold a fraction of a GPU (`SPLIT_GPU`: refused)."""
    return workers > 1 and not isinstance(gpus, str) and 0 < gpus < 1


# ------------------------------------------------------------------------------------------------- trial
def _error_at(key: str, reason: str, value: Any) -> ValidationError:
    """A field validator's error placed at `key` inside the field (a knob, a mechanism's kind), not the field."""
    error = PydanticCustomError("value_error", "{reason}", {"reason": reason})
    return ValidationError.from_exception_data("attention", [InitErrorDetails(type=error, loc=(key,), input=value)])


class TrialConfig(Strict):
    """One fully resolved trial: what `run_trial` trains and evaluates."""

    model_config = ConfigDict(defer_build=True)  # the attention union is built from the registry on first use

    task: str = "classify"
    """A registered task: classify (images), mil (bags), or a plugin's."""
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(size="vit-tiny"))
    attention: AttentionConfig = Field(default_factory=lambda: MECHANISMS.get("softmax").model_validate({}))
    train: TrainConfig = Field(default_factory=TrainConfig)
    resources: Resources = nokey(Resources())
    seed: int = Field(0, ge=0, lt=2**63)

    @field_validator("task")
    @classmethod
    def _task(cls, v: str) -> str:
        return known(TASKS, v)

    @field_validator("attention", mode="before")
    @classmethod
    def _default_kind(cls, v: Any) -> Any:
        """An attention section without `kind` is softmax (so `attention.tau` on it is an unknown key); a kind no
        mechanism is registered as is named at `kind` (the union would name the whole section)."""
        if isinstance(v, dict) and isinstance(v.get("kind"), str) and v["kind"] not in MECHANISMS:
            raise _error_at("kind", unregistered(MECHANISMS, v["kind"]), v["kind"])
        return {"kind": "softmax", **v} if isinstance(v, dict) and "kind" not in v else v

    @field_validator("attention")
    @classmethod
    def _fits_network(cls, v: Mechanism, info: ValidationInfo) -> Mechanism:
        """A knob the network cannot take (`Mechanism.fits`: projections its layers cannot apply, a patch form
        without a token grid), named at that knob."""
        model = info.data.get("model")
        if isinstance(model, ModelConfig):
            try:
                v.fits(BACKBONES.get(model.backbone), model)
            except KnobError as e:
                raise _error_at(e.knob, str(e), getattr(v, e.knob, None)) from None
        return v

    @model_validator(mode="after")
    def _check(self) -> TrialConfig:
        if self.data.task != self.task:
            raise ValueError(f"task {self.task} cannot use dataset {self.data.name} (a {self.data.task} dataset)")
        backbone = BACKBONES.get(self.model.backbone)
        if backbone.task != self.task:
            raise ValueError(f"task {self.task} cannot use backbone {self.model.backbone} (a {backbone.task} backbone)")
        backbone.accepts(self.attention)
        self.batch_split()
        if self.train.select == "best" and self.data.val_fraction == 0:
            raise ValueError("train.select best chooses the epoch on validation data: data.val_fraction must be > 0")
        return self

    def batch_split(self) -> BatchSplit:
        """How the global batch splits: workers x accum_steps x device_batch = batch_size (ValueError if not)."""
        t, workers = self.train, self.resources.workers
        accum = t.accum_steps or (t.batch_size // (workers * t.device_batch) if t.device_batch else 1)
        device = t.device_batch or t.batch_size // (workers * accum)
        if workers * accum * device != t.batch_size:
            raise ValueError(
                f"train.batch_size {t.batch_size} is not resources.workers {workers} x train.accum_steps "
                f"{accum} x train.device_batch {device}: the global batch must split evenly"
            )
        return BatchSplit(workers, accum, device)


@dataclass(frozen=True)
class BatchSplit:
    """A global batch's split over data-parallel workers and accumulation steps."""

    workers: int
    accum_steps: int
    device_batch: int


def _rebuild_on_registration() -> None:
    """A mechanism registered after TrialConfig was built (a plugin): rebuild so its config validates."""
    if TrialConfig.__pydantic_complete__:
        TrialConfig.model_rebuild(force=True)


MECHANISMS.on_change(_rebuild_on_registration)


REPLICATES = ("seed", "data.split_seed", "data.fold")
"""Config paths whose values repeat one variant rather than make another: the seed, the repeat of a random
split or of a cross-validation (split_seed), and the CV fold. Variant keys and reports leave them out."""


def identity(model: BaseModel) -> dict[str, Any]:
    """The key-relevant part of a config as plain JSON data: every field not marked `nokey`, and fields
    marked `added` only away from their defaults."""
    out: dict[str, Any] = {}
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        if field.json_schema_extra == NOKEY or (field.json_schema_extra == ADDED and value == field.default):
            continue
        out[name] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return identity(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value
