"""`ablate plan`'s rows as CSV and JSON (`ablate.api.plan_rows.write_csv`, `write_json`): the bytes Python's csv
and json modules write for them."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from conftest import TINY, write_sweeps

from ablate.api.plan_rows import SEED, _CsvLines, columns, document, rows, variant_costs, write_csv, write_json
from ablate.config import TrialConfig
from ablate.planning.keys import Trial
from ablate.planning.plan import Plan, plan


def written_by_csv(plans: list[Plan]) -> str:
    """Every row with its config text through csv.writer, the whole row at once."""
    fields = list(dict.fromkeys(c for p in plans for c in [*columns(p, None), "config"]))
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(fields)
    for p in plans:
        for row, t in zip(rows(p, None), p.trials, strict=True):
            row["config"] = t.resolved_text()
            writer.writerow(json.dumps(v) if isinstance(v := row.get(f, ""), (dict, list)) else v for f in fields)
    return text.getvalue()


def two_sweeps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str = "${H6_DATA}/x") -> list[Plan]:
    """Two sweeps with other axes (the second's columns come after the config, some of its cells empty in the
    first's rows, a list-valued axis), a value from the environment holding quotes and a comma."""
    monkeypatch.setenv("H6_DATA", 'a "quoted", dir')
    sweeps = {
        "a": {"base": {**TINY, "data": {"name": "digits", "path": path, "remote": True}}, "seeds": 3,
              "grid": {"attention.kind": ["softmax", "csan"]}},
        "b": {"base": TINY, "seeds": 2, "grid": {"train.lr": [0.1, 0.2], "model.depths": [[2], [3]]}},
    }  # fmt: skip
    f = write_sweeps(tmp_path / "e.yaml", sweeps)
    return [plan(f, "a"), plan(f, "b")]


def test_the_csv_is_what_the_csv_module_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same text, byte for byte, as csv.writer given each whole row."""
    plans = two_sweeps(tmp_path, monkeypatch)
    out = io.StringIO()
    write_csv(plans, None, out)
    assert out.getvalue() == written_by_csv(plans)
    header = out.getvalue().splitlines()[0].split(",")
    assert header.index("config") < header.index("train.lr")  # a column after the config
    assert '\\""quoted\\""' in out.getvalue() and len(out.getvalue().splitlines()) == 1 + 6 + 8


def test_the_json_is_what_the_json_module_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`write_json` streams `document` as json.dumps(indent=1) writes it, byte for byte, costs included; a cell
    whose config holds a mark's text itself (where each trial's seed would go) is written whole, as the rest."""
    for path in ("${H6_DATA}/x", SEED):
        plans = two_sweeps(tmp_path, monkeypatch, path)
        costs = variant_costs(plans)
        out = io.StringIO()
        write_json(plans, costs, out)
        assert out.getvalue() == json.dumps(document(plans, costs), indent=1) + "\n"
        out = io.StringIO()
        write_csv(plans, None, out)
        assert out.getvalue() == written_by_csv(plans)


def test_a_config_without_a_cell_is_quoted_as_the_csv_module_quotes_it() -> None:
    t = Trial("k", "v", TrialConfig.model_validate({**TINY, "data": {"name": "digits", "path": 'say "hi", go'}}), {})
    text = io.StringIO()
    csv.writer(text, lineterminator="\n").writerow(["k", t.resolved_text()])
    assert _CsvLines(["key", "config"]).text({"key": "k"}, t) == text.getvalue()
