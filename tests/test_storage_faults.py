"""A database that fails under a study: a full disk at open and mid-study, a failure that
reaches a command raw through Optuna. One clear line, exit 2, nothing lost (issue 31).

The full disk is a tmpfs of a few hundred KiB mounted in a mount namespace (`unshare -m`,
root): skipped, saying so, where that is not allowed.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy.exc

from autotune.cli._common import _database_failure
from autotune.ground.errors import StorageError
from autotune.storage.engine import database_failure, what_to_do


def _tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _tmpfs_works(), reason=(
    "needs `unshare -m` and mount (root in a mount namespace) for a small full filesystem"))


def _study_on_a_small_disk(folder: Path, size: str, trials: int) -> subprocess.CompletedProcess:
    """`autotune study` with its database on a tmpfs of `size` mounted over `folder/small`;
    the database, with its write-ahead log, is copied to `folder/kept` before the mount
    goes."""
    study = [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--benchmark",
             "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5", "--warmup", "1",
             "--trials", str(trials), "--confirm", "0", "--storage",
             f"sqlite:///{folder}/small/a.db"]
    (folder / "small").mkdir()
    script = (f"mount -t tmpfs -o size={size} tmpfs {folder}/small && "
              f"{' '.join(study)}; code=$?; mkdir {folder}/kept; cp {folder}/small/a.db* "
              f"{folder}/kept/ 2>/dev/null; exit $code")
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600, env={"COLUMNS": "100", "PATH": "/usr/bin:/bin"})


@needs_tmpfs
def test_a_full_disk_at_open_is_one_line_that_says_so(tmp_path):
    done = _study_on_a_small_disk(tmp_path, "200k", 3)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert "database or disk is full; the disk holding it is full: free space there" \
        in done.stderr


@needs_tmpfs
@pytest.mark.slow
def test_a_disk_that_fills_mid_study_stops_it_with_one_line_and_keeps_the_runs(tmp_path):
    done = _study_on_a_small_disk(tmp_path, "420k", 40)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("error: the database")
    assert "database or disk is full; the disk holding it is full" in done.stderr
    kept = sqlite3.connect(tmp_path / "kept" / "a.db")
    assert kept.execute("pragma integrity_check").fetchone() == ("ok",)
    assert kept.execute("select count(*) from autotune_runs").fetchone()[0] > 3


def test_what_to_do_follows_what_the_driver_said():
    assert what_to_do("database or disk is full").startswith("the disk holding it is full")
    assert what_to_do("could not write: No space left on device").startswith("the disk holding")
    assert what_to_do("disk I/O error").startswith("the disk holding it could not be written")
    assert what_to_do("connection refused").startswith("check that it is reachable")
    failure = database_failure(sqlalchemy.exc.OperationalError(
        "INSERT", {}, sqlite3.OperationalError("database or disk is full")), "sqlite:///a.db")
    assert failure.message.startswith(
        "the database sqlite:///a.db failed: database or disk is full; the disk holding it")


def test_a_raw_database_failure_is_worded_from_the_drivers_error_or_autotunes_own():
    import optuna.exceptions

    driver = sqlalchemy.exc.OperationalError("COMMIT", {}, sqlite3.OperationalError(
        "database or disk is full"))
    try:
        try:
            raise driver
        except sqlalchemy.exc.OperationalError as error:
            raise optuna.exceptions.StorageInternalError(
                "An exception is raised during the commit. This typically happens due to "
                "invalid data in the commit, e.g. exceeding max length.") from error
    except optuna.exceptions.StorageInternalError as wrapped:
        found = _database_failure(wrapped)
    assert found is not None and "database or disk is full" in found.message
    assert "invalid data" not in found.message
    clear = StorageError("the database x failed: server closed the connection")
    try:
        try:
            raise clear
        except StorageError as error:  # cleanup that failed again on top of it
            raise sqlalchemy.exc.OperationalError(
                "ROLLBACK", {}, Exception("AdminShutdown")) from error
    except sqlalchemy.exc.OperationalError as chained:
        assert _database_failure(chained) is clear
    assert _database_failure(ValueError("not a database")) is None


def test_optunas_storage_reconnects_after_the_server_dropped_its_connections(postgres_url):
    """A 3 s PostgreSQL restart during a trial crashed the study 22 s later, after the
    server was back: Optuna's storage used a dead pooled connection (issue 31). Here the
    server ends the storage's connections, as a restart does."""
    import uuid

    import optuna
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    from autotune.storage._optuna import rdb_storage

    name = f"autotune-restart-{uuid.uuid4().hex[:8]}"  # only these connections are ended
    url = make_url(postgres_url).update_query_dict({"application_name": name})
    storage = rdb_storage(url.render_as_string(hide_password=False), create=True)
    study = optuna.create_study(study_name="s", storage=storage)
    study.enqueue_trial({})
    assert len(study.get_trials()) == 1  # a pooled connection now holds the server's end
    killer = create_engine(postgres_url)
    with killer.connect() as connection:
        ended = connection.execute(text(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE "
            "application_name = :name"), {"name": name}).scalar_one()
    killer.dispose()
    assert ended >= 1
    assert len(study.get_trials()) == 1  # a fresh connection, not the dead one
