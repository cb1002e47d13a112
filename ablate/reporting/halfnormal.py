"""The half-normal (Daniel) reading of an unreplicated design's terms, as R's unrepx and FrF2 draw it.

Where Lenth's test read a family of terms (`stats.unreplicated`: one seed, no replicate spread), each term's t is its
effect over its pseudo standard error. Under no effect the |t| of m terms lie along the half-normal's quantiles with
slope about 1; active terms stand off that line. Two margins say how far is far (`ablate.evidence.lenth.margins`,
both from the simulated null of m terms): ME, past which a term is active at the per-term 5% rate (the table's
unadjusted p: the same cut), and SME, past which it is active at the family's 5% rate (under no effect at all, no
term of the m crosses it in 95% of designs). Dong's pseudo standard error is read beside Lenth's, with margins from
its own simulated null: where the two name different terms, the verdict leans on which terms their trims kept.
Box and Meyer's posterior probability of activity (`ablate.evidence.boxmeyer`) reads the same t's without a trim.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.evidence import boxmeyer, lenth
from ablate.reporting.stats import LENTH
from ablate.reporting.tables import num

LIKELY = 0.5
"""The posterior probability of activity past which the words name a term."""


@dataclass(frozen=True)
class Screen:
    """One family of terms Lenth's test read together, on the t scale (Lenth's PSE = 1)."""

    name: str
    terms: list[str]
    t: np.ndarray
    """Each term's effect over its Lenth pseudo standard error."""
    unit: float
    """Lenth's pseudo standard error of the family's first main effect, in the metric's units (NaN if none)."""
    margins: dict[str, lenth.Margins]
    """Per method (Lenth, Dong): the PSE relative to Lenth's, and the ME and SME on the t scale."""
    active: np.ndarray
    """Each term's Box-Meyer posterior probability of being active (`ablate.evidence.boxmeyer`)."""

    def likely(self) -> list[str]:
        """The terms more likely active than not by Box and Meyer's posterior, most likely first, with it."""
        order = np.argsort(-self.active, kind="stable")
        return [f"{self.terms[i]} ({self.active[i]:.2f})" for i in order if self.active[i] > LIKELY]

    def beyond(self, method: str, margin: str) -> list[str]:
        """The terms whose |t| passes the `margin` ("me" or "sme") of `method`, largest first."""
        bound = getattr(self.margins[method], margin)
        order = np.argsort(-np.abs(self.t), kind="stable")
        return [self.terms[i] for i in order if abs(self.t[i]) > bound]


def screens(eff: pd.DataFrame) -> list[Screen]:
    """The families of an effects frame (`effects.COLUMNS`) that Lenth's test read, in table order; only those whose
    every term is a row: the margins are a function of all of them (`missing` says why another has none)."""
    out = []
    for name, part in _families(eff):
        if len(part) != part["terms"].iloc[0]:
            continue
        t = part["t"].to_numpy(dtype=float)
        mains = part[(part["term"] == "main") & (part["t"] != 0)]
        unit = float(mains["effect"].iloc[0] / mains["t"].iloc[0]) if len(mains) else np.nan
        found = {m: lenth.margins(t, m) for m in lenth.METHODS}
        out.append(Screen(name, list(part["factor"]), t, unit, found, boxmeyer.posterior(t)))
    return out


def missing(eff: pd.DataFrame) -> str | None:
    """Why a family Lenth's test read has no half-normal reading, where one has none; None where all have one."""
    shown = [(name, len(part), int(part["terms"].iloc[0])) for name, part in _families(eff)]
    lacking = [f"{name + ': ' if name else ''}{n} of its {m}" for name, n, m in shown if n != m]
    if not lacking:
        return None
    return (f"No half-normal reading where the table shows only some of the terms Lenth's test read together "
            f"({'; '.join(lacking)}; the others only measure the noise).")  # fmt: skip


def _families(eff: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    tested = eff[eff["test"] == LENTH]
    return [(str(name), part) for name, part in tested.groupby("screen", sort=False)]


def words(found: list[Screen], metric: str) -> str:
    """What the half-normal plot shows, per family, in sentences each of which the numbers make true."""
    parts = []
    for s in found:
        within = f"{s.name}: " if len(found) > 1 else ""
        ln, dg = s.margins[lenth.LENTH], s.margins[lenth.DONG]
        per = f" ({num(s.unit, 3)} {metric} for a main effect)" if np.isfinite(s.unit) else ""
        parts.append(
            f"{within}{len(s.t)} terms read together; Lenth's pseudo standard error{per} gives the margin of error "
            f"ME = {ln.me:.2f} PSE and the simultaneous margin SME = {ln.sme:.2f} PSE (95% quantiles of one |t| and "
            f"of the largest of {len(s.t)}, simulated under no effect). Past ME (active at the per-term 5% rate): "
            f"{_names(s.beyond(lenth.LENTH, 'me'))}; past SME (at the family's 5% rate): "
            f"{_names(s.beyond(lenth.LENTH, 'sme'))}. Dong's pseudo standard error is {dg.pse:.2f} times Lenth's; by "
            f"its own simulated margins, past ME: {_names(s.beyond(lenth.DONG, 'me'))}; past SME: "
            f"{_names(s.beyond(lenth.DONG, 'sme'))}. Box-Meyer posterior probability of being active (prior "
            f"{boxmeyer.ALPHA:g} per term, an active term's spread {boxmeyer.K:g} times an inert one's), above "
            f"{LIKELY:g}: {_names(s.likely())}."
        )
    lead = ("Half-normal (Daniel) plot: each term's |effect| over its pseudo standard error against the half-normal "
            "quantiles; inert terms lie near the line of slope 1, active ones stand above it. ")  # fmt: skip
    return lead + " ".join(parts)


def _names(terms: list[str]) -> str:
    return ", ".join(terms) if terms else "none"
