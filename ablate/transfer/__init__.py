"""Runs in and out of the store: `ablate export` writes a store's rows to Parquet or CSV files (`export`), and
`ablate import` adds runs ablate did not train, from an MLflow experiment (`mlflow_runs`) or a table (`tabular`),
as a sweep's trials (`runs`: the mapping from parameters to axes, seed and result), or an export read back.

- `ablate.transfer.export`: the export format, written and read back
- `ablate.transfer.runs`: `Run`, `Mapping`, `Source`; runs to the store's rows, checked first (`ImportProblem`)
- `ablate.transfer.tabular`: runs from a CSV or Parquet table, wide or long
- `ablate.transfer.mlflow_runs`: runs from an MLflow experiment
"""
