"""Claims: one measurement per configuration per environment, whatever the processes.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23

`autotune_claims` holds a row per configuration (or confirmation round) that a
process measures or has measured, unique per (study, environment key, hash of
the measurement's key). `autotune_studies.claims_made` is bumped by every
claim: the write that serialises claims. `autotune_runs.env_key` says which
environment a run belongs to; runs made before this revision take the host of
their environment row (NULL when they have none).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("autotune_studies") as batch:
        batch.add_column(sa.Column("claims_made", sa.Integer(), nullable=False,
                                   server_default="0"))
    with op.batch_alter_table("autotune_runs") as batch:
        batch.add_column(sa.Column("env_key", sa.String(length=255), nullable=True))
    op.execute("UPDATE autotune_runs SET env_key = (SELECT host FROM autotune_environments "
               "WHERE autotune_environments.id = autotune_runs.environment_id)")
    op.create_table(
        "autotune_claims",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("env_key", sa.String(length=255), nullable=False),
        sa.Column("key_hash", sa.String(length=64), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("owner_host", sa.String(length=255), nullable=False),
        sa.Column("owner_pid", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.ForeignKeyConstraint(["study_id"], ["autotune_studies.id"],
                                name="fk_autotune_claims_study_id_autotune_studies"),
        sa.ForeignKeyConstraint(["run_id"], ["autotune_runs.id"],
                                name="fk_autotune_claims_run_id_autotune_runs"),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_claims"),
        sa.UniqueConstraint("study_id", "env_key", "key_hash",
                            name="uq_autotune_claims_identity"),
    )


def downgrade() -> None:
    op.drop_table("autotune_claims")
    with op.batch_alter_table("autotune_runs") as batch:
        batch.drop_column("env_key")
    with op.batch_alter_table("autotune_studies") as batch:
        batch.drop_column("claims_made")
