"""The export format both ways (issue 57): a store exported to Parquet or CSV and imported into an empty store gives
the same report to the byte; a second import adds nothing; the schema page names every column; a folder that is no
export is refused; on PostgreSQL both ways, the reports those of SQLite to the byte. Real stores filled through the
launcher's write API (tests/synthetic.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import TINY, fresh_database, write_sweeps
from synthetic import fill

from ablate.api import import_runs
from ablate.api.transfer import export
from ablate.planning.keys import Trial
from ablate.planning.plan import plan
from ablate.reporting import report
from ablate.store import Store
from ablate.transfer.export import TABLES, ExportError, read

ROOT = Path(__file__).parents[2]


def filled(tmp_path: Path) -> Store:
    """Two sweeps, one sharing trials with the other, some failed, 4 epochs each."""
    spec = {"base": TINY, "grid": {"attention.kind": ["softmax", "csan"]}, "seeds": 4,
            "baseline": {"attention.kind": "softmax"}}  # fmt: skip
    file = write_sweeps(tmp_path / "s.yaml", {"kinds": spec, "soft": {**spec, "grid": {"attention.kind": ["softmax"]}}})
    store = Store(str(tmp_path / "a.sqlite"))
    for name in ("kinds", "soft"):
        p = plan(file, name)
        fill(store, p, lambda t: 70 + t.axes["seed"] + csan(t), epochs=4,
             state=lambda t: "failed" if t.axes["seed"] == 3 and csan(t) else "done")  # fmt: skip
    return store


def csan(t: Trial) -> bool:
    return bool(t.axes["attention.kind"] == "csan")


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_an_export_imported_into_an_empty_store_reports_the_same_to_the_byte(tmp_path: Path, fmt: str) -> None:
    with filled(tmp_path) as a:
        exported = export(tmp_path / "out", store=a, fmt=fmt)
        report(store=a, out=tmp_path / "ra", formats=["md", "csv"])
    assert exported.rows["sweeps"] == 2 and exported.rows["trials"] == 8 and exported.rows["members"] == 12
    first = import_runs(tmp_path / "out", store=str(tmp_path / "b.sqlite"))
    assert (len(first.added), first.known) == (8, [])
    again = import_runs(tmp_path / "out", store=str(tmp_path / "b.sqlite"))
    assert (again.added, len(again.known)) == ([], 8)  # nothing twice
    with Store(str(tmp_path / "b.sqlite")) as b:
        report(store=b, out=tmp_path / "rb", formats=["md", "csv"])
        assert len(b.metrics_frame()) == exported.rows["metrics"]
    ours, theirs = files(tmp_path / "ra"), files(tmp_path / "rb")
    assert "kinds/report.md" in ours and ours == theirs


def test_an_export_imported_into_postgresql_and_exported_again_reports_as_sqlite_to_the_byte(
    tmp_path: Path, postgres: str
) -> None:
    """SQLite -> export -> an empty PostgreSQL store -> its report, then PostgreSQL -> export -> an empty SQLite
    store -> its report: both the SQLite store's report, to the byte (types, times and JSON as PostgreSQL keeps
    them)."""
    with filled(tmp_path) as a:
        export(tmp_path / "out", store=a)
        report(store=a, out=tmp_path / "ra", formats=["md", "csv"])
    pg = fresh_database(postgres)
    assert len(import_runs(tmp_path / "out", store=pg).added) == 8
    with Store(pg) as b:
        report(store=b, out=tmp_path / "rb", formats=["md", "csv"])
        again = export(tmp_path / "back", store=b)
    assert again.rows == json.loads((tmp_path / "out" / "manifest.json").read_text())["rows"]
    assert len(import_runs(tmp_path / "back", store=str(tmp_path / "c.sqlite")).added) == 8
    with Store(str(tmp_path / "c.sqlite")) as c:
        report(store=c, out=tmp_path / "rc", formats=["md", "csv"])
    ours = files(tmp_path / "ra")
    assert "kinds/report.md" in ours and ours == files(tmp_path / "rb") == files(tmp_path / "rc")


def test_one_sweep_exports_its_trials_memberships_metrics_and_flattened_configs(tmp_path: Path) -> None:
    with filled(tmp_path) as a:
        exported = export(tmp_path / "out", ["soft"], store=a)
    assert exported.rows["trials"] == 4 and exported.rows["members"] == 4  # kinds' memberships stay out
    trials = pq.read_table(tmp_path / "out" / "trials.parquet").to_pydict()
    assert trials["config.attention.kind"] == ["softmax"] * 4 and sorted(trials["config.seed"]) == [0, 1, 2, 3]
    assert sorted(trials["result.test.top1"]) == [70.0, 71.0, 72.0, 73.0]
    assert all(json.loads(c)["seed"] == s for c, s in zip(trials["config"], trials["config.seed"]))
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["sweeps"] == ["soft"] and manifest["rows"] == exported.rows


def test_the_schema_page_names_every_column_of_every_table() -> None:
    page = (ROOT / "docs" / "export.md").read_text()
    missing = [f"{name}.{c}" for name, (_, columns) in TABLES.items() for c in columns if f"`{c}`" not in page]
    assert not missing and all(f"\n## {name}\n" in page for name in TABLES)


def test_a_folder_without_a_manifest_is_no_export(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"manifest\.json"):
        read(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "ablate-export", "version": 99}))
    with pytest.raises(ExportError, match="version 99"):
        read(tmp_path)
