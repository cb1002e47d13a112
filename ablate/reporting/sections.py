"""Report sections that mechanisms contribute (`ablate.registry.SECTIONS`): what a section is given, and the
sections a sweep's report gets.

A mechanism's module (or a plugin) registers a `ReportSection` naming its `attention.kind`; every sweep one of
whose variants uses that mechanism gets the section, after the report's own tables. Its `build` gets a
`SweepResults` and returns blocks: text, or `Table`s of formatted cells (examples/cosine_attention/cosine.py):

    def by_temperature(results: SweepResults) -> list[Block]:
        cells = results.cells(["attention.tau0"])       # per variant: tau0, label, group, mean, std, n
        rows = [[f"{r['attention.tau0']:g}", f"{r['mean']:.2f}"] for _, r in cells.iterrows()]
        return [Table("Mean top-1 per initial temperature.", ["tau0", "top-1"], rows)]

    register_section(ReportSection("Cosine attention: temperature", "cosine", by_temperature))
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable
from dataclasses import dataclass

import pandas as pd

from ablate.registry import SECTIONS
from ablate.reporting import frames
from ablate.reporting.frames import SweepData
from ablate.reporting.render import Block, Section, Table
from ablate.spec.paths import get_path
from ablate.store import Store

__all__ = ["Block", "SweepResults", "Table", "sections"]


@dataclass(frozen=True)
class SweepResults:
    """One sweep's results as a report section reads them."""

    data: SweepData
    """The sweep: its trials (`value` = the metric, `rep` = replicate), variants (with a `config` each), design."""
    table: pd.DataFrame
    """The variant table (`frames.variant_table`): per variant mean, std, n, the paired delta to its reference."""
    correction: str
    """How the report adjusts p-values (holm or bh)."""
    store: Store

    def cells(self, paths: Iterable[str]) -> pd.DataFrame:
        """Per variant (index, in table order): the value of each config path in `paths` (the variant's own
        config, so paths the grid does not vary are read too), label, group, mean, std and n of the metric."""
        paths = list(paths)
        configs = {v: frames.own_config(self.data, v) for v in self.table.index}
        out = pd.DataFrame({p: [get_path(configs[v], p) for v in self.table.index] for p in paths},
                           index=self.table.index)  # fmt: skip
        return out.join(self.table[["label", "group", "mean", "std", "n"]])

    def replicates(self) -> pd.DataFrame:
        """The metric per variant (rows) and replicate (columns), NaN where not done: what paired tests take."""
        return frames.replicates(self.data)

    def metrics(self, names: Iterable[str]) -> pd.DataFrame:
        """Per-epoch metrics `names` of the sweep's trials, long: key, variant, name, step, value."""
        return frames.variant_metrics(self.store, self.data, list(names)).astype({"variant": str})


def mechanisms(data: SweepData) -> set[str]:
    """The `attention.kind` of every variant of the sweep."""
    return {str(get_path(c, "attention.kind")) for c in data.variants["config"]}


def sections(results: SweepResults) -> list[Section]:
    """The registered sections of the mechanisms the sweep uses, in registration order; one with nothing to say
    (no blocks) is left out. A section that raises shows the error with the place it was registered, and the rest
    of the report is written as usual."""
    used = mechanisms(results.data)
    out = []
    for entry in SECTIONS.entries():
        section = entry.component
        if section.mechanism not in used:
            continue
        try:
            blocks: list[Block] = list(section.build(results))
        except Exception as e:  # a contributed section's failure is reported in it, not raised
            where = traceback.extract_tb(e.__traceback__)[-1]
            blocks = [f"This section failed: {type(e).__name__}: {e} (in {where.filename}, line {where.lineno}; "
                      f"section registered by {entry.source})."]  # fmt: skip
        if blocks:
            out.append(Section(section.title, blocks))
    return out
