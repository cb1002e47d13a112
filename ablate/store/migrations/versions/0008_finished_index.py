"""An index of trials by finish time, with their states and keys: a launcher asks after each trial it settles
which trials finished since its last look (`Store.finished_since`), where it asked the state of every trial it
had queued (0.46 s per settled trial on PostgreSQL with 10,000 queued: quadratic in the sweep)."""

from alembic import op

revision = "0008"
down_revision = "0007"


def upgrade() -> None:
    op.create_index("ix_trials_finished_at_state_key", "trials", ["finished_at", "state", "key"])


def downgrade() -> None:
    op.drop_index("ix_trials_finished_at_state_key", "trials")
