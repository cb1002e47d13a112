"""Figures that are slow to compute but fixed by the code they come from, kept on disk across processes.

`ablate plan` shows params and GFLOPs per trial, and `model.match_params` searches widths by parameter count;
both build networks (on the meta device: no memory, yet seconds for a few Swin models). They are kept in
`costs.json`, so each is computed once per architecture and code version rather than once per process. An
entry's key is what was computed, the architecture's identity, the trial's code fingerprint (its components,
the training loop, torch and timm versions: `ablate.provenance.fingerprint`) and the source of the module that computes
it. Code fingerprints themselves are kept in `fingerprints-<digest>.json` (`ablate.provenance.fingerprint`), each
with the files it was computed from. The files live under ABLATE_CACHE, else $XDG_CACHE_HOME/ablate, else
~/.cache/ablate. A cache that cannot be read or written is passed over: the figure is computed, as without one.
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
from typing import Any

CACHE_ENV = "ABLATE_CACHE"
COSTS = "costs.json"
_ENTRIES: dict[Path, dict[str, Any]] = {}
"""Each cache file's entries, as this process knows them."""


def folder() -> Path:
    """Where the cache lives (see the module docstring)."""
    if env := os.environ.get(CACHE_ENV):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ablate"


def remembered(what: str, code: str, identity: str, compute: Callable[[], Any], module: str) -> Any:
    """The JSON value `compute()` gives for the architecture `identity` of a trial whose code fingerprint has
    digest `code` (`ablate.provenance.fingerprint`, which keeps its own entries here: the caller computes it), from the
    cache when the same code and `module`'s source computed it before; computed and kept otherwise."""
    key = hashlib.sha256(json.dumps([what, identity, code, _source_digest(module)]).encode()).hexdigest()
    known = entries(COSTS)
    if key not in known:
        keep(COSTS, key, compute())
    return known[key]


@functools.cache
def _source_digest(module: str) -> str:
    spec = importlib.util.find_spec(module)
    origin = spec.origin if spec else None
    return hashlib.sha256(Path(origin).read_bytes()).hexdigest()[:16] if origin else "none"


def entries(file: str | Path) -> dict[str, Any]:
    """The entries of the cache file `file` (a name in `folder()`, or a path of its own), read once per process (a
    file that cannot be read, or holds no JSON object, has none)."""
    path = folder() / file
    if path not in _ENTRIES:
        _ENTRIES[path] = _read(path)
    return _ENTRIES[path]


def keep(file: str | Path, key: str, value: Any) -> None:
    """Set `key` to `value` in the cache file `file` (`keep_all`)."""
    keep_all(file, {key: value})


def keep_all(file: str | Path, values: dict[str, Any]) -> None:
    """Set `values`' keys in this process and in the cache file `file`: merged with what other processes wrote
    meanwhile, and the file replaced whole (never half-written). A file that cannot be written is passed over."""
    path = folder() / file
    known = entries(file)
    known.update(values)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        merged = {**_read(path), **values}
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(merged, f)
        os.replace(tmp, path)
    except OSError:
        return
    known.update(merged)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
