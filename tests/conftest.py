"""Shared fixtures: paths, a child environment that finds this checkout."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def pytest_configure(config: pytest.Config) -> None:
    """Trial children run `python -m autotune.bench`: let them import this checkout.

    Set for the whole session (module-scoped fixtures start trials too).
    """
    # A probe cache of this session only: tests never read a user's ~/.cache.
    os.environ["AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="autotune-test-cache-")
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)


@pytest.fixture
def workloads_dir() -> Path:
    return WORKLOADS
