"""Environments carry their driver, runtime and fingerprint.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-21

`autotune_environments` gains `driver_version` (the GPU driver's, NULL where
there is none), `runtime_version` (what the backend's platform version names,
e.g. `cuda 12080`; NULL on CPU) and `fingerprint` (16 hex digits of sha256
over every fact, the host included: `records.Environment.fingerprint`). A row
is told apart by its fingerprint alone, which replaces the unique constraint
over the old columns: two environments that differ only in their driver are
two rows. Rows stored before this revision have no driver or runtime (NULL)
and get their fingerprint here, computed as the code computes it, so a worker
that reports the same facts finds its row again.
"""

import hashlib
import json
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: The facts in `records.Environment`'s order (the digest sorts its keys anyway).
FACTS = ("host", "python_version", "jax_version", "jaxlib_version", "backend", "device_kind",
         "device_count", "driver_version", "runtime_version")
OLD_IDENTITY = ("host", "python_version", "jax_version", "jaxlib_version", "backend",
                "device_kind", "device_count")

ENVIRONMENTS = sa.table("autotune_environments", sa.column("id", sa.Integer),
                        sa.column("fingerprint", sa.String),
                        *(sa.column(name) for name in FACTS))
RUNS = sa.table("autotune_runs", sa.column("environment_id", sa.Integer))


def fingerprint(facts: dict[str, Any]) -> str:
    """`records.Environment.fingerprint` as of this revision."""
    text = json.dumps({name: facts[name] for name in FACTS}, sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


def upgrade() -> None:
    with op.batch_alter_table("autotune_environments") as batch:
        batch.add_column(sa.Column("driver_version", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("runtime_version", sa.String(length=255), nullable=True))
        batch.add_column(sa.Column("fingerprint", sa.String(length=64), nullable=True))
    bind = op.get_bind()
    rows = bind.execute(sa.select(ENVIRONMENTS)).mappings().all()
    for row in rows:
        facts = dict(row) | {"driver_version": None, "runtime_version": None}
        bind.execute(ENVIRONMENTS.update().where(ENVIRONMENTS.c.id == row["id"])
                     .values(fingerprint=fingerprint(facts)))
    with op.batch_alter_table("autotune_environments") as batch:
        batch.drop_constraint("uq_autotune_environments_identity", type_="unique")
        batch.create_unique_constraint("uq_autotune_environments_fingerprint", ["fingerprint"])


def downgrade() -> None:
    # Rows that differ only in driver or runtime become one again: their runs move to
    # the first of them, the others go, so the old unique constraint holds.
    bind = op.get_bind()
    first: dict[tuple[Any, ...], int] = {}
    for row in bind.execute(sa.select(ENVIRONMENTS).order_by(ENVIRONMENTS.c.id)).mappings():
        identity = tuple(row[name] for name in OLD_IDENTITY)
        if identity not in first:
            first[identity] = row["id"]
            continue
        bind.execute(RUNS.update().where(RUNS.c.environment_id == row["id"])
                     .values(environment_id=first[identity]))
        bind.execute(ENVIRONMENTS.delete().where(ENVIRONMENTS.c.id == row["id"]))
    with op.batch_alter_table("autotune_environments") as batch:
        batch.drop_constraint("uq_autotune_environments_fingerprint", type_="unique")
        batch.create_unique_constraint("uq_autotune_environments_identity", list(OLD_IDENTITY))
        batch.drop_column("fingerprint")
        batch.drop_column("runtime_version")
        batch.drop_column("driver_version")
