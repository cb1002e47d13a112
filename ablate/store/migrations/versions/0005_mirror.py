"""What MLflow already has of each trial (the last metric step and the state mirrored), so the store can say
what MLflow lacks. Trials mirrored before (they have a run id) were mirrored as they ran: marked in step."""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("mlflow_step", sa.BigInteger()))
        batch.add_column(sa.Column("mlflow_state", sa.String(16)))
    op.execute(
        "UPDATE trials SET mlflow_state = state, "
        "mlflow_step = (SELECT max(step) FROM metrics WHERE metrics.trial_key = trials.key) "
        "WHERE mlflow_run_id IS NOT NULL"
    )


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("mlflow_state")
        batch.drop_column("mlflow_step")
