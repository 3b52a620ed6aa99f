"""Shared fixtures: paths, a child environment that finds this checkout."""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = Path(__file__).resolve().parent / "workloads"


def pytest_configure(config: pytest.Config) -> None:
    """Trial children run `python -m autotune.bench`: let them import this checkout.

    Set for the whole session (module-scoped fixtures start trials too).
    """
    # A probe cache of this session only: tests never read a user's ~/.cache. The
    # xdist workers of one run share it (each probe and flag list is then made once per
    # run, not once per worker; the cache is written atomically or read as missing).
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run:
        cache = Path(tempfile.gettempdir()) / f"autotune-test-cache-{run}"
        cache.mkdir(exist_ok=True)
        os.environ["AUTOTUNE_CACHE_DIR"] = str(cache)
    else:
        os.environ["AUTOTUNE_CACHE_DIR"] = tempfile.mkdtemp(prefix="autotune-test-cache-")
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)


@pytest.fixture
def workloads_dir() -> Path:
    return WORKLOADS


POSTGRES_ENV = "AUTOTUNE_TEST_POSTGRES_URL"


def _postgres_url() -> Iterator[str]:
    """A URL of a schema of its own in the test PostgreSQL, dropped afterwards (skip
    without `AUTOTUNE_TEST_POSTGRES_URL`)."""
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        pytest.skip(f"set {POSTGRES_ENV} to run PostgreSQL tests")
    schema = f"autotune_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base)
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield url.render_as_string(hide_password=False)
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'autotune.db'}"
    else:
        yield from _postgres_url()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'autotune.db'}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    yield from _postgres_url()


