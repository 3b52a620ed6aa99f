"""Reading a test database with plain SQL, apart from the code under test."""

from __future__ import annotations

from sqlalchemy import create_engine, text


def rows(url: str, query: str) -> list[tuple]:
    """Every row `query` returns from the database at `url`, as tuples."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(query))]
    finally:
        engine.dispose()
