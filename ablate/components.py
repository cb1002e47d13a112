"""The base classes of components: mechanisms (`Mechanism`, a config section), backbones, datasets, and
the published tables and report sections a mechanism's module may declare.

A component is one module: it subclasses one of these, fills in what it knows, and registers it
(`ablate.registry.register_mechanism` / `register_backbone` / `register_dataset`). The rest of ablate asks
the registry, never the module, so a plugin's component is used exactly like a built-in one. Nothing here
imports torch: validation asks `check` and `dims` before any model or data is built.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, ValidationInfo, field_validator
from pydantic.config import JsonDict

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import ModelConfig, TrialConfig
    from ablate.data import Splits
    from ablate.nn.mixer import TokenMixer
    from ablate.reporting.sections import SweepResults


class Strict(BaseModel):
    """Base of every config section: unknown keys are errors, docstrings are field descriptions, numbers are
    finite, and a value is taken as the kind it was written as: pydantic would silently convert a YAML `true`
    to 1, the text "no" to false, 1 to true and the text "2" to 2 (so `[true, "no", 1]` would be two values)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_default=True,
                              allow_inf_nan=False)  # fmt: skip

    @field_validator("*", mode="before")
    @classmethod
    def _as_written(cls, value: Any, info: ValidationInfo) -> Any:
        takes = _takes(cls, info.field_name or "")
        if takes is None:
            return value
        whole, items = takes
        if (got := whole.converted(value)) is not None:
            raise ValueError(f"expected {whole.expected}, got {got}")
        if items is not None and isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if (got := items.converted(item)) is not None:
                    raise ValueError(f"expected {items.expected} at [{i}], got {got}")
        return value


_LAX = {kind: TypeAdapter(kind) for kind in (bool, int, float)}
"""Scalar fields as pydantic fills them in lax mode: what they would convert a value of another kind to."""


@dataclass(frozen=True)
class _Takes:
    """What a field, or each item of a list field, takes as written: worked out once from its annotation."""

    booleans: bool
    kinds: frozenset[type]
    """Its scalar types where it takes only scalars ({int} for `int | None`); empty where it takes more."""
    expected: str

    @classmethod
    def of(cls, annotation: Any) -> _Takes:
        return cls(_admits_bool(annotation), frozenset(_scalar_kinds(annotation) or ()), _expected(annotation))

    def converted(self, value: Any) -> str | None:
        """What `value` is ("the string 'no'") where pydantic would take it only by converting it to another
        kind of scalar; None where it is taken as it is, or refused anyway (pydantic then says why)."""
        if isinstance(value, bool):
            return None if self.booleans else f"the boolean {str(value).lower()}"
        if isinstance(value, str) and self.kinds and str not in self.kinds:
            what = "string"
        elif isinstance(value, (int, float)) and self.kinds == {bool}:
            what = "number"
        else:
            return None
        return f"the {what} {value!r}" if any(_converts(_LAX[k], value) for k in self.kinds if k in _LAX) else None


@functools.cache
def _takes(model: type[BaseModel], name: str) -> tuple[_Takes, _Takes | None] | None:
    """What field `name` of `model` takes, and what each of its items takes (None: not a list of one type)."""
    field = model.model_fields.get(name)
    if field is None:
        return None
    items = _item_types(field.annotation)
    return _Takes.of(field.annotation), _Takes.of(items[0]) if len(items) == 1 else None


def _converts(adapter: TypeAdapter[Any], value: Any) -> bool:
    try:
        adapter.validate_python(value)
    except ValidationError:
        return False
    return True


def _admits_bool(annotation: Any) -> bool:
    if annotation is bool or annotation is Any:
        return True
    return any(_admits_bool(a) for a in typing.get_args(annotation) if not isinstance(a, (str, int, float)))


def _scalar_kinds(annotation: Any) -> set[type] | None:
    """The scalar types a field takes ({int} for `int | None`, {str} for a Literal of names); None when it
    takes anything else too (a section, a list, Any)."""
    if annotation in (bool, int, float, str):
        return {annotation}
    if annotation is type(None):
        return set()
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return {type(a) for a in args}
    if origin is typing.Annotated:
        return _scalar_kinds(args[0])
    if origin in (typing.Union, types.UnionType):
        kinds = [_scalar_kinds(a) for a in args]
        return None if any(k is None for k in kinds) else set().union(*typing.cast(list[set[type]], kinds))
    return None


def _item_types(annotation: Any) -> list[Any]:
    """What the items of a list or tuple field may be (`tuple[int, ...] | None` -> [int]); [] for no sequence."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple):
        return [a for a in typing.get_args(annotation) if a is not Ellipsis]
    if origin in (typing.Union, types.UnionType):
        return [t for a in typing.get_args(annotation) for t in _item_types(a)]
    return []


def _expected(annotation: Any) -> str:
    kinds = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    found = [kinds[a] for a in (annotation, *typing.get_args(annotation)) if a in kinds]
    return " or ".join(dict.fromkeys(found)) or "a value of another type"


#: Marks a result-relevant field added after trials were stored (``json_schema_extra``): see `added`.
ADDED: JsonDict = {"x-key-unless-default": True}


def added(default: Any, **kw: Any) -> Any:
    """A result-relevant field added to a config that trials were already keyed by: it joins the key only
    when set to something other than its default (which must be what trials did before it existed), so
    adding it keeps every stored trial's key. Every new result-relevant field is declared this way."""
    return Field(default, json_schema_extra=ADDED, **kw)


class KnobError(ValueError):
    """A knob's value that the rest of the trial's config rules out (`Mechanism.fits`): validation names the
    knob (`attention.<knob>`), not the whole section."""

    def __init__(self, knob: str, message: str) -> None:
        super().__init__(message)
        self.knob = knob


class Mechanism(Strict):
    """Base of every attention mechanism's config; a mechanism is one module that subclasses it.

    A subclass sets `kind: Literal["<name>"] = "<name>"` (the `attention.kind` it answers to), adds its knobs
    as fields with docstrings, builds its token mixer in `build`, and is registered with
    `ablate.registry.register_mechanism`. Everything the rest of ablate knows about it is asked here.
    """

    kind: str
    self_attention_only: ClassVar[bool] = False
    """True when the mixer calibrates each key from its own token: it cannot pool with a single query."""
    said: ClassVar[tuple[str, ...]] = ()
    """Knobs that `describe` puts in words (reports append the other varying knobs as name=value)."""
    projections: Literal["learned", "tied", "identity"] = added("learned")
    """Query, key and value projections: `learned` (three matrices), `tied` (one matrix makes both the query
    and the key, so q = k; a second the value) or `identity` (none: q = k = v = the token itself, split into
    heads). The output projection stays. Applied by the backbone's attention layers (`Backbone.check_projections`
    says which it can)."""

    def fits(self, backbone: Backbone, m: ModelConfig) -> None:
        """Raise a KnobError for a knob of this config that the network `backbone` builds from `m` cannot take
        (checked at validation). By default: projections the backbone's layers cannot apply."""
        try:
            backbone.check_projections(m, self.projections)
        except ValueError as e:
            raise KnobError("projections", str(e)) from None

    def build(self, dim: int, num_heads: int, in_dim: int | None = None) -> TokenMixer:
        """The token mixer of this config (see `ablate.nn.mixer.TokenMixer` for the interface)."""
        raise NotImplementedError(f"mechanism {self.kind!r} does not build a mixer")

    def describe(self) -> str:
        """The mechanism in a paper table's words, e.g. 'CSaN (tau, mu, private; unit readout)'."""
        return self.kind

    def published_key(self) -> tuple[Any, ...] | None:
        """The key of published rows this variant corresponds to (`ablate.reporting.published`), or None."""
        return None


class Backbone:
    """How a network is built around a mechanism: which blocks get its token mixer, and at what sizes."""

    name: ClassVar[str]
    """`model.backbone` value."""
    task: ClassVar[str] = "classify"
    """The task its networks solve (their inputs and outputs)."""
    family: ClassVar[str]
    """How a paper names it ("Swin", "ViT")."""
    patch_size: ClassVar[int] = 1
    """Default `model.patch_size`."""
    normalization: ClassVar[str] = "imagenet"
    """The image normalisation its authors train with (`data.normalization: family`): imagenet or inception."""
    sizes: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named sizes (`model.size`): the fields each one sets."""

    def check(self, m: ModelConfig) -> None:
        """Raise ValueError for a model config this backbone cannot build (checked at validation)."""

    def accepts(self, attention: Mechanism) -> None:
        """Raise ValueError for a mechanism this backbone cannot use."""

    token_grid: ClassVar[bool] = False
    """Its attentions see their tokens as a grid (after any class token), which it tells each mixer
    (`ablate.nn.mixer.TokenMixer.grid`): what a mechanism comparing neighbourhoods of tokens needs."""

    def check_projections(self, m: ModelConfig, projections: str) -> None:
        """Raise ValueError for an `attention.projections` its attention layers cannot apply. The default takes
        learned only: a backbone whose own layers project queries, keys and values (synpool, a plugin's)."""
        if projections != "learned":
            raise ValueError(f"{self.name} projects queries, keys and values in its own layers: it takes "
                             f"projections: learned only, not {projections}")  # fmt: skip

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        raise NotImplementedError

    def example(self, m: ModelConfig, in_chans: int, batch: int, device: Any) -> tuple[Any, ...]:
        """Positional inputs of the right shape for one forward (FLOP counts, the pre-launch check)."""
        import torch

        return (torch.randn(batch, in_chans, m.img_size, m.img_size, device=device),)

    def attention_drop_path(self, rate: float) -> float:
        """The drop-path rate of a block's attention branch for a block rate `rate`, when
        `model.desync_drop_path` is on (the family's rule in the CSaN recipe); default: the block's rate."""
        return rate

    def width_step(self, m: ModelConfig) -> int:
        """Smallest `embed_dim` increment that keeps the model valid (the `match_params` search grid)."""
        assert m.num_heads is not None  # set by validation
        return m.num_heads[0]

    def describe_size(self, words: str, m: dict[str, Any]) -> str:
        """A named size in a paper's words (`words` is the size name capitalised: Swin-Min, ViT-Base)."""
        return words

    def describe(self, m: dict[str, Any]) -> str:
        """The architecture in a paper table's words, from a stored config's `model` section."""
        blocks = sum(m.get("depths") or ())
        heads = (m.get("num_heads") or [None])[0]
        return f"{self.family} ({m.get('embed_dim')}-d, {blocks} blocks, {heads} heads)"


class Dataset:
    """Where a trial's examples come from: fixed, seeded train / val / test splits and their shapes."""

    name: str
    """`data.name` value."""
    task: str = "classify"
    needs_path: bool = False
    """True when `data.path` is required."""
    val_fraction: float = 0.1
    """Default `data.val_fraction`: the share of training examples held out for validation curves."""

    @property
    def shipped(self) -> bool:
        """Whether, without a `data.path`, its examples are fixed by its code (copies its package ships, a seeded
        generator): the pre-launch data check of such a dataset is remembered with the code's fingerprint, as a model's
        is (`ablate.probe.check.data_fingerprint`). A dataset that needs no path is, unless it says otherwise (one
        that reads data from elsewhere without a path sets `shipped = False`, and is checked at every launch). A
        property, not a field of the built-ins: their modules, and so every stored result's code digest, are as they
        were."""
        return not self.needs_path

    def dims(self, cfg: TrialConfig) -> tuple[int, int]:
        """(in_chans, num_classes) without loading the data (costs and checks at plan time)."""
        raise NotImplementedError

    def build(self, cfg: TrialConfig) -> Splits:
        raise NotImplementedError

    def describe(self, d: dict[str, Any]) -> str:
        """The dataset's name in reports, from a stored config's `data` section."""
        return self.name


@dataclass(frozen=True)
class PublishedRow:
    """One row of a paper's table, with what a measured variant must match to sit beside it."""

    model: str
    setting: str
    params_m: float
    gflops: float | None
    """G multiply-accumulates; None where the paper does not give it."""
    top1: float
    size: str
    """The `model.size` it was measured at."""
    stack: str
    mechanism: tuple[Any, ...]
    """The `Mechanism.published_key()` of the variant the row reports."""
    diamond: bool = False
    """Param-matched widths (`model.match_params`)."""
    dwconv: bool = False

    def key(self) -> tuple[Any, ...]:
        return (self.stack, self.mechanism, self.diamond, self.dwconv)


@dataclass(frozen=True)
class PublishedTable:
    """A paper's table: registered by the module of the mechanism it publishes (`register_table`)."""

    name: str
    source: str
    """The paper, cited by its title."""
    dataset: str
    data_ids: frozenset[str]
    """Normalised `data.id` values (lower case, alphanumerics only) under which a run is comparable."""
    note: str
    rows: tuple[PublishedRow, ...]
    recipe: dict[str, Any] = field(default_factory=dict)
    """Dotted config paths and the values the paper trained with: a run is comparable only when it has them."""


@dataclass
class Table:
    """A table of formatted cells, the block a report section returns beside text (`ReportSection`): here, in
    the contract, so a mechanism's section builds one without importing the report's renderer."""

    caption: str
    header: list[str]
    rows: list[list[str]]
    groups: list[str] | None = None
    """Group of each row; a group row is drawn where it changes."""
    bold: set[tuple[int, int]] = field(default_factory=set)
    """(row, column) cells to mark as the best."""
    left: int = 2
    """Leading text columns (left-aligned); the rest are numbers (right-aligned)."""
    links: dict[tuple[int, int], str] = field(default_factory=dict)
    """(row, column) cells that link to a relative address."""


@dataclass
class Image:
    """A figure a report section returns beside text and tables: PNG bytes, inline in HTML, a file beside the
    Markdown."""

    name: str
    """File stem: the PNG written beside report.md is `<name>.png`."""
    png: bytes
    alt: str


Block = str | Table | Image
"""What a report section is made of: paragraphs, tables and figures, as every page renders them."""


@dataclass(frozen=True)
class ReportSection:
    """A section of its own that a mechanism's module (or a plugin) adds to the report of every sweep one of
    whose variants uses the mechanism, computed from that sweep's results: a paper's own tables, say
    (`ablate.registry.register_section`; Syn's are in `ablate.nn.mechanisms.syn.report`)."""

    title: str
    """The section's heading, and its name in the registry."""
    mechanism: str
    """The `attention.kind` whose sweeps get the section."""
    build: Callable[[SweepResults], Sequence[Block]]
    """The section's blocks (text, `Table`) from the sweep's results. Whatever it
    raises is shown in the section, naming where the section was registered: the rest of the report stands."""
