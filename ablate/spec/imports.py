"""The `import:` block of experiments.yaml: how runs ablate did not train become a sweep's trials (`ImportSpec`, one
per sweep name), what `ablate import --file experiments.yaml` reads instead of flags. Checked like every other block
(`SpecFile` holds it): an unknown key or a value of the wrong kind is a problem with its file and line.

    import:
      digits:                     # the sweep the runs become
        source: mlflow.db         # tracking URI, mlruns folder, SQLite file or a table (relative to this file)
        experiment: digits        # an MLflow experiment, by name or id (none: the source is a table)
        seed: seed
        metric: val_acc
        direction: max            # which way val_acc is better (default: what its name says)
        ignore: [epochs]
        baseline: {lr: 0.001}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ablate.components import Strict
from ablate.errors import Problem, SpecError
from ablate.spec.problems import validation_problems
from ablate.spec.yaml_doc import nearest_line, read_yaml


class ImportSpec(Strict):
    """Runs to import as one sweep's trials (`ablate import --file`)."""

    source: str
    """An MLflow tracking URI, `mlruns` folder or SQLite file (with `experiment`), or a CSV or Parquet table; a path
    is relative to the experiments file."""
    experiment: str | None = None
    """The MLflow experiment, by name or id; none: `source` is a table."""
    seed: str = "seed"
    """The parameter, tag or column that holds each run's seed (an integer)."""
    axes: list[str] | None = None
    """Parameters or columns that are axes (default: MLflow's every parameter but the seed and `ignore`; a table's
    columns that are not `metrics`)."""
    metrics: list[str] | None = None
    """A table's metric columns (default: the columns that are not axes)."""
    metric: str | None = None
    """The headline metric (default: the first by name); its name says which way is better."""
    direction: Literal["max", "min"] | None = None
    """Which way the headline metric is better (default: what its name says, `ablate.spec.metrics`): the report,
    its Findings and `select: best` follow it."""
    select: Literal["last", "best"] = "last"
    """Which epoch's values are a run's result: its last, or where the headline metric is best."""
    baseline: dict[str, Any] | None = None
    """The baseline cell: {parameter: value}."""
    ignore: list[str] = []
    """MLflow parameters that are not axes."""
    run_id: str | None = None
    """A table's column naming each run."""
    epoch: str | None = None
    """A long table's epoch column (one row per run and epoch)."""
    status: str | None = None
    """A table's status column (failed, error or killed: a failed run)."""
    duplicates: Literal["refuse", "first", "last"] = "refuse"
    """Runs claiming one cell and seed: refuse the import, or keep the first or last started."""

    def source_at(self, folder: Path) -> str:
        """The source, a path taken relative to `folder` (a URI as it is)."""
        if "://" in self.source or self.source.startswith("file:"):
            return self.source
        return str((folder / Path(self.source).expanduser()).resolve())


class _Imports(BaseModel):
    """The file's `import:` block alone (its other blocks are the sweeps' reader's)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    imports: dict[str, ImportSpec] = Field(default_factory=dict, alias="import")


def read_imports(path: Path) -> dict[str, ImportSpec]:
    """The `import:` block of the experiments file at `path`; SpecError with every problem, each at its line."""
    doc = read_yaml(path)
    data = doc.data if isinstance(doc.data, dict) else {}
    src = str(path)
    try:
        return _Imports.model_validate(data).imports
    except ValidationError as err:

        def where(loc: tuple[str | int, ...], message: str) -> Problem:
            return Problem(src, loc, message, nearest_line(doc.lines, loc))

        raise SpecError(validation_problems(err, data, where, _Imports)) from None
