"""Artifacts: files a trial produced, kept where every worker and the export find them.

Revision ID: 0008
Revises: 0007
Create Date: 2027-01-04

A trial can produce a file that later processes need, on other machines, and
that the export carries: first of all a PGLE cost profile (a text proto, tens
of KB to a few MB) with a JSON document of what it belongs to. A file on the
machine that measured the trial is lost to every other, so `autotune_artifacts`
keeps it in the database beside the runs: one row per (study, environment
key, trial, kind), unique, so that storing a re-collected artifact replaces
the old one instead of adding a second. `created_at` keeps its time zone
(UTC). Databases made before this revision hold no artifacts.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "autotune_artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=False),
        sa.Column("env_key", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("meta", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["autotune_studies.id"],
                                name="fk_autotune_artifacts_study_id_autotune_studies"),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_artifacts"),
        sa.UniqueConstraint("study_id", "env_key", "trial_number", "kind",
                            name="uq_autotune_artifacts_identity"),
    )


def downgrade() -> None:
    op.drop_table("autotune_artifacts")
