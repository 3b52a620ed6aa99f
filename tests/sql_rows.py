"""Reading a test database with plain SQL, apart from the code under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url


def rows(url: str, query: str) -> list[tuple]:
    """Every row `query` returns from the database at `url`, as tuples."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()


def snapshot(url: str) -> Any:
    """What "left as it was" compares: a SQLite file's bytes (None when there is no file),
    else every table's rows."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        path = Path(parsed.database or "")
        return path.read_bytes() if path.exists() else None
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return {name: sorted(map(repr, connection.execute(text(f'SELECT * FROM "{name}"'))))
                    for name in sorted(inspect(connection).get_table_names())}
    finally:
        engine.dispose()
