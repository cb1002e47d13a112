"""Trials ablate did not train (`ablate import`): where each came from (the kind of source, its URI, experiment and
run id), so a second import of the same runs adds nothing; trials ablate trained have none."""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("source", sa.JSON()))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("source")
