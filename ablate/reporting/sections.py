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

import numpy as np
import pandas as pd

from ablate.registry import SECTIONS
from ablate.reporting import frames, stats, tables
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

    # The report's own statistics and cell formats, so that a section (a mechanism's package sits below
    # `ablate.reporting` and imports none of it) tests and writes its numbers as the report's tables do.

    def digits(self) -> int:
        """Decimals of the metric's cells: 2 for percentages, 4 for values in [0, 1] (AUC)."""
        return tables.digits(self.data)

    def num(self, x: float | None, digits: int) -> str:
        """A number with `digits` decimals, "-" where there is none."""
        return tables.num(x, digits)

    def paired(self, diffs: np.ndarray) -> pd.DataFrame:
        """Paired comparisons, one per row of differences (variant - other per replicate), as the sweep's design
        and the small-sample policy give them, their p-values adjusted together (`p_adj`, the report's
        correction)."""
        test = stats.paired(diffs, replicates=self.data.replicates)
        test["p_adj"] = stats.adjust(test["p"], self.correction)
        return test

    def difference(self, row: pd.Series, digits: int) -> str:
        """A row of `paired` (its `mean` renamed `delta`) as the report's cell: delta, interval or why none,
        marks."""
        return tables.difference(row, digits)

    def pvalue(self, p: float) -> str:
        """A p-value as the report's cell."""
        return tables.pvalue(p)

    def starred(self, k: int, what: str) -> str:
        """The caption's words for a family of `k` adjusted `what`, and what a star means."""
        return stats.starred(k, self.correction, what)

    def na_words(self, cells: list[str]) -> str:
        """The caption's footnote for the n/a intervals among `cells`, where there are any."""
        return tables.na_words(cells, self.data.replicates.unit)


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
