"""Trials record the epoch their last attempt resumed from (0: from scratch), so a resume is visible."""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("resumed_from", sa.BigInteger()))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("resumed_from")
