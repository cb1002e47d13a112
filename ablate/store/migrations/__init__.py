"""Alembic migrations of the results schema, run by `ablate.store.engine.upgrade` when a Store opens.

To change the schema: edit `ablate/store/schema.py`, then add `versions/NNNN_<what>.py` with `revision`,
`down_revision` (the previous file's revision) and `upgrade()` using `alembic.op` (batch_alter_table for
column changes, so SQLite works). `tests/store/test_store.py` checks that the migrated schema equals the ORM models.
"""
