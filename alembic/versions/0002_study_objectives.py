"""Study objectives and memory budget.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22

`objectives` is what the study minimises (`time`, `memory` or `time,memory`);
`memory_budget_bytes` makes configurations above it infeasible. Studies made
before this revision optimised time with no budget, which the defaults say.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.add_column(sa.Column("objectives", sa.String(length=64), nullable=False,
                                   server_default="time"))
        batch.add_column(sa.Column("memory_budget_bytes", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.drop_column("memory_budget_bytes")
        batch.drop_column("objectives")
