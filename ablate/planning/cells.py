"""The cells of a sweep's grid: axis groups (grid axes, linked rows, `when:` blocks) and their products, each
cell's raw config, and what is wrong in them named where the user wrote it (`ablate.planning.plan` validates and
keys the cells into trials).
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.config import TrialConfig
from ablate.errors import Problem, format_path
from ablate.planning.designs import Cell
from ablate.spec.paths import get_path, matches, overlaps, set_path
from ablate.spec.problems import clean_loc, error_message
from ablate.spec.registry_check import path_problem
from ablate.spec.schema import Linked, axis_paths
from ablate.spec.sweeps import SweepSource
from ablate.spec.yaml_doc import Loc


def groups(
    grid: dict[str, list[Any]],
    linked: list[Linked],
    at: Loc,
    sweep: SweepSource,
    problems: list[Problem],
    kinds: list[str],
) -> list[list[Cell]]:
    """Each axis group as its list of rows (a row is a partial cell); `kinds`: the attention kinds they apply to."""
    groups: list[list[Cell]] = []
    for path, values in grid.items():
        loc = at + ("grid", path)
        if (msg := path_problem(path, kinds)) is not None:
            problems.append(sweep.problem(loc, msg))
        elif not values:
            problems.append(sweep.problem(loc, "empty axis: expected a list of at least one value"))
        groups.append([((path, v, loc + (i,)),) for i, v in enumerate(values)])
    for g, group in enumerate(linked):
        loc = at + ("linked", g)
        if isinstance(group, dict):
            lengths = {len(v) for v in group.values()}
            if len(lengths) > 1:
                problems.append(
                    sweep.problem(loc, f"linked axes need lists of one length, got lengths {sorted(lengths)}")
                )
                continue
            rows = [{p: vals[i] for p, vals in group.items()} for i in range(lengths.pop() if lengths else 0)]
            locs = [{p: loc + (p, i) for p in group} for i in range(len(rows))]
        else:
            rows = group
            locs = [{p: loc + (i, p) for p in row} for i, row in enumerate(rows)]
        if not rows:
            problems.append(sweep.problem(loc, "empty linked group: expected at least one row"))
        for p in {p for row in rows for p in row}:
            if (msg := path_problem(p, kinds)) is not None:
                problems.append(sweep.problem(loc, msg))
        groups.append([tuple((p, v, locs[i][p]) for p, v in row.items()) for i, row in enumerate(rows)])
    return groups


def product(groups: list[list[Cell]]) -> Iterable[Cell]:
    for combo in itertools.product(*groups):
        yield tuple(a for row in combo for a in row)


def declared(loc: Loc) -> Loc:
    """Where an axis value's axis is declared: `grid.PATH` or `linked[g]` (inside a when block or not)."""
    at = max(i for i, part in enumerate(loc) if part in ("grid", "linked"))
    return loc[: at + 2]


def varied_twice(sweep: SweepSource, cell: Cell) -> list[Problem]:
    """An axis a cell takes from two places (grid and linked, two linked groups, a when block and the grid):
    one value would silently win, so each path is varied in one place."""
    first: dict[str, Loc] = {}
    problems = []
    for path, _, loc in cell:
        where = declared(loc)
        if first.setdefault(path, where) != where:
            problems.append(sweep.problem(where, f"{path} is also varied at {format_path(first[path])}: vary each "
                                          "path in one place (a linked group, or the grid)"))  # fmt: skip
    return problems


def taken(values: Iterable[Any]) -> list[Any]:
    """Distinct values, in order of first appearance (lists compared as JSON)."""
    return list({json.dumps(v, sort_keys=True, default=str): v for v in values}.values())


def dead_values(rule: dict[str, Any], haves: dict[str, list[Any]]) -> Iterable[tuple[str, str]]:
    """(path, what is wrong) for each value of a `when:` or `exclude:` rule that matches no value its path takes
    in the sweep (a typo of a mechanism name, say): such a rule silently does nothing."""
    for path, want in rule.items():
        taken = haves.get(path, [])
        scalar_axis = not any(isinstance(h, (list, tuple)) for h in taken)
        candidates = want if isinstance(want, list) and scalar_axis else [want]
        dead = [c for c in candidates if not any(matches({path: c}, {path: h}, flat=True) for h in taken)]
        if dead:
            shown = ", ".join(repr(v) for v in taken[:12]) + (", ..." if len(taken) > 12 else "")
            words = [h for h in taken if isinstance(h, str)]
            close = [c for d in dead if isinstance(d, str) for c in difflib.get_close_matches(d, words, n=1)]
            mean = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            yield path, f"{', '.join(map(repr, dead))} matches no value {path} takes in this sweep ({shown}){mean}"


def where(sweep: SweepSource, cell: Cell, err_path: str, msg: str) -> list[Problem]:
    """Place a cell's validation error at the axes that set the offending path, else in the base."""
    hits = [
        sweep.problem(loc, msg if "(got " in msg or ", got " in msg else f"{msg} (value {value!r})")
        for path, value, loc in cell
        if err_path and overlaps(path, err_path)
    ]
    if hits:
        return hits
    if not err_path:
        desc = ", ".join(f"{p}={v!r}" for p, v, _ in cell)
        return [sweep.problem(("base",), f"{msg} (in the cell {desc})" if desc else msg)]
    return [sweep.problem(("base", *err_path.split(".")), msg)]


def base_problems(sweep: SweepSource) -> list[Problem]:
    """What is wrong in the base where no axis could mend it: named beside a grid's own problems, which stop
    the cells from being checked, so a file's problems are named at once."""
    varied = axis_paths(sweep.spec)

    def fixed(path: str) -> bool:
        return bool(path) and not any(overlaps(path, v) for v in varied)

    base = raw_config(sweep, ())
    found = []
    try:
        TrialConfig.model_validate(base)
    except ValidationError as err:
        for e in err.errors():
            path = ".".join(str(p) for p in clean_loc(tuple(e["loc"]), base))
            found += where(sweep, (), path, error_message(e, TrialConfig)) if fixed(path) else []
    if fixed("data.path") and isinstance(base.get("data"), dict) and (msg := data_path_problem(base["data"])):
        found += where(sweep, (), "data.path", msg)
    return found


def given(raw: dict[str, Any], paths: Iterable[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """The value a raw config gives each of `paths`, else its default, as a config of those paths alone: what a
    `when:` condition tests, and an `exclude:` rule in a cell that does not validate."""
    out: dict[str, Any] = {}
    for path in paths:
        set_path(out, path, get_path(raw, path, get_path(defaults, path)))
    return out


def raw_config(sweep: SweepSource, cell: Cell) -> dict[str, Any]:
    return sweep.config((path, value) for path, value, _ in cell)


def data_path_problem(data: dict[str, Any]) -> str | None:
    """A path the config gives must exist where the plan is made, whether the dataset needs one or takes it in
    place of a shipped copy, unless it is marked as the cluster's (`remote`). Read from the raw section, so a
    cell that fails validation elsewhere has this problem named too."""
    path = data.get("path")
    if not isinstance(path, str) or data.get("remote") is True or Path(path).exists():
        return None
    return f"{path} does not exist on this machine (data.remote: true marks a path only the cluster's nodes have)"


def with_whens(
    sweep: SweepSource,
    cells: list[Cell],
    whens: list[list[list[Cell]]],
    kinds: list[str],
    defaults: dict[str, Any],
    problems: list[Problem],
) -> tuple[list[Cell], list[Problem]]:
    """`cells` with each `when:` block's axes added to the cells its condition matches (`whens`: each block's axis
    groups; a condition tests a cell's raw config, else `defaults`, a default config as JSON data), and the problems
    of conditions that can never hold (a value no cell takes); a condition's bad path is added to `problems`."""
    dead: list[Problem] = []
    for w, block in enumerate(sweep.spec.when):
        for path in block.when:
            if (msg := path_problem(path, kinds)) is not None:
                problems.append(sweep.problem(("when", w, "when", path), msg))
        more: list[Cell] = []
        conditions = [given(raw_config(sweep, cell), block.when, defaults) for cell in cells]
        for cell, values in zip(cells, conditions, strict=True):
            if matches(block.when, values):
                more.extend(cell + extra for extra in product(whens[w]))
            else:
                more.append(cell)
        if not problems:  # a condition that can never hold leaves the cells as they are: named with theirs
            haves = {p: taken(get_path(v, p) for v in conditions) for p in block.when}
            dead += [sweep.problem(("when", w, "when", p), m) for p, m in dead_values(block.when, haves)]
        cells = more
    return cells, dead
