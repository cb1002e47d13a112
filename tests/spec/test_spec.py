"""experiments.yaml validation: every malformed file in tests/specs/bad gives its expected message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ablate.cli import app
from ablate.errors import SpecError
from ablate.planning.plan import load_plans
from ablate.spec.schema import json_schema

BAD = sorted((Path(__file__).parents[1] / "specs" / "bad").glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[2]


def expected(path: Path) -> list[str]:
    """The messages a file's leading `# expect: <message>` lines name: every one must be reported at once."""
    lines = path.read_text().splitlines()
    found = [line.removeprefix("# expect: ") for line in lines if line.startswith("# expect: ")]
    assert lines[0].startswith("# expect: "), f"{path.name} must start with '# expect: <message>'"
    return found


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 75
    assert sum(len(expected(p)) > 2 for p in BAD) >= 3  # files with defects in several sections


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_malformed_file_names_file_path_and_expectation(path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_plans(path)
    text = str(info.value)
    assert str(path) in text
    for message in expected(path):
        assert message in text, text


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_cli_exits_2_and_writes_nothing(path: Path, tmp_path: Path) -> None:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, ["plan", str(path), "--no-costs"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    assert all(message in result.output.replace("\n", "") for message in expected(path)), result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_launch_of_a_malformed_file_exits_2_before_anything_starts(path: Path, tmp_path: Path) -> None:
    """`launch` (not only `plan`): exit 2, the expected key path, and no store, MLflow store, checkpoints or
    reports: the working folder stays empty (Ray is never started: the check comes first)."""
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(app, ["launch", str(path), "--no-check", "--plain"])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    assert all(message in result.output.replace("\n", "") for message in expected(path)), result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("encoded", "message"),
    [("sweeps:\n  s: {description: caf\u00e9}\n".encode("latin-1"), "is not UTF-8 text (byte 0xe9)"),
     ("sweeps:\n  s: {}\n".encode("utf-16"), "is UTF-16 text: save it as UTF-8"),
     ("sweeps:\n  s: {}\n".encode("utf-16-be"), "is UTF-16 text: save it as UTF-8"),
     (b"sweeps:\n  s: {description: \xff\xfe}\n", "is not UTF-8 text (byte 0xff)")],
)  # fmt: skip
def test_text_that_is_not_utf8_is_a_spec_error(tmp_path: Path, encoded: bytes, message: str) -> None:
    f = tmp_path / "e.yaml"
    f.write_bytes(encoded)
    with pytest.raises(SpecError, match=re.escape(message)):
        load_plans(f)


def test_utf8_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    f = tmp_path / "e.yaml"
    f.write_bytes("sweeps:\n  s: {description: caf\u00e9, base: {train: {epochs: 1}}}\n".encode("utf-8-sig"))
    assert load_plans(f)["s"].description == "caf\u00e9"


def test_an_alias_bomb_is_refused_in_milliseconds_and_little_memory(tmp_path: Path) -> None:
    """A 1.3 KB billion-laughs document: refused by counting the expanded nodes on the composed graph, in a
    child process whose peak memory is measured (under 200 MB beyond the interpreter and imports)."""
    f = tmp_path / "bomb.yaml"
    rows = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    rows += [f"{c}: &{c} [{', '.join(['*' + p] * 10)}]" for p, c in zip("abcdefgh", "bcdefghi")]
    f.write_text("\n".join(rows) + "\nsweeps:\n  s: {}\n")
    code = (
        "import resource, sys, time\n"
        "from ablate.planning.plan import load_plans\nfrom ablate.errors import SpecError\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\nstart = time.perf_counter()\n"
        "try:\n    load_plans(sys.argv[1])\nexcept SpecError as e:\n    print(e)\n"
        "print(time.perf_counter() - start, (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(f)], capture_output=True, text=True, timeout=120)
    *message, numbers = out.stdout.strip().splitlines()
    _seconds, grown_mb = map(float, numbers.split())  # the time is not asserted: speed is measured, in bench/
    assert "the document expands to 1,234,567,913 YAML nodes" in " ".join(message), out.stdout + out.stderr
    assert grown_mb < 200


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    f = tmp_path / "huge.yaml"
    f.write_text("sweeps:\n  s: {}\n" + "# padding\n" * 200_000)
    size = f.stat().st_size
    with pytest.raises(SpecError, match=f"the file is {size:,} bytes; an experiments file may have at most 1,048,576"):
        load_plans(f)


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
    for model, key in ((schema, "defaults"), (defs["SweepSpec"], "base")):  # optional: the reference says required
        assert model["properties"][key]["default"] == {} and key not in model.get("required", []), key
    assert defs["CSaNAttention"]["properties"]["tau"]["description"].startswith("Row temperature")
    kinds = {d["properties"]["kind"]["const"] for n, d in defs.items() if n.endswith("Attention")}
    assert kinds == {"softmax", "csan", "syn", "gaussian", "laplace", "nlm", "sparsemax", "entmax15", "ista"}
    json.dumps(schema)


def test_schema_command_prints_json() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output)["title"] == "ablate experiments file"


def test_a_metric_is_one_of_the_final_results_the_task_records(tmp_path: Path) -> None:
    """`metric:` is checked at plan time against the task's declared results (`Task.results`, torch-free), not
    first at `report`: a MIL sweep's test.top1 is refused with MIL's results; each declared result plans."""
    f = tmp_path / "e.yaml"
    mil = "{task: mil, data: {name: musk1}, model: {size: synpool}}"
    f.write_text(f"sweeps:\n  s:\n    metric: test.top1\n    base: {mil}\n")
    with pytest.raises(SpecError) as info:
        load_plans(f)
    assert str(info.value) == (f"{f}:3: sweeps.s.metric: mil records no final result 'test.top1': expected one of "
                               "test.loss, test.auc, test.acc (the test scores reports compare trials on)")  # fmt: skip
    for metric in ("test.loss", "test.auc", "test.acc"):
        f.write_text(f"sweeps:\n  s:\n    metric: {metric}\n    base: {mil}\n")
        assert load_plans(f)["s"].metric == metric
