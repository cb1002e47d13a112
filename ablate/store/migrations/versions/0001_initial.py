"""Initial schema: sweeps, trials, sweep membership, per-step metrics."""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("name", sa.String(200), primary_key=True),
        sa.Column("spec_path", sa.Text()),
        sa.Column("spec", sa.JSON()),
        sa.Column("baseline", sa.JSON()),
        sa.Column("metric", sa.String(200)),
        sa.Column("description", sa.Text()),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("mlflow_experiment_id", sa.String(64)),
        sa.Column("mlflow_run_id", sa.String(64)),
        sa.PrimaryKeyConstraint("name", name="pk_sweeps"),
    )
    op.create_table(
        "trials",
        sa.Column("key", sa.String(64)),
        sa.Column("variant", sa.String(64)),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("axes", sa.JSON()),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True)),
        sa.Column("finished_at", sa.DateTime(timezone=True)),
        sa.Column("error", sa.Text()),
        sa.Column("traceback", sa.Text()),
        sa.Column("host", sa.String(200)),
        sa.Column("node_id", sa.String(200)),
        sa.Column("device", sa.String(200)),
        sa.Column("mlflow_run_id", sa.String(64)),
        sa.Column("params", sa.BigInteger()),
        sa.Column("flops", sa.BigInteger()),
        sa.Column("environment", sa.JSON()),
        sa.Column("result", sa.JSON()),
        sa.PrimaryKeyConstraint("key", name="pk_trials"),
    )
    op.create_index("ix_trials_variant", "trials", ["variant"])
    op.create_index("ix_trials_state", "trials", ["state"])
    op.create_table(
        "sweep_trials",
        sa.Column(
            "sweep",
            sa.String(200),
            sa.ForeignKey("sweeps.name", name="fk_sweep_trials_sweep_sweeps", ondelete="CASCADE"),
        ),
        sa.Column("trial_key", sa.String(64), sa.ForeignKey("trials.key", name="fk_sweep_trials_trial_key_trials")),
        sa.Column("axes", sa.JSON()),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("sweep", "trial_key", name="pk_sweep_trials"),
    )
    op.create_index("ix_sweep_trials_trial_key", "sweep_trials", ["trial_key"])
    op.create_table(
        "metrics",
        sa.Column("trial_key", sa.String(64), sa.ForeignKey("trials.key", name="fk_metrics_trial_key_trials")),
        sa.Column("name", sa.String(200)),
        sa.Column("step", sa.BigInteger()),
        sa.Column("value", sa.Float()),
        sa.Column("wall_time", sa.Float()),
        sa.PrimaryKeyConstraint("trial_key", "name", "step", name="pk_metrics"),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    for table in ("metrics", "sweep_trials", "trials", "sweeps"):
        op.drop_table(table)
