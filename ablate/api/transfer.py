"""`ablate export` and `ablate import` (`ablate.transfer`): a store's sweeps out to Parquet or CSV, and runs ablate did
not train in, from an MLflow experiment, a table or an export, each a typed result.

    ablate.api.export("out/", ["cpu"], fmt="parquet")                      # out/trials.parquet, ...
    ablate.api.import_runs("mlruns", experiment="cifar", seed="seed")    # every parameter but the seed an axis
    ablate.api.import_runs("runs.csv", seed="seed", axes=["lr", "model"], metrics=["val_acc"])
    ablate.api.import_runs("out/")                                         # an export read back

Every run is read and checked before the store is opened: an import that fails (`ImportProblem`) writes nothing,
and one that succeeds writes in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.api.stores import open_store, reading

if TYPE_CHECKING:
    from ablate.spec.imports import ImportSpec
    from ablate.store import Store
    from ablate.store.dump import Dump
    from ablate.transfer.export import Exported


@dataclass(frozen=True)
class Imported:
    """What `import_runs` did: the sweeps it wrote to, the trials it added and those the store held already (a
    second import of the same runs adds none), and notes on runs it left out or changed."""

    sweeps: list[str]
    added: list[str]
    known: list[str]
    notes: list[str] = field(default_factory=list)


def export(
    folder: Path | str, sweeps: Sequence[str] | None = None, *, store: Store | str | None = None, fmt: str = "parquet"
) -> Exported:
    """Write `sweeps` (default: the whole store) of `store` to `folder` as `fmt` (parquet or csv) files: sweeps,
    trials (configs and results also flattened to columns), memberships, per-epoch metrics, previous results, and
    the manifest (docs/export.md). A LookupError where the database or a sweep named does not exist."""
    from importlib import metadata

    from ablate.store.engine import revision_number
    from ablate.transfer.export import write

    with reading(store) as opened:
        names = list(sweeps) if sweeps else None
        if names and (unknown := [s for s in names if opened.sweep(s) is None]):
            raise LookupError(f"no sweep {', '.join(map(repr, unknown))} in the store")
        rows = opened.dump(names)
    return write(rows, Path(folder), fmt, revision=revision_number(), sweeps=names, version=metadata.version("ablate"))


def import_runs(
    source: Path | str,
    *,
    store: Store | str | None = None,
    experiment: str | None = None,
    sweep: str | None = None,
    seed: str = "seed",
    axes: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    metric: str | None = None,
    direction: str | None = None,
    select: str = "last",
    baseline: dict[str, Any] | None = None,
    ignore: Sequence[str] = (),
    run_id: str | None = None,
    epoch: str | None = None,
    status: str | None = None,
    duplicates: str = "refuse",
) -> Imported:
    """Add runs to `store` (created where it does not exist) as the trials of `sweep`: from an MLflow `experiment`
    (name or id) at `source` (a tracking URI, `mlruns` folder or SQLite file), from a CSV or Parquet table at
    `source` (its columns: `seed`, `axes` or `metrics`, and optionally `run_id`, `epoch` for the long format and
    `status`), or, where `source` is a folder `ablate export` wrote, that export's sweeps as they were. `sweep`
    defaults to the experiment's or the table's name; `metric` is the headline (default: the first by name), better
    as `direction` says (max or min; default: as its name says), its value at the last epoch or, `select="best"`,
    the best one is the result; `baseline`: {parameter: value}. Trials already in the store are left as they are.
    ImportProblem, with nothing written, where a column or parameter is unknown, a seed is missing or not an
    integer, a direction is not max or min, or two runs claim one cell and seed (unless `duplicates` is first or
    last)."""
    from pydantic import ValidationError

    from ablate.spec.imports import ImportSpec
    from ablate.transfer import export
    from ablate.transfer.runs import ImportProblem

    path = Path(source)
    if experiment is None and path.is_dir() and export.is_export(path):
        return _add(export.read(path), store, [])
    try:
        spec = ImportSpec(source=str(source), experiment=experiment, seed=seed, axes=_listed(axes),
                          metrics=_listed(metrics), metric=metric, direction=direction, select=select,
                          baseline=baseline, ignore=list(ignore), run_id=run_id, epoch=epoch, status=status,
                          duplicates=duplicates)  # fmt: skip
    except ValidationError as e:
        raise ImportProblem([f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()]) from None
    rows, notes, name = _converted(spec, sweep)
    return _add(rows, store, notes, name)


def import_file(
    file: Path | str, sweeps: Sequence[str] | None = None, *, store: Store | str | None = None
) -> list[Imported]:
    """The `import:` block of an experiments file (`ablate.spec.imports`), each entry's runs added as the trials of
    the sweep it names (`sweeps`: only these): what `import_runs` does with its flags. Every entry is read and
    checked before anything is written; a bad block is a SpecError, an entry whose runs cannot be imported an
    ImportProblem naming the file and the entry."""
    from ablate.spec.imports import read_imports
    from ablate.transfer.runs import ImportProblem

    path = Path(file)
    blocks = read_imports(path)
    unknown = [s for s in sweeps or [] if s not in blocks]
    if unknown or not blocks:
        there = ", ".join(blocks) or "none"
        raise ImportProblem([f"{path}: no import entry {', '.join(map(repr, unknown))} (entries: {there})" if unknown
                             else f"{path}: no `import:` block"])  # fmt: skip
    chosen = {n: b for n, b in blocks.items() if not sweeps or n in sweeps}
    converted = []
    for name, block in chosen.items():
        spec = block.model_copy(update={"source": block.source_at(path.resolve().parent)})
        try:
            converted.append(_converted(spec, name))
        except ImportProblem as e:
            raise ImportProblem([f"{path}: import.{name}: {p}" for p in e.problems]) from None
    return [_add(rows, store, notes, sweep) for rows, notes, sweep in converted]


def _listed(names: Sequence[str] | None) -> list[str] | None:
    return list(names) if names else None


def _converted(spec: ImportSpec, sweep: str | None) -> tuple[Dump, list[str], str]:
    """The rows of the runs `spec` names, notes on those left out or changed, and the sweep they go to (default:
    the experiment's or the table's name)."""
    from ablate.transfer import mlflow_runs, tabular
    from ablate.transfer.runs import Mapping, to_dump

    if spec.experiment is not None:
        found, origin, notes = mlflow_runs.runs(spec.source, spec.experiment)
        axes = tuple(spec.axes) if spec.axes else None
    else:
        named = (tuple(spec.axes) if spec.axes else None, tuple(spec.metrics) if spec.metrics else None)
        columns = tabular.Columns(spec.seed, *named, spec.run_id, spec.epoch, spec.status)
        found, origin, axes = tabular.runs(Path(spec.source), columns)
        notes = []
    name = sweep or _sweep_name(origin.experiment)
    mapping = Mapping(name, spec.seed, axes, spec.metric, spec.direction, spec.select, spec.baseline,
                      tuple(spec.ignore), spec.duplicates)  # fmt: skip
    converted = to_dump(found, mapping, origin)
    return converted.dump, notes + converted.notes, name


def _sweep_name(text: str) -> str:
    """A sweep name from an experiment's or a file's name: letters, digits, - and _."""
    import re

    stem = Path(text).stem if "." in text else text
    return re.sub(r"[^A-Za-z0-9_-]+", "-", stem).strip("-")[:64] or "imported"


def _add(rows: Dump, store: Store | str | None, notes: list[str], sweep: str | None = None) -> Imported:
    """Write `rows` in one transaction; an ImportProblem, with nothing written, where `sweep` holds trials ablate
    planned (an import never mixes into a launched sweep)."""
    from ablate.transfer.runs import ImportProblem

    with open_store(store) as opened:
        record = opened.sweep(sweep) if sweep else None
        if record is not None and not (record.spec or {}).get("imported"):
            raise ImportProblem([f"sweep {sweep!r} holds trials ablate launched; import into a sweep of its own "
                                 "(--sweep NAME)"])  # fmt: skip
        added = opened.add_dump(rows)
    return Imported(sorted(r["name"] for r in rows.sweeps), added.new, added.known, notes)
