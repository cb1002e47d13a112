"""A plugin mechanism's knobs, as a new author writes them (`power: int`, `normalize: bool`, one file): a knob
takes a value as it is written ("no" is not false, 1 is not true, "2" is not 2), grid values that make one cell
twice are an error, and an unknown knob is compared with that mechanism's own knobs. Each is refused by `plan`
and `launch` with the file, the key path and what was expected: exit 2, nothing written. (The built-in
mechanisms' cases are files of tests/specs/bad, run by test_spec.py.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import TINY
from test_plugins import GOOD_BODY, LAYERS
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import SpecError
from ablate.planning.keys import Trial
from ablate.planning.plan import Plan, load_plans

#: A ReLU-power mechanism with two knobs, its mixer the plugin tests' ReLU attention (`Relu`, after it).
PLUGIN = '''
from typing import Literal

from pydantic import Field

from ablate.config import Mechanism
from ablate.registry import register_mechanism


@register_mechanism
class ReluPower(Mechanism):
    """relu(q k^T)^power attention, each row divided by its sum or not."""

    kind: Literal["relupow"] = "relupow"
    power: int = Field(2, ge=1)
    """Exponent of the ReLU."""
    normalize: bool = True
    """Divide each row by its sum."""

    def build(self, dim, num_heads, in_dim=None):
        return Relu(self, dim, num_heads, in_dim)
''' + LAYERS.format(body=GOOD_BODY)


def experiments(folder: Path, sweep: dict[str, Any]) -> Path:
    """An experiments file beside the plugin file, its one sweep `sweep` over the tiny ReLU-power model."""
    (folder / "relupow.py").write_text(PLUGIN)
    base = {**TINY, "attention": {"kind": "relupow"}, **sweep.pop("base", {})}
    path = folder / "e.yaml"
    path.write_text(yaml.safe_dump({"plugins": ["./relupow.py"], "sweeps": {"s": {"base": base, **sweep}}}))
    return path


def refused(path: Path, overrides: tuple[str, ...] = ()) -> str:
    """The SpecError of planning `path` with `overrides`, which names the file (or the override it is in)."""
    with pytest.raises(SpecError) as info:
        load_plans(path, overrides=overrides)
    assert (f"override {overrides[0]!r}" if overrides else str(path)) in str(info.value)
    return str(info.value)


@pytest.mark.parametrize("command", [["plan", "--no-costs"], ["launch", "--no-check", "--plain"]])
def test_knob_values_are_taken_as_written_and_refused_before_anything_starts(
    tmp_path: Path, command: list[str]
) -> None:
    f = experiments(tmp_path, {"grid": {"attention.normalize": [True, "no", 1], "attention.power": [1, "2"]}})
    expected = ["s.grid[\"attention.normalize\"][1]: expected true or false, got the string 'no'",
                's.grid["attention.normalize"][2]: expected true or false, got the number 1',
                "s.grid[\"attention.power\"][1]: expected an integer, got the string '2'"]  # fmt: skip
    text = refused(f)
    assert all(message in text for message in expected), text
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, [command[0], str(f), *command[1:]])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    assert all(message in result.output.replace("\n", "") for message in expected), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml", "relupow.py"]  # no store, no checkpoints


def test_knob_values_that_make_one_cell_twice_are_an_error(tmp_path: Path) -> None:
    """2 and 2.0 are one integer knob: 3 x 2 cells written, 2 x 2 planned, were it not refused."""
    grid = {"attention.power": [1, 2, 2.0], "attention.normalize": [True, False]}
    text = refused(experiments(tmp_path, {"grid": grid, "seeds": 3}))
    assert 's.grid["attention.power"][2]: 2.0 makes the same trials as 2 (grid["attention.power"][1]): both are ' \
           "attention.power = 2 once validated" in text, text  # fmt: skip
    grid["attention.power"] = [1, 2, 3]
    plan = load_plans(experiments(tmp_path, {"grid": grid, "seeds": 3}))["s"]
    assert len(plan.trials) == 18 and len(plan.variants) == 6


def test_an_unknown_knob_is_compared_with_its_own_mechanisms_knobs(tmp_path: Path) -> None:
    """In a grid, in the base, as a knob of another mechanism (syn's `renormalize`) and in an override: the
    nearest of relupow's knobs, and relupow's knobs only (not the built-ins' 20-odd)."""
    own = "expected one of ['kind', 'normalize', 'power', 'projections'] (the knobs of attention kind relupow)"
    text = refused(experiments(tmp_path, {"grid": {"attention.normalise": [True, False]}}))
    assert "'normalise' is not a key of attention; did you mean 'normalize'? " + own in text, text
    text = refused(experiments(tmp_path, {"base": {"attention": {"kind": "relupow", "powr": 3}}}))
    assert "s.base.attention.powr: unknown key; did you mean 'power'? " + own in text, text
    text = refused(experiments(tmp_path, {"grid": {"attention.renormalize": [True]}}))
    assert "s.grid[\"attention.renormalize\"][0]: unknown key; did you mean 'normalize'? " + own in text, text
    text = refused(experiments(tmp_path, {}), overrides=("attention.normalise=true",))
    assert "did you mean 'normalize'? " + own in text and "tau" not in text, text


def test_a_number_in_exponent_notation_is_a_number_quoted_or_not_where_yaml_1_1_reads_text(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads `1e-3` as text: the file's reader takes it for the number YAML 1.2 says it is, so
    a number field takes it as written and a baseline matches it; quoted, it is text, and refused."""
    f = tmp_path / "e.yaml"
    sweep = "base: {data: {name: digits}}\n    grid: {train.lr: [1e-3, 2.0e-3]}\n    baseline: {train.lr: 1e-3}"
    f.write_text(f"sweeps:\n  s:\n    {sweep}\n")
    plan = load_plans(f)["s"]
    assert [t.config.train.lr for t in plan.trials] == [0.001, 0.002]
    assert plan.baseline == plan.trials[0].variant
    quoted = sweep.replace("[1e-3", '["1e-3"')
    f.write_text(f"sweeps:\n  s:\n    {quoted}\n")
    assert "expected a number, got the string '1e-3'" in refused(f)


def test_an_override_of_a_knob_some_mechanisms_have_is_set_on_their_cells_only(tmp_path: Path) -> None:
    """`-s attention.power=3` over softmax and relupow: relupow's cells take it (new keys), softmax's keep their
    configs and keys. On a sweep of relupow alone it is set on the base; a knob none of the sweep's mechanisms
    has (csan's `tau`) is refused, naming the mechanisms that have it."""
    f = experiments(tmp_path, {"grid": {"attention.kind": ["softmax", "relupow"]}, "seeds": 2})
    before, after = load_plans(f)["s"], load_plans(f, overrides=("attention.power=3",))["s"]

    def cells(plan: Plan, kind: str) -> list[Trial]:
        return [t for t in plan.trials if t.config.attention.kind == kind]

    assert [t.key for t in cells(after, "softmax")] == [t.key for t in cells(before, "softmax")]
    assert [t.config.attention.power for t in cells(after, "relupow")] == [3, 3]
    assert not {t.key for t in cells(after, "relupow")} & {t.key for t in cells(before, "relupow")}
    text = refused(f, overrides=("attention.tau=false",))
    assert "attention.tau: no cell of sweep s has a mechanism with this knob (its attention kinds: relupow, " \
           "softmax); attention.tau is a knob of csan (found False)" in text, text  # fmt: skip
    alone = load_plans(experiments(tmp_path, {}), overrides=("attention.power=3",))["s"]
    assert [t.config.attention.power for t in alone.trials] == [3]
