"""`ablate export` and `ablate import` on the command line (issue 57): a table imported, exported and imported into
another store; an unknown column exits 2 naming it with nothing written; two runs in one cell and seed exit 2
naming both, and `--duplicates last` keeps one; an experiments file's `import:` block checked like every block;
`ablate show` says where an imported trial came from."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from typer.testing import CliRunner

from ablate.cli import app
from ablate.spec.sweeps import read_sweeps
from ablate.store import Store

ROWS = [{"model": m, "seed": s, "acc": 0.7 + 0.1 * (m == "vit") + s / 100} for m in ("resnet", "vit") for s in range(3)]


def invoke(*args: str, code: int = 0) -> str:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    assert result.exit_code == code, result.output
    return result.output


def test_a_table_imported_exported_and_imported_elsewhere(tmp_path: Path) -> None:
    table, a, b = tmp_path / "grid.csv", str(tmp_path / "a.sqlite"), str(tmp_path / "b.sqlite")
    pd.DataFrame(ROWS).to_csv(table, index=False)
    assert "imported 6 trials into grid" in invoke("import", str(table), "--axis", "model", "--db", a)
    assert "imported 0 trials into grid; 6 already in the store" in invoke("import", str(table), "--axis", "model",
                                                                           "--db", a)  # fmt: skip
    out = invoke("export", str(tmp_path / "out"), "grid", "--format", "csv", "--db", a)
    assert "exported 1 sweeps, 6 trials, 6 members, 6 metrics, 0 previous" in out
    assert "imported 6 trials into grid" in invoke("import", str(tmp_path / "out"), "--db", b)
    assert "vit" in invoke("runs", "grid", "--db", b)


def test_an_unknown_column_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    table, db = tmp_path / "grid.csv", tmp_path / "a.sqlite"
    pd.DataFrame(ROWS).to_csv(table, index=False)
    out = invoke("import", str(table), "--axis", "model,optimizer", "--db", str(db), code=2)
    assert "no column 'optimizer' (columns: model, seed, acc)" in out and not db.exists()


def test_two_runs_in_one_cell_and_seed_are_named_and_kept_only_as_told(tmp_path: Path) -> None:
    table, db = tmp_path / "grid.csv", str(tmp_path / "a.sqlite")
    pd.DataFrame([*ROWS, {**ROWS[0], "acc": 0.5}]).to_csv(table, index=False)
    out = invoke("import", str(table), "--axis", "model", "--db", db, code=2)
    assert 'runs row 1, row 7 claim the same cell {"model": "resnet"} and seed 0' in out
    out = invoke("import", str(table), "--axis", "model", "--db", db, "--duplicates", "last")
    assert "imported 6 trials" in out and "note: runs row 1, row 7 claim" in out


def test_an_import_block_is_checked_like_every_block_and_imports_as_the_flags_do(tmp_path: Path) -> None:
    pd.DataFrame(ROWS).to_csv(tmp_path / "grid.csv", index=False)
    file, db = tmp_path / "experiments.yaml", tmp_path / "a.sqlite"
    file.write_text("sweeps:\n  a:\n    base: {data: {name: digits}}\nimport:\n  grid:\n    source: grid.csv\n"
                    "    axes: [model]\n    metric: acc\n    baseline: {model: resnet}\n    seeds: 3\n")  # fmt: skip
    out = invoke("import", "--file", str(file), "--db", str(db), code=2)
    assert f"{file}:10: import.grid.seeds: unknown key; did you mean 'seed'?" in out and not db.exists()
    file.write_text(file.read_text().replace("    seeds: 3\n", "    status: state\n"))
    out = invoke("import", "--file", str(file), "--db", str(db), code=2)
    assert f"{file}: import.grid: {tmp_path / 'grid.csv'}: no column 'state'" in out and not db.exists()
    file.write_text(file.read_text().replace("    status: state\n", ""))
    assert "imported 6 trials into grid" in invoke("import", "--file", str(file), "--db", str(db))
    with Store(str(db)) as store:
        key = store.member_keys(["grid"])[0]
    shown = invoke("show", key, "--db", str(db), "--mlflow-uri", "")
    assert f"imported from table grid.csv ({tmp_path / 'grid.csv'}), run row " in shown
    assert read_sweeps(file).problems == []  # the sweeps' reader takes the block too


def test_a_direction_says_which_way_the_headline_is_better_and_a_bad_one_exits_2(tmp_path: Path) -> None:
    """`wer` reads as higher-is-better by its name; `--direction min` (or `direction: min` in the block) makes the
    report rank the lowest first. A direction that is not max or min: exit 2, the flag or the file's key named,
    nothing written."""
    rows = [
        {"model": m, "seed": s, "wer": 0.3 - 0.1 * (m == "vit") + s / 100} for m in ("resnet", "vit") for s in (0, 1)
    ]
    pd.DataFrame(rows).to_csv(tmp_path / "grid.csv", index=False)
    db, file = tmp_path / "a.sqlite", tmp_path / "experiments.yaml"
    out = invoke("import", str(tmp_path / "grid.csv"), "--axis", "model", "--direction", "up", "--db", str(db), code=2)
    assert "direction: Input should be 'max' or 'min'" in out and not db.exists()
    file.write_text("import:\n  grid:\n    source: grid.csv\n    axes: [model]\n    direction: up\n")
    out = invoke("import", "--file", str(file), "--db", str(db), code=2)
    assert f"{file}:5: import.grid.direction: Input should be 'max' or 'min'" in out and not db.exists()
    file.write_text(file.read_text().replace("direction: up", "direction: min"))
    assert "imported 4 trials into grid" in invoke("import", "--file", str(file), "--db", str(db))
    invoke("report", "grid", "--db", str(db), "--out", str(tmp_path / "r"), "-f", "md")
    text = (tmp_path / "r" / "grid" / "report.md").read_text()
    assert "Metric: wer, lower is better" in text and "| run; model=vit | 0.2050 |   | best mean |" in text
