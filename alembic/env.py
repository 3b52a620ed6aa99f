"""Alembic environment for autotune's own tables (prefix `autotune_`).

Optuna owns the default `alembic_version` table in the same database, so the
project's migrations stamp `autotune_alembic_version` and autogenerate looks
only at `autotune_*` tables. The store passes its own connection in
`config.attributes["connection"]`; the `alembic` command line uses the
`sqlalchemy.url` option (or `-x url=...`).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool
from sqlalchemy.engine import Connection

from autotune.storage.models import VERSION_TABLE, Base, include_name

config = context.config
target_metadata = Base.metadata

_OPTIONS = {
    "target_metadata": target_metadata,
    "version_table": VERSION_TABLE,
    "include_name": include_name,
    "render_as_batch": True,
    "compare_type": True,
}


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    url = url or config.get_main_option("sqlalchemy.url")
    if not url:
        raise RuntimeError("no database: pass -x url=DATABASE_URL or set sqlalchemy.url")
    return url


def _run(connection: Connection) -> None:
    context.configure(connection=connection, **_OPTIONS)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    """Emit the migrations as SQL for the configured URL."""
    context.configure(
        url=_url(), literal_binds=True, dialect_opts={"paramstyle": "named"}, **_OPTIONS
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the migrations on the store's connection, or on a new one for the URL."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(_url(), poolclass=pool.NullPool)
    try:
        with engine.connect() as new_connection:
            _run(new_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
