"""Loading components: the built-ins, a file's `plugins:` list, and installed entry points.

Every way in ends in importing a module whose top level calls a registry's `register` (see
`ablate.registry`). A `Plugins` value says what to import and travels with each Ray task, so a worker on any
node imports the same components before it validates its trial's config:
- a module name (`my_pkg.attention`) is imported by name: an installed package (install it on every
  node, like ablate), or a local one beside the experiments file, whose folder travels with the task as a
  zip and is unpacked on each worker (a shared filesystem is not needed);
- a file (`./local/myattn.py`, relative to the experiments file) is imported from its source text, which
  travels with the task, under the name `ablate_plugin_<stem>_<hash of its path and text>` on every process;
- entry points of the groups in `GROUPS` of every installed distribution (installed on every node, like
  ablate itself).
Any failure to import or register is a `PluginError` naming the plugin.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import io
import sys
import sysconfig
import tempfile
import traceback
import types
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.registry import BUILTINS

GROUPS = ("ablate.mechanisms", "ablate.backbones", "ablate.datasets")


class PluginError(ValueError):
    """A plugin that cannot be found, imported or registered."""


@dataclass(frozen=True)
class FilePlugin:
    """A plugin module given as a file: its source travels with every task."""

    path: str
    source: str

    @property
    def module(self) -> str:
        """Its stem and a hash of its path and source: two files of one name (in two projects, or two tests of
        one process) never share a module, every process given the same file computes the same name, and an
        edited file is a new module. A process that imported the old text (a Ray worker of a long-lived
        cluster, a notebook) runs the new one, whose components replace the old file's in the registries."""
        digest = hashlib.sha256(f"{self.path}\0{self.source}".encode()).hexdigest()[:12]
        return f"ablate_plugin_{Path(self.path).stem}_{digest}"


@dataclass(frozen=True)
class Plugins:
    """What a process must import before it validates configs: module names and files."""

    modules: tuple[str, ...] = ()
    files: tuple[FilePlugin, ...] = ()
    packages: tuple[bytes, ...] = field(default=(), compare=False, repr=False)
    """Zips of the local (not installed) packages of module plugins: unpacked on workers that lack them."""

    @classmethod
    def from_list(cls, entries: list[str], base: Path) -> Plugins:
        """Resolve a file's `plugins:` entries: paths (containing '/' or ending in .py) relative to `base`."""
        modules: list[str] = []
        files: list[FilePlugin] = []
        for entry in entries:
            if "/" in entry or entry.endswith(".py"):
                path = (base / entry).expanduser().resolve()
                try:
                    files.append(FilePlugin(str(path), path.read_text()))
                except OSError as e:
                    raise PluginError(f"plugin {entry}: cannot read {path}: {e.strerror or e}") from None
            else:
                modules.append(entry)
        return cls(tuple(modules), tuple(files), tuple(_zip(Path(folder)) for folder in _local_folders(modules, base)))

    def merged(self, other: Plugins) -> Plugins:
        return Plugins(tuple(dict.fromkeys(self.modules + other.modules)),
                       tuple(dict.fromkeys(self.files + other.files)),
                       tuple(dict.fromkeys(self.packages + other.packages)))  # fmt: skip

    def load(self, strict: bool = True) -> None:
        """Import built-ins, entry points, then these plugins (idempotent: a module is imported once). Not
        `strict` (commands that only read results: status, runs, show, report): a plugin that fails is a
        PluginWarning naming it, and the others load; what it would register stays as registered elsewhere (an
        installed package of the same components) or unknown."""
        load_builtins()
        load_entry_points(strict)
        for package in self.packages:
            _unpack(package)
        for name in self.modules:
            _guarded(name, functools.partial(importlib.import_module, name), strict)
        for plugin in self.files:
            _guarded(plugin.path, functools.partial(_exec_file, plugin), strict)

    def to_json(self) -> dict[str, Any]:
        """What the store keeps with a sweep, so a report (anywhere) loads the same components."""
        return {"modules": list(self.modules), "files": [{"path": f.path, "source": f.source} for f in self.files]}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Plugins:
        data = data or {}
        files = tuple(FilePlugin(f["path"], f["source"]) for f in data.get("files", []))
        return cls(tuple(data.get("modules", [])), files)

    def __bool__(self) -> bool:
        return bool(self.modules or self.files)


_BUILTINS_LOADED = False


def load_builtins() -> None:
    """Import the built-in component modules (each registers itself), once per process (validation asks on
    every config)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    for name in BUILTINS:
        importlib.import_module(name)
    _BUILTINS_LOADED = True


_ENTRY_POINTS_LOADED = False


def load_entry_points(strict: bool = True) -> None:
    """Import every installed distribution's `ablate.*` entry points, once per process (not `strict`: one that
    fails is a PluginWarning, and the others load)."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for group in GROUPS:
        for ep in importlib.metadata.entry_points(group=group):
            where = f"{ep.name} = {ep.value} (entry point {group}, {ep.dist.name if ep.dist else '?'})"
            _guarded(where, ep.load, strict)


class PluginWarning(UserWarning):
    """A plugin that failed to load where results are only read: they are shown without it (`Plugins.load`)."""


def _guarded(what: str, load: Callable[[], object], strict: bool = True) -> None:
    try:
        try:
            load()
        except PluginError:
            raise
        except Exception as e:  # any error inside a plugin: name the plugin, keep the cause's last frame
            last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
            at = f" ({last[0].filename}:{last[0].lineno})" if last else ""
            raise PluginError(f"plugin {what} failed to load: {type(e).__name__}: {e}{at}") from e
    except PluginError as e:
        if strict:
            raise
        warnings.warn(PluginWarning(str(e)), stacklevel=2)


def _exec_file(plugin: FilePlugin) -> None:
    """Import a file plugin from its source under a stable name (the same on every Ray worker); other texts of
    the same file imported before are forgotten, so returning to one imports it again."""
    if plugin.module in sys.modules:
        return
    for name, module in list(sys.modules.items()):
        if name.startswith("ablate_plugin_") and getattr(module, "__file__", None) == plugin.path:
            del sys.modules[name]
    module = types.ModuleType(plugin.module)
    module.__file__ = plugin.path
    sys.modules[plugin.module] = module
    try:
        exec(compile(plugin.source, plugin.path, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[plugin.module]
        raise


def _local_folders(modules: list[str], base: Path) -> list[str]:
    """Top-level package folders of module plugins that are importable here but not installed."""
    installed = {Path(p).resolve() for p in (sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])}
    folders = []
    for name in modules:
        top = name.split(".")[0]
        if str(base) not in sys.path and (base / top).exists():
            sys.path.insert(0, str(base))
        spec = importlib.util.find_spec(top)
        if spec is None:
            raise PluginError(
                f"plugin {name}: no module named {top!r} (install it, or put it beside the experiments file)"
            )
        if spec.submodule_search_locations:
            folder = Path(next(iter(spec.submodule_search_locations))).resolve()
            if not any(folder.is_relative_to(p) for p in installed):
                folders.append(str(folder))
    return folders


def _zip(folder: Path) -> bytes:
    """A package folder as zip bytes (sources only), its top-level name as the archive's first folder."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, Path(folder.name) / path.relative_to(folder))
    return buffer.getvalue()


def _unpack(package: bytes) -> None:
    """Make a zipped package importable here: unpacked once per content into the temp folder, whose path
    goes on sys.path; a process that can already import the package (the launcher) is left as it is."""
    with zipfile.ZipFile(io.BytesIO(package)) as zf:
        top = zf.namelist()[0].split("/")[0]
        if importlib.util.find_spec(top) is not None:
            return
        target = Path(tempfile.gettempdir()) / "ablate-plugins" / hashlib.sha256(package).hexdigest()[:16]
        if not (target / top).exists():
            zf.extractall(target)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
        importlib.invalidate_caches()
