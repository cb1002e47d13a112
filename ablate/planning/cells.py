"""The cells of a sweep's grid: axis groups (grid axes, linked rows, `when:` blocks) and their products, each
cell's raw config, and what is wrong in them named by the key path where the user wrote it (`SweepProblem`:
functions of the sweep's data, placed in its file by its `SweepSource`; `ablate.planning.plan` validates and keys
the cells into trials).
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ablate.config import TrialConfig
from ablate.errors import format_path
from ablate.planning.designs import Cell
from ablate.spec.paths import get_path, matches, overlaps, set_path
from ablate.spec.problems import SweepProblem, clean_loc, error_message
from ablate.spec.registry_check import knob_owners, path_problem
from ablate.spec.schema import Linked, axis_paths
from ablate.spec.sweeps import Sweep
from ablate.spec.yaml_doc import Loc


def groups(
    grid: dict[str, list[Any]],
    linked: list[Linked],
    at: Loc,
    problems: list[SweepProblem],
    kinds: list[str],
) -> list[list[Cell]]:
    """Each axis group as its list of rows (a row is a partial cell), its problems added to `problems`; `kinds`: the
    attention kinds they apply to."""
    groups: list[list[Cell]] = []
    for path, values in grid.items():
        loc = at + ("grid", path)
        if (msg := path_problem(path, kinds)) is not None:
            problems.append(SweepProblem(loc, msg))
        elif not values:
            problems.append(SweepProblem(loc, "empty axis: expected a list of at least one value"))
        groups.append([((path, v, loc + (i,)),) for i, v in enumerate(values)])
    for g, group in enumerate(linked):
        loc = at + ("linked", g)
        if isinstance(group, dict):
            lengths = {len(v) for v in group.values()}
            if len(lengths) > 1:
                problems.append(
                    SweepProblem(loc, f"linked axes need lists of one length, got lengths {sorted(lengths)}")
                )
                continue
            rows = [{p: vals[i] for p, vals in group.items()} for i in range(lengths.pop() if lengths else 0)]
            locs = [{p: loc + (p, i) for p in group} for i in range(len(rows))]
        else:
            rows = group
            locs = [{p: loc + (i, p) for p in row} for i, row in enumerate(rows)]
        if not rows:
            problems.append(SweepProblem(loc, "empty linked group: expected at least one row"))
        for p in {p for row in rows for p in row}:
            if (msg := path_problem(p, kinds)) is not None:
                problems.append(SweepProblem(loc, msg))
        groups.append([tuple((p, v, locs[i][p]) for p, v in row.items()) for i, row in enumerate(rows)])
    return groups


def product(groups: list[list[Cell]]) -> Iterable[Cell]:
    for combo in itertools.product(*groups):
        yield tuple(a for row in combo for a in row)


def declared(loc: Loc) -> Loc:
    """Where an axis value's axis is declared: `grid.PATH` or `linked[g]` (inside a when block or not)."""
    at = max(i for i, part in enumerate(loc) if part in ("grid", "linked"))
    return loc[: at + 2]


def varied_twice(cell: Cell) -> list[SweepProblem]:
    """An axis a cell takes from two places (grid and linked, two linked groups, a when block and the grid):
    one value would silently win, so each path is varied in one place."""
    first: dict[str, Loc] = {}
    problems = []
    for path, _, loc in cell:
        where = declared(loc)
        if first.setdefault(path, where) != where:
            problems.append(SweepProblem(where, f"{path} is also varied at {format_path(first[path])}: vary each "
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


def where(cell: Cell, err_path: str, msg: str) -> list[SweepProblem]:
    """A cell's validation error at the key paths of the axes that set the offending path, else in the base."""
    hits = [
        SweepProblem(loc, msg if "(got " in msg or ", got " in msg else f"{msg} (value {value!r})")
        for path, value, loc in cell
        if err_path and overlaps(path, err_path)
    ]
    if hits:
        return hits
    if not err_path:
        desc = ", ".join(f"{p}={v!r}" for p, v, _ in cell)
        return [SweepProblem(("base",), f"{msg} (in the cell {desc})" if desc else msg)]
    return [SweepProblem(("base", *err_path.split(".")), msg)]


def base_problems(sweep: Sweep) -> list[SweepProblem]:
    """What is wrong in the base where no axis could mend it: named beside a grid's own problems, which stop
    the cells from being checked, so a file's problems are named at once."""
    varied = axis_paths(sweep.spec)

    def fixed(path: str) -> bool:
        return bool(path) and not any(overlaps(path, v) for v in varied)

    base = raw_config(sweep, ())
    try:
        TrialConfig.model_validate(base)
    except ValidationError as err:
        return refused((), base, err, fixed)
    return refused((), base, None, fixed)


def refused(
    cell: Cell, raw: dict[str, Any], err: ValidationError | None, kept: Callable[[str], bool] = lambda _: True
) -> list[SweepProblem]:
    """What is wrong in a cell's raw config, at the axes that set each path (`where`): each error of its validation
    (`err`), then a data path this machine lacks (read from the raw section, so a cell that fails validation
    elsewhere has it named too); those at a path `kept` keeps."""
    found = [
        (".".join(str(p) for p in clean_loc(tuple(e["loc"]), raw)), error_message(e, TrialConfig))
        for e in (err.errors() if err is not None else [])
    ]
    if isinstance(raw.get("data"), dict) and (msg := data_path_problem(raw["data"])) is not None:
        found.append(("data.path", msg))
    return [p for path, msg in found if kept(path) for p in where(cell, path, msg)]


def given(raw: dict[str, Any], paths: Iterable[str], defaults: dict[str, Any]) -> dict[str, Any]:
    """The value a raw config gives each of `paths`, else its default, as a config of those paths alone: what a
    `when:` condition tests, and an `exclude:` rule in a cell that does not validate."""
    out: dict[str, Any] = {}
    for path in paths:
        set_path(out, path, get_path(raw, path, get_path(defaults, path)))
    return out


def raw_config(sweep: Sweep, cell: Cell) -> dict[str, Any]:
    """A cell's raw config: the sweep's base with the cell's values set, then each of the sweep's knobs (`-s`
    overrides of a mechanism's own fields) if the cell's mechanism has that knob."""
    raw = copy.deepcopy(sweep.base)
    for path, value, _ in cell:
        set_path(raw, path, value)
    kind = get_path(raw, "attention.kind", "softmax")
    for o in sweep.knobs:
        if isinstance(kind, str) and kind in knob_owners(o.path):
            set_path(raw, o.path, o.value)
    return raw


def data_path_problem(data: dict[str, Any]) -> str | None:
    """A path the config gives must exist where the plan is made, whether the dataset needs one or takes it in
    place of a shipped copy, unless it is marked as the cluster's (`remote`). Read from the raw section, so a
    cell that fails validation elsewhere has this problem named too."""
    path = data.get("path")
    if not isinstance(path, str) or data.get("remote") is True or Path(path).exists():
        return None
    return f"{path} does not exist on this machine (data.remote: true marks a path only the cluster's nodes have)"


def with_whens(
    sweep: Sweep,
    cells: list[Cell],
    whens: list[list[list[Cell]]],
    kinds: list[str],
    defaults: dict[str, Any],
    problems: list[SweepProblem],
) -> tuple[list[Cell], list[SweepProblem]]:
    """`cells` with each `when:` block's axes added to the cells its condition matches (`whens`: each block's axis
    groups; a condition tests a cell's raw config, else `defaults`, a default config as JSON data), and the problems
    of conditions that can never hold (a value no cell takes); a condition's bad path is added to `problems`."""
    dead: list[SweepProblem] = []
    for w, block in enumerate(sweep.spec.when):
        for path in block.when:
            if (msg := path_problem(path, kinds)) is not None:
                problems.append(SweepProblem(("when", w, "when", path), msg))
        more: list[Cell] = []
        conditions = [given(raw_config(sweep, cell), block.when, defaults) for cell in cells]
        for cell, values in zip(cells, conditions, strict=True):
            if matches(block.when, values):
                more.extend(cell + extra for extra in product(whens[w]))
            else:
                more.append(cell)
        if not problems:  # a condition that can never hold leaves the cells as they are: named with theirs
            haves = {p: taken(get_path(v, p) for v in conditions) for p in block.when}
            dead += [SweepProblem(("when", w, "when", p), m) for p, m in dead_values(block.when, haves)]
        cells = more
    return cells, dead
