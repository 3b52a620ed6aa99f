"""A study's page kept by its writer (`Store.save_view`, `current_view`; migration 0009), so
that a reader of an unchanged study reads no run (issue 33's fast reads).

The storage tests run on SQLite and, when AUTOTUNE_TEST_POSTGRES_URL is set, on
PostgreSQL (`url` in conftest.py). `tests/test_cli.py` checks the page a real
study keeps against the one its readers compute.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from alembic import command
from migrations_util import alembic_config
from sql_rows import rows, snapshot
from sqlalchemy import create_engine, inspect
from starlette.testclient import TestClient
from test_storage import ENV, FLAGS, HERE, OK

from autotune.dashboard.app import Reader, create_app
from autotune.flags.catalog import load_catalog
from autotune.ground.errors import StorageError, StudyNotFoundError
from autotune.ground.records import Role
from autotune.results.view import study_page
from autotune.storage import Store
from autotune.storage import views as views_module
from autotune.study.service import publish_page

PAGE = {"summary": {"runs": 1}, "best": [{"trial": 0, "speedup": 1.0}]}


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store.open(url) as opened:
        opened.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
        opened.ensure_study("t", "cpu", "matmul", "tiny", 1, "paired")
        opened.record_run("s", 0, Role.BASELINE, {}, ENV, OK, HERE)
        yield opened


def keep(store: Store, name: str = "s", page: dict | None = None) -> None:
    store.save_view(name, store.version(name), json.dumps(page or PAGE))


def test_a_kept_page_is_current_until_the_study_changes(store: Store) -> None:
    assert store.current_view("s") is None  # nothing kept
    keep(store)
    assert json.loads(store.current_view("s") or "") == PAGE
    assert store.current_view("t") is None  # another study's page is not this one's
    store.record_run("s", 1, Role.SEARCH, FLAGS, ENV, OK, HERE)
    assert store.current_view("s") is None  # a run stored: behind the study
    keep(store, page={"best": []})
    assert json.loads(store.current_view("s") or "") == {"best": []}


def test_a_claim_taken_leaves_the_kept_page_behind(store: Store) -> None:
    keep(store)
    store.claim("s", "env", "trial:1", Role.SEARCH, FLAGS, 1, ("node-1", 7))
    assert store.current_view("s") is None


def test_keeping_a_page_again_replaces_it(store: Store, url: str) -> None:
    keep(store, page={"n": 1})
    keep(store, page={"n": 2})
    assert json.loads(store.current_view("s") or "") == {"n": 2}
    assert rows(url, "SELECT COUNT(*) FROM autotune_views") == [(1,)]


def test_a_page_another_autotune_kept_is_not_shown(store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Another version or other sources may compute other figures: the reader computes."""
    keep(store)
    monkeypatch.setattr(views_module, "made_by", lambda: "0.0.0:another")
    assert store.stored_view("s") is None and store.current_view("s") is None


def test_keeping_a_page_of_a_missing_study_is_refused(store: Store, url: str) -> None:
    with pytest.raises(StudyNotFoundError):
        store.save_view("nope", "v", "{}")
    with pytest.raises(StudyNotFoundError):
        store.current_view("nope")
    assert rows(url, "SELECT COUNT(*) FROM autotune_views") == [(0,)]


def test_deleting_a_study_deletes_its_kept_page(store: Store, url: str) -> None:
    keep(store)
    keep(store, "t")
    store.delete_study("s")
    assert rows(url, "SELECT COUNT(*) FROM autotune_views") == [(1,)]


def test_reading_a_kept_page_writes_nothing(store: Store, url: str) -> None:
    keep(store)
    store.close()
    before = snapshot(url)
    with Store.open(url, upgrade=False) as reader:
        assert reader.current_view("s") is not None
    assert snapshot(url) == before


def test_the_dashboard_shows_a_kept_page_without_reading_a_run(
        store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    assert publish_page(store, "s")
    kept = json.loads(store.current_view("s") or "null")
    marked = {**kept, "summary": {**kept["summary"], "mark": "kept"}}  # which path showed it
    keep(store, page=marked)
    client = TestClient(create_app(store, refresh_s=0))
    monkeypatch.setattr(store, "runs", lambda *a, **k: pytest.fail("a run was read"))
    assert client.get("/api/study/s").json() == marked
    assert client.get("/study/s").status_code == 200
    assert client.get("/api/study/s/version").json() == {"version": store.version("s")}
    assert Reader(store).summary("s") == marked["summary"]
    monkeypatch.undo()
    store.record_run("s", 1, Role.SEARCH, FLAGS, ENV, OK, HERE)  # the page is behind now
    computed = client.get("/api/study/s").json()
    assert computed["summary"]["runs"] == 2 and "mark" not in computed["summary"]


def test_upgrade_from_0008_adds_the_table_and_downgrade_removes_it(url: str) -> None:
    command.upgrade(alembic_config(url), "0008")
    with Store.open(url) as store:  # migrates to head
        store.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired")
        keep(store, "old")
        assert store.current_view("old") is not None
    command.downgrade(alembic_config(url), "0008")
    engine = create_engine(url)
    try:
        assert "autotune_views" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert rows(url, "SELECT name FROM autotune_studies") == [("old",)]


def test_a_study_keeps_the_page_its_readers_compute(store: Store) -> None:
    assert publish_page(store, "s") is True
    kept = json.loads(store.current_view("s") or "null")
    computed = study_page(store.get_study("s"), store.runs("s"), load_catalog(),
                          store.workers("s"), claims=store.claims("s"))
    assert kept == json.loads(json.dumps(computed))
    assert kept["summary"]["runs"] == 1 and kept["best"][0]["trial"] == 0


def test_a_page_that_cannot_be_kept_never_stops_the_study(
        store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    def refuse(*_args: object) -> None:
        raise StorageError("disk I/O error; check that the database is reachable")

    monkeypatch.setattr(store, "save_view", refuse)
    assert publish_page(store, "s") is False
    assert "the study's page was not kept (readers compute it): disk I/O error" in caplog.text
    assert store.current_view("s") is None
