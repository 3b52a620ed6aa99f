"""Drive the CLI as a user types it, from a given folder (shared by the CLI tests)."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner, Result

from autotune.cli import app

runner = CliRunner()


def invoke(*args: str, cwd: Path) -> Result:
    """Run `autotune ARGS...` in `cwd` (where its default ./autotune.db lives)."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(app, list(args))
    finally:
        os.chdir(old)
