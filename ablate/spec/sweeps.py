"""experiments.yaml -> validated sweeps.

A file holds named sweeps. Each sweep is a base config (a partial `TrialConfig`, merged over the file's
`defaults`) and a grid over dotted config paths: cartesian `grid` axes, `linked` axes that move together,
`when` blocks whose axes apply only where a condition holds, `exclude` rules, `seeds` and a `baseline`.
Everything wrong in a file is collected and raised as one `SpecError` whose problems name the file, the
key path and the YAML line. This module reads and checks the file's structure (`read_sweeps`); expanding
a sweep into trials, which finds the errors inside cells, is `ablate.planning.plan`'s job (`load_plans` does both).
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
import re
import typing
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Discriminator,
    Field,
    StrictInt,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ablate.components import Strict
from ablate.config import NAMED, AnyMechanism, TrialConfig, unregistered
from ablate.errors import Problem, SpecError
from ablate.plugins import PluginError, Plugins, load_builtins
from ablate.registry import MECHANISMS, TASKS
from ablate.spec.paths import get_path, overlaps, set_path, typed_value
from ablate.spec.tune import TuneSpec

Loc = tuple[str | int, ...]
"""A key path inside the YAML file, e.g. ("sweeps", "cpu", "grid", "train.lr", 0)."""
Assignment = dict[str, Any]
"""A partial assignment of dotted config paths to values, e.g. {"model.stack": "pure"}."""
Linked = dict[str, list[Any]] | list[Assignment]
"""A linked axis group: columns of equal length, or a list of rows."""


class When(Strict):
    """Axes that apply only to cells matching a condition (e.g. CSaN knobs only where kind is csan)."""

    when: Assignment = Field(min_length=1)
    """Condition: path -> value (a list of scalars matches any of them)."""
    grid: dict[str, list[Any]] = {}
    """Cartesian axes added to matching cells."""
    linked: list[Linked] = []
    """Linked axis groups added to matching cells."""


Seed = Annotated[StrictInt, Field(ge=0, lt=2**63)]
"""A seed, as `TrialConfig.seed` takes it (a YAML `true` is not the seed 1)."""
MAX_SEEDS = 10_000
"""Seeds a sweep may count (`seeds: n`); the trial cap (`--max-trials`) bounds the grid as a whole."""


class AdaptiveSeeds(Strict):
    """`seeds: {min: 3, max: 10, threshold: 0.5}`: min seeds everywhere, more only where undecided (see
    `ablate.planning.adaptive` for the procedure and its error control)."""

    min: int = Field(3, ge=2)
    """Seeds every cell gets (at least 2: an interval needs a spread)."""
    max: int = Field(10, le=MAX_SEEDS)
    """Seeds an undecided cell may reach."""
    threshold: float = Field(gt=0, allow_inf_nan=False)
    """Practical threshold, in the metric's units (points for top1, which is in percent): differences to
    the baseline smaller than this do not matter."""
    target: Literal["decided"] = "decided"
    """What the added seeds aim at: every cell's comparison with the baseline decided."""
    looks: int = Field(3, ge=2, le=20)
    """Analyses from min to max seeds, evenly spaced (the group-sequential design's looks)."""
    alpha: float = Field(0.05, gt=0, lt=0.5)
    """Error rate of each cell's decision, spent over the looks."""
    spending: Literal["pocock", "obrien-fleming"] = "pocock"
    """Alpha spending function (Lan-DeMets): pocock spends early, so clear differences stop at `min`;
    obrien-fleming keeps most for the last look."""

    @model_validator(mode="after")
    def _range(self) -> AdaptiveSeeds:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max}) must exceed min ({self.min}); a fixed count is `seeds: {self.min}`")
        return self

    @property
    def seeds(self) -> list[int]:
        """Every seed a cell may get, in the order they are added."""
        return list(range(self.max))


class SweepSpec(Strict):
    """One named sweep: a base config and the grid over it."""

    description: str = ""
    base: dict[str, Any] = {}
    """A partial trial config (task, data, model, attention, train, resources); merged over `defaults`."""
    grid: dict[str, list[Any]] = {}
    """Cartesian axes: dotted config path -> values."""
    linked: list[Linked] = []
    """Axes that move together: {path: [values...]} columns of equal length, or a list of rows
    (partial assignments; a path a row leaves out keeps the base value)."""
    when: list[When] = []
    """Conditional axes."""
    exclude: list[Assignment] = []
    """Cells matching any of these partial assignments are dropped."""
    seeds: Annotated[
        Annotated[list[Seed], Tag("list")] | Annotated[AdaptiveSeeds, Tag("adaptive")],
        Discriminator(lambda v: "adaptive" if isinstance(v, (dict, AdaptiveSeeds)) else "list"),
    ] = [0]
    """Seeds per cell: a list, a count n meaning 0..n-1, or adaptive ({min, max, threshold}: `AdaptiveSeeds`)."""
    baseline: Assignment | None = None
    """The cell reports compare against (a partial assignment matching at least one cell)."""
    metric: str | None = None
    """Headline metric of reports (default: test.top1 for classify, test.auc for mil)."""
    stale: Literal["warn", "rerun", "reuse"] = "warn"
    """A done trial whose code changed since it ran (`ablate.provenance.fingerprint`): warn (reuse it and list it),
    rerun
    (train it again, keeping the old result as a previous one) or reuse (silently); `launch --stale` overrides."""
    tune: TuneSpec | None = None
    """Tune every arm (variant) alike before its seeds run: `budget` configurations of `space` each, chosen on
    the validation `metric` (`ablate.spec.tune`, `ablate.planning.tuned`; checked against the grid by
    `ablate.spec.tune_check`)."""

    @field_validator("seeds", mode="before", json_schema_input_type=list[int] | int | AdaptiveSeeds)
    @classmethod
    def _count(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool):
            if v > MAX_SEEDS:
                raise ValueError(f"a count of seeds may be at most {MAX_SEEDS:,}, got {v:,}")
            return list(range(v))
        return v

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, seeds: list[int] | AdaptiveSeeds) -> list[int] | AdaptiveSeeds:
        if isinstance(seeds, AdaptiveSeeds):
            return seeds
        if not seeds:
            raise ValueError("at least one seed is required")
        if len(set(seeds)) != len(seeds):
            raise ValueError("seeds repeat")
        return seeds


class SpecFile(Strict):
    """The whole experiments file."""

    plugins: list[str] = []
    """Modules (`my_pkg.attention`) or files (`./plugins/myattn.py`, relative to this file) that register
    mechanisms, backbones or datasets; imported before the sweeps are validated, and on every Ray worker."""
    defaults: dict[str, Any] = {}
    """A partial trial config shared by every sweep of the file."""
    sweeps: dict[str, SweepSpec] = Field(min_length=1)
    """Named sweeps."""
    default: str | None = None
    """The sweep that runs when none is named (default: the first one)."""

    @field_validator("sweeps", mode="before")
    @classmethod
    def _safe_names(cls, v: Any) -> Any:
        """Sweep names become folders (reports/<sweep>/) and MLflow experiments: letters, digits, - and _."""
        if isinstance(v, dict):
            bad = [name for name in v if not isinstance(name, str) or not SAFE_NAME.fullmatch(name)]
            if bad:
                raise ValueError(f"sweep names must match {SAFE_NAME.pattern} (letters, digits, - and _, at most 64, "
                                 f"starting with a letter or digit): {', '.join(map(repr, bad))}")  # fmt: skip
        return v

    @field_validator("default")
    @classmethod
    def _default(cls, v: str | None, info: ValidationInfo) -> str | None:
        sweeps = info.data.get("sweeps")
        if v is not None and sweeps is not None and v not in sweeps:
            raise ValueError(f"{v!r} names no sweep of the file; it has {list(sweeps)}")
        return v


@dataclass
class SweepSource:
    """A sweep as its file gives it, ready to plan: its spec, merged base, YAML lines and the file's plugins."""

    name: str
    spec: SweepSpec
    file: Path
    base: dict[str, Any]
    """defaults merged with the sweep's base, relative data paths made absolute."""
    lines: dict[tuple[str | int, ...], int] = field(default_factory=dict, repr=False)
    plugins: Plugins = field(default_factory=Plugins)
    """The file's plugins: loaded here, and by every process that runs or reports this sweep's trials."""
    placeholders: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Dotted path -> (value, text as written) where the base's value came from environment variables
    (`${TOKEN}`): records keep the text, the trial runs with the value."""
    overrides: tuple[Override, ...] = ()
    """Command-line overrides (`with_overrides`): a problem at their path is theirs."""
    knobs: tuple[Override, ...] = ()
    """The overrides of a knob that only some of the sweep's mechanisms have: set on each cell whose mechanism
    has it (`config`), not on `base`, so the other cells keep their keys."""

    @property
    def source(self) -> str:
        return str(self.file)

    def taken(self, path: str, default: Any = None) -> list[Any]:
        """The values cells may take at `path`: those the sweep's axes give it (its when blocks' included), or
        its base's where the grid gives none."""
        return [value for value, _ in self.written(path, default)]

    def written(self, path: str, default: Any = None) -> list[tuple[Any, Loc]]:
        """`taken(path)` with where each value is written in the sweep."""
        spec = self.spec
        found = list(_written(spec.grid, spec.linked, path, ()))
        if not found:
            found.append((get_path(self.base, path, default), ("base", *path.split("."))))
        for w, block in enumerate(spec.when):
            found += _written(block.grid, block.linked, path, ("when", w))
        return found

    def kinds(self, block: When | None = None) -> list[str]:
        """The attention kinds cells may have (an unknown knob is compared with their knobs; a kind that no
        mechanism is registered as makes its knobs uncheckable, see `path_problem`): those `block`'s condition
        names, if it names any; else those the sweep's axes give attention.kind, or its base's."""
        taken = [k for k in self.taken("attention.kind", "softmax") if isinstance(k, str)]
        named = block.when.get("attention.kind") if block is not None else None
        if named is None:
            return sorted(set(taken))
        return sorted({k for k in _listed(named) if isinstance(k, str) and (k in MECHANISMS or k in taken)})

    def config(self, assigned: Iterable[tuple[str, Any]]) -> dict[str, Any]:
        """A cell's raw config: the base with the cell's `assigned` (path, value) pairs set, then each of `knobs`
        if the cell's mechanism has that knob."""
        raw = copy.deepcopy(self.base)
        for path, value in assigned:
            set_path(raw, path, value)
        kind = get_path(raw, "attention.kind", "softmax")
        for o in self.knobs:
            if isinstance(kind, str) and kind in _owners(o.path):
                set_path(raw, o.path, o.value)
        return raw

    def problem(self, path: tuple[str | int, ...], message: str) -> Problem:
        """A problem at `path` inside this sweep's YAML, with the nearest known line; a problem in the base
        at a path an override set is the override's."""
        full: Loc = ("sweeps", self.name, *path)
        if path[:1] == ("base",) and len(path) > 1:
            dotted = ".".join(str(p) for p in path[1:])
            if (o := next((o for o in self.overrides if o.overlaps(dotted)), None)) is not None:
                return o.problem(message)
            if self._inherited(path[1:]):
                full = ("defaults", *path[1:])
        return Problem(self.source, full, message, nearest_line(self.lines, full))

    def _inherited(self, keys: Loc) -> bool:
        """Whether the base's value at `keys` is the file's `defaults:` (the sweep's own base leaves it out),
        so a problem there is named once, where it is written, not once per sweep."""
        own: Any = self.spec.base
        merged: Any = self.base
        for k in keys:
            if not isinstance(merged, dict) or k not in merged:
                return False
            merged = merged[k]
            if not isinstance(own, dict) or k not in own:
                return True
            own = own[k]
        return False


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


def clean_loc(loc: Loc, data: Any) -> Loc:
    """The user's key path of a pydantic error: walk the input and drop union tags and type labels
    (parts that name no key of the input), except a last part, which is a missing key."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        keys = node if isinstance(node, dict) else range(len(node)) if isinstance(node, list) else ()
        if part in keys:
            node = node[part]
        elif i < len(loc) - 1:
            continue
        out.append(part)
    return tuple(out)


def error_message(e: Any, root: type[BaseModel] | None = None) -> str:
    """A pydantic error as a sentence about what was expected; with the model validated (`root`), an unknown
    key is compared with the keys of its section (a mechanism's: its own knobs)."""
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        loc = tuple(e["loc"])
        if root is None or not loc:
            return "unknown key"
        return f"unknown key; {expected_keys(str(loc[-1]), _section(root, loc))}"
    if e["type"] == "missing":
        return "missing required key"
    if e["type"] in ("literal_error", "union_tag_invalid"):
        return f"{msg} (got {e.get('input')!r})"
    return str(msg)


def validation_problems(err: ValidationError, data: Any, where: Any, root: type[BaseModel]) -> list[Problem]:
    """Turn `root`'s validation error into problems; `where(path, message) -> Problem` places each in the file."""
    return [where(clean_loc(tuple(e["loc"]), data), error_message(e, root)) for e in err.errors()]


def _section(root: type[BaseModel], loc: Loc) -> list[type[BaseModel]]:
    """The models whose keys sit where a pydantic error's `loc` ends: its path walked from `root`, a field at a
    time (a dict key or list index keeps the models; the attention union's tag picks that mechanism)."""
    models = [root]
    for part in loc[:-1]:
        fields = {n: f for m in models for n, f in m.model_fields.items()}
        if isinstance(part, str) and part in fields:
            models = _models_in(fields[part].annotation, fields[part].metadata)
        elif isinstance(part, str) and part in MECHANISMS and MECHANISMS.get(part) in models:
            models = [MECHANISMS.get(part)]
    return models


def expected_keys(name: str, models: Sequence[type[BaseModel]]) -> str:
    """What to say of an unknown key `name` among the keys of `models`: the nearest one, then every one (a
    mechanism's keys are its knobs, named by its kind)."""
    keys = sorted({n for m in models for n in m.model_fields})
    close = difflib.get_close_matches(name, keys, n=1)
    text = f"did you mean {close[0]!r}? " if close else ""
    kinds = [kind for kind, cls in MECHANISMS.items() if cls in models]
    if kinds and len(kinds) == len(models):
        which = f"attention kind {', '.join(kinds)}" if len(kinds) < len(MECHANISMS.names()) else "every attention kind"
        return f"{text}expected one of {keys} (the knobs of {which})"
    return f"{text}expected one of {keys}"


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` merged into a copy of `base`, mapping by mapping."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
"""What a sweep name may be: it names a folder of reports and an MLflow experiment, so never `..` or `a/b`."""
MAX_BYTES = 1 << 20
"""Largest experiments file read (an experiments file is a few KB; a larger one is almost surely a mistake)."""
MAX_NODES = 100_000
"""Largest document, counted as YAML nodes with every alias expanded (a 1 KB alias bomb expands to billions)."""


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


def _absolute_data_path(cfg: dict[str, Any], folder: Path) -> tuple[dict[str, Any], list[str], str | None]:
    """Expand $VARS in data.path (e.g. ${IMAGENET_DIR}) and resolve it against the file's folder; also the
    names of variables it uses that are not set, and the text as written when it used any."""
    data = cfg.get("data")
    if not (isinstance(data, dict) and isinstance(data.get("path"), str)):
        return cfg, [], None
    written = data["path"]
    path, missing = expand_env(os.path.expanduser(written))
    data["path"] = path if missing or Path(path).is_absolute() else str((folder / path).resolve())
    return cfg, missing, written if ENV_VAR.search(written) else None


def load_plugins(entries: Any, path: Path, lines: dict[tuple[str | int, ...], int]) -> Plugins:
    """Import a file's `plugins:` (after the built-ins and entry points); a SpecError naming the entry if one
    cannot be found, imported or registered, before any sweep is looked at."""
    src = str(path)
    if entries is None:
        entries = []
    if not isinstance(entries, list) or not all(isinstance(e, str) and e for e in entries):
        raise SpecError([Problem(src, ("plugins",), "expected a list of module names or .py paths",
                                 nearest_line(lines, ("plugins",)))])  # fmt: skip
    try:
        plugins = Plugins.from_list(entries, path.resolve().parent)
        plugins.load()
    except PluginError as e:
        at = next((i for i, entry in enumerate(entries) if entry in str(e) or Path(entry).name in str(e)), None)
        where = ("plugins",) if at is None else ("plugins", at)
        raise SpecError([Problem(src, where, str(e), nearest_line(lines, where))]) from None
    return plugins


@dataclass
class SweepFile:
    """An experiments file read and checked: its well-formed sweeps, and every problem found so far (the
    planner adds the problems inside cells and raises them together)."""

    path: Path
    sweeps: dict[str, SweepSource]
    default: str | None
    """The sweep to run when none is named; None when the file has no well-formed sweep."""
    problems: list[Problem] = field(default_factory=list)


DEPENDS: dict[str, tuple[str, ...]] = {
    "grid": ("when", "exclude", "baseline", "seeds"),
    "linked": ("when", "exclude", "baseline", "seeds"),
    "when": ("exclude", "baseline", "seeds"),
    "baseline": ("seeds",),
}
"""Parts of a sweep that are checked against others: when one of these is malformed, the parts that depend
on it are left unchecked too (a `when:` value looks for the grid's values; adaptive seeds need a baseline)."""


def _checkable(body: Any) -> SweepSpec | None:
    """A sweep whose structure has errors (already reported through SpecFile), less the parts they are in and
    the parts that depend on those, so its base and the rest of its grid are still checked: a file's problems
    are named at once, across sections. None when its base is malformed (then no cell can be checked)."""
    if not isinstance(body, dict):
        return None
    try:
        return SweepSpec.model_validate(body)
    except ValidationError as err:
        bad = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
    if not bad or "base" in bad:
        return None
    bad |= {d for part in bad for d in DEPENDS.get(part, ())}
    with contextlib.suppress(ValidationError):
        return SweepSpec.model_validate({k: v for k, v in body.items() if k not in bad})
    return None


def read_sweeps(path: str | Path) -> SweepFile:
    """Read and check `path`: YAML, plugins, and each sweep's structure. Problems that stop the file from
    being read at all (unreadable YAML, a failing plugin) raise SpecError; the rest are collected."""
    path = Path(path)
    src = str(path)
    doc = read_yaml(path)
    data, lines = doc.data, doc.lines
    if not isinstance(data, dict):
        raise SpecError([*doc.duplicates, Problem(src, (), "expected a mapping with a `sweeps` key", 1)])
    try:
        plugins = load_plugins(data.get("plugins"), path, lines)
    except SpecError as e:
        raise SpecError([*doc.duplicates, *e.problems]) from None
    problems: list[Problem] = list(doc.duplicates)
    try:
        spec = SpecFile.model_validate(data)
        defaults, specs, default = spec.defaults, spec.sweeps, spec.default
    except ValidationError as err:
        # Keep going with the sweeps that are well-formed, so one run reports every problem of the file.
        problems += validation_problems(err, data, lambda p, m: Problem(src, p, m, nearest_line(lines, p)), SpecFile)
        defaults = data["defaults"] if isinstance(data.get("defaults"), dict) else {}
        raw = data["sweeps"] if isinstance(data.get("sweeps"), dict) else {}
        specs = {name: sweep for name, body in raw.items() if (sweep := _checkable(body)) is not None}
        default = data.get("default") if data.get("default") in specs else None
    folder = path.resolve().parent
    sweeps = {}
    for name, body in specs.items():
        base, missing, written = _absolute_data_path(deep_merge(defaults, body.base), folder)
        if missing:
            where: tuple[str, ...] = ("sweeps", name, "base", "data", "path")
            if get_path(defaults, "data.path") is not None and get_path(body.base, "data.path") is None:
                where = ("defaults", "data", "path")
            problems.append(Problem(src, where, f"environment variable {', '.join(missing)} is not set (give a "
                                    "default with ${VAR:-value})", nearest_line(lines, where)))  # fmt: skip
            continue
        secret = {"data.path": (base["data"]["path"], written)} if written else {}
        sweeps[name] = SweepSource(name, body, path, base, lines, plugins, secret)
        problems += unregistered_names(sweeps[name]) + metric_problems(sweeps[name])
    return SweepFile(path, sweeps, default or next(iter(sweeps), None), problems)


def _models_in(annotation: Any, metadata: list[Any] | tuple[Any, ...] = ()) -> list[type[BaseModel]]:
    """The config models a field holds; for the attention field, every registered mechanism's config."""
    if any(isinstance(meta, AnyMechanism) for meta in metadata):
        return [cls for _, cls in MECHANISMS.items()]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _takes_dict(annotation: Any) -> bool:
    return (
        annotation is dict
        or typing.get_origin(annotation) is dict
        or any(_takes_dict(a) for a in typing.get_args(annotation))
    )


def path_problem(path: str, kinds: Collection[str] = ()) -> str | None:
    """None if `path` names a config field (of any attention kind), else what was expected: for a knob, among
    the knobs of `kinds` (the attention kinds it may apply to) when given."""
    load_builtins()
    models: list[type[BaseModel]] = [TrialConfig]
    parts = path.split(".")
    for i, part in enumerate(parts):
        fields = {n: f for m in models for n, f in m.model_fields.items()}
        if part not in fields:
            if i == 1 and parts[0] == "attention" and any(k not in MECHANISMS for k in kinds):
                return None  # a knob of a kind no mechanism is registered as: the kind is the problem
            where = ".".join(parts[:i]) or "the top level"
            own = [MECHANISMS.get(k) for k in kinds if k in MECHANISMS and MECHANISMS.get(k) in models]
            hint = expected_keys(part, own or models)
            return f"unknown config path {path!r}: {part!r} is not a key of {where}; {hint}"
        ann = fields[part].annotation
        models = _models_in(ann, fields[part].metadata)
        if not models:
            return None if i == len(parts) - 1 or _takes_dict(ann) else f"{'.'.join(parts[: i + 1])} has no sub-keys"
    return None


@dataclass(frozen=True)
class Override:
    """`PATH=VALUE` given on the command line (`-s train.epochs=3`) or to `ablate.plan`: VALUE is YAML, set on
    the base of every sweep planned, so it changes trial keys as an edit of the file would."""

    text: str
    path: str
    value: Any

    def overlaps(self, path: str) -> bool:
        """Whether `path` is this override's path, inside it, or holds it."""
        return overlaps(path, self.path)

    def problem(self, message: str) -> Problem:
        """A problem named by the override as it was typed, with the value it found."""
        found = "" if any(said in message for said in ("(got ", ", got ", "(value ")) else f" (found {self.value!r})"
        return Problem(f"override {self.text!r}", tuple(self.path.split(".")), message + found)


def parse_override(text: str) -> Override:
    """`PATH=VALUE` with VALUE read as YAML (`3`, `1e-3`, `true`, `[2, 2]`, `csan`); SpecError if it is not."""
    path, sep, raw = text.partition("=")
    path = path.strip()
    if not sep or not path or any(not part for part in path.split(".")):
        raise SpecError([Problem(f"override {text!r}", (), "expected PATH=VALUE, e.g. train.epochs=3")])
    try:
        value = typed_value(raw)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or e
        raise SpecError(
            [Problem(f"override {text!r}", tuple(path.split(".")), f"VALUE is not YAML: {problem}")]
        ) from None
    return Override(text, path, value)


def with_overrides(file: SweepFile, texts: Sequence[str], names: Iterable[str] | None = None) -> SweepFile:
    """`file` with each override `PATH=VALUE` set on the base of the sweeps `names` (default: every sweep); a knob
    that only some of a sweep's mechanisms have is set on their cells only (`SweepSource.knobs`). An override
    that is not PATH=VALUE, names no config field or registered component, sets a path the sweep's grid varies
    or a knob none of its mechanisms has is a problem of the file; a value the config refuses is found when the
    sweep is planned, and named as the override's (`SweepSource.problem`)."""
    if not texts:
        return file
    problems: list[Problem] = []
    overrides: list[Override] = []
    sweeps = dict(file.sweeps)
    chosen = list(sweeps) if names is None else [n for n in names if n in sweeps]
    kinds = {k for name in chosen for k in sweeps[name].kinds()}
    for text in texts:
        try:
            o = parse_override(text)
        except SpecError as e:
            problems += e.problems
            continue
        if o.path in NAMED and _unknown(o.value, NAMED[o.path]):
            problems.append(o.problem(unregistered(NAMED[o.path], o.value)))
            kinds.add(o.value)
        else:
            overrides.append(o)
    for o in list(overrides):
        if (msg := path_problem(o.path, kinds)) is not None:
            problems.append(o.problem(msg))
            overrides.remove(o)
    for name in chosen:
        source = sweeps[name]
        base = copy.deepcopy(source.base)
        for o in overrides:
            varied = [p for p in axis_paths(source.spec) if o.overlaps(p)]
            if varied:
                problems.append(o.problem(f"sweep {name} varies {', '.join(varied)} in its grid; an override sets "
                                          "one value for every trial, so set it in the file instead"))  # fmt: skip
            if searched := [p for p in (source.spec.tune.space if source.spec.tune else {}) if o.overlaps(p)]:
                problems.append(o.problem(f"sweep {name} searches {', '.join(searched)} in its tune: space; an "
                                          "override sets one value for every trial"))  # fmt: skip
            if not _owners(o.path):
                set_path(base, o.path, o.value)
        if any(o.overlaps("data.path") for o in overrides):  # a relative path typed here is relative to here
            base = _absolute_data_path(base, Path.cwd())[0]
        knobs = []
        mechanisms = [k for k in replace(source, base=base).kinds() if k in MECHANISMS]
        for o in (o for o in overrides if _owners(o.path)):
            having = [k for k in mechanisms if k in _owners(o.path)]
            if len(having) == len(mechanisms):
                set_path(base, o.path, o.value)
            elif having:
                knobs.append(o)
            else:
                problems.append(o.problem(f"no cell of sweep {name} has a mechanism with this knob (its attention "
                                          f"kinds: {', '.join(mechanisms)}); {o.path} is a knob of "
                                          f"{', '.join(_owners(o.path))}"))  # fmt: skip
        sweeps[name] = replace(source, base=base, overrides=tuple(overrides), knobs=tuple(knobs))
    return replace(file, sweeps=sweeps, problems=[*file.problems, *problems])


def _owners(path: str) -> list[str]:
    """The registered mechanisms that have the knob `path` sets (attention.<knob>...), if it sets one that not
    every mechanism has (`kind` and the knobs of `Mechanism` are every mechanism's)."""
    parts = path.split(".")
    if parts[0] != "attention" or len(parts) < 2:
        return []
    owners = [kind for kind, cls in MECHANISMS.items() if parts[1] in cls.model_fields]
    return [] if len(owners) == len(MECHANISMS) else owners


def axis_paths(spec: SweepSpec) -> list[str]:
    """Every dotted path a sweep's grid, linked groups and when blocks vary."""
    paths: list[str] = []
    for grid, linked in [(spec.grid, spec.linked), *((w.grid, w.linked) for w in spec.when)]:
        paths += grid
        for group in linked:
            paths += group if isinstance(group, dict) else [p for row in group for p in row]
    return list(dict.fromkeys(paths))


def axis_values(grid: dict[str, list[Any]], linked: list[Linked], path: str) -> list[Any]:
    """Every value a grid and its linked groups give `path`."""
    return [value for value, _ in _written(grid, linked, path, ())]


def _written(grid: dict[str, list[Any]], linked: list[Linked], path: str, at: Loc) -> Iterator[tuple[Any, Loc]]:
    """Every value a grid and its linked groups (under `at` in the sweep) give `path`, with where it is written."""
    yield from ((v, (*at, "grid", path, i)) for i, v in enumerate(grid.get(path, [])))
    for g, group in enumerate(linked):
        if isinstance(group, dict):
            yield from ((v, (*at, "linked", g, path, i)) for i, v in enumerate(group.get(path, [])))
        else:
            yield from ((row[path], (*at, "linked", g, i, path)) for i, row in enumerate(group) if path in row)


def unregistered_names(sweep: SweepSource) -> list[Problem]:
    """Each value that names a component (`config.NAMED`: a mechanism, backbone, dataset or task) no registered
    one answers to, where it is written: a sweep's first problem, as its knobs cannot be checked without it."""
    return [
        sweep.problem(at, unregistered(registry, value))
        for path, registry in NAMED.items()
        for value, at in sweep.written(path)
        if _unknown(value, registry)
    ]


def _unknown(value: Any, registry: Collection[str]) -> bool:
    return isinstance(value, str) and value not in registry


def metric_problems(sweep: SweepSource) -> list[Problem]:
    """A `metric:` that the sweep's task records no final result of (`Task.results`): found by `plan`, not by
    the report that compares trials on it after they ran."""
    metric = sweep.spec.metric
    tasks = [TASKS.get(t) for t in sweep.taken("task", "classify") if isinstance(t, str) and t in TASKS]
    if metric is None or not tasks or not all(t.results() for t in tasks):
        return []
    results = [r for r in tasks[0].results() if all(r in t.results() for t in tasks)]
    if metric in results:
        return []
    leaf = metric.rpartition(".")[2]
    close = [r for r in results if r.rpartition(".")[2] == leaf] or difflib.get_close_matches(metric, results, 1, 0.8)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    names = " and ".join(dict.fromkeys(t.name for t in tasks))
    expected = f"expected one of {', '.join(results) or 'none'} (the test scores reports compare trials on)"
    return [sweep.problem(("metric",), f"{names} records no final result {metric!r}: {expected}{hint}")]


def _listed(value: Any) -> list[Any]:
    """A rule's value as the values it matches (a list matches any of its items)."""
    return value if isinstance(value, list) else [value]


def json_schema() -> dict[str, Any]:
    """JSON schema of experiments.yaml, with base/defaults typed as (partial) TrialConfig for editors
    (every registered mechanism's knobs included: load a file's plugins first to see theirs)."""
    schema = SpecFile.model_json_schema()
    trial = TrialConfig.model_json_schema(ref_template="#/$defs/{model}")
    defs = schema.setdefault("$defs", {})
    defs.update(trial.pop("$defs", {}))
    defs["TrialConfig"] = trial
    for props in (schema["properties"], defs["SweepSpec"]["properties"]):
        key = "defaults" if "defaults" in props else "base"
        props[key] = {"$ref": "#/$defs/TrialConfig", "description": props[key].get("description", "")}
    schema["title"] = "ablate experiments file"
    return schema
