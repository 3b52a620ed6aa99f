"""Initial autotune tables: environments, studies, runs.

Revision ID: 0001
Revises:
Create Date: 2025-11-22

Hand-written to match `autotune/storage/models.py`; the test suite compares
the two (`alembic.autogenerate.compare_metadata`).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _create_environments() -> None:
    op.create_table(
        "autotune_environments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("python_version", sa.String(length=64), nullable=False),
        sa.Column("jax_version", sa.String(length=64), nullable=False),
        sa.Column("jaxlib_version", sa.String(length=64), nullable=False),
        sa.Column("backend", sa.String(length=32), nullable=False),
        sa.Column("device_kind", sa.String(length=255), nullable=False),
        sa.Column("device_count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_environments"),
        sa.UniqueConstraint(
            "host",
            "python_version",
            "jax_version",
            "jaxlib_version",
            "backend",
            "device_kind",
            "device_count",
            name="uq_autotune_environments_identity",
        ),
    )


def _create_studies() -> None:
    op.create_table(
        "autotune_studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("space", sa.String(length=255), nullable=False),
        sa.Column("benchmark", sa.String(length=255), nullable=False),
        sa.Column("preset", sa.String(length=255), nullable=False),
        sa.Column("devices", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("space_backend", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_studies"),
        sa.UniqueConstraint("name", name="uq_autotune_studies_name"),
    )


def _run_columns() -> list[sa.Column[object]]:
    return [
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("trial_number", sa.Integer(), nullable=True),
        sa.Column("role", sa.String(length=32), nullable=False),
        sa.Column("flags", sa.JSON(), nullable=False),
        sa.Column("env", sa.JSON(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("signal", sa.Integer(), nullable=True),
        sa.Column("environment_id", sa.Integer(), nullable=True),
        sa.Column("mode", sa.String(length=16), nullable=True),
        sa.Column("compile_time_s", sa.Float(), nullable=True),
        sa.Column("first_step_time_s", sa.Float(), nullable=True),
        sa.Column("step_times", sa.JSON(), nullable=False),
        sa.Column("baseline_step_times", sa.JSON(), nullable=False),
        sa.Column("median_s", sa.Float(), nullable=True),
        sa.Column("baseline_median_s", sa.Float(), nullable=True),
        sa.Column("ratio", sa.Float(), nullable=True),
        sa.Column("peak_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("memory_source", sa.String(length=64), nullable=True),
        sa.Column("rss_peak_bytes", sa.BigInteger(), nullable=True),
        sa.Column("extras", sa.JSON(), nullable=False),
        sa.Column("checksum", sa.Float(), nullable=True),
        sa.Column("baseline_checksum", sa.Float(), nullable=True),
        sa.Column("hlo_stats", sa.JSON(), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=True),
        sa.Column("baseline_fingerprint", sa.String(length=128), nullable=True),
        sa.Column("jax_version", sa.String(length=64), nullable=True),
        sa.Column("jaxlib_version", sa.String(length=64), nullable=True),
        sa.Column("backend", sa.String(length=32), nullable=True),
        sa.Column("device_kind", sa.String(length=255), nullable=True),
        sa.Column("device_count", sa.Integer(), nullable=True),
        sa.Column("stdout_tail", sa.Text(), nullable=False),
        sa.Column("stderr_tail", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    ]


def _create_runs() -> None:
    op.create_table(
        "autotune_runs",
        *_run_columns(),
        sa.ForeignKeyConstraint(
            ["study_id"],
            ["autotune_studies.id"],
            name="fk_autotune_runs_study_id_autotune_studies",
        ),
        sa.ForeignKeyConstraint(
            ["environment_id"],
            ["autotune_environments.id"],
            name="fk_autotune_runs_environment_id_autotune_environments",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_autotune_runs"),
    )
    op.create_index(
        "ix_autotune_runs_study_id_trial_number",
        "autotune_runs",
        ["study_id", "trial_number"],
        unique=False,
    )


def upgrade() -> None:
    """Create autotune's three tables."""
    _create_environments()
    _create_studies()
    _create_runs()


def downgrade() -> None:
    """Drop autotune's tables (Optuna's tables are left alone)."""
    op.drop_index("ix_autotune_runs_study_id_trial_number", table_name="autotune_runs")
    op.drop_table("autotune_runs")
    op.drop_table("autotune_studies")
    op.drop_table("autotune_environments")
