"""experiments.yaml validation: every malformed file in tests/specs/bad gives its expected message."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import SpecError
from ablate.planner import load_plans
from ablate.spec import json_schema

BAD = sorted((Path(__file__).parent / "specs" / "bad").glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[1]


def expected(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return first.removeprefix("# expect: ")


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 20


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_malformed_file_names_file_path_and_expectation(path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_plans(path)
    text = str(info.value)
    assert str(path) in text
    assert expected(path) in text, text


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_cli_exits_2_and_writes_nothing(path: Path, tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, ["plan", str(path), "--no-costs"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    assert expected(path) in result.output.replace("\n", "")
    assert list(tmp_path.iterdir()) == []


def test_all_problems_of_a_file_are_reported(tmp_path: Path) -> None:
    f = tmp_path / "many.yaml"
    f.write_text(
        "sweeps:\n"
        "  a:\n"
        "    grid: {model.nope: [1], attention.kind: [softmax]}\n"
        "  b:\n"
        "    seeds: []\n"
        "  c:\n"
        "    base: {attention: {kind: syn}}\n"
        "    grid: {attention.gamma: [0, 2]}\n"
    )
    with pytest.raises(SpecError) as info:
        load_plans(f)
    lines = [str(p) for p in info.value.problems]
    assert any("sweeps.a.grid" in p and "model.nope" in p for p in lines)
    assert any("sweeps.b.seeds" in p for p in lines)
    assert any('attention.gamma"][0]' in p for p in lines)
    assert any('attention.gamma"][1]' in p for p in lines)


def test_yaml_is_loaded_safely(tmp_path: Path) -> None:
    f = tmp_path / "evil.yaml"
    f.write_text("sweeps: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(SpecError, match="invalid YAML"):
        load_plans(f)


def test_repository_experiments_file_is_valid() -> None:
    sweeps = load_plans(ROOT / "experiments.yaml")
    assert {"cpu", "csan-paper", "syn-mil", "self-expression"} <= set(sweeps)


def test_schema_describes_fields_and_kinds() -> None:
    schema = json_schema()
    defs = schema["$defs"]
    assert schema["properties"]["defaults"]["$ref"] == "#/$defs/TrialConfig"
    assert defs["CSaNAttention"]["properties"]["tau"]["description"].startswith("Row temperature")
    kinds = {d["properties"]["kind"]["const"] for n, d in defs.items() if n.endswith("Attention")}
    assert kinds == {"softmax", "csan", "syn", "gaussian", "laplace", "sparsemax", "entmax15", "ista"}
    json.dumps(schema)


def test_schema_command_prints_json() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output)["title"] == "ablate experiments file"
