"""A database that fails under a study: a full disk at open and mid-study, a failure that
reaches a command raw through Optuna. One clear line, exit 2, nothing lost (issue 31).

The full disk is a small tmpfs mounted in a mount namespace (`unshare -m`, root): too small
for the schema at open, or filled by a file once the study has stored a few runs. Skipped,
saying so, where that is not allowed.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy.exc
import typer
from cli_runner import invoke
from sqlalchemy import event
from sqlalchemy.engine import Engine
from typer.testing import CliRunner

from autotune.cli._common import _database_failure, friendly
from autotune.ground.errors import StorageError
from autotune.ground.records import ClaimState, Role
from autotune.storage import engine
from autotune.storage.engine import HEAD_REVISION, database_failure, revision_of, what_to_do


def _tmpfs_works() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


needs_tmpfs = pytest.mark.skipif(not _tmpfs_works(), reason=(
    "needs `unshare -m` and mount (root in a mount namespace) for a small full filesystem"))


#: Run by `sh` beside the study: wait until the study, whose output goes to `argv[1]`,
#: has finished trial `argv[2]` (or it, `argv[3]`, has ended), then fill the disk of its
#: database, `argv[4]`, but for `ROOM` bytes, which its next writes outgrow. (Its
#: progress is read from its output, not its database: a reader of that can wait on the
#: study's locks.)
ROOM = 24 * 1024
_FILL_AFTER_TRIAL = """
import os, shutil, sys, time
out, trial, pid, folder = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
deadline = time.monotonic() + 300
while time.monotonic() < deadline:
    try:
        state = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[0]
        done = f"trial {trial}/" in open(out).read()
    except OSError:
        break
    if state == "Z" or done:
        break
    time.sleep(0.1)
try:
    with open(os.path.join(folder, "filler"), "wb") as filler:
        filler.write(bytes(max(0, shutil.disk_usage(folder).free - int(sys.argv[5]))))
except OSError:
    pass  # the study took some of that room meanwhile: the disk is full either way
"""


def _study_on_a_small_disk(folder: Path, size: str, trials: int,
                           fill_after: int | None = None) -> subprocess.CompletedProcess:
    """`autotune study` with its database on a tmpfs of `size` mounted over `folder/small`;
    with `fill_after`, a file fills that disk but for `ROOM` bytes as soon as the study has
    finished that trial. The database, with its write-ahead log, is copied to
    `folder/kept` before the mount goes."""
    db = f"{folder}/small/a.db"
    study = [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--benchmark",
             "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5", "--warmup", "1",
             "--trials", str(trials), "--confirm", "0", "--storage", f"sqlite:///{db}"]
    (folder / "small").mkdir()
    out = folder / "study.out"
    run = " ".join(study) if fill_after is None else (
        f"({' '.join(study)} > {out} & pid=$!; {sys.executable} -c "
        f"{shlex.quote(_FILL_AFTER_TRIAL)} {out} {fill_after} $pid {folder}/small {ROOM}; "
        f"wait $pid; code=$?; cat {out}; exit $code)")
    script = (f"mount -t tmpfs -o size={size} tmpfs {folder}/small && "
              f"{run}; code=$?; mkdir {folder}/kept; cp {db}* "
              f"{folder}/kept/ 2>/dev/null; exit $code")
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, timeout=600,
                          env={"COLUMNS": "100", "PATH": "/usr/bin:/bin",
                               # the session's probe cache, never ~/.cache
                               "AUTOTUNE_CACHE_DIR": os.environ["AUTOTUNE_CACHE_DIR"]})


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
    done = _study_on_a_small_disk(tmp_path, "4m", 40, fill_after=3)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr[-3000:]
    assert done.stderr.startswith("error: the database")
    # SQLite says "database or disk is full" or, some of the time, "disk I/O error";
    # autotune then looks at the disk and says it is full
    assert "; the disk holding it is full: free space there" in done.stderr
    kept = sqlite3.connect(tmp_path / "kept" / "a.db")
    assert kept.execute("pragma integrity_check").fetchone() == ("ok",)
    assert kept.execute("select count(*) from autotune_runs").fetchone()[0] > 3


def test_a_ctrl_c_inside_a_migration_is_answered_as_a_stop_and_the_next_upgrade_finishes(
        tmp_path):
    """Ctrl-C landing in a migration's DDL: SQLAlchemy closes the connection, and alembic's
    cleanup (drop its half-made table) fails on it, raised while handling the signal. The
    command still ends as a stop (130, no traceback), the database is left at
    its old revision, and the next upgrade finishes it (found by sending SIGINT at random
    moments of `autotune study`: 2 of 300 ended with exit 2 and alembic's error)."""
    url = f"sqlite:///{tmp_path}/autotune.db"
    sent: list[str] = []

    def ctrl_c_at_the_first_drop(conn, cursor, statement, *rest):
        if statement.lstrip().startswith("DROP TABLE") and not sent:
            sent.append(statement)
            os.kill(os.getpid(), signal.SIGINT)  # the handler raises in this frame

    event.listen(Engine, "before_cursor_execute", ctrl_c_at_the_first_drop)
    try:
        stopped = invoke("db", "upgrade", "--storage", url, cwd=tmp_path)
    finally:
        event.remove(Engine, "before_cursor_execute", ctrl_c_at_the_first_drop)
    assert sent, "no migration dropped a table: the signal was never sent"
    assert stopped.exit_code == 130, stopped.output
    assert "interrupted (SIGINT): every finished trial is kept" in stopped.output
    # (newer alembic fails its cleanup on top of the signal and says so; older re-raises it)
    assert "Traceback" not in stopped.output
    assert revision_of(url) != HEAD_REVISION  # the migration did not land half-way
    finished = invoke("db", "upgrade", "--storage", url, cwd=tmp_path)
    assert finished.exit_code == 0 and "at revision" in finished.output, finished.output
    assert revision_of(url) == HEAD_REVISION


def test_a_failure_raised_while_handling_a_stop_signal_ends_the_command_as_that_stop():
    """The cleanup after SIGTERM fails on the database: the command ends as SIGTERM (143),
    naming the failed cleanup in the driver's words; a failure with no stop under it is
    still an error (exit 2)."""
    from autotune.ground.proc import Interrupted

    def cleanup_fails_after(signum):
        def command():
            try:
                raise Interrupted(signum)
            except KeyboardInterrupt:
                raise sqlalchemy.exc.OperationalError(
                    "UPDATE claims", {}, sqlite3.OperationalError("database is locked")
                ) from None  # `from None` hides it from tracebacks, not from __context__
        return command

    app = typer.Typer()
    app.command()(friendly(cleanup_fails_after(signal.SIGTERM)))
    stopped = CliRunner().invoke(app, [])
    assert stopped.exit_code == 143, stopped.output
    assert "interrupted (SIGTERM): every finished trial is kept" in stopped.output
    assert "cleaning up after the stop failed: the database failed: database is locked" in (
        " ".join(stopped.output.split()))

    def fails_alone():
        raise sqlalchemy.exc.OperationalError(
            "UPDATE claims", {}, sqlite3.OperationalError("database is locked"))

    app = typer.Typer()
    app.command()(friendly(fails_alone))
    failed = CliRunner().invoke(app, [])
    assert failed.exit_code == 2 and "error: the database failed: database is locked" in (
        failed.output)
    assert "interrupted" not in failed.output


def test_what_to_do_follows_what_the_driver_said(tmp_path):
    assert what_to_do("database or disk is full").startswith("the disk holding it is full")
    assert what_to_do("could not write: No space left on device").startswith("the disk holding")
    assert what_to_do("disk I/O error").startswith("the disk holding it could not be written")
    assert what_to_do("disk I/O error", tmp_path).startswith(
        "the disk holding it could not be written")  # a disk with room: not called full


def test_a_disk_io_error_on_a_disk_without_room_is_called_full(tmp_path, monkeypatch):
    # Above the disk's size, not its free space: other tests free space meanwhile.
    monkeypatch.setattr(engine, "FULL_BELOW_BYTES", shutil.disk_usage(tmp_path).total + 1)
    assert what_to_do("disk I/O error", tmp_path).startswith("the disk holding it is full")
    assert what_to_do("disk I/O error").startswith("the disk holding it could not")  # unknown
    assert engine.sqlite_folder(f"sqlite:///{tmp_path}/a.db") == tmp_path
    assert engine.sqlite_folder("postgresql://u:secret@h/db") is None
    failure = database_failure(sqlite3.OperationalError("disk I/O error"),
                               f"sqlite:///{tmp_path}/a.db")
    assert "disk I/O error; the disk holding it is full" in str(failure)
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


# A server that goes away for a while (issue 31): a TCP proxy between autotune and the real
# PostgreSQL cuts every connection and refuses new ones, then serves again.


def _proxy(postgres_url: str):
    from sqlalchemy.engine import make_url

    from tests.bench_scripts import script

    parsed = make_url(postgres_url)
    return script("tcp_proxy").Proxy((parsed.host or "127.0.0.1", parsed.port or 5432))


def _back_after(proxy, seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, proxy.restore)
    timer.start()
    return timer


def test_the_store_and_optunas_storage_wait_for_a_server_that_went_away(postgres_url):
    """Cut for 3 s: a read during the cut waits, and both storages answer once it is back
    (before, the first read after the cut raised)."""
    import optuna

    from autotune.storage._optuna import rdb_storage
    from autotune.storage.store import Store

    with _proxy(postgres_url) as proxy:
        url = proxy.url(postgres_url)
        store = Store.open(url)
        storage = rdb_storage(url, create=True)
        optuna.create_study(study_name="s", storage=storage).enqueue_trial({})
        proxy.cut()
        _back_after(proxy, 3.0)
        started = time.monotonic()
        assert store.list_studies() == []
        assert time.monotonic() - started >= 2.5
        proxy.cut()
        _back_after(proxy, 2.0)
        assert len(optuna.load_study(study_name="s", storage=storage).get_trials()) == 1
        store.close()


def test_a_read_in_flight_when_the_server_goes_away_is_asked_again(postgres_url):
    """A read whose connection dies while the server runs it (here: waiting on a lock that
    another session holds) is asked again once the server is back, not a failure."""
    from sqlalchemy import create_engine, text

    from autotune.ground.records import OutcomeKind, TrialOutcome
    from autotune.storage.store import Store

    with _proxy(postgres_url) as proxy:
        store = Store.open(proxy.url(postgres_url))
        store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
        store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, ""))
        locker = create_engine(postgres_url)
        answer: dict[str, object] = {}

        def read() -> None:
            try:
                answer["runs"] = store.runs("s")
            except Exception as error:  # the failure this test looks for
                answer["error"] = error

        with locker.connect() as holding:
            holding.execute(text("LOCK TABLE autotune_runs IN ACCESS EXCLUSIVE MODE"))
            reader = threading.Thread(target=read)
            reader.start()
            time.sleep(1.0)  # the read waits on the lock: in flight
            proxy.cut()
            _back_after(proxy, 2.0)
            time.sleep(3.0)
            holding.rollback()  # the lock goes; the read asked again can answer
        reader.join(timeout=60)
        locker.dispose()
        assert "error" not in answer, answer.get("error")
        assert [r.trial_number for r in answer["runs"]] == [0]  # type: ignore[attr-defined]
        store.close()


def test_a_server_away_longer_than_the_patience_is_one_clear_error(postgres_url, monkeypatch):
    from autotune.storage.store import Store

    monkeypatch.setenv("AUTOTUNE_DB_PATIENCE_S", "1.5")
    with _proxy(postgres_url) as proxy:
        store = Store.open(proxy.url(postgres_url))
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(StorageError, match="check that it is reachable"):
            store.list_studies()
        assert 1.4 <= time.monotonic() - started < 10
        store.close()


def test_a_server_never_reached_is_reported_at_once_not_waited_for(postgres_url):
    """The first connection is not retried: a wrong host or port is a mistake, not an
    outage (the patience is the default, minutes)."""
    from autotune.storage.store import Store

    with _proxy(postgres_url) as proxy:
        proxy.cut()
        started = time.monotonic()
        with pytest.raises(StorageError, match="cannot open the database"):
            Store.open(proxy.url(postgres_url))
        assert time.monotonic() - started < 5


@pytest.mark.parametrize("value", ["soon", "-1", "inf"])
def test_a_bad_patience_is_refused_by_name(value, monkeypatch):
    from autotune.ground.errors import UsageError
    from autotune.storage.outage import patience_s

    monkeypatch.setenv("AUTOTUNE_DB_PATIENCE_S", value)
    with pytest.raises(UsageError, match="AUTOTUNE_DB_PATIENCE_S"):
        patience_s()


def test_retries_pause_longer_each_time_and_give_up_after_the_patience():
    """`patiently` on a fake clock: pauses 0.5, 1, 2, 4, 8, 8 ... until the patience."""
    from autotune.storage.outage import patiently

    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    def never() -> None:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError):
        patiently(never, ConnectionError, "db", 20.0, sleep=sleep, clock=lambda: now[0])
    assert pauses == [0.5, 1.0, 2.0, 4.0, 8.0, 4.5]
    calls = iter([ConnectionError("refused"), ConnectionError("refused"), "up"])

    def flaky() -> str:
        item = next(calls)
        if isinstance(item, Exception):
            raise item
        return item

    pauses.clear()
    assert patiently(flaky, ConnectionError, "db", 20.0, sleep=sleep,
                     clock=lambda: now[0]) == "up"
    assert pauses == [0.5, 1.0]


@pytest.mark.slow
def test_a_study_rides_out_a_20_s_outage_of_its_postgresql(postgres_url):
    """A real `autotune study` through the proxy, cut for 20 s while a trial's child runs
    (each child pauses 3 s before it builds): it waits for the server and finishes with
    exactly --trials, its trial's heartbeat going on after (before: it stopped)."""
    from autotune.storage.store import Store
    from autotune.study.measured import BUDGET_ROLES

    script = Path(__file__).parent / "workloads" / "slow_build.py"
    with _proxy(postgres_url) as proxy:
        study = subprocess.Popen(
            [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--script",
             str(script), "--preset", "tiny", "--devices", "1", "--steps", "5", "--warmup",
             "1", "--trials", "3", "--confirm", "0", "--name", "outage", "--storage",
             proxy.url(postgres_url)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "COLUMNS": "100", "SLOW_BUILD_S": "3"})
        watcher = Store.open(postgres_url)  # the server itself, not through the proxy
        deadline = time.monotonic() + 300
        while not [c for c in _claims(watcher) if c.state is ClaimState.RUNNING
                   and c.role is Role.SEARCH]:
            assert study.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # the trial's child pauses; its parent only waits
        proxy.cut()
        _back_after(proxy, 20.0)
        out, _ = study.communicate(timeout=400)
        assert study.returncode == 0, out
        assert "cannot be reached" in out and "is back after" in out
        assert "Traceback" not in out
        assert watcher.held("outage", BUDGET_ROLES) == 3
        watcher.close()


def test_a_trials_heartbeat_goes_on_after_the_server_was_away(postgres_url):
    """Optuna's own heartbeat thread ended at the first failed beat (a traceback on
    stderr), and the trial then went stale under its live process."""
    import optuna

    from autotune.storage._optuna import beating, rdb_storage

    with _proxy(postgres_url) as proxy:
        storage = rdb_storage(proxy.url(postgres_url), create=True, heartbeat_s=1)
        study = optuna.create_study(study_name="s", storage=storage)
        trial = study.ask()
        with beating(study, trial):
            time.sleep(1.5)  # beating
            proxy.cut()
            time.sleep(2.5)  # beats fail meanwhile
            before = _heartbeat(postgres_url, trial._trial_id)
            proxy.restore()
            time.sleep(2.5)
            after = _heartbeat(postgres_url, trial._trial_id)
        assert before is not None and after is not None and after > before
        assert [t.name for t in threading.enumerate() if t.name.startswith("autotune-trial")
                ] == []


def _heartbeat(url: str, trial_id: int):
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as connection:
        value = connection.execute(text(
            "select heartbeat from trial_heartbeats where trial_id = :t"), {"t": trial_id}
        ).scalar_one_or_none()
    engine.dispose()
    return value


def _claims(store) -> list:
    from autotune.ground.errors import StudyNotFoundError

    try:
        return store.claims("outage")
    except StudyNotFoundError:
        return []
