"""Artifacts: files a trial produced (a PGLE profile...), stored for other machines and the
export (`Store.put_artifact`, `Store.artifact`, `Store.artifacts`; migration 0008).

Each test runs on SQLite and, when AUTOTUNE_TEST_POSTGRES_URL is set, on PostgreSQL
(`url` in conftest.py: a fresh database of each kind, a schema of its own).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from alembic import command
from migrations_util import alembic_config
from sql_rows import rows, snapshot
from sqlalchemy import create_engine, inspect, text

from autotune.ground.errors import StudyNotFoundError
from autotune.ground.records import ArtifactRecord
from autotune.storage import Store

PGLE = "pgle-profile"
META = {"fingerprint": "sha256:" + "ab" * 32, "flags": {"xla_gpu_enable_pgle": True,
        "combine_bytes": 2**28}, "source": "profiler", "devices": 8, "ratio": 0.93,
        "names": ["fusion.12", "all-reduce.3"], "note": None}
PROFILE = """costs {
  name: "fusion.12"
  cost_us: 118.25
}
costs {
  name: "all-reduce.3"
  cost_us: 2034.5
}
"""


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store.open(url) as opened:
        opened.ensure_study("s", "gpu-pgle", "transformer", "small", 8, "paired")
        yield opened


def _profile(size: int) -> str:
    """A text proto of `size` characters, every line different (no run of one byte that a
    database could shorten), one name not ASCII."""
    lines = []
    total = i = 0
    while total < size:
        line = f'costs {{ name: "fusion.{i}{"µ" if i == 7 else ""}" cost_us: {i * 1.25} }}\n'
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)[:size]


def test_an_artifact_is_read_back_as_it_was_stored(store: Store) -> None:
    before = datetime.now(UTC)
    store.put_artifact("s", 3, "env-a", PGLE, PROFILE, META)
    after = datetime.now(UTC)

    got = store.artifact("s", 3, "env-a", PGLE)
    assert isinstance(got, ArtifactRecord)
    assert (got.study, got.trial_number, got.env_key, got.kind) == ("s", 3, "env-a", PGLE)
    assert got.content == PROFILE
    assert got.meta == META
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset().total_seconds() == 0
    assert before.replace(microsecond=0) <= got.created_at <= after


def test_no_artifact_of_another_trial_environment_or_kind(store: Store) -> None:
    store.put_artifact("s", 3, "env-a", PGLE, PROFILE, META)
    assert store.artifact("s", 4, "env-a", PGLE) is None
    assert store.artifact("s", 3, "env-b", PGLE) is None
    assert store.artifact("s", 3, "env-a", "xla-dump") is None
    assert store.artifacts("s", kind="xla-dump") == []


def test_storing_the_same_artifact_again_replaces_it(store: Store, url: str) -> None:
    store.put_artifact("s", 3, "env-a", PGLE, PROFILE, META)
    first = store.artifact("s", 3, "env-a", PGLE)
    assert first is not None

    store.put_artifact("s", 3, "env-a", PGLE, "costs {}\n", {"source": "recollected"})
    again = store.artifact("s", 3, "env-a", PGLE)
    assert again is not None
    assert (again.content, again.meta) == ("costs {}\n", {"source": "recollected"})
    assert again.created_at >= first.created_at
    assert store.artifacts("s") == [again]
    assert rows(url, "SELECT COUNT(*) FROM autotune_artifacts") == [(1,)]


def test_a_missing_study_is_refused_and_nothing_is_stored(store: Store, url: str) -> None:
    with pytest.raises(StudyNotFoundError, match="no study named 'nope'.*known studies: s"):
        store.put_artifact("nope", 3, "env-a", PGLE, PROFILE, META)
    with pytest.raises(StudyNotFoundError, match="no study named 'nope'"):
        store.artifact("nope", 3, "env-a", PGLE)
    with pytest.raises(StudyNotFoundError, match="no study named 'nope'"):
        store.artifacts("nope")
    assert rows(url, "SELECT COUNT(*) FROM autotune_artifacts") == [(0,)]


def test_artifacts_are_listed_by_trial_then_as_stored_and_filtered_by_kind(store: Store) -> None:
    store.put_artifact("s", 5, "env-a", PGLE, "five", {})
    store.put_artifact("s", 2, "env-b", PGLE, "two on b", {})
    store.put_artifact("s", 2, "env-a", PGLE, "two on a", {})
    store.put_artifact("s", 2, "env-a", "hlo-text", "HloModule m", {"stage": "optimised"})
    store.put_artifact("s", 5, "env-a", PGLE, "five again", {})  # replaced: keeps its place

    listed = store.artifacts("s")
    assert [(a.trial_number, a.env_key, a.kind, a.content) for a in listed] == [
        (2, "env-b", PGLE, "two on b"), (2, "env-a", PGLE, "two on a"),
        (2, "env-a", "hlo-text", "HloModule m"), (5, "env-a", PGLE, "five again")]
    assert [a.content for a in store.artifacts("s", kind=PGLE)] == [
        "two on b", "two on a", "five again"]
    assert [a.meta for a in store.artifacts("s", kind="hlo-text")] == [{"stage": "optimised"}]


def test_two_studies_keep_their_artifacts_apart(store: Store) -> None:
    store.ensure_study("t", "gpu-pgle", "transformer", "large", 8, "paired")
    store.put_artifact("s", 1, "env-a", PGLE, "of s", {"study": "s"})
    store.put_artifact("t", 1, "env-a", PGLE, "of t", {"study": "t"})

    mine, theirs = store.artifact("s", 1, "env-a", PGLE), store.artifact("t", 1, "env-a", PGLE)
    assert mine is not None and theirs is not None
    assert (mine.study, mine.content, mine.meta) == ("s", "of s", {"study": "s"})
    assert (theirs.study, theirs.content, theirs.meta) == ("t", "of t", {"study": "t"})
    assert [a.content for a in store.artifacts("s")] == ["of s"]
    assert [a.content for a in store.artifacts("t")] == ["of t"]


def test_a_two_megabyte_profile_is_read_back_whole(store: Store) -> None:
    content = _profile(2 * 2**20)
    assert len(content) == 2 * 2**20 and "µ" in content
    store.put_artifact("s", 0, "env-a", PGLE, content, META)
    got = store.artifact("s", 0, "env-a", PGLE)
    assert got is not None and got.content == content
    (listed,) = store.artifacts("s")
    assert listed.content == content


def test_what_a_column_cannot_hold_on_either_database_is_refused(store: Store, url: str) -> None:
    with pytest.raises(ValueError, match="kind must be 1 to 32 characters"):
        store.put_artifact("s", 0, "env-a", "k" * 33, PROFILE, META)
    with pytest.raises(ValueError, match="kind must be 1 to 32 characters"):
        store.put_artifact("s", 0, "env-a", "", PROFILE, META)
    with pytest.raises(ValueError, match="environment key must be at most 255"):
        store.put_artifact("s", 0, "e" * 256, PGLE, PROFILE, META)
    with pytest.raises(ValueError, match="without NUL characters"):
        store.put_artifact("s", 0, "env-a", PGLE, "costs {\x00}", META)
    assert rows(url, "SELECT COUNT(*) FROM autotune_artifacts") == [(0,)]


def test_reading_artifacts_through_a_read_only_store_writes_nothing(store: Store,
                                                                     url: str) -> None:
    store.put_artifact("s", 3, "env-a", PGLE, PROFILE, META)
    store.close()
    before = snapshot(url)
    with Store.open(url, upgrade=False) as reader:
        got = reader.artifact("s", 3, "env-a", PGLE)
        assert got is not None and got.content == PROFILE
        assert [a.trial_number for a in reader.artifacts("s", kind=PGLE)] == [3]
        assert reader.artifact("s", 4, "env-a", PGLE) is None
    assert snapshot(url) == before


def test_processes_storing_the_same_artifact_at_once_leave_one(store: Store, url: str) -> None:
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def put(n: int) -> None:
        try:
            with Store.open(url, upgrade=False) as own:  # one Store per thread
                start.wait()
                for i in range(10):
                    own.put_artifact("s", 1, "env-a", PGLE, f"writer {n} round {i}", {"n": n})
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=put, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    (only,) = store.artifacts("s")
    assert only.content == f"writer {only.meta['n']} round 9"
    assert rows(url, "SELECT COUNT(*) FROM autotune_artifacts") == [(1,)]


def test_upgrade_from_0007_adds_the_table_and_downgrade_removes_it(url: str) -> None:
    command.upgrade(alembic_config(url), "0007")
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text(
                "INSERT INTO autotune_studies (name, space, benchmark, preset, devices, mode, "
                "created_at, objectives, claims_made) VALUES ('old', 'cpu', 'matmul', 'tiny', "
                "1, 'paired', '2026-01-01', 'time', 0)"))
        assert "autotune_artifacts" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()

    with Store.open(url) as store:  # migrates to head
        assert store.artifacts("old") == []
        store.put_artifact("old", 0, "env-a", PGLE, PROFILE, META)
        assert store.artifact("old", 0, "env-a", PGLE) is not None

    command.downgrade(alembic_config(url), "0007")
    engine = create_engine(url)
    try:
        assert "autotune_artifacts" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert rows(url, "SELECT name FROM autotune_studies") == [("old",)]
