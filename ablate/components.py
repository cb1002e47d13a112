"""The base classes of backbone and dataset components (mechanisms subclass `ablate.config.Mechanism`),
and the published tables a mechanism's module may declare.

A component is one module: it subclasses one of these, fills in what it knows, and registers an instance
(`ablate.registry.register_backbone` / `register_dataset`). The rest of ablate asks the registry, never
the module, so a plugin's backbone or dataset is used exactly like a built-in one. Nothing here imports
torch: validation asks `check` and `dims` before any model or data is built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from torch import nn

    from ablate.config import Mechanism, ModelConfig, TrialConfig
    from ablate.data import Splits


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
    sizes: ClassVar[dict[str, dict[str, Any]]] = {}
    """Named sizes (`model.size`): the fields each one sets."""

    def check(self, m: ModelConfig) -> None:
        """Raise ValueError for a model config this backbone cannot build (checked at validation)."""

    def accepts(self, attention: Mechanism) -> None:
        """Raise ValueError for a mechanism this backbone cannot use."""

    def build(self, m: ModelConfig, attention: Mechanism, num_classes: int, in_chans: int) -> nn.Module:
        raise NotImplementedError

    def example(self, m: ModelConfig, in_chans: int, batch: int, device: Any) -> tuple[Any, ...]:
        """Positional inputs of the right shape for one forward (FLOP counts, the pre-launch check)."""
        import torch

        return (torch.randn(batch, in_chans, m.img_size, m.img_size, device=device),)

    def width_step(self, m: ModelConfig) -> int:
        """Smallest `embed_dim` increment that keeps the model valid (the `match_params` search grid)."""
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
