"""Memberships say whether the sweep's current plan makes their trial: a sweep held every trial ever launched
under its name (`-s train.epochs=4` and then 5: two rows per label in its report). Rows already there stay
planned: which plan made them was not recorded."""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"


def upgrade() -> None:
    with op.batch_alter_table("sweep_trials") as batch:
        batch.add_column(sa.Column("planned", sa.Boolean(), nullable=False, server_default=sa.true()))


def downgrade() -> None:
    with op.batch_alter_table("sweep_trials") as batch:
        batch.drop_column("planned")
