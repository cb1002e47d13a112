"""Code-aware results: the fingerprint of the code each trial ran with, its last checkpoint's digest, and
the results a retrained trial had before (trials recorded before this revision have no fingerprint: they are never called stale)."""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("code", sa.JSON()))
        batch.add_column(sa.Column("code_digest", sa.String(16)))
        batch.add_column(sa.Column("checkpoint", sa.JSON()))
    op.create_table(
        "previous_results",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("trial_key", sa.String(64), nullable=False),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("record", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["trial_key"], ["trials.key"], name="fk_previous_results_trial_key_trials"),
        sa.PrimaryKeyConstraint("id", name="pk_previous_results"),
    )
    op.create_index("ix_previous_results_trial_key", "previous_results", ["trial_key"])


def downgrade() -> None:
    op.drop_index("ix_previous_results_trial_key", "previous_results")
    op.drop_table("previous_results")
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("checkpoint")
        batch.drop_column("code_digest")
        batch.drop_column("code")
