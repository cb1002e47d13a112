"""Which code produced a result: a digest per component a trial uses, so a result computed by older code is
never taken for a current one.

A trial's key says *what* it trains (its config); its fingerprint says *with which code*. For each component
the trial uses (its mechanism, backbone, dataset and task, plugins included, and the training loop), the
digest covers the module that registers it and the module that defines it, and the modules they import from
`ablate.nn` and `ablate.data` (or from their own package, for a plugin package; never a package's `report`
module, which formats results: `REPORT`), each as its syntax tree without its bare string statements
(`ALGORITHM`): comments, docstrings (a knob's attribute docstring too), formatting and where a module lives
(its name, the paths its imports of ablate's own modules name) never count, a changed expression always
does. The versions of torch, timm and of the distributions that ship plugin components count too. Module
digests are cached by file and modification time, and fingerprints by component names, so a plan of
thousands of trials costs one dictionary lookup per trial after the first of each kind.

Fingerprints are also kept on disk (`CACHE` in `ablate.provenance.cache.folder()`), each with what it was computed
from: the file, modification time and size of every module it covers, of every name it looked for and found
no module of, and of the modules that decide which module registers a name (`DECIDING`); the plugin modules
that registered its components; the package versions. A process whose files are as they were takes the kept
fingerprint without importing a component or parsing a file (`ablate status` of a large store); any
difference, and the fingerprint is computed again and kept anew.

Long because computing, keeping and comparing a fingerprint share one set of helpers (a component's modules,
their digests, what a kept fingerprint was computed from): split, each part would reach into the other's internals.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import inspect
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.provenance import cache

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ablate.config import TrialConfig
    from ablate.registry import Registry

LOOP = ("ablate.training.loop", "ablate.training.parallel", "ablate.nn.factory", "ablate.nn.build", "ablate.nn.widths")
"""The training loop: the same for every trial (the model factory builds every network)."""
FOLLOWED = ("ablate.nn", "ablate.data")
"""Imports of a component's module that are followed (other ablate modules configure; they do not compute)."""
REPORT = "report"
"""A component package's module of this name holds its report section (`ablate.components.ReportSection`): it
formats results and computes none, so it is never followed (an edit to a paper's tables leaves results current)."""
KINDS = ("mechanism", "backbone", "dataset", "task")
"""A trial's components, named `<kind> <name>` in its fingerprint (beside `loop`)."""
VERSIONED = ("torch", "timm")
FILE_PLUGIN = re.compile(r"(ablate_plugin_\w+)_[0-9a-f]{12}")
"""The module of a plugin given as a file (`ablate.plugins.FilePlugin.module`): its stem, then a hash of its
path and text."""
REGISTRY = "ablate.registry"
"""The module that holds the registries (`_registries`)."""
_CHECKOUT = hashlib.sha256(json.dumps([sys.version, sys.prefix, __file__]).encode()).hexdigest()[:16]
CACHE = f"fingerprints-{_CHECKOUT}.json"
"""The cache file (`ablate.provenance.cache`) of fingerprints by component names, each with what it was computed
from: one per interpreter, environment and checkout, the only ones whose entries this process can take (a launch
read every checkout's: 7 MB, 0.22 s, on a machine with 55 clones and worktrees)."""
DECIDING = (__name__, REGISTRY, "ablate.plugins")
"""Modules whose text decides a fingerprint beyond the components' own: this algorithm (`LOOP`, `FOLLOWED`),
the built-in modules that register names (`BUILTINS`) and how a registration names its module, and how
plugins are loaded and their modules named."""
ALGORITHM = 4
"""How a module's syntax tree is digested, recorded with each fingerprint (a record without one is 1): 1
dropped a module's, class's or function's leading docstring; 2 drops every bare string statement, attribute
docstrings included (a string used as a value, a `Field(description=...)` or a default, still counts); 3 also
digests a module by what it is, not where it is (`MOVABLE`): a component's digest is over its modules' digests
without their names, and an import of ablate's own modules (or of a plugin package's, or a relative one) counts
by the names it binds, not the path it binds them from. So a pure move (same code, new path, imports updated)
keeps every digest; a changed expression still changes one, and so does a component that imports another
module (that module joins its digests); 4 also leaves out the order of those imports within a block (they count
as one sorted set of bound names, where the first of them stood: `UNORDERED`), since a move re-sorts them (an
import sorter orders them by the paths a move changes). A record is compared with today's code digested as it was
(`current`): a new algorithm never makes a result stale by itself."""
MOVABLE = 3
"""The first `ALGORITHM` by which a module's digest does not depend on its path or its imports' paths."""
UNORDERED = 4
"""The first `ALGORITHM` by which the order of a block's imports of ablate's own modules does not count."""
DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
"""What has a docstring: its body's leading string (all that algorithm 1 dropped)."""
SETTLED_NS = 2_000_000_000
"""A fingerprint is kept on disk only when every file it covers was last modified this long before it was
computed: a file written within one tick of a coarse file-system clock (2 s on FAT) can change again with the
same modification time and size, and a file edited while it was being read would be kept with the wrong
digest."""


@dataclass(frozen=True)
class Fingerprint:
    """The code of one trial: component name (`mechanism csan`, `loop`, ...) -> digest, and package versions."""

    components: dict[str, str]
    versions: dict[str, str | None] = field(default_factory=dict)
    algorithm: int = ALGORITHM
    """How its module digests were taken (`ALGORITHM`); not part of `digest`: both take unchanged code alike."""
    missing: tuple[str, ...] = field(default=(), compare=False)
    """Files of modules it covers that were imported from a file that is gone now (a plugin file moved or
    deleted): what its digests say of them is not today's code. Never recorded or kept."""

    @functools.cached_property
    def digest(self) -> str:
        """Hashed once per fingerprint (one is shared by every trial of its components)."""
        return _hash(json.dumps([self.components, self.versions], sort_keys=True))

    def changed(self, old: Fingerprint) -> list[str]:
        """What differs from `old`: component names and `torch 2.4 -> 2.5` for versions."""
        names = sorted(set(self.components) | set(old.components))
        out = [n for n in names if self.components.get(n) != old.components.get(n)]
        for pkg in sorted(set(self.versions) | set(old.versions)):
            if self.versions.get(pkg) != old.versions.get(pkg):
                out.append(f"{pkg} {old.versions.get(pkg)} -> {self.versions.get(pkg)}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"components": self.components, "versions": self.versions, "algorithm": self.algorithm,
                "digest": self.digest}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fingerprint:
        return cls(dict(data.get("components", {})), dict(data.get("versions", {})), int(data.get("algorithm", 1)))


class CodeMissing(ValueError):
    """Today's code of a recorded fingerprint cannot be read here: a file it covers is gone."""

    def __init__(self, files: tuple[str, ...]) -> None:
        one = len(files) == 1
        super().__init__(f"{'file' if one else 'files'} {', '.join(files)} {'is' if one else 'are'} missing")


def fingerprint(cfg: TrialConfig) -> Fingerprint:
    """The fingerprint of the code that trains `cfg` (its components must be registered: plugins loaded)."""
    return fingerprints([cfg])[0]


def fingerprints(configs: list[TrialConfig]) -> list[Fingerprint]:
    """Fingerprints of many trials: the files are looked at once per distinct set of components."""
    seen: dict[tuple[str, str, str, str], Fingerprint] = {}
    out = []
    for cfg in configs:
        names = (cfg.attention.kind, cfg.model.backbone, cfg.data.name, cfg.task)
        if names not in seen:
            seen[names] = _now(names)
        out.append(seen[names])
    return out


def current(recorded: Fingerprint) -> Fingerprint:
    """The fingerprint the code has now for the components a recorded one names (`mechanism csan`, `backbone
    vit`, ...), digested by the record's `algorithm`: what a trial recorded with it gets now, found without
    reading the trial's config. Kept on disk (see the module docstring), it is found with no component loaded;
    computed, it needs them registered (their plugins loaded). CodeMissing where a file it covers is gone (the
    code cannot be compared here, which is not a change); ValueError where one of them is not registered (a
    RegistryError where the registries are imported) or the record lacks one."""
    now = _now(_names(recorded), recorded.algorithm)
    if now.missing:
        raise CodeMissing(now.missing)
    return now


def comparable(recorded: Fingerprint, now: Fingerprint) -> Fingerprint:
    """What a trial's recorded fingerprint is compared with, given the trial's fingerprint `now`: `now`, or for
    a record digested by another `ALGORITHM`, today's code digested by that one."""
    return now if recorded.algorithm == now.algorithm else _now(_names(now), recorded.algorithm)


def _names(fp: Fingerprint) -> tuple[str, str, str, str]:
    """The components a fingerprint names: mechanism, backbone, dataset and task (ValueError if one is not)."""
    names = []
    for kind in KINDS:
        found = [n.removeprefix(f"{kind} ") for n in fp.components if n.startswith(f"{kind} ")]
        if len(found) != 1:
            raise ValueError(f"a recorded fingerprint names {len(found)} {kind} components, not 1")
        names.append(found[0])
    kind, backbone, dataset, task = names
    return kind, backbone, dataset, task


def _now(names: tuple[str, str, str, str], algorithm: int = ALGORITHM) -> Fingerprint:
    """The fingerprint of these components (mechanism, backbone, dataset, task) as their files are now: the one
    kept on disk when nothing it was computed from has changed, else computed and kept."""
    key = json.dumps([*names, algorithm])  # the file is this interpreter's, environment's and checkout's (`CACHE`)
    kept = _kept(cache.entries(CACHE).get(key))
    if kept is not None:
        return kept
    started = time.time_ns()
    components = _components(names)
    stamps = tuple(_stamp(m) for m in sorted(set().union(*components.values())))
    fp = _of(names, stamps, algorithm)
    _keep(key, fp, names, components, started)
    return fp


def _kept(entry: Any) -> Fingerprint | None:
    """A kept fingerprint (`_keep`) when everything it was computed from is as it was: each file (the module of
    each name is where it was, with the same modification time and size; a name that had no module still has
    none), each plugin module that registered a component loaded in this process (so a name registers here
    as it did then, not by another project's plugin of that name), each package version. None otherwise, and
    for an entry this code cannot read."""
    try:
        fp = Fingerprint.from_json(entry["fingerprint"])
        same = (
            all(module in sys.modules for module in entry["loaded"])
            and all(list(_stamp(module)) == stamp for module, *stamp in entry["files"])
            and all(_version(pkg) == version for pkg, version in fp.versions.items())
        )
    except (KeyError, TypeError, ValueError, AttributeError):  # a damaged or older entry: computed again
        return None
    return fp if same else None


def _keep(key: str, fp: Fingerprint, names: tuple[str, str, str, str], components: dict[str, set[str]],
          started: int) -> None:  # fmt: skip
    """Keep `fp` on disk with what `_kept` checks: the stamps of the modules it covers, of the names they
    import that a digest would follow and that have no module (one that appears is followed), and of
    `DECIDING`; the modules outside ablate that registered or define its components (plugins). Not when a file
    was modified since `SETTLED_NS` before `started`, nor when one is `missing` (its gone file's stamp would
    match again, and what is kept does not say it is missing)."""
    covered = set().union(*components.values())
    looked_for = {name for module in covered for name in _followed(module)}
    files = [(module, *_stamp(module)) for module in sorted(covered | looked_for | set(DECIDING))]
    if fp.missing or any(mtime > started - SETTLED_NS for _, _, mtime, _ in files):
        return
    roots = set().union(*_named_roots(names).values())
    loaded = sorted(module for module in roots if module.split(".")[0] != "ablate")
    cache.keep(CACHE, key, {"fingerprint": fp.to_json(), "files": files, "loaded": loaded})


def modules_of(cfg: TrialConfig) -> dict[str, list[str]]:
    """Component name -> the modules its digest covers (what `ablate show` prints)."""
    return {name: sorted(mods) for name, mods in _components((cfg.attention.kind, cfg.model.backbone,
                                                             cfg.data.name, cfg.task)).items()}  # fmt: skip


def _components(names: tuple[str, str, str, str]) -> dict[str, set[str]]:
    out = {name: _closure(mods) for name, mods in _named_roots(names).items()}
    out["loop"] = set(LOOP)
    return out


def _named_roots(names: tuple[str, str, str, str]) -> dict[str, set[str]]:
    """Component name (`mechanism csan`) -> its `_roots`."""
    return {f"{kind} {name}": _roots(registry, name) for kind, registry, name in zip(KINDS, _registries(), names)}


def _registries() -> tuple[Registry[Any], ...]:
    """The registries of `KINDS`, where this process imported their module. A component registers by importing
    it, so a process that has not imported it holds no component: it is not imported here only to find
    nothing, and a fingerprint from the disk cache (`_kept`) costs no import of it and of the pydantic models
    it declares (tens of milliseconds of an `ablate status`)."""
    registry = sys.modules.get(REGISTRY)
    if registry is None:
        raise ValueError("no component is registered in this process: no built-in or plugin was loaded")
    return registry.MECHANISMS, registry.BACKBONES, registry.DATASETS, registry.TASKS


def _stamp(module: str) -> tuple[str, int, int]:
    """What invalidates a module's digest: its file, modification time and size."""
    path = _file(module)
    if path is None:
        return module, 0, 0
    stat = path.stat()
    return str(path), stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=1024)
def _of(names: tuple[str, str, str, str], stamps: tuple[tuple[str, int, int], ...], algorithm: int) -> Fingerprint:
    """Fingerprints by component names, recomputed when any of their modules' files changed (`stamps`)."""
    modules = _components(names)
    components = {name: _hash(json.dumps(sorted(_module_digest(m, *_stamp(m)[1:], algorithm) if algorithm >= MOVABLE
                                                else [_label(m), _module_digest(m, *_stamp(m)[1:], algorithm)]
                                                for m in mods)))
                  for name, mods in modules.items()}  # fmt: skip
    versions = {pkg: _version(pkg) for pkg in VERSIONED}
    for mods in modules.values():
        for module in mods:
            if _installable(module) and (dist := _distribution(module.split(".")[0])):
                versions[dist] = _version(dist)
    missing = {gone for mods in modules.values() for module in mods if (gone := _gone(module))}
    return Fingerprint(components, versions, algorithm, tuple(sorted(missing)))


def _gone(module: str) -> str | None:
    """The source file `module` was imported from, where no file is there now: a plugin file moved or deleted
    since (its module runs from the text the store kept), or a module loaded from no plain file. None for a
    module with a source file, or imported from none (a notebook's `__main__`)."""
    file = getattr(sys.modules.get(module), "__file__", None)
    return file if isinstance(file, str) and file.endswith(".py") and not Path(file).is_file() else None


def _label(module: str) -> str:
    """A module's name in a digest: its name, but for a file plugin (`ablate.plugins.FilePlugin.module`, its
    stem and a hash of its path and text) its stem alone: an edited text is imported as a new module, and only
    its syntax tree may count, as for any other module."""
    return match[1] if (match := FILE_PLUGIN.fullmatch(module)) else module


def _roots(registry: Registry[Any], name: str) -> set[str]:
    """The module that registered the component and the one that defines it (a class, or an instance's type;
    for an instance, also the module of any function it holds, e.g. a dataset's loader)."""
    entry = registry.entry(name)
    obj = entry.component
    roots = {entry.source.split(":")[0].split(" ")[0]}
    target = obj if inspect.isclass(obj) or inspect.isfunction(obj) else type(obj)
    roots.add(target.__module__)
    for value in getattr(obj, "__dict__", {}).values():
        if inspect.isfunction(value):
            roots.add(value.__module__)
    return roots


def _closure(roots: set[str]) -> set[str]:
    """`roots` and the modules they import, followed within `FOLLOWED` and within a plugin's own package."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [name for name in _followed(module) if _file(name) is not None]
    return seen


def _followed(module: str) -> list[str]:
    """The names `module` imports that its digest follows where they are modules: within `FOLLOWED`, or within
    a plugin's own package, never a `REPORT` module."""
    top = module.split(".")[0]
    return [name for name in _imports(module, *_stamp(module)[1:])
            if (name.startswith(FOLLOWED) or (top != "ablate" and name.split(".")[0] == top))
            and name.rpartition(".")[2] != REPORT]  # fmt: skip


@functools.lru_cache(maxsize=4096)
def _imports(module: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    """Names `module` imports, absolute (`from pkg import x` gives `pkg` and `pkg.x`: x may be a module),
    cached by the file's modification time and size."""
    tree = _tree(module)
    if tree is None:
        return ()
    package = module if _is_package(module) else module.rpartition(".")[0]
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out += [base, *(f"{base}.{a.name}" for a in node.names)]
    return tuple(dict.fromkeys(name for name in out if name))


def _is_package(module: str) -> bool:
    path = _file(module)
    return path is not None and path.name == "__init__.py"


def _file(module: str) -> Path | None:
    """The source file of `module`, found without importing it: a package's lazily imported torch code is
    followed without running it (planning stays torch-free)."""
    file = getattr(sys.modules.get(module), "__file__", None) or _locate(module)
    path = Path(file) if file else None
    return path if path is not None and path.suffix == ".py" and path.is_file() else None


def _locate(module: str) -> str | None:
    """Where `module` would be imported from, walking its package folders (finding a submodule's spec the
    usual way imports its parents)."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not rest:
        return spec.origin if spec else None
    folders = [Path(f) for f in spec.submodule_search_locations or ()]
    for i, part in enumerate(rest):
        packages = [f / part for f in folders if (f / part / "__init__.py").is_file()]
        if i == len(rest) - 1:
            plain = [f / f"{part}.py" for f in folders if (f / f"{part}.py").is_file()]
            return str(packages[0] / "__init__.py") if packages else str(plain[0]) if plain else None
        folders = packages[:1]
    return None


def _tree(module: str) -> ast.Module | None:
    path = _file(module)
    return ast.parse(path.read_text(encoding="utf-8")) if path else None


@functools.lru_cache(maxsize=4096)
def _module_digest(module: str, mtime_ns: int, size: int, algorithm: int = ALGORITHM) -> str:
    """The module's syntax tree without docstrings, as `algorithm` (`ALGORITHM`) drops them (cached by
    modification time and size). A statement list left empty becomes `pass`, as the docstring-only body of a
    function did under algorithm 1: code without other bare strings digests the same by both."""
    tree = _tree(module)
    if tree is None:
        return "unreadable"
    if algorithm >= MOVABLE:
        _unplaced(tree, module.split(".")[0])
    if algorithm >= UNORDERED:
        _unordered(tree)
    for node in ast.walk(tree):
        for name, statements in ast.iter_fields(node):
            if not isinstance(statements, list) or not any(map(_bare_string, statements)):
                continue
            kept = [s for s in statements if not _bare_string(s)]
            if algorithm == 1:  # a module's, class's or function's leading docstring alone
                if name != "body" or not isinstance(node, DOCUMENTED) or not _bare_string(statements[0]):
                    continue
                kept = statements[1:]
            setattr(node, name, kept or [ast.Pass()])
    return _hash(ast.dump(tree, annotate_fields=False, include_attributes=False))


def _unplaced(tree: ast.Module, top: str) -> None:
    """Imports of ablate's own modules, of the module's own package (`top`) or relative ones, stripped of the path
    they import from (`from ablate.training.loop import run` as `from . import run`; `import ablate.nn.mixer as mx`
    as `import mx`): what they bind stays, where it lives does not count (`MOVABLE`)."""
    ours = {"ablate", top}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in ours):
            node.module, node.level = None, 1
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name.split(".")[0] in ours:
                    alias.name = alias.asname


def _unordered(tree: ast.Module) -> None:
    """Each block's imports that `_unplaced` stripped (`from . import ...`) merged into one, its names sorted, where
    the first of them stood (`UNORDERED`)."""
    for node in ast.walk(tree):
        for name, statements in ast.iter_fields(node):
            if not isinstance(statements, list):
                continue
            ours = [s for s in statements if isinstance(s, ast.ImportFrom) and s.level == 1 and s.module is None]
            if len(ours) < 2:
                continue
            bound = sorted({(a.name, a.asname or "") for s in ours for a in s.names})
            merged = ast.ImportFrom(None, [ast.alias(n, a or None) for n, a in bound], 1)
            first = statements.index(ours[0])
            kept = [s for s in statements if not any(s is o for o in ours)]
            setattr(node, name, [*kept[:first], merged, *kept[first:]])


def _bare_string(statement: ast.AST) -> bool:
    """A string constant standing as a statement: a docstring, an attribute's docstring, or any other string
    that does nothing (an f-string evaluates its fields: it is not one)."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)  # fmt: skip


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@functools.cache
def git_state(root: Path) -> dict[str, Any]:
    """Commit and dirty flag (tracked files changed) of the git checkout holding `root`; None for both outside
    one (or without git)."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if sha else None
    return {"sha": sha, "dirty": bool(status) if status is not None else None}


def git_words(git: Mapping[str, Any] | None) -> str:
    """The git state `record` kept, in words: a launch outside a git checkout (the tutorial's own workflow) keeps
    no commit, which a reader should see said, not as `{'sha': None, 'dirty': None}`."""
    if not git:
        return "git state not recorded"
    if git.get("sha") is None:
        return "no git commit (the experiments file was not in a git checkout)"
    changes = {True: "with uncommitted changes", False: "clean", None: "changes unknown"}[git.get("dirty")]
    return f"git commit {git['sha']} ({changes})"


def record(fp: Fingerprint, spec_file: str | Path | None) -> dict[str, Any]:
    """What the store keeps of a trial's code: the fingerprint, and the git state of its experiments file."""
    git = _git_of(str(Path(spec_file).absolute())) if spec_file else {"sha": None, "dirty": None}
    return {**fp.to_json(), "git": git}


@functools.lru_cache(maxsize=64)
def _git_of(spec_file: str) -> dict[str, Any]:
    """`git_state` of the folder of an experiments file, its path resolved once per file (a launch records the
    code of each of its trials)."""
    return git_state(Path(spec_file).resolve().parent)


@functools.cache
def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _installable(module: str) -> bool:
    """Whether `module` can belong to a distribution other than ablate's: a file plugin's module cannot (and
    looking for one reads every installed distribution's file list, a second)."""
    return not module.startswith("ablate.") and not FILE_PLUGIN.fullmatch(module)


@functools.cache
def _distribution(top: str) -> str | None:
    dists = metadata.packages_distributions().get(top)
    return dists[0] if dists else None
