"""MkDocs hook: the generated reference pages, written at build time from the code itself.

A page asks for a reference with a marker line, `<!-- generated: NAME -->` (NAME one of `GENERATORS`): the
experiments file's keys from its JSON schema (`ablate.spec.schema.json_schema`, the pydantic models' fields and their
docstrings, as `ablate schema` prints it) and every command and flag from the typer app (`ablate.cli.app`). Nothing
in them is written by hand, so a key or flag added, renamed or removed changes the site on the next build; an
unknown marker fails the build.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer.main

from ablate.cli import app
from ablate.spec.schema import json_schema

MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)
CODE_SPAN = re.compile(r"(`[^`]*`)")
Schema = dict[str, Any]


# ------------------------------------------------------------------------------------------- experiments.yaml
def type_of(node: Schema) -> str:
    """A JSON-schema node as a short type: `int >= 1`, `list[int]`, `"a" | "b"`, `AdaptiveSeeds`, ..."""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[1]
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    for union in ("anyOf", "oneOf"):
        if union in node:
            return " | ".join(dict.fromkeys(type_of(n) for n in node[union]))
    kind = node.get("type", "any")
    if kind == "array":
        items = node.get("prefixItems") or [node.get("items", {})]
        return f"list[{', '.join(type_of(i) for i in items)}]"
    if kind == "object":
        values = node.get("additionalProperties")
        return f"dict[str, {type_of(values)}]" if isinstance(values, dict) else "dict"
    limits = (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
    bounds = [f"{op} {node[k]:g}" for k, op in limits if k in node and abs(node[k]) < 1e15]  # not 2^63
    names = {"integer": "int", "number": "float", "boolean": "bool", "string": "str", "null": "null"}
    return " ".join([names.get(kind, kind), *bounds])


def cell(text: str) -> str:
    """Text for one table cell: one line, pipes escaped outside code spans (inside one, Python-Markdown's tables
    already read a pipe as text, so an escape would show as a literal backslash)."""
    parts = CODE_SPAN.split(" ".join(text.split()))
    return "".join(part if CODE_SPAN.fullmatch(part) else part.replace("|", "\\|") for part in parts)


def unbroken(text: str) -> str:
    """A cell's text on one line: a table's first column is narrow, and a code span breaks anywhere to fit it
    (`descriptio` / `n`)."""
    return f'<span style="white-space: nowrap">{cell(text)}</span>'


def key_note(node: Schema) -> str:
    """Whether a field is part of the trial key (see Concepts: trial identity)."""
    if node.get("x-nokey"):
        return "no"
    return "when not default" if node.get("x-key-unless-default") else "yes"


def fields_table(model: Schema, prefix: str, keyed: bool, defs: Schema) -> str:
    """One row per field of `model`: its dotted path, type, default and docstring (a model's own, `defs`, for a
    field that has none)."""
    head = "| key | type | default |" + (" in trial key |" if keyed else "") + " description |"
    rows = [head, "|---" * (head.count("|") - 1) + "|"]
    for name, node in model.get("properties", {}).items():
        default = f"`{json.dumps(node['default'])}`" if "default" in node else "required"
        if name in model.get("required", []):
            default = "required"
        about = node.get("description") or defs.get(type_of(node), {}).get("description", "")
        key = f" {key_note(node)} |" if keyed else ""
        rows.append(f"| {unbroken(f'`{prefix}{name}`')} | {cell(f'`{type_of(node)}`')} | {cell(default)} |{key} "
                    f"{cell(about)} |")  # fmt: skip
    return "\n".join(rows)


def sections(schema: Schema) -> Iterator[tuple[str, str, Schema, bool]]:
    """(title, dotted prefix, model, keyed) for the file and the sweep, then the trial config and every model under
    it (first path found, breadth first), each mechanism of `attention` under its `kind`."""
    defs, seen = schema["$defs"], {"TrialConfig"}
    queue: list[tuple[str, str, Schema, bool]] = [("The file", "", schema, False)]
    trial = ("A trial config (`base:`, `defaults:`)", "", defs["TrialConfig"], True)
    while queue or trial:
        if queue:
            title, prefix, model, keyed = queue.pop(0)
        else:
            (title, prefix, model, keyed), trial = trial, None
        yield title, prefix, model, keyed
        for name, node in model.get("properties", {}).items():
            mapping = node.get("discriminator", {}).get("mapping", {})
            found = [(f": {kind}", ref) for kind, ref in mapping.items()] or list(references(node, ""))
            for where, ref in found:
                target = ref.rsplit("/", 1)[1]
                if target not in seen:
                    seen.add(target)
                    inner = "" if target == "SweepSpec" else f"{prefix}{name}{'' if mapping else where}."
                    queue.append((f"`{prefix}{name}{where}` ({target})", inner, defs[target], keyed))


def references(node: Schema, path: str) -> Iterator[tuple[str, str]]:
    """(path suffix, $ref) of every model a field's node holds: `[]` for a list's items, `.KEY` for a mapping's
    values."""
    if "$ref" in node:
        yield path, node["$ref"]
    for union in node.get("anyOf", []) + node.get("oneOf", []):
        yield from references(union, path)
    if isinstance(node.get("items"), dict):
        yield from references(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from references(node["additionalProperties"], f"{path}.KEY")


def experiments_reference() -> str:
    """Every key of experiments.yaml, built-in mechanisms' knobs included, one table per model."""
    schema, out = json_schema(), []
    for title, prefix, model, keyed in sections(schema):
        table = fields_table(model, prefix, keyed, schema["$defs"])
        out += [f"## {title}", "", cell(model.get("description", "")), "", table, ""]
    return "\n".join(out)


# -------------------------------------------------------------------------------------------------------- CLI
def cli_reference() -> str:
    """Every command of the `ablate` app with its help, arguments and options (their help, defaults, types)."""
    group = typer.main.get_command(app)
    root = group.context_class(group, info_name="ablate")
    out = [cell(group.help or ""), "", options_table(group, root)]
    for name, command in group.commands.items():
        ctx = command.context_class(command, info_name=name, parent=root)
        out += ["", f"## `ablate {name}`", "", (command.help or "").strip(), "", options_table(command, ctx)]
    return "\n".join(out)


def options_table(command: Any, ctx: Any) -> str:
    """The arguments and options of one command, as `COMMAND --help` lists them."""
    rows = ["| argument or option | description |", "|---|---|"]
    for param in command.params:
        if param.param_type_name == "argument":
            default = "" if param.required or param.default is None else f" [default: {param.default}]"
            rows.append(f"| {unbroken(f'`{param.name.upper()}`')} | {cell((param.help or '') + default)} |")
        elif (record := param.get_help_record(ctx)) is not None:
            rows.append(f"| {unbroken(f'`{record[0]}`')} | {cell(record[1])} |")
    rows.append("| `--help` | Show the command's help and exit. |")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------- gallery
def gallery(docs: Path) -> str:
    """Each report `make gallery` left in docs/gallery/<sweep>/: the run's date, commit and minutes (its run.json),
    its headline plot and a link to the whole report; or a line saying that no run is there yet."""
    folder = docs / "gallery"
    reports = sorted(p.parent for p in folder.glob("*/index.html"))
    if not reports:
        return "No gallery run yet: `make gallery` writes one."
    out = []
    for report in reports:
        sweep, run = report.name, json.loads((report / "run.json").read_text())
        ran = (f"Run on {run['date']} at commit `{run['commit']}`: {run['sweeps']} in one launch, "
               f"{run['seconds'] / 60:.1f} minutes (`make gallery`, on the 2-core machine the project is developed on)."
               + (f" {run['note']}" if "note" in run else ""))  # fmt: skip
        whole = f"[The whole report]({sweep}/index.html) ([Markdown]({sweep}/report.md))."
        out += ["", f"## {sweep}", "", ran, "", whole, ""]
        out += [f"![{sweep}: {png.stem}]({sweep}/{png.name})" for png in sorted(report.glob("variants*.png"))]
    return "\n".join(out[1:])


GENERATORS: dict[str, Callable[[Path], str]] = {
    "experiments": lambda _: experiments_reference(),
    "cli": lambda _: cli_reference(),
    "gallery": gallery,
}


def on_page_markdown(markdown: str, config: Any, **_: Any) -> str:
    """Each marker replaced by its generated reference."""

    def generated(match: re.Match[str]) -> str:
        if match.group(1) not in GENERATORS:
            raise KeyError(f"no generated reference {match.group(1)!r}; known: {sorted(GENERATORS)}")
        return GENERATORS[match.group(1)](Path(config["docs_dir"]))

    return MARKER.sub(generated, markdown)
