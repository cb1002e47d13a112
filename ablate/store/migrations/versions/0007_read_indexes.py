"""Indexes that let `status` and `runs` of a large sweep read index entries instead of rows (a trial's row holds
its config, code and result: reading 100,000 of them to learn their states took seconds): trials by state with
their code digest and key; a sweep's trials in plan order; a trial's sweeps with its position in each (which
replaces the index of trial keys alone)."""

from alembic import op

revision = "0007"
down_revision = "0006"


def upgrade() -> None:
    op.create_index("ix_trials_state_digest_key", "trials", ["state", "code_digest", "key"])
    op.create_index("ix_sweep_trials_sweep_position", "sweep_trials", ["sweep", "position", "trial_key"])
    op.create_index("ix_sweep_trials_trial_key_sweep", "sweep_trials", ["trial_key", "sweep", "position"])
    op.drop_index("ix_sweep_trials_trial_key", "sweep_trials")


def downgrade() -> None:
    op.create_index("ix_sweep_trials_trial_key", "sweep_trials", ["trial_key"])
    op.drop_index("ix_sweep_trials_trial_key_sweep", "sweep_trials")
    op.drop_index("ix_sweep_trials_sweep_position", "sweep_trials")
    op.drop_index("ix_trials_state_digest_key", "trials")
