"""The study's whole plan.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23

`plan` holds what shapes every measurement beyond the study's columns: a
hash of the space file and of the workload file (or the command), steps,
warm-up, sampler, prune margin, time and memory limits. A re-run whose plan
differs is refused, naming each field. Studies made before this revision
have no plan (NULL) and are compared on their columns only.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.add_column(sa.Column("plan", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.drop_column("plan")
