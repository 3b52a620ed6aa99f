"""Alembic's own command line, as the migration tests drive it."""

from __future__ import annotations

from pathlib import Path

from alembic.config import Config

from autotune.ground.resources import data_dir


def alembic_config(url: str, script_location: Path | None = None) -> Config:
    """A Config for the database at `url` (a `%` escaped for the ini parser), with the
    migrations of `script_location` (default: autotune's own)."""
    config = Config()
    config.set_main_option("script_location", str(script_location or data_dir("alembic")))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config
