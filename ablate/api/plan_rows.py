"""What `ablate plan` prints per trial: key, variant, axis values, costs and config (and, as JSON, each sweep's
design beside them), so the CLI only formats.

A large sweep has few distinct models and grid cells and many seeds: costs are counted once per architecture
and configs dumped once per cell (`Trial.resolved`), not once per trial (per trial, they were 7 of the 8.7 s
of `ablate plan` at 100,000 trials of 80 architectures).
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ablate.config import TrialConfig, identity
from ablate.nn.costs import Cost
from ablate.planning.keys import Recording, Trial
from ablate.planning.plan import Plan
from ablate.probe.check import cost
from ablate.provenance.fingerprint import fingerprints

COSTS = ("params", "gflops", "gflops_no_attn")
"""The cost columns, in `Costs`' order."""


@dataclass(frozen=True)
class Costs:
    """A model's size as papers count it: GFLOPs per example are multiply-accumulates (torch's counter counts 2
    per MAC), with the attention matmuls and without them (the convention of most papers' tables)."""

    params: int
    gflops: float
    gflops_no_attn: float


def variant_costs(plans: Iterable[Plan]) -> dict[str, Costs]:
    """Each variant's costs, counted once per architecture (`_architecture`) on its first trial: a variant's
    trials differ only in replicates (seed, split seed, CV fold), which no network reads, and its variants in
    recipe (learning rate, epochs, ...), which none reads either. A model that fails is a `check.ModelError`
    naming its mechanism, backbone or dataset. The code's fingerprints are taken once per set of components
    (`fingerprints`), not once per architecture."""
    cells: dict[str, TrialConfig] = {}  # an architecture's first cell: the trial's config, but for the seed
    of: dict[str, str] = {}
    for plan in plans:
        for t in plan.trials:
            if t.variant not in of:
                of[t.variant] = arch = _architecture(t.cell)
                cells.setdefault(arch, t.cell)
    codes = fingerprints(list(cells.values()))
    counted = {arch: _costs(cost(cell, fp.digest)) for (arch, cell), fp in zip(cells.items(), codes, strict=True)}
    return {variant: counted[arch] for variant, arch in of.items()}


def _costs(c: Cost) -> Costs:
    return Costs(c.params, round(c.gflops / 2, 6), round((c.gflops - c.attention_gflops) / 2, 6))


def _architecture(cfg: TrialConfig) -> str:
    """All that a model's cost reads: `nn.widths.model_key` (the model and attention identities and the data
    widths) and the code of the components (mechanism, backbone, dataset, task). The data section stands for
    the widths its dataset gives (finding them may read files); a key that tells more apart only counts more."""
    data = cfg.data.model_dump(mode="json")
    return json.dumps([identity(cfg.model), identity(cfg.attention), data, cfg.task], sort_keys=True)


def columns(plan: Plan, costs: Mapping[str, Costs] | None) -> list[str]:
    """The columns of `rows` (without the config)."""
    return ["sweep", "key", "variant", *plan.axes, "seed", *(COSTS if costs is not None else ())]


def rows(plan: Plan, costs: Mapping[str, Costs] | None, limit: int | None = None) -> list[dict[str, Any]]:
    """The first `limit` trials (default: all), one row each: sweep, key, variant, axis values, seed, and the
    variant's costs where `costs` is given."""
    out = []
    for t in plan.trials[:limit]:
        row: dict[str, Any] = {"sweep": plan.sweep, "key": t.key, "variant": t.variant, **t.axes}
        if costs is not None:
            c = costs[t.variant]
            row.update(params=c.params, gflops=c.gflops, gflops_no_attn=c.gflops_no_attn)
        out.append(row)
    return out


def document(plans: Iterable[Plan], costs: Mapping[str, Costs] | None) -> dict[str, Any]:
    """What `ablate plan --format json` prints: `sweeps`, each sweep's name and design (`DesignPlan.record`; null
    for the full grid), and `trials`, every trial's record (`records`)."""
    plans = list(plans)
    return {"sweeps": _sweeps(plans), "trials": records(plans, costs)}


def _sweeps(plans: list[Plan]) -> list[dict[str, Any]]:
    return [{"sweep": p.sweep, "design": p.design.record(p.seeds) if p.design else None} for p in plans]


def write_json(plans: list[Plan], costs: Mapping[str, Costs] | None, out: TextIO) -> None:
    """`document` as `json.dumps(..., indent=1)` writes it, and a newline: the same bytes, streamed, each trial's
    record filled into its cell's (`_JsonRecords`; dumping every trial's record was 9 of the 10 s of `ablate plan
    --format json` at 100,000 trials)."""
    if not any(p.trials for p in plans):
        out.write(json.dumps(document(plans, costs), indent=1) + "\n")
        return
    head = json.dumps({"sweeps": _sweeps(plans)}, indent=1)
    out.write(head.removesuffix("\n}") + ',\n "trials": [')
    made, sep = _JsonRecords(), "\n  "
    for plan in plans:
        for row, t in zip(rows(plan, costs), plan.trials, strict=True):
            out.write(sep + made.text(row, t))
            sep = ",\n  "
    out.write("\n ]\n}\n")


def records(plans: Iterable[Plan], costs: Mapping[str, Costs] | None) -> list[dict[str, Any]]:
    """Every trial's row with its resolved config as JSON data (`config`): `trials` of `document`."""
    return [
        {**row, "config": t.resolved()} for plan in plans for row, t in zip(rows(plan, costs), plan.trials, strict=True)
    ]


def write_csv(plans: list[Plan], costs: Mapping[str, Costs] | None, out: TextIO) -> None:
    """Every trial's row and config (JSON text) as CSV: the columns of every plan, in order of first use; a
    value that is a list or a mapping as JSON. The same bytes as the csv module's writer's, each trial's line
    filled into its cell's (`_CsvLines`)."""
    fields = list(dict.fromkeys(c for plan in plans for c in [*columns(plan, costs), "config"]))
    csv.writer(out, lineterminator="").writerow(fields)
    out.write("\n")
    lines = _CsvLines(fields)
    for plan in plans:
        for row, t in zip(rows(plan, costs), plan.trials, strict=True):
            out.write(lines.text(row, t))


def write_markdown(
    plans: list[Plan], costs: Mapping[str, Costs] | None, out: TextIO, text: Callable[[Any], str]
) -> None:
    """Every trial's row (no config) as a Markdown table: the columns of every row, in order of first use, a row
    without one given None; each cell's text by `text` (the CLI's, `ablate.cli.tables.markdown_cell`). The bytes of
    `ablate.cli.tables.markdown` of the rows, each trial's line filled into its cell's (`_MarkdownLines`: a table
    of every row's every cell was most of `ablate plan --format markdown` at 100,000 trials)."""
    planned = [(rows(plan, costs), plan.trials) for plan in plans]
    fields: dict[str, None] = {}
    for made, _ in planned:
        for row in made:
            fields.update(dict.fromkeys(row))
    out.write("| " + " | ".join(fields) + " |\n|" + "---|" * len(fields) + "\n")
    lines = _MarkdownLines(list(fields), text)
    for made, trials in planned:
        for row, t in zip(made, trials, strict=True):
            out.write(lines.text(row, t))


def _cells(row: Mapping[str, Any], fields: list[str]) -> list[Any]:
    return [json.dumps(v) if isinstance(v := row.get(f, ""), (dict, list)) else v for f in fields]


KEY, SEED = "\x01key\x01", "\x01seed\x01"
"""Marks where a trial's key and seed go in its cell's text (`_PerCell`)."""


class _PerCell:
    """Trials' texts (CSV lines, JSON records) made once per grid cell: a cell's trials differ only in key and
    seed, so its text is made with a mark where each goes (`_marked`), split there (`_split`), and each trial's
    is the parts with its own key and seed (`_filled`). A trial of no cell, or whose cell's text holds a mark's
    text itself, is made whole (`_whole`)."""

    def __init__(self) -> None:
        self._made: dict[tuple[int, str], list[str] | None] = {}  # by the id of a cell's Recording, which plans keep

    def text(self, row: dict[str, Any], t: Trial) -> str:
        if t.recording is None or t.seed is None or not t.key.isalnum():  # a key's text: no quote, no escape
            return self._whole(row, t)
        at = (id(t.recording), t.variant)
        if at not in self._made:
            self._made[at] = self._marked(row, t.recording)
        parts = self._made[at]
        return self._whole(row, t) if parts is None else _filled(parts, t.key, t.seed)

    def _marked(self, row: dict[str, Any], recording: Recording) -> list[str] | None:
        raise NotImplementedError

    def _whole(self, row: dict[str, Any], t: Trial) -> str:
        raise NotImplementedError


def _split(text: str, key: str, seed: str, seeds: int = 2) -> list[str] | None:
    """A cell's text made with `key` where a trial's key goes (once) and `seed` where its seed does (`seeds` times:
    in its row and its config), split there: text, "key" or "seed", text, ...; None where they are not there just
    so (a value of the cell that holds a mark's text)."""
    if text.count(key) != 1 or text.count(seed) != seeds:
        return None
    parts = re.split(f"({re.escape(key)}|{re.escape(seed)})", text)
    parts[1::2] = ["key" if mark == key else "seed" for mark in parts[1::2]]
    return parts


def _filled(parts: list[str], key: str, seed: int) -> str:
    """A trial's text: its cell's `_split` parts with its `key` and `seed` (decimal) where they go."""
    values = {"key": key, "seed": f"{seed:d}"}
    return "".join([values[p] if i % 2 else p for i, p in enumerate(parts)])


class _JsonRecords(_PerCell):
    """Trials' records (`records`) as JSON text at their depth in `document` (indent 1, two levels in): the key
    goes inside its mark's quotes, the seed (a number) in place of its mark's."""

    def _marked(self, row: dict[str, Any], recording: Recording) -> list[str] | None:
        marked = {**row, "key": KEY, "seed": SEED, "config": {**recording.resolved, "seed": SEED}}
        return _split(self._indented(marked), json.dumps(KEY)[1:-1], json.dumps(SEED))

    def _whole(self, row: dict[str, Any], t: Trial) -> str:
        return self._indented({**row, "config": t.resolved()})

    @staticmethod
    def _indented(record: dict[str, Any]) -> str:
        return json.dumps(record, indent=1).replace("\n", "\n  ")


class _CsvLines(_PerCell):
    """Trials' CSV lines: a config is JSON text of a mapping, so it holds quotes, and the csv module writes it
    quoted, each quote doubled; a key and a seed need no quoting (quoting each trial's whole config was two
    thirds of `ablate plan --format csv`'s time at 100,000 trials; writing the rest of its row through the csv
    module most of what was left)."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__()
        at = fields.index("config")
        self._head, self._tail = fields[:at], fields[at + 1 :]

    def _marked(self, row: dict[str, Any], recording: Recording) -> list[str] | None:
        if (halves := recording.resolved_text) is None:
            return None
        config = f"{_quoted(halves[0])[:-1]}{SEED}{_quoted(halves[1])[1:]}"
        return _split(self._written({**row, "key": KEY, "seed": SEED}, config), KEY, SEED)

    def _whole(self, row: dict[str, Any], t: Trial) -> str:
        return self._written(row, _quoted(t.resolved_text()))

    def _written(self, row: Mapping[str, Any], config: str) -> str:
        """The line of `row` with the `config` field as given, the rest as the csv module writes it."""
        line = io.StringIO()
        writer = csv.writer(line, lineterminator="")
        writer.writerow([*_cells(row, self._head), ""])  # its last, empty cell: the comma before the config
        line.write(config)
        if self._tail:
            writer.writerow(["", *_cells(row, self._tail)])  # its first, empty cell: the comma after it
        line.write("\n")
        return line.getvalue()


def _quoted(text: str) -> str:
    """`text` as the csv module writes a field that holds a quote: in quotes, each of its quotes doubled."""
    return '"' + text.replace('"', '""') + '"'


class _MarkdownLines(_PerCell):
    """Trials' Markdown lines, each cell's text by the CLI's `text`; the key and the seed as they are (an
    alphanumeric key escapes to itself, a seed is its decimal digits)."""

    def __init__(self, fields: list[str], text: Callable[[Any], str]) -> None:
        super().__init__()
        self._fields, self._text = fields, text

    def _marked(self, row: dict[str, Any], recording: Recording) -> list[str] | None:
        return _split(self._written({**row, "key": KEY, "seed": SEED}), KEY, SEED, seeds=1)

    def _whole(self, row: dict[str, Any], t: Trial) -> str:
        return self._written(row)

    def _written(self, row: Mapping[str, Any]) -> str:
        return "| " + " | ".join(self._text(row.get(f)) for f in self._fields) + " |\n"
