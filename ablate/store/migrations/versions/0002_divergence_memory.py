"""Trials record peak memory and where they diverged (epoch and step of the first NaN/inf)."""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"

COLUMNS = ("peak_memory", "diverged_epoch", "diverged_step")


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.BigInteger()))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        for name in COLUMNS:
            batch.drop_column(name)
