"""Registries of components: every mechanism, backbone and dataset is reached through one of these.

A registry maps a name to a component and remembers where each came from (the module, and the plugin
that loaded it), so a duplicate name is refused with both sources named (torchtitan's
`register_train_spec` does the same). Built-in components register exactly as a user's plugin does: by
importing their module, which calls `register`.

`on_change` callbacks run after every registration: the config module uses one to rebuild its pydantic
models so a plugin's mechanism config validates, serialises and appears in `ablate schema`.
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ablate.components import Backbone, Dataset, Mechanism, PublishedTable, ReportSection

if TYPE_CHECKING:
    from ablate.training.tasks import Task

T = TypeVar("T")


class RegistryError(ValueError):
    """A component that cannot be registered or found; the message names the registry and the sources."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    """A registered component and where it was declared."""

    name: str
    component: T
    source: str
    """`module:qualname` of the declaration (a plugin file shows as its path)."""


class Registry(Generic[T]):
    """Name -> component, refusing duplicates; iteration order is registration order."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry[T]] = {}
        self._listeners: list[Callable[[], None]] = []

    def register(self, name: str, component: T, source: str | None = None) -> T:
        """Add `component` under `name`; a name already taken by another source is a RegistryError, unless that
        source is an earlier text of the same plugin file (then the new text's component replaces it)."""
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind}: a component needs a non-empty string name, got {name!r}")
        where = source or describe_source(component)
        old = self._entries.get(name)
        if old is not None and old.source == where:
            return component  # the same module imported again (e.g. on a Ray worker): a no-op
        if old is not None and not _edited(old.source, where):
            raise RegistryError(f"{self.kind} {name!r} is registered twice: by {old.source} and by {where}")
        self._entries[name] = Entry(name, component, where)
        for listener in self._listeners:
            listener()
        return component

    def get(self, name: str) -> T:
        try:
            return self._entries[name].component
        except KeyError:
            raise RegistryError(
                f"unknown {self.kind} {name!r}; registered: {', '.join(self._entries) or 'none'}"
            ) from None

    def entry(self, name: str) -> Entry[T]:
        self.get(name)
        return self._entries[name]

    def names(self) -> list[str]:
        return list(self._entries)

    def entries(self) -> list[Entry[T]]:
        return list(self._entries.values())

    def items(self) -> list[tuple[str, T]]:
        return [(e.name, e.component) for e in self._entries.values()]

    def on_change(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def describe_source(obj: object) -> str:
    """`module:qualname` of the registering module and the component, with the file for modules loaded from
    a path (plugins given as ./file.py): two registrations of one name differ when either differs."""
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    caller = _caller()
    module = caller.f_globals.get("__name__", "?") if caller else getattr(target, "__module__", "?")
    name = f"{module}:{getattr(target, '__qualname__', repr(target))}"
    file = caller.f_globals.get("__file__") if caller else None
    if file and not module.startswith("ablate."):
        name += f" ({file})"
    return name


def _edited(old: str, new: str) -> bool:
    """True when `new` is a later text of the file that registered `old`: one path, another module (a file
    plugin's module name carries its text's hash, see `ablate.plugins.FilePlugin`). It replaces the entry."""
    file = old.partition(" (")[2]
    return bool(file) and new.partition(" (")[2] == file and old.split(":")[0] != new.split(":")[0]


def _caller() -> Any:
    """The first frame outside this module: where a component was registered from."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back  # type: ignore[assignment]
    return frame


MECHANISMS: Registry[type[Mechanism]] = Registry("mechanism")
"""attention.kind -> the mechanism's config class (which also builds its token mixer and labels it)."""
BACKBONES: Registry[Backbone] = Registry("backbone")
"""model.backbone -> how a network is built around the mechanism."""
DATASETS: Registry[Dataset] = Registry("dataset")
"""data.name -> how the splits are loaded, and their shapes."""
TASKS: Registry[type[Task]] = Registry("task")
"""task -> how a batch becomes a loss and a split a score."""
TABLES: Registry[PublishedTable] = Registry("published table")
"""Papers' tables that reports place measured variants beside."""
SECTIONS: Registry[ReportSection] = Registry("report section")
"""Report sections mechanisms add to the reports of the sweeps that use them."""
REGISTRIES: tuple[Registry[Any], ...] = (MECHANISMS, BACKBONES, DATASETS, TASKS, TABLES, SECTIONS)
"""Every registry: what a plugin can register into."""

#: Modules of the built-in components, imported like plugins (see `ablate.plugins.load_builtins`).
BUILTINS = (
    "ablate.nn.mechanisms.softmax", "ablate.nn.mechanisms.csan", "ablate.nn.mechanisms.syn",
    "ablate.nn.mechanisms.kernel", "ablate.nn.mechanisms.nlm", "ablate.nn.mechanisms.sparse",
    "ablate.nn.backbones.vit", "ablate.nn.backbones.swin", "ablate.nn.backbones.hiera", "ablate.nn.backbones.mil",
    "ablate.data.images", "ablate.data.mil", "ablate.training.tasks",
)  # fmt: skip


def register_mechanism(cls: type[Mechanism]) -> type[Mechanism]:
    """Class decorator: make a `Mechanism` config selectable as `attention.kind: <its kind literal>`."""
    if not (inspect.isclass(cls) and issubclass(cls, Mechanism)):
        raise RegistryError(f"mechanism {describe_source(cls)}: must be a subclass of ablate.config.Mechanism")
    field = cls.model_fields.get("kind")
    values = typing.get_args(field.annotation) if field is not None else ()
    if field is None or typing.get_origin(field.annotation) is not typing.Literal or len(values) != 1 \
            or field.default != values[0]:  # fmt: skip
        raise RegistryError(f"mechanism {describe_source(cls)}: needs a field kind: Literal['<name>'] = '<name>'")
    return MECHANISMS.register(values[0], cls)


def register_backbone(backbone: Backbone) -> Backbone:
    """Make a `Backbone` instance selectable as `model.backbone: <backbone.name>` (and its sizes)."""
    return BACKBONES.register(backbone.name, backbone)


def register_dataset(dataset: Dataset) -> Dataset:
    """Make a `Dataset` instance selectable as `data.name: <dataset.name>`."""
    return DATASETS.register(dataset.name, dataset)


def register_task(cls: type[Task]) -> type[Task]:
    """Class decorator: make a `Task` selectable as `task: <cls.name>`."""
    return TASKS.register(cls.name, cls)


def register_table(table: PublishedTable) -> PublishedTable:
    """Make a paper's table available to reports (declared by the module of the mechanism it publishes)."""
    return TABLES.register(table.name, table)


def register_section(section: ReportSection) -> ReportSection:
    """Add a section to the report of every sweep that uses `section.mechanism` (declared by that mechanism's
    module, or by a plugin)."""
    return SECTIONS.register(section.title, section)
