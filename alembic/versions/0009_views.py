"""Views: a study's page as its writer computed it, for readers of an unchanged study.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27

Reading a study of 10,000 trials (every run, then every figure of the page)
takes seconds; `best` and the dashboard should answer in under one. The
process that ends a study's phases computes the page once and stores it in
`autotune_views`, one row per study, with the study's version token as it read
it and the autotune that computed it; a reader whose version and autotune match
shows that page and reads no run. Databases made before this revision hold no
views: their readers compute the page, as before.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "autotune_views",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=255), nullable=False),
        sa.Column("made_by", sa.String(length=64), nullable=False),
        sa.Column("page", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["autotune_studies.id"],
                                name="fk_autotune_views_study_id_autotune_studies"),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_views"),
        sa.UniqueConstraint("study_id", name="uq_autotune_views_study_id"),
    )


def downgrade() -> None:
    op.drop_table("autotune_views")
