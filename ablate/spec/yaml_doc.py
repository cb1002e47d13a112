"""A YAML file read safely: its size, encoding and aliases bounded, the line of every key path kept, `$VARS`
expanded where a path allows them.

An experiments file is a few KB that a person writes, so anything far from that (a file over `MAX_BYTES`, an
alias bomb, UTF-16 text, a recursive alias) is refused with a `SpecError` that says what it is, before any of
it is constructed. The line map is what lets every later problem name its line (`nearest_line`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ablate.errors import Problem, SpecError

Loc = tuple[str | int, ...]
"""A key path inside the YAML file, e.g. ("sweeps", "cpu", "grid", "train.lr", 0)."""
MAX_BYTES = 1 << 20
"""Largest experiments file read (an experiments file is a few KB; a larger one is almost surely a mistake)."""
MAX_NODES = 100_000
"""Largest document, counted as YAML nodes with every alias expanded (a 1 KB alias bomb expands to billions)."""


def nearest_line(lines: dict[tuple[str | int, ...], int], path: tuple[str | int, ...]) -> int | None:
    for n in range(len(path), 0, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return None


def _line_map(
    node: yaml.Node, path: Loc, out: dict[Loc, int], dups: list[tuple[Loc, int]], seen: dict[int, Loc]
) -> None:
    """Record the 1-based line of every key and list item; note duplicate keys (PyYAML keeps the last). A node
    that aliases repeat is walked once, under its first path (kept in `seen`)."""
    out[path] = node.start_mark.line + 1
    if id(node) in seen:
        return
    seen[id(node)] = path
    if isinstance(node, yaml.MappingNode):
        keys: set[Any] = set()
        for k, v in node.value:
            key = k.value
            if key in keys:
                dups.append((path + (key,), k.start_mark.line + 1))
            keys.add(key)
            _line_map(v, path + (key,), out, dups, seen)
            out[path + (key,)] = k.start_mark.line + 1  # the key's line, not its value's
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _line_map(v, path + (i,), out, dups, seen)


def _decode(raw: bytes, src: str) -> str:
    """UTF-8 text (a UTF-8 byte-order mark is allowed); anything else is a SpecError saying what it is."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or (len(raw) > 1 and b"\x00" in raw[:2]):
        raise SpecError([Problem(src, (), "the file is UTF-16 text: save it as UTF-8")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError([Problem(src, (), f"the file is not UTF-8 text (byte 0x{raw[e.start]:02x}): save it as "
                                 "UTF-8", line)]) from None  # fmt: skip


def _expanded_size(node: yaml.Node, memo: dict[int, int], src: str, at: dict[int, Loc], open_: set[int]) -> int:
    """Nodes of the document with aliases expanded, counted in time linear in the composed graph. A node that
    holds an alias to itself (`a: &x [*x]`) has no expansion: a SpecError at its path (`at`, from `_line_map`)."""
    if id(node) in open_:
        raise SpecError([Problem(src, at.get(id(node), ()), "a recursive alias: this node holds an alias to itself, "
                                 "which no config can be", node.start_mark.line + 1)])  # fmt: skip
    if id(node) in memo:
        return memo[id(node)]
    open_.add(id(node))
    size = 1
    if isinstance(node, yaml.MappingNode):
        size += sum(
            _expanded_size(k, memo, src, at, open_) + _expanded_size(v, memo, src, at, open_) for k, v in node.value
        )
    elif isinstance(node, yaml.SequenceNode):
        size += sum(_expanded_size(v, memo, src, at, open_) for v in node.value)
    open_.discard(id(node))
    memo[id(node)] = size
    return size


@dataclass
class YamlDoc:
    """A YAML file read: its data, the line of every key path, and its duplicate keys (as problems, so the
    rest of the file is still checked; PyYAML keeps the last of each)."""

    data: Any
    lines: dict[Loc, int]
    duplicates: list[Problem]


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, reading `1e-3` and `1.0e5` as the numbers YAML 1.2 says they are: YAML 1.1 reads
    them as text, which a number field refuses (it takes a value as written, see `components.Strict`)."""


_Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)[eE][-+]?\d+\Z"),
                              list("-+.0123456789"))  # fmt: skip


def read_yaml(path: Path) -> YamlDoc:
    """Safe-load a YAML file with a line for every key path. Raises SpecError on unreadable/invalid YAML, a
    file over MAX_BYTES, text that is not UTF-8, a recursive alias, or a document over MAX_NODES nodes once
    aliases expand."""
    src = str(path)
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise SpecError([Problem(src, (), f"the file is {size:,} bytes; an experiments file may have at most "
                                     f"{MAX_BYTES:,}")])  # fmt: skip
        text = _decode(path.read_bytes(), src)
    except OSError as e:
        raise SpecError([Problem(src, (), f"cannot read file: {e.strerror or e}")]) from None
    lines: dict[tuple[str | int, ...], int] = {}
    dups: list[tuple[tuple[str | int, ...], int]] = []
    try:
        loader = _Loader(text)
        try:
            node = loader.get_single_node()
            at: dict[int, Loc] = {}
            if node is not None:  # before construction, which rewrites merge keys (<<) in place
                _line_map(node, (), lines, dups, at)
            if node is not None and (n := _expanded_size(node, {}, src, at, set())) > MAX_NODES:
                raise SpecError([Problem(src, (), f"the document expands to {n:,} YAML nodes (aliases repeat what "
                                         f"they name); at most {MAX_NODES:,} are read")])  # fmt: skip
            data = loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise SpecError([Problem(src, (), f"invalid YAML: {getattr(e, 'problem', None) or e}", line)]) from None
    except RecursionError:
        raise SpecError([Problem(src, (), "the document nests too deeply")]) from None
    return YamlDoc(data, lines, [Problem(src, p, "duplicate key (YAML keeps only the last)", ln) for p, ln in dups])


ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def expand_env(text: str) -> tuple[str, list[str]]:
    """`$VAR`, `${VAR}` and `${VAR:-default}` replaced from the environment; the names that are unset (and
    have no default) are returned, not guessed."""
    missing: list[str] = []

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in os.environ:
            return os.environ[name]
        if m.group(2) is not None:
            return m.group(2)
        missing.append(name)
        return m.group(0)

    return ENV_VAR.sub(value, text), missing


def absolute_data_path(cfg: dict[str, Any], folder: Path) -> tuple[dict[str, Any], list[str], str | None]:
    """Expand $VARS in data.path (e.g. ${IMAGENET_DIR}) and resolve it against the file's folder; also the
    names of variables it uses that are not set, and the text as written when it used any."""
    data = cfg.get("data")
    if not (isinstance(data, dict) and isinstance(data.get("path"), str)):
        return cfg, [], None
    written = data["path"]
    path, missing = expand_env(os.path.expanduser(written))
    data["path"] = path if missing or Path(path).is_absolute() else str((folder / path).resolve())
    return cfg, missing, written if ENV_VAR.search(written) else None
