"""The Findings' advice run to its decision: each undecided comparison's advised seed count, computed at the
level that decides in its family (`ablate.reporting.advice`), is run on scripted scores with the same mean and
SD of paired differences, into a real SQLite store, and the report's own tables then decide it. Where no count
can (a family of 3 at 6 seeds; a cross-validated difference under the corrected t's floor) the Findings say so;
where adaptive seeding decided a cell, they say what it decided."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import TINY, write_sweeps
from scipy import stats as sps
from synthetic import fill

from ablate.planning.keys import Trial
from ablate.planning.plan import plan
from ablate.reporting import adaptive, advice, effects, findings, frames, report, stats, tables
from ablate.store import Store


@pytest.fixture
def store(tmp_path):
    with Store(f"sqlite:///{tmp_path / 'a.sqlite'}") as s:
        yield s


def patterns(n: int, k: int) -> np.ndarray:
    """k patterns over n seeds (rows), each of mean 0 and SD 1, orthogonal to one another: any mix a z_i + b z_j
    has SD sqrt(a^2 + b^2) at every n, so a sweep of any seed count has the paired differences' mean and SD the
    advice was computed from."""
    s = np.arange(n)
    q, _ = np.linalg.qr(np.column_stack([np.ones(n), *(np.sin(1.3 * s + j) for j in range(1, k + 1))]))
    out: np.ndarray = q[:, 1:].T * math.sqrt(n - 1)
    return out


def sweep(store: Store, tmp_path: Path, name: str, grid: dict, seeds: int, value: Callable[[Trial], float]) -> None:
    p = plan(write_sweeps(tmp_path / f"{name}.yaml", {name: {"base": TINY, "grid": grid, "seeds": seeds,
             "baseline": {k: v[0] for k, v in grid.items()}}}), name)  # fmt: skip
    fill(store, p, value)


def read(store: Store, name: str) -> tuple[list[findings.Finding], dict[str, float]]:
    """The sweep's Findings and the adjusted p of each comparison of the variant table and of each effect, by its
    name in the Findings (NaN where untested)."""
    data = frames.load(store, name)
    table = frames.variant_table(data)
    fac = effects.factorial(data)
    eff = effects.effects(fac) if fac is not None else None
    found = findings.findings(data, table, fac, eff, tables.verdicts(table, data), adaptive.verdicts(store, data))
    labels = table["label"]
    p = {f"{labels[v]} vs {labels[r['ref']]}": r["p_adj"] for v, r in table[table["ref"].notna()].iterrows()}
    if eff is not None:
        p |= {f"{e['factor']}: {e['contrast']}": e["p_adj"] for _, e in eff.iterrows()}
    return found, p


def advised(found: list[findings.Finding]) -> list[tuple[str, int]]:
    """(text, seeds) of every not-decided line that advises a plain seed count."""
    return [
        (f.text, int(m[1])) for f in found if f.kind == findings.OPEN and (m := re.search(r"`seeds: (\d+)`", f.text))
    ]


def by_hand(sd: float, delta: float, k: int, have: int) -> int:
    """The fewest n above `have` with (t(1 - a/2) + t(0.8)) sd / sqrt(n) <= |delta| at a = 0.05 / k."""
    a = 0.05 / k
    return next(n for n in range(have + 1, 10_001)
                if (sps.t.ppf(1 - a / 2, n - 1) + sps.t.ppf(0.8, n - 1)) * sd / math.sqrt(n) <= abs(delta))  # fmt: skip


STACK_KIND = {"model.stack": ["alternating", "pure"], "attention.kind": ["softmax", "csan"]}


def factorial(n: int) -> Callable[[Trial], float]:
    """The 2 x 2 of stack and kind: CSaN in the attn-FFN stack +1 (SD 2) over softmax; pure +10; CSaN gains 2
    more in the pure stack (interaction +2, SD 2 sqrt 2); the seeds' shared shift cancels in every pair."""
    z1, z2, z3 = patterns(n, 3)

    def value(t: Trial) -> float:
        s, pure, csan = t.axes["seed"], t.axes["model.stack"] == "pure", t.axes["attention.kind"] == "csan"
        cell = {(False, False): 0.0, (False, True): 1 + 2 * z1[s], (True, False): 10 + 0.5 * z2[s],
                (True, True): 13 + 0.5 * z2[s] + 2 * z3[s]}[(pure, csan)]  # fmt: skip
        return 70 + math.sin(2 * s) + cell

    return value


CSAN_ALT = "CSaN (tau, mu, private; unit readout), attn-FFN vs Softmax, attn-FFN"


def test_each_undecided_comparison_gets_its_own_advice_and_the_advised_seeds_decide_it(store, tmp_path):
    """At 10 seeds CSaN's +1 in the attn-FFN stack (p adj 0.148 over the variant table's 3) and the +2
    interaction (p adj 0.052 over the effects' 3) are not decided; each line advises its own seed count, at
    α/3 by hand; a sweep of that many seeds with the same differences decides what the line names."""
    sweep(store, tmp_path, "f10", STACK_KIND, 10, factorial(10))
    found, _ = read(store, "f10")
    (comparison, n1), (interaction, n2) = advised(found)
    assert comparison.startswith(f"{CSAN_ALT} +1.00 points [-0.43, +2.43], p adj = 0.148. MDD 2.41 points at α/3")
    assert interaction.startswith("stack x kind: csan vs softmax (kind) is 2.00 points larger with pure than with "
                                  "alternating (stack) [-0.02, +4.02], p adj = 0.052.")  # fmt: skip
    assert (n1, n2) == (by_hand(2, 1, 3, 10), by_hand(2 * math.sqrt(2), 2, 3, 10)) == (45, 24)
    for name, n in ((CSAN_ALT, n1), ("stack x kind: (pure vs alternating) x (csan vs softmax)", n2)):
        sweep(store, tmp_path, f"f{n}", STACK_KIND, n, factorial(n))
        assert read(store, f"f{n}")[1][name] < 0.05, (name, n)


def test_six_seeds_in_a_family_of_three_can_decide_nothing_and_the_advised_seven_do(store, tmp_path):
    """Three rates each 5 points above the baseline (SD 1): at 4 seeds there is no test, and the line asks for 7
    (it asked for 6); at 6 seeds the sign-flip test's smallest p, 2/64 = 0.031, is 0.094 after Holm over 3, so
    nothing is decided however large; the advice is 7 seeds (2/128 = 0.0156 < 0.05/3), and at 7 every comparison
    is decided."""
    grid = {"train.lr": [1e-3, 2e-3, 3e-3, 4e-3]}

    def value(n: int) -> Callable[[Trial], float]:
        z = patterns(n, 3)
        return lambda t: (
            70
            + math.sin(2 * t.axes["seed"])
            + (0.0 if t.axes["train.lr"] == 1e-3 else 5 + z[round(t.axes["train.lr"] * 1000) - 2][t.axes["seed"]])
        )

    sweep(store, tmp_path, "r4", grid, 4, value(4))
    (line,) = [f.text for f in read(store, "r4")[0] if f.kind == findings.NO_TEST]
    assert line.endswith("too few for any test of the small-sample policy. Deciding one takes at least 7 seeds "
                         "(`seeds: 7`): the exact sign-flip test's smallest p, 2/2^7 = 0.0156, is then below α/3; a "
                         "t-test needs 10.")  # fmt: skip
    sweep(store, tmp_path, "r6", grid, 6, value(6))
    found, p = read(store, "r6")
    advice_lines = advised(found)
    assert len(advice_lines) == 3 and all(n == 7 for _, n in advice_lines)
    assert all("6 seeds can decide nothing at α/3 = 0.0167 (the sign-flip test's smallest p is 0.0312); about 7 "
               "seeds would detect" in text for text, _ in advice_lines)  # fmt: skip
    compared = [x for name, x in p.items() if " vs " in name and ":" not in name and not math.isnan(x)]
    assert compared == pytest.approx([0.09375] * 3)
    sweep(store, tmp_path, "r7", grid, 7, value(7))
    decided = [x for name, x in read(store, "r7")[1].items() if ":" not in name and not math.isnan(x)]
    assert len(decided) == 3 and max(decided) == pytest.approx(3 * 2 / 128)


def test_a_cross_validated_difference_under_the_floor_says_more_repeats_cannot_decide_it(store, tmp_path):
    """The gallery's syn-musk1 case: +0.027 AUC, fold differences of SD 0.062 over one 10-fold split. The corrected
    t's MDD never falls below (z(0.975) + z(0.8)) 0.062 sqrt(1/9) = 0.0579, so no count of repeats decides it;
    the line says so and what the folds established, and the arithmetic agrees at 10,000 repeats."""
    base = {"task": "mil", "data": {"name": "musk1", "folds": 10}, "model": {"size": "synpool"},
            "attention": {"kind": "syn"}, "train": {"epochs": 1}}  # fmt: skip
    grid = {"attention.steps": [0, 1], "data.fold": list(range(10))}
    p = plan(write_sweeps(tmp_path / "m.yaml", {"cv": {"base": base, "grid": grid, "seeds": 1,
                                                       "baseline": {"attention.steps": 0}}}), "cv")  # fmt: skip
    (z,) = patterns(10, 1)
    fill(store, p, lambda t: 0.8 + 0.01 * math.sin(t.axes["data.fold"])
         + (0.027 + 0.062 * z[t.axes["data.fold"]] if t.axes["attention.steps"] else 0.0))  # fmt: skip
    found, _ = read(store, "cv")
    (line,) = [f.text for f in found if f.kind == findings.OPEN]
    least = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * 0.062 * math.sqrt(1 / 9)
    assert round(least, 4) == 0.0579
    assert line.endswith("p adj = 0.368. MDD 0.0896 at α = 0.05 (10 folds, SD 0.06200); more repeats cannot detect "
                         "|Δ| = 0.0270: at this SD the MDD never falls below 0.0579, only less noisy folds (more data "
                         "per fold) lower it; at 10 folds its 95% interval bounds |Δ| by 0.0914.")  # fmt: skip
    assert advice.mdd(0.062, 10 * 10_000, 0.05, stats.Replicates(10)) > 0.027
    assert advice.needed(0.062, 0.027, 1, 10, stats.Replicates(10)) is None


def test_a_cell_adaptive_seeding_ruled_equivalent_is_not_listed_as_not_decided(store, tmp_path):
    """Issue 51's item 9: the Adaptive seeds table ruled a comparison equivalent while the Findings listed it as
    not decided and advised 564 seeds. Six seeds of differences 0.01 +- 0.05 lie inside +-0.5 (the first look's
    sign-flip interval, their range): the Findings say equivalent, from the same verdict as that table."""
    (z,) = patterns(6, 1)
    grid = {"attention.kind": ["softmax", "csan"]}
    p = plan(write_sweeps(tmp_path / "e.yaml", {"eq": {"base": TINY, "grid": grid, "baseline": {"attention.kind":
             "softmax"}, "seeds": {"min": 6, "max": 10, "threshold": 0.5}}}), "eq")  # fmt: skip
    fill(store, p, lambda t: 80 + math.sin(2 * t.axes["seed"])
         + (0.01 + 0.05 * z[t.axes["seed"]] if t.axes["attention.kind"] == "csan" else 0.0))  # fmt: skip
    found, adjusted = read(store, "eq")
    (line,) = [f for f in found if f.kind not in (findings.TIED, findings.BEST)]
    data = frames.load(store, "eq")
    verdict = (adaptive.verdicts(store, data) or {})[p.variants[1]]
    assert (
        verdict.decision == line.kind == "equivalent" and min(x for x in adjusted.values() if not math.isnan(x)) >= 0.05
    )
    assert line.text.endswith(f"not significant after the table's adjustment, but adaptive seeding found it "
                              f"{verdict.reason} (Adaptive seeds, below).")  # fmt: skip
    assert "inside the threshold" in verdict.reason and "seeds:" not in line.text
    (md,) = [f for f in report("eq", store=store, out=tmp_path / "rep", formats=["md"]) if f.name == "report.md"]
    text = md.read_text()
    assert f"| equivalent | {line.text.replace('|', chr(92) + '|')} |" in text.split("## Findings")[1].split("## ")[0]
    assert "| equivalent | 6 | equivalent: [" in text.split("## Adaptive seeds")[1]


def test_where_no_feasible_seed_count_decides_the_line_says_what_the_seeds_established(store, tmp_path):
    """Issue 51's item 9: 0.01 points at an SD of 1 would take about 78,000 seeds, over MAX_SEEDS; the line says
    no feasible count detects it and how large the difference can be: the bound of its 95% t interval, by hand."""
    (z,) = patterns(10, 1)
    sweep(store, tmp_path, "tiny", {"attention.kind": ["softmax", "csan"]}, 10,
          lambda t: 80 + (0.01 + z[t.axes["seed"]] if t.axes["attention.kind"] == "csan" else 0.0))  # fmt: skip
    (line,) = [f.text for f in read(store, "tiny")[0] if f.kind == findings.OPEN]
    bound = 0.01 + sps.t.ppf(0.975, 9) / math.sqrt(10)
    assert advice.needed(1.0, 0.01, 1, 10, stats.Replicates()) is None and f"{bound:.2f}" == "0.73"
    assert line.endswith("MDD 0.99 points at α = 0.05 (10 seeds, SD 1.000); no feasible number of seeds (up to 10000) "
                         "detects |Δ| = 0.01; at 10 seeds its 95% interval bounds |Δ| by 0.73 points.")  # fmt: skip


def test_an_effect_on_the_sign_flip_test_gets_its_advice_too(store, tmp_path):
    """At 8 seeds the effects are on the exact sign-flip test, whose interval gives no SD to read back: the
    effects table carries the contrasts' SD, so the interaction's line still advises its own count (by hand)."""
    sweep(store, tmp_path, "f8", STACK_KIND, 8, factorial(8))
    (comparison, n1), (interaction, n2) = advised(read(store, "f8")[0])
    assert comparison.startswith(CSAN_ALT) and interaction.startswith("stack x kind: csan vs softmax (kind) is")
    assert (n1, n2) == (by_hand(2, 1, 3, 8), by_hand(2 * math.sqrt(2), 2, 3, 8))
