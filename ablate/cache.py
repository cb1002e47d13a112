"""Figures that are slow to compute but fixed by a model's config and the code: costs and parameter counts.

`ablate plan` shows params and GFLOPs per trial, and `model.match_params` searches widths by parameter count;
both build networks (on the meta device: no memory, yet seconds for a few Swin models). They are kept on disk,
so each is computed once per architecture and code version rather than once per process. An entry's key is
what was computed, the architecture's identity, the trial's code fingerprint (its components, the training
loop, torch and timm versions: `ablate.fingerprint`) and the source of the module that computes it. The file
is `costs.json` under ABLATE_CACHE, else $XDG_CACHE_HOME/ablate, else ~/.cache/ablate. A cache that cannot be
read or written is passed over: the figure is computed, as without one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ablate.config import TrialConfig

CACHE_ENV = "ABLATE_CACHE"
FILE = "costs.json"
_ENTRIES: dict[Path, dict[str, Any]] = {}
"""The cache file's entries, per file, as this process knows them."""


def folder() -> Path:
    """Where the cache lives (see the module docstring)."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate"


def remembered(what: str, cfg: TrialConfig, identity: str, compute: Callable[[], Any], module: str) -> Any:
    """The JSON value `compute()` gives for the architecture `identity` of `cfg`, from the cache when the same
    code (the trial's fingerprint and `module`'s source) computed it before; computed and kept otherwise."""
    from ablate.fingerprint import fingerprint

    key = hashlib.sha256(
        json.dumps([what, identity, fingerprint(cfg).digest, _source_digest(module)]).encode()
    ).hexdigest()
    path = folder() / FILE
    entries = _entries(path)
    if key not in entries:
        entries[key] = compute()
        _write(path, entries)
    return entries[key]


@functools.cache
def _source_digest(module: str) -> str:
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec else None
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16] if origin else "none"


def _entries(path: Path) -> dict[str, Any]:
    if path not in _ENTRIES:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        _ENTRIES[path] = data if isinstance(data, dict) else {}
    return _ENTRIES[path]


def _write(path: Path, entries: dict[str, Any]) -> None:
    """Merge with what other processes wrote meanwhile, and replace the file whole (never half-written)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            on_disk = json.loads(path.read_text())
        except (OSError, ValueError):
            on_disk = {}
        merged = {**on_disk, **entries} if isinstance(on_disk, dict) else entries
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".costs-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(merged, f)
        os.replace(tmp, path)
        entries.update(merged)
    except OSError:
        return
