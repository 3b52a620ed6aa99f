"""Opening a database: the URL checked, the engine made, autotune's tables migrated
or refused (the store's `open`), and the schema revision read."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import random
import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import (
    Engine,
    column,
    create_engine,
    exc,
    inspect,
    select,
    table,
)
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.pool import NullPool

from autotune.ground.errors import StorageError
from autotune.ground.records import (
    SQLITE_TIMEOUT_S,
    sqlite_file,
)
from autotune.ground.resources import data_dir, install_line
from autotune.storage.models import (
    VERSION_TABLE,
)
from autotune.storage.outage import ride_out_outages

if TYPE_CHECKING:
    from alembic.config import Config

HEAD_REVISION = "0009"
"""The migration this code needs; the tests check it is the head of `alembic/versions`."""

PG_CONNECT_TIMEOUT_S = 10
"""How long a PostgreSQL connection attempt may take (unless the URL says otherwise)."""

URL_HINT = "use sqlite:///path.db or postgresql://user@host/db"

_T = TypeVar("_T")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def mask_url(url: str) -> str:
    """The URL as the user typed it, password replaced by ***."""
    return _PASSWORD.sub(r"\1***@", url)


def _reason(error: BaseException) -> str:
    """One line saying why a database call failed (the driver's own words)."""
    orig = getattr(error, "orig", None) or error
    return " ".join(str(orig).split()) or type(orig).__name__


#: Free bytes below which the disk of a SQLite file that failed with "disk I/O error"
#: is called full: SQLite can report a disk that filled under it as that error, not as
#: "database or disk is full" (3 of 5 times when `tests/test_storage_faults.py` filled a
#: study's disk mid-study, 2026-11-29).
FULL_BELOW_BYTES = 1 << 20


def what_to_do(reason: str, folder: Path | None = None) -> str:
    """What a user can do about a database failure whose driver said `reason`: free space
    where the disk is full, look at a disk that failed, else check the server. `folder`,
    where the database is a SQLite file: a disk I/O error there with under
    `FULL_BELOW_BYTES` free is a full disk."""
    lowered = reason.lower()
    if "disk is full" in lowered or "no space left" in lowered or (
            "disk i/o error" in lowered and _nearly_full(folder)):
        return ("the disk holding it is full: free space there, or give --storage a place "
                "with room, and run the same command again; what was stored is kept")
    if "disk i/o error" in lowered or "readonly database" in lowered:
        return ("the disk holding it could not be written (full, removed or read-only?): "
                "check it and run the same command again; what was stored is kept")
    return "check that it is reachable and run the same command again; what was stored is kept"


def _nearly_full(folder: Path | None) -> bool:
    """Whether the disk of `folder` has under `FULL_BELOW_BYTES` free (False if unknown)."""
    if folder is None:
        return False
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW_BYTES
    except OSError:
        return False


def sqlite_folder(shown: str) -> Path | None:
    """The folder of the SQLite file a database URL names (None for any other URL)."""
    try:
        url = make_url(shown)
    except (exc.ArgumentError, ValueError):
        return None
    return Path(str(url.database)).absolute().parent if sqlite_file(url) else None


def database_failure(error: BaseException, shown: str = "") -> StorageError:
    """One clear StorageError for a failed database call (SQLAlchemy's, or Optuna's over
    it): the driver's reason and what to do (`what_to_do`); `shown` names the database
    (its URL: a SQLite file's folder is looked at for a full disk)."""
    reason = _reason(error)
    where = f"the database {shown}" if shown else "the database"
    return StorageError(f"{where} failed: {reason}; {what_to_do(reason, sqlite_folder(shown))}")


def _parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as error:  # ValueError: e.g. a port that is no number
        detail = "" if isinstance(error, exc.ArgumentError) else f" ({error})"
        raise StorageError(
            f"invalid storage URL {mask_url(url)!r}: it does not parse as a database URL{detail}; "
            f"{URL_HINT}"
        ) from error
    return _with_installed_driver(parsed)


def _with_installed_driver(url: URL) -> URL:
    """`postgresql://` names psycopg2; use psycopg (3) when only that one is installed."""
    if url.drivername != "postgresql" or importlib.util.find_spec("psycopg2") is not None:
        return url
    if importlib.util.find_spec("psycopg") is None:
        return url
    return url.set(drivername="postgresql+psycopg")


def _check_sqlite_folder(url: URL, shown: str) -> None:
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return
    if database.startswith("file:") or url.query.get("uri"):
        return
    folder = Path(database).absolute().parent
    if not folder.is_dir():
        raise StorageError(
            f"cannot open {shown}: the folder {folder} does not exist; "
            "create it first or point the sqlite:/// path at an existing folder"
        )


def reading_url(url: URL) -> URL:
    """The URL a reader opens: `url` itself, except a SQLite file in a folder this process
    cannot write (a read-only mount, another user's folder), opened read-only instead.

    SQLite in write-ahead-log mode makes a `-shm` file beside the database even to
    read, which such a folder refuses ("unable to open database file"). Opened
    `mode=ro&immutable=1`, it reads the file alone; where a non-empty `-wal` file
    holds commits not yet folded into it, `immutable` would hide them, so only
    `mode=ro` (SQLite then needs the `-shm` there already).
    """
    database = url.database
    if (not sqlite_file(url) or database is None or database.startswith("file:")
            or url.query.get("uri")):
        return url
    path = Path(database).absolute()
    if not path.is_file() or os.access(path.parent, os.W_OK):
        return url
    wal = path.with_name(path.name + "-wal")
    query = {"mode": "ro", "uri": "true"}
    if not (wal.exists() and wal.stat().st_size > 0):
        query["immutable"] = "1"
    return url.set(database=f"file:{path}", query={**url.query, **query})


def _connect_args(url: URL) -> dict[str, Any]:
    if url.get_backend_name() == "sqlite" and "timeout" not in url.query:
        return {"timeout": SQLITE_TIMEOUT_S}
    if url.get_driver_name() in ("psycopg", "psycopg2") and "connect_timeout" not in url.query:
        return {"connect_timeout": PG_CONNECT_TIMEOUT_S}
    return {}


_JSON = json.JSONDecoder()


def _json_loads(text: str | bytes) -> Any:
    """`json.loads`, quicker on what the store wrote itself (a document with nothing around
    it): the decoder's own entry point; anything else goes to `json.loads`, which parses it
    or raises as it always did. Bytes (psycopg's) are decoded as `json.loads` decodes them.
    A study's runs hold six JSON columns each."""
    if isinstance(text, bytes | bytearray):
        text = text.decode(json.detect_encoding(text), "surrogatepass")
    try:
        value, end = _JSON.raw_decode(text)
    except ValueError:
        return json.loads(text)
    return value if end == len(text) else json.loads(text)


def _create_engine(url: URL, shown: str) -> Engine:
    """The engine of a storage URL; on a SQLite file without a pool (`records.sqlite_file`),
    on a server waiting for it through an outage (`autotune.storage.outage`)."""
    pool = {"poolclass": NullPool} if sqlite_file(url) else {}
    try:
        engine = create_engine(url, connect_args=_connect_args(url), pool_pre_ping=True,
                               json_deserializer=_json_loads, **pool)
    except exc.NoSuchModuleError as error:
        raise StorageError(
            f"unknown database kind {url.drivername!r} in storage URL {shown}; {URL_HINT}"
        ) from error
    except ImportError as error:
        raise StorageError(
            f"the database driver for {shown} is not installed ({error.name or error}); "
            f"install it (for PostgreSQL: {install_line('postgres')})"
        ) from error
    except exc.ArgumentError as error:
        raise StorageError(f"invalid storage URL {shown}: {error}; {URL_HINT}") from error
    ride_out_outages(engine, shown)
    return engine


def _write_ahead(engine: Engine) -> None:
    """Put a SQLite file in write-ahead-log mode (kept in the file from then on), so
    readers never block the workers that write and several workers on one host share
    it; with the busy timeout of `SQLITE_TIMEOUT_S` a writer waits for another's
    commit instead of failing. Only writers call this: reading changes no byte."""
    if not sqlite_file(engine.url):
        return
    deadline = time.monotonic() + SQLITE_TIMEOUT_S
    while True:
        try:
            with engine.connect() as connection:
                connection.exec_driver_sql("PRAGMA journal_mode=WAL")
            return
        except exc.OperationalError as error:
            # Changing the journal mode takes no busy timeout: SQLite answers "database is
            # locked" at once while another connection writes (several processes creating
            # one new database at once). Try again until the timeout a writer waits.
            if "database is locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(WAL_RETRY_S)


#: How long `_write_ahead` waits before asking for write-ahead mode again.
WAL_RETRY_S = 0.05


def _current_revision(connection: Connection) -> str | None:
    """The revision stamped in autotune's version table; None without the table or a stamp.

    Read with a plain query, as Alembic would read it: Alembic itself is
    imported only to migrate (importing it takes longer than reading a study).

    Raises:
        StorageError: the table holds more than one revision (Alembic's branches,
            which autotune's linear history never makes).
    """
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    stamped: list[str] = list(connection.execute(
        select(column("version_num")).select_from(table(VERSION_TABLE))).scalars())
    if len(stamped) > 1:
        raise StorageError(f"autotune's version table {VERSION_TABLE} holds several revisions "
                           f"({', '.join(map(str, stamped))}); autotune's migrations are one "
                           "line: stamp the database with its one revision (alembic stamp)")
    return stamped[0] if stamped else None


def _alembic_config(connection: Connection) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(data_dir("alembic")).replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


@contextmanager
def _schema_transaction(engine: Engine, write: bool) -> Iterator[Connection]:
    """A connection in one transaction that commits at the end of the block, DDL included.

    On a SQLite file pysqlite runs DDL outside any transaction (it begins one only
    before INSERT, UPDATE and DELETE), so a migration stopped half-way (Ctrl-C, a
    crash) left half its tables and a database no later open could migrate ("table
    autotune_environments already exists"). Here pysqlite's handling is off for the
    one connection (the engine keeps none idle: `records.sqlite_file`) and the block
    runs in one transaction: all of a migration or none of it. With `write` it begins
    IMMEDIATE, so a second process reads the revision only once the first has
    committed its migration; without, deferred (a reader's file may be read-only).
    Elsewhere: `engine.begin()`.
    """
    if not sqlite_file(engine.url):
        with engine.begin() as connection:
            yield connection
        return
    with engine.connect() as connection:
        connection.connection.driver_connection.isolation_level = None  # type: ignore[union-attr]
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
        yield connection
        connection.commit()


def _migrate(engine: Engine, shown: str, upgrade: bool, foreign_ok: bool = False) -> None:
    with _schema_transaction(engine, write=upgrade) as connection:
        current = _current_revision(connection)
        if current == HEAD_REVISION:
            return
        if upgrade and current is None and not foreign_ok:
            _refuse_foreign(connection, shown)
        if not upgrade:
            if current is None and not _has_autotune_tables(connection):
                raise StorageError(
                    f"the database {shown} is not an autotune database (it holds no autotune "
                    "tables): check --storage, or run `autotune study ...` to create a study "
                    "there")
            if current is not None and not _known_revision(connection, current):
                raise StorageError(
                    f"the database {shown} is at {current!r}, a schema revision this autotune "
                    "does not know: a newer autotune made it; upgrade autotune")
            raise StorageError(
                f"the database {shown} is at schema revision {current!r}, this autotune needs "
                f"{HEAD_REVISION!r}: run `autotune db upgrade` with the same --storage "
                "to migrate it"
            )
        _upgrade(connection, shown)


def _upgrade(connection: Connection, shown: str) -> None:
    """Run autotune's migrations up to the head, on `connection`."""
    from alembic import command
    from alembic.util import CommandError

    try:
        command.upgrade(_alembic_config(connection), "head")
    except CommandError as error:
        raise StorageError(
            f"cannot migrate the database {shown}: {error}; if a newer autotune created "
            "it, upgrade autotune"
        ) from error


def _known_revision(connection: Connection, revision: str) -> bool:
    """Whether `revision` is one of this autotune's migrations."""
    from alembic.script import ScriptDirectory
    from alembic.util import CommandError

    try:
        return ScriptDirectory.from_config(_alembic_config(connection)).get_revision(
            revision) is not None
    except CommandError:
        return False


#: Optuna's own tables (its RDB storage, in the same database as autotune's); a test checks
#: them against the installed Optuna's models.
OPTUNA_TABLES = frozenset({
    "alembic_version", "studies", "study_directions", "study_system_attributes",
    "study_user_attributes", "trial_heartbeats", "trial_intermediate_values", "trial_params",
    "trial_system_attributes", "trial_user_attributes", "trial_values", "trials",
    "version_info"})


def _refuse_foreign(connection: Connection, shown: str) -> None:
    """Refuse to add autotune's tables to a database that holds someone else's: tables that
    are neither autotune's (`autotune_*`) nor Optuna's (`OPTUNA_TABLES`)."""
    foreign = sorted(name for name in inspect(connection).get_table_names()
                     if not name.startswith("autotune_") and name not in OPTUNA_TABLES)
    if foreign:
        shown_names = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more"
                                                if len(foreign) > 5 else "")
        raise StorageError(
            f"the database {shown} holds tables that are not autotune's ({shown_names}): "
            "autotune leaves it as it is; point --storage at a database of its own, or run "
            "`autotune db upgrade --force` with the same --storage to add autotune's tables "
            "beside them")


def _has_autotune_tables(connection: Connection) -> bool:
    """Whether any of autotune's own tables (or its version table) exists."""
    return any(name.startswith("autotune_") for name in inspect(connection).get_table_names())


def _revision_or_none(engine: Engine) -> str | None:
    try:
        with engine.connect() as connection:
            return _current_revision(connection)
    except exc.DBAPIError:
        return None


#: How often a process retries creating the schema while another creates it too.
SCHEMA_ATTEMPTS = 12


def _open_schema(engine: Engine, shown: str, upgrade: bool, foreign_ok: bool = False) -> None:
    """Check (and with `upgrade`, create or migrate) autotune's tables; creating them in a
    database that holds other tables than autotune's and Optuna's only with `foreign_ok`.

    Two processes that open a brand-new database at once both try to create
    it; the one that loses the race waits for the other's tables (a short
    backoff, `SCHEMA_ATTEMPTS` tries) instead of failing.
    """
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            _migrate(engine, shown, upgrade, foreign_ok)
            return
        except exc.DBAPIError as error:
            if not upgrade or attempt == SCHEMA_ATTEMPTS - 1:
                reason = _reason(error)
                raise StorageError(
                    f"cannot open the database {shown}: {reason}; " + (
                        what_to_do(reason, sqlite_folder(shown)) if "disk" in reason.lower() else
                        f"check that the database is reachable and the URL is right "
                        f"({URL_HINT})")
                ) from error
            time.sleep(0.05 * (attempt + 1) + random.uniform(0, 0.05))
            if _revision_or_none(engine) == HEAD_REVISION:
                return  # another process migrated the same database at the same moment


def revision_of(url: str) -> str | None:
    """The schema revision of autotune's tables at `url` (None: there are none). Writes nothing.

    Raises:
        StorageError: a bad URL, or a database that cannot be reached.
    """
    parsed = _parse_url(url)
    shown = parsed.render_as_string(hide_password=True)
    _check_sqlite_folder(parsed, shown)
    engine = _create_engine(reading_url(parsed), shown)
    try:
        with engine.connect() as connection:
            return _current_revision(connection)
    except exc.DBAPIError as error:
        raise StorageError(
            f"cannot open the database {shown}: {_reason(error)}; check that the database "
            f"is reachable and the URL is right ({URL_HINT})"
        ) from error
    finally:
        engine.dispose()


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold Python's cyclic garbage collector while thousands of records are built.

    The records hold no cycles, so a collection finds nothing to free, but
    each one walks every object alive: while a large study's runs are read,
    those passes cost as much as reading them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


