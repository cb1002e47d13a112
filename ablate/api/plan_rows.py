"""What `ablate plan` prints per trial: key, variant, axis values, costs and config (and, as JSON, each sweep's
design beside them), so the CLI only formats.

A large sweep has few distinct models and grid cells and many seeds: costs are counted once per architecture
and configs dumped once per cell (`Trial.resolved`), not once per trial (per trial, they were 7 of the 8.7 s
of `ablate plan` at 100,000 trials of 80 architectures).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from ablate.config import TrialConfig, identity
from ablate.planning.keys import Trial
from ablate.planning.plan import Plan
from ablate.probe.check import cost

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
    naming its mechanism, backbone or dataset."""
    counted: dict[str, Costs] = {}
    out: dict[str, Costs] = {}
    for plan in plans:
        for t in plan.trials:
            if t.variant in out:
                continue
            arch = _architecture(t.cell)  # the cell's config: the trial's, but for the seed
            if arch not in counted:
                c = cost(t.cell)
                counted[arch] = Costs(c.params, round(c.gflops / 2, 6), round((c.gflops - c.attention_gflops) / 2, 6))
            out[t.variant] = counted[arch]
    return out


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
    return {"sweeps": [{"sweep": p.sweep, "design": p.design.record(p.seeds) if p.design else None} for p in plans],
            "trials": records(plans, costs)}  # fmt: skip


def records(plans: Iterable[Plan], costs: Mapping[str, Costs] | None) -> list[dict[str, Any]]:
    """Every trial's row with its resolved config as JSON data (`config`): `trials` of `document`."""
    return [
        {**row, "config": t.resolved()} for plan in plans for row, t in zip(rows(plan, costs), plan.trials, strict=True)
    ]


def write_csv(plans: list[Plan], costs: Mapping[str, Costs] | None, out: TextIO) -> None:
    """Every trial's row and config (JSON text) as CSV: the columns of every plan, in order of first use; a
    value that is a list or a mapping as JSON. The config field, most of each line, is quoted once per cell
    (`_ConfigFields`), the rest by the csv module: the same bytes as its writer's, at a fraction of the cost."""
    fields = list(dict.fromkeys(c for plan in plans for c in [*columns(plan, costs), "config"]))
    at = fields.index("config")
    head, tail = fields[:at], fields[at + 1 :]
    writer = csv.writer(out, lineterminator="")
    writer.writerow(fields)
    out.write("\n")
    config = _ConfigFields()
    for plan in plans:
        for row, t in zip(rows(plan, costs), plan.trials, strict=True):
            writer.writerow([*_cells(row, head), ""])  # its last, empty cell: the comma before the config
            out.write(config.field(t))
            if tail:
                writer.writerow(["", *_cells(row, tail)])  # its first, empty cell: the comma after it
            out.write("\n")


def _cells(row: Mapping[str, Any], fields: list[str]) -> list[Any]:
    return [json.dumps(v) if isinstance(v := row.get(f, ""), (dict, list)) else v for f in fields]


class _ConfigFields:
    """Trials' configs as CSV fields: a config is JSON text of a mapping, so it holds quotes, and the csv module
    writes it quoted with each quote doubled. A cell's trials differ only in the seed's digits, which need no
    quoting: the cell's text either side of the seed (`Recording.resolved_text`) is quoted once (quoting each
    trial's whole text was two thirds of `ablate plan --format csv`'s time at 100,000 trials)."""

    def __init__(self) -> None:
        self._halves: dict[int, tuple[str, str]] = {}  # by the id of a cell's Recording, which the plan keeps

    def field(self, t: Trial) -> str:
        halves = t.recording.resolved_text if t.recording is not None and t.seed is not None else None
        if halves is None:
            return _quoted(t.resolved_text())
        quoted = self._halves.get(id(t.recording))
        if quoted is None:
            quoted = self._halves[id(t.recording)] = (_quoted(halves[0])[:-1], _quoted(halves[1])[1:])
        return f"{quoted[0]}{t.seed:d}{quoted[1]}"


def _quoted(text: str) -> str:
    """`text` as the csv module writes a field that holds a quote: in quotes, each of its quotes doubled."""
    return '"' + text.replace('"', '""') + '"'
