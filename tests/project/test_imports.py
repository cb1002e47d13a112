"""The package's modules import each other as a DAG, and only down the layers of tests/layers.py (`LAYERS`, which
docs/architecture.md shows): every import counts, a function-local one included (it runs as surely as a top-level
one, only later); imports under `if TYPE_CHECKING:` never run, so they make no cycle, but they obey the layers too
(a type the plugin contract names belongs below it), but for the few `CLIMBING` lists."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from layers import LAYER_OF, table, unit

PACKAGE = Path(__file__).resolve().parents[2] / "ablate"


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package at `root`."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    return {
        id(sub)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body
        for sub in ast.walk(stmt)
    }


def type_only_lines(name: str, file: Path, known: dict[str, Path]) -> dict[str, int]:
    """The package's modules that `name` imports under `if TYPE_CHECKING:`, each with the line of its first such
    import (absolute imports: the package's own never import relatively under it)."""
    tree = ast.parse(file.read_text())
    only = _type_checking_nodes(tree)
    found: dict[str, int] = {}
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        if id(node) not in only or not isinstance(node, ast.ImportFrom):
            continue
        target = node.module or ""
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            found.setdefault(target, node.lineno)
    return found


def imports(name: str, file: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports anywhere in its file."""
    return set(import_lines(name, file, known))


def import_lines(name: str, file: Path, known: dict[str, Path], typing: bool = False) -> dict[str, int]:
    """The package's modules that `name` imports anywhere in its file, each with the line of its first import:
    `from a.b import c` is a.b.c where c is a module, else a.b; relative imports resolve against the module's
    package. Imports under `if TYPE_CHECKING:` count only with `typing`."""
    tree = ast.parse(file.read_text())
    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    skip = set() if typing else _type_checking_nodes(tree)
    found: dict[str, int] = {}
    for node in sorted(ast.walk(tree), key=lambda n: getattr(n, "lineno", 0)):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.setdefault(target, node.lineno)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, file, known) for name, file in known.items()}


def packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph of units (`layers.unit`): a package of `ablate/` or a top-level module."""
    out: dict[str, set[str]] = {}
    for name, targets in graph.items():
        out.setdefault(unit(name), set()).update(unit(t) for t in targets if unit(t) != unit(name))
    return out


def upward(root: Path) -> list[str]:
    """Every import of a unit of the same or a higher layer, naming the file, the line and the rule broken."""
    known = modules(root)
    out = []
    for name, file in known.items():
        for target, line in import_lines(name, file, known).items():
            mine, theirs = unit(name), unit(target)
            if mine != theirs and LAYER_OF[theirs] >= LAYER_OF[mine]:
                out.append(f"{file.relative_to(root.parent)}:{line}: {name} imports {target}, but `{mine}` (layer "
                           f"{LAYER_OF[mine]}) may import only its own package and layers below it; "
                           f"`{theirs}` is layer {LAYER_OF[theirs]}")  # fmt: skip
    return out


CLI_IMPORTS = ("api", "errors", "cli")
"""The units `ablate.cli` may import: the commands parse, call the library's API and print what it returns, so a
command's work is the API's for a notebook too. The package's facade itself (`ablate`, for `__version__`) too."""


def past_the_api(root: Path) -> list[str]:
    """Every import by a module of `root`'s cli of another unit than `CLI_IMPORTS`, anywhere in
    its file (a function-local one or one for type checking included), by file and line."""
    known = modules(root)
    out = []
    for name, file in known.items():
        if unit(name) != "cli":
            continue
        for target, line in import_lines(name, file, known, typing=True).items():
            if unit(target) not in CLI_IMPORTS and target != root.name:
                out.append(f"{file.relative_to(root.parent)}:{line}: {name} imports {target}; the CLI imports only "
                           f"{', '.join(f'{root.name}.{u}' for u in CLI_IMPORTS)}")  # fmt: skip
    return out


def test_the_cli_imports_only_the_api() -> None:
    found = past_the_api(PACKAGE)
    assert not found, "\n".join(found)


def test_the_cli_rule_sees_local_and_typing_imports(tmp_path: Path) -> None:
    """A function-local import of the store and one under TYPE_CHECKING break the rule; the API, the errors and
    the facade do not."""
    pkg = tmp_path / "ablate"
    (pkg / "cli").mkdir(parents=True)
    for module in ("__init__", "api", "errors", "store", "cli/__init__"):
        (pkg / f"{module}.py").write_text("")
    (pkg / "cli" / "ok.py").write_text("from ablate.api import x\nfrom ablate.errors import E\nfrom ablate import v\n")
    (pkg / "cli" / "late.py").write_text("def f():\n    from ablate.store import Store\n")
    typed = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ablate.store\n"
    (pkg / "cli" / "typed.py").write_text(typed)
    assert [f.split(":")[0].removeprefix("ablate/cli/") for f in past_the_api(pkg)] == ["late.py", "typed.py"]


CLIMBING = {
    ("ablate.components", "ablate.config"): "ModelConfig, TrialConfig: config validates against the registry, "
    "which holds the contract's classes",
    ("ablate.components", "ablate.data"): "Splits: defined in data/__init__, which every dataset's fingerprint covers",
    ("ablate.components", "ablate.nn.mixer"): "TokenMixer: defined in nn/mixer.py, which every mechanism's "
    "fingerprint covers",
    ("ablate.components", "ablate.reporting.sections"): "SweepResults: the report's frames and statistics",
    ("ablate.nn.mechanisms.syn", "ablate.reporting.sections"): "SweepResults, as the contract's ReportSection",
    ("ablate.nn.mechanisms.syn.report", "ablate.reporting.sections"): "SweepResults, as the contract's ReportSection",
    ("ablate.registry", "ablate.training.tasks"): "Task: defined in training/tasks.py, which every task's "
    "fingerprint covers",
}
"""Type-only imports that still climb (module, the module it imports), each with what keeps its type up there:
this list only shrinks (issue 54 counted 11 such names; `Block` and `Image` moved down into the contract)."""


def climbing(root: Path) -> dict[tuple[str, str], str]:
    """Every type-only import of a unit of the same or a higher layer, as (module, imported) -> `file:line`."""
    known = modules(root)
    out = {}
    for name, file in known.items():
        for target, line in type_only_lines(name, file, known).items():
            if unit(name) != unit(target) and LAYER_OF[unit(target)] >= LAYER_OF[unit(name)]:
                out[(name, target)] = f"{file.relative_to(root.parent)}:{line}"
    return out


def test_type_only_imports_point_down_the_layers_but_for_those_listed() -> None:
    """A new type-only import up the layers fails, naming its file and line; one listed that no longer climbs
    leaves `CLIMBING`."""
    found = climbing(PACKAGE)
    new = [f"{where}: {name} imports {target} under TYPE_CHECKING" for (name, target), where in found.items()
           if (name, target) not in CLIMBING]  # fmt: skip
    assert not new, "\n".join(new)
    assert sorted(set(CLIMBING) - set(found)) == []


def test_the_type_only_walk_sees_a_climbing_import(tmp_path: Path) -> None:
    """`climbing` reads the layers of tests/layers.py: components (layer 1) naming a config type climbs."""
    pkg = tmp_path / "ablate"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("class TrialConfig: ...\n")
    only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ablate.{} import {}\n"
    (pkg / "errors.py").write_text(only.format("units", "x"))
    (pkg / "units.py").write_text("x = 1\n")
    (pkg / "components.py").write_text(only.format("config", "TrialConfig"))
    assert climbing(pkg) == {
        ("ablate.components", "ablate.config"): "ablate/components.py:3",
        ("ablate.errors", "ablate.units"): "ablate/errors.py:3",
    }


def test_the_package_import_graph_has_no_cycle() -> None:
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and "ablate.planning.plan" in graph["ablate.api"] | graph["ablate.cli"]
    assert cycles(graph) == []


def test_the_walk_sees_deferred_relative_and_aliased_imports(tmp_path: Path) -> None:
    """A cycle through a function-local relative import is found; one through a TYPE_CHECKING import is not."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("import pkg.b as bee\n")
    (pkg / "b.py").write_text("def f():\n    from .sub import layers\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "layers.py").write_text("from ..a import x\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import y\n")
    (pkg / "d.py").write_text("from pkg import c\n")
    graph = import_graph(pkg)
    assert graph["pkg.b"] == {"pkg.sub.layers"} and graph["pkg.c"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.layers"]]


MAX_LINES = 500
"""Lines a module may have unless its docstring says why, on a line of its own starting "Long because": a file
one person can read through, with one job."""


def too_long(root: Path) -> list[str]:
    """The modules of the package at `root` over `MAX_LINES` lines whose docstring gives no reason, with their
    length."""
    out = []
    for name, file in modules(root).items():
        text = file.read_text()
        lines = len(text.splitlines())
        doc = ast.get_docstring(ast.parse(text)) or ""
        if lines > MAX_LINES and not any(line.startswith("Long because") for line in doc.splitlines()):
            out.append(f"{name} ({lines} lines)")
    return out


def test_no_module_is_long_without_a_reason_in_its_docstring() -> None:
    assert too_long(PACKAGE) == []


def test_a_long_module_needs_its_reason_in_its_docstring(tmp_path: Path) -> None:
    """A reason in a comment or in a function's docstring is not one; a module of `MAX_LINES` lines needs none."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    body = "x = 1\n" * MAX_LINES
    (pkg / "__init__.py").write_text("")
    (pkg / "short.py").write_text(body)
    (pkg / "said.py").write_text('"""Tables.\n\nLong because one class."""\n' + body)
    (pkg / "comment.py").write_text("# Long because one class.\n" + body)
    (pkg / "inner.py").write_text('def f():\n    """Long because one class."""\n' + body)
    assert too_long(pkg) == ["pkg.comment (501 lines)", "pkg.inner (502 lines)"]


def test_importing_ablate_is_enough_for_timm_to_import() -> None:
    """`import ablate` installs the torchvision shim as an import hook, so timm (which imports torchvision)
    imports after it whatever imports it, and no module has to import the shim by hand (on this machine's CPU
    torch, torchvision's extension cannot load and `import timm` alone fails)."""
    code = "import ablate, timm.models, timm.data, torchvision.ops; print(timm.models.vit_tiny_patch16_224)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_unit_of_the_package_has_a_layer() -> None:
    assert sorted(set(packages(import_graph(PACKAGE))) - set(LAYER_OF)) == []


def test_imports_point_down_the_layers() -> None:
    """At module level, so at package level too: an import of the own layer or one above fails, by file and line."""
    found = upward(PACKAGE)
    assert not found, "\n".join(found)


def test_the_packages_import_each_other_as_a_dag() -> None:
    found = cycles(packages(import_graph(PACKAGE)))
    assert not found, "\n".join(" <-> ".join(c) for c in found)


def test_the_architecture_page_shows_the_layers() -> None:
    """docs/architecture.md's layer table is `LAYERS`, row for row (regenerate it from `layers.table()`)."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text().splitlines()
    start = page.index(table()[0])
    assert page[start : start + len(table())] == table() and page[start + len(table())] == ""
