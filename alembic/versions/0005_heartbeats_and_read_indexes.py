"""Claims carry a heartbeat; indexes for reading a large study.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-07

`autotune_claims.heartbeat_at` is when the process that holds a claim last
said it is alive (`Store.beat`, every few seconds while its measurement
runs); claims made before this revision have none (their `claimed_at`
stands in). Two indexes serve the queries that a study of thousands of runs
makes often: the runs of a study by role (what a budget counts, at every
claim) and the claims of a state (the running claims of one study, or of all).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_claims") as batch:
        batch.add_column(sa.Column("heartbeat_at", sa.DateTime(), nullable=True))
        batch.create_index("ix_autotune_claims_state_study_id", ["state", "study_id"])
    with op.batch_alter_table("autotune_runs") as batch:
        batch.create_index("ix_autotune_runs_study_id_role", ["study_id", "role"])


def downgrade() -> None:
    with op.batch_alter_table("autotune_runs") as batch:
        batch.drop_index("ix_autotune_runs_study_id_role")
    with op.batch_alter_table("autotune_claims") as batch:
        batch.drop_index("ix_autotune_claims_state_study_id")
        batch.drop_column("heartbeat_at")
