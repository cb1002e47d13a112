"""Migration scripts, oldest first (Alembic reads them by their `revision` / `down_revision` chain)."""
