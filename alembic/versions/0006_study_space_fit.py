"""The search space fitted to the study's workload.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-14

`autotune_studies.space_fit` holds what `autotune.spaces.fit` derived from
the baseline's compiled program (the params it dropped or clipped, and why),
stored once by the first process to fit it, so every worker and every resume
samples the same effective space. Studies made before this revision have
none (NULL): they are searched over the space as documented.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.add_column(sa.Column("space_fit", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.drop_column("space_fit")
