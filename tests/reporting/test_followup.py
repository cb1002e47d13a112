"""A design's follow-up in one step (`design.follow-up`): where the Findings say an active effect is confounded they
name the follow-up as the edit to make; made, it trains only the cells the design lacks, clears the effect, and the
report reads both parts as one design. Scores are scripted (one seed, Lenth's test), never trained."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import TINY, write_sweeps
from synthetic import fill

from ablate.errors import SpecError
from ablate.execution.selection import Select, select
from ablate.planning import followup
from ablate.planning.designs import short
from ablate.planning.plan import Plan, plan
from ablate.reporting import designed, frames, report
from ablate.store import Store

SWITCHES = ["tau", "mu", "kappa_priv", "bounded", "kappa_pub", "stack", "mlp_ratio"]
PATHS = {n: f"model.{n}" if n in ("stack", "mlp_ratio") else f"attention.{n}" for n in SWITCHES}
LEVELS = {"kappa_pub": ["off", "unit"], "stack": ["pure", "alternating"], "mlp_ratio": [2, 4]}


def grid(k: int) -> dict[str, list]:
    return {PATHS[n]: LEVELS.get(n, [False, True]) for n in SWITCHES[:k]}


def scores(k: int, main: dict[str, float], pairs: dict[tuple[str, ...], float]):
    """One seed: the planted main effects and interactions (an interaction of m switches: its product's coefficient
    is effect / 2^m, as the report's scale reads it), and a per-cell noise of SD 0.05 drawn from the cell."""
    levels = grid(k)

    def value(t) -> float:
        x = {n: 1 if t.axes[PATHS[n]] == levels[PATHS[n]][1] else -1 for n in SWITCHES[:k]}
        noise = np.random.default_rng([(v + 1) // 2 for v in x.values()]).normal(0, 0.05)
        y = 80 + sum(e / 2 * x[n] for n, e in main.items())
        return y + noise + sum(e / 2 ** len(p) * np.prod([x[n] for n in p]) for p, e in pairs.items())

    return value


@pytest.fixture
def store(tmp_path: Path):
    with Store(f"sqlite:///{tmp_path / 'f.sqlite'}") as s:
        yield s


def planned(tmp_path: Path, k: int, design) -> Plan:
    body = {"base": {**TINY, "attention": {"kind": "csan"}}, "grid": grid(k), "seeds": 1, "design": design,
            "baseline": {a: v[0] for a, v in grid(k).items()}}  # fmt: skip
    return plan(write_sweeps(tmp_path / "s.yaml", {"s": body}), "s")


def confounded_line(store: Store, tmp_path: Path) -> str:
    report("s", store=store, out=tmp_path / "reports", formats=["md"])
    text = (tmp_path / "reports" / "s" / "report.md").read_text()
    return next(
        (line for line in text.split("## Findings")[1].split("##")[0].splitlines() if "| confounded |" in line), ""
    )


def named(line: str, followed: int) -> dict | None:
    """The follow-up the Findings line names to a design with `followed` follow-ups (as a mapping of
    `design.follow-up`'s list); None for `design: full`."""
    if "set `design: full`" in line:
        return None
    form = r"`(\{.+?\})` to the list of the sweep's `design.follow-up`" if followed else r"`follow-up: (\{.+?\})` under"
    edit = re.search(f"add {form}", line)  # a design with follow-ups has them listed: the next is added to the list
    assert edit is not None, line
    return yaml.safe_load(edit[1])


def active(line: str) -> list[str]:
    """The terms the Findings line calls active and confounded."""
    said = re.search(r"([^.:]+?) (?:is|are) decided and confounded", line)
    return said[1].strip().split(" and ") if said else []


@pytest.mark.parametrize(
    ("k", "resolution", "main", "size"),
    [
        (5, 3, {"mu": 10.0}, 8.0),  # mu = -tau x bounded (a two-switch interaction)
        (6, 4, {"tau": 10.0}, 8.0),  # tau = a three-switch interaction
        (7, 3, {"kappa_pub": 10.0}, -8.0),
    ],
)
def test_the_follow_up_the_findings_name_for_an_active_confounded_effect_trains_what_lacks_and_clears_it(
    tmp_path, store, k, resolution, main, size
) -> None:
    """Each round: the Findings call the planted active effect confounded, name a follow-up; made, the launch
    trains only the cells it lacks, the report reads every cell as one design and the effect is clear, with its
    planted size; until nothing active is confounded."""
    design: dict = {"fractional": {"resolution": resolution}}
    before = planned(tmp_path, k, design)
    assert before.design is not None
    names = short([f.name for f in before.design.factors])
    aliased = followup.confounded(before.design.coded(list(before.design.runs)), (names.index(*main),), names)
    pairs = {tuple(aliased[-1].lstrip("-").split(" x ")): size}  # the widest interaction the active effect carries
    value = scores(k, main, pairs)
    fill(store, before, value)
    line = confounded_line(store, tmp_path)
    assert next(iter(main)) in active(line), line
    first = designed.effects(frames.load(store, "s"), before.design)
    ((name, truth),) = main.items()
    row = first[(first["factor"] == name) | first["factor"].str.startswith(f"{name} = ")].iloc[0]
    assert abs(row["effect"] - truth) > 1  # the design reads the active effect with what it is confounded with
    rounds = 0
    while active(line):
        rounds += 1
        assert rounds <= 3, line
        follow = named(line, rounds - 1)
        assert follow is not None, line
        design = {**design, "follow-up": [*design.get("follow-up", []), follow]}
        after = planned(tmp_path, k, design)
        assert after.design is not None and after.design.followed == rounds
        new = {t.key for t in after.trials} - {t.key for t in before.trials}
        assert {t.key for t in before.trials} < {t.key for t in after.trials}
        assert set(select([after], store, Select()).run) == new  # the launch trains only the cells it lacks
        assert f"({len(new)} more cells per stratum" in line and f"reads all {len(after.trials)} as one design" in line
        names = short([f.name for f in after.design.factors])
        coded = after.design.coded(list(after.design.runs))
        order = 2 if "clear of every two-factor interaction" in line else 3
        for term in active(line):
            terms = tuple(names.index(n) for n in term.split(" x "))
            assert followup.confounded(coded, terms, names, order) == [], term
        fill(store, replace(after, trials=[t for t in after.trials if t.key in new]), value)
        data = frames.load(store, "s")
        assert data.design is not None and len(data.design.runs) == len(after.trials)  # both parts, one design
        eff = designed.effects(data, data.design)
        for term in active(line):  # a resolution IV main effect's three-factor aliases are listed as assumed zero
            said = eff.loc[eff["factor"] == term, "aliases"].iloc[0].split("; ")
            kept = [a for a in said if a and not (order == 2 and a.endswith("(three-factor, assumed zero)"))]
            assert kept == [], term
        line, before = confounded_line(store, tmp_path), after
    assert rounds >= 1
    final = designed.effects(frames.load(store, "s"), before.design)
    row = final[final["factor"] == name].iloc[0]  # clear of what it was confounded with: its planted size
    assert row["effect"] == pytest.approx(truth, abs=0.2) and row["aliases"] == ""


def test_no_effect_is_called_active_where_none_was_decided(tmp_path, store) -> None:
    first = planned(tmp_path, 5, {"fractional": {"resolution": 3}})
    fill(store, first, scores(5, {}, {}))
    line = confounded_line(store, tmp_path)
    assert "Confounded by the design: " in line and "decided and confounded" not in line


def test_a_fold_over_on_a_switch_clears_it_of_every_interaction_and_keeps_the_designs_cells(tmp_path) -> None:
    """Montgomery 8.6: folding a resolution III fraction over on one switch leaves it and its two-factor
    interactions clear; `all` folds every switch (main effects clear of two-factor interactions)."""
    first = planned(tmp_path, 5, {"fractional": {"resolution": 3}})
    assert first.design is not None
    for fold, clear in (("all", [(i,) for i in range(5)]), ([PATHS["mu"]], [(1,), (0, 1), (1, 2), (1, 3), (1, 4)])):
        p = planned(tmp_path, 5, {"fractional": {"resolution": 3}, "follow-up": {"foldover": fold}})
        assert p.design is not None and len(p.trials) == 16
        assert {t.key for t in first.trials} < {t.key for t in p.trials}
        s = p.design.structure()
        assert all(t in s.model and not s.aliases.get(t) for t in clear), (fold, s.confounded)
        assert p.design.title.endswith("and its fold-over" if fold == "all" else "and its fold-over on attention.mu")


def test_a_second_fraction_adds_its_cells_to_the_designs(tmp_path) -> None:
    third = planned(tmp_path, 5, {"fractional": {"resolution": 3}})
    fifth = planned(tmp_path, 5, {"fractional": {"resolution": 5}})
    both = planned(tmp_path, 5, {"fractional": {"resolution": 3}, "follow-up": {"fractional": {"resolution": 5}}})
    assert {t.key for t in both.trials} == {t.key for t in third.trials} | {t.key for t in fifth.trials}


@pytest.mark.parametrize(
    ("design", "said"),
    [
        ({"fractional": {"resolution": 3}, "follow-up": {"foldover": ["attention.nope"]}},
         "design.follow-up[0].foldover[0]: attention.nope is no axis the design varies"),
        ({"one-at-a-time": {"from": "baseline"}, "follow-up": {"foldover": "all"}},
         "follow-up: adds cells to a fractional or screening design"),
        ({"fractional": {"resolution": 3}, "follow-up": {}}, "expected one of foldover"),
    ],
)  # fmt: skip
def test_a_follow_up_that_cannot_be_is_refused_naming_the_key(tmp_path, design, said) -> None:
    with pytest.raises(SpecError, match=re.escape(said)):
        planned(tmp_path, 5, design)
