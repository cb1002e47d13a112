"""Alembic environment: runs on the connection `ablate.store.engine.upgrade` passes in (never its own)."""

from alembic import context

from ablate.store.schema import Base

context.configure(
    connection=context.config.attributes["connection"],
    target_metadata=Base.metadata,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()
