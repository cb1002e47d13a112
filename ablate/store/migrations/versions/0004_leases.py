"""Trial leases: the launcher that holds a trial, where it runs, and when its lease lapses."""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(64)))
        batch.add_column(sa.Column("lease_host", sa.String(200)))
        batch.add_column(sa.Column("lease_expires", sa.DateTime(timezone=True)))
        batch.create_index("ix_trials_lease_owner", ["lease_owner"])


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_index("ix_trials_lease_owner")
        batch.drop_column("lease_expires")
        batch.drop_column("lease_host")
        batch.drop_column("lease_owner")
