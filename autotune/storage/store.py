"""The store: the only door to autotune's tables in the database.

Optuna's RDB storage keeps the optimisation history in the same database; the
store keeps what Optuna does not (studies' settings, environments, every
measurement run, the files trials produced). It owns its engine and sessions,
migrates its tables with Alembic (version table `autotune_alembic_version`,
apart from Optuna's `alembic_version`), translates database errors into
`StorageError` and hands out plain records from `autotune.records`, never ORM
rows.
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, timedelta
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from sqlalchemy import (
    ColumnElement,
    Engine,
    column,
    create_engine,
    exc,
    func,
    insert,
    inspect,
    select,
    table,
    update,
)
from sqlalchemy.engine import URL, Connection, make_url
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from autotune._resources import data_dir
from autotune.errors import StorageError, StudyMismatchError, StudyNotFoundError
from autotune.records import (
    LIVE_WITHIN_S,
    SQLITE_TIMEOUT_S,
    ArtifactRecord,
    ClaimRecord,
    ClaimState,
    ClaimVerdict,
    Environment,
    FlagValue,
    MeasureMode,
    NewRun,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
    WorkerRecord,
    sqlite_file,
)
from autotune.storage import artifacts as _artifacts
from autotune.storage.models import (
    RUN_COLUMNS,
    VERSION_TABLE,
    Base,
    ClaimRow,
    EnvironmentRow,
    RunRow,
    StudyRow,
    outcome_columns,
    run_record,
    utcnow,
)

if TYPE_CHECKING:
    from alembic.config import Config

HEAD_REVISION = "0008"
"""The migration this code needs; the tests check it is the head of `alembic/versions`."""

PG_CONNECT_TIMEOUT_S = 10
"""How long a PostgreSQL connection attempt may take (unless the URL says otherwise)."""

URL_HINT = "use sqlite:///path.db or postgresql://user@host/db"

_T = TypeVar("_T")
_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def _mask(url: str) -> str:
    """The URL as the user typed it, password replaced by ***."""
    return _PASSWORD.sub(r"\1***@", url)


def _reason(error: BaseException) -> str:
    """One line saying why a database call failed (the driver's own words)."""
    orig = getattr(error, "orig", None) or error
    return " ".join(str(orig).split()) or type(orig).__name__


def _parse_url(url: str) -> URL:
    try:
        parsed = make_url(url)
    except (exc.ArgumentError, ValueError) as error:  # ValueError: e.g. a port that is no number
        detail = "" if isinstance(error, exc.ArgumentError) else f" ({error})"
        raise StorageError(
            f"invalid storage URL {_mask(url)!r}: it does not parse as a database URL{detail}; "
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
    """The engine of a storage URL; on a SQLite file without a pool (`records.sqlite_file`)."""
    pool = {"poolclass": NullPool} if sqlite_file(url) else {}
    try:
        return create_engine(url, connect_args=_connect_args(url), pool_pre_ping=True,
                             json_deserializer=_json_loads, **pool)
    except exc.NoSuchModuleError as error:
        raise StorageError(
            f"unknown database kind {url.drivername!r} in storage URL {shown}; {URL_HINT}"
        ) from error
    except ImportError as error:
        raise StorageError(
            f"the database driver for {shown} is not installed ({error.name or error}); "
            "install it (for PostgreSQL: pip install 'autotune[postgres]')"
        ) from error
    except exc.ArgumentError as error:
        raise StorageError(f"invalid storage URL {shown}: {error}; {URL_HINT}") from error


def _write_ahead(engine: Engine) -> None:
    """Put a SQLite file in write-ahead-log mode (kept in the file from then on), so
    readers never block the workers that write and several workers on one host share
    it; with the busy timeout of `SQLITE_TIMEOUT_S` a writer waits for another's
    commit instead of failing. Only writers call this: reading changes no byte."""
    if not sqlite_file(engine.url):
        return
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA journal_mode=WAL")


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


def _migrate(engine: Engine, shown: str, upgrade: bool) -> None:
    with engine.begin() as connection:
        current = _current_revision(connection)
        if current == HEAD_REVISION:
            return
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


def _open_schema(engine: Engine, shown: str, upgrade: bool) -> None:
    """Check (and with `upgrade`, create or migrate) autotune's tables.

    Two processes that open a brand-new database at once both try to create
    it; the one that loses the race waits for the other's tables (a short
    backoff, `SCHEMA_ATTEMPTS` tries) instead of failing.
    """
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            _migrate(engine, shown, upgrade)
            return
        except exc.DBAPIError as error:
            if not upgrade or attempt == SCHEMA_ATTEMPTS - 1:
                raise StorageError(
                    f"cannot open the database {shown}: {_reason(error)}; check that the "
                    f"database is reachable and the URL is right ({URL_HINT})"
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
    engine = _create_engine(parsed, shown)
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


def _study_named(session: Session, name: str) -> StudyRow | None:
    return session.scalar(select(StudyRow).where(StudyRow.name == name))


def _enum_values(values: Iterable[str], enum: type[StrEnum]) -> list[str]:
    return [str(enum(value)) for value in values]


def _study_not_found(name: str, shown: str, known: Iterable[str]) -> str:
    names = ", ".join(known)
    if not names:
        return (
            f"no study named {name!r}: the database {shown} holds no studies yet; "
            "create one with `autotune study --name NAME ...`"
        )
    return f"no study named {name!r} in {shown}; known studies: {names}"


def _check_same_settings(existing: StudyRow, wanted: StudyRow) -> None:
    differences = existing.differences(wanted)
    if differences:
        raise StudyMismatchError(
            f"study {existing.name!r} was created with {'; '.join(differences)}: resume it "
            "with its original settings (the first value of each), or pick a new --name to "
            "study other settings"
        )


class Store:
    """autotune's tables in one SQL database (SQLite or PostgreSQL).

    Open it with `Store.open(url)`; close it with `close()` or a `with` block.
    Every method runs in its own short transaction and returns plain records
    (`StudyRecord`, `RunRecord`); no ORM row escapes.

    Thread-safety: a Store is not shared. Open one per thread and one per
    process (never carry one across `fork`); many Stores on many machines may
    use the same database at once. One exception: `beat` may be called from
    another thread (a claim's heartbeat) while the owner uses the Store; it
    takes a connection of its own from the engine's pool.

    Raises (from any method):
        StorageError: the URL is malformed, names an unknown database kind or a
            missing driver, the database cannot be reached or opened, its schema
            is not at `HEAD_REVISION` (with `upgrade=False`), or a statement
            fails (e.g. SQLite stayed locked past `SQLITE_TIMEOUT_S`).
        StudyNotFoundError: a method names a study the database does not hold.
        StudyMismatchError: `ensure_study` finds the study with other settings.
    """

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine whose schema is at head; use `Store.open` instead."""
        self._engine = engine
        self._shown = engine.url.render_as_string(hide_password=True)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @classmethod
    def open(cls, url: str, *, upgrade: bool = True) -> Store:
        """Connect to the database at `url` and bring autotune's tables to head.

        Args:
            url: a SQLAlchemy URL, e.g. `sqlite:///autotune.db` or
                `postgresql://user@host/db`. A SQLite file is created if
                missing, but its folder must exist.
            upgrade: create or migrate the tables to `HEAD_REVISION` if
                needed; when False (every command that only reads), nothing is
                written and a database not at head raises instead: "not an
                autotune database" without autotune's tables, else "run
                `autotune db upgrade`".

        Raises:
            StorageError: see the class docstring; the message names the URL
                (password masked) and what to do.
        """
        parsed = _parse_url(url)
        shown = parsed.render_as_string(hide_password=True)
        _check_sqlite_folder(parsed, shown)
        engine = _create_engine(parsed, shown)
        try:
            _open_schema(engine, shown, upgrade)
            if upgrade:
                _write_ahead(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

    @property
    def url(self) -> str:
        """The URL in use, password included: hand this one to Optuna's storage."""
        return self._engine.url.render_as_string(hide_password=False)

    def __repr__(self) -> str:
        return f"Store({self._shown!r})"

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the connections; the Store must not be used afterwards."""
        self._engine.dispose()

    def current_revision(self) -> str | None:
        """The autotune schema revision stamped in the database (None if none)."""
        with self._translated(), self._engine.connect() as connection:
            return _current_revision(connection)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except exc.IntegrityError:
            raise
        except exc.DBAPIError as error:
            raise StorageError(
                f"the database {self._shown} failed: {_reason(error)}; "
                "check that it is reachable and retry"
            ) from error

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One session in one transaction, committed on success."""
        with self._translated(), self._sessions() as session, session.begin():
            yield session

    def ensure_study(
        self,
        name: str,
        space: str,
        benchmark: str,
        preset: str,
        devices: int,
        mode: MeasureMode | str,
        space_backend: str | None = None,
        objectives: Sequence[str] = ("time",),
        memory_budget_bytes: int | None = None,
        plan: Mapping[str, Any] | None = None,
    ) -> StudyRecord:
        """Create the study, or return it if it exists with the same settings.

        `space_backend` (the backend the space's flags are for) is kept for
        reports; it is not a setting that must match on resume. `plan` holds
        the rest of what shapes a measurement (JSON-ready values); it must match
        too when the stored study has one.

        Raises:
            StudyMismatchError: the study exists with a different space,
                benchmark, preset, devices, mode, objectives, memory budget or
                plan field; the message names each with both values.
        """
        wanted = StudyRow(
            name=name,
            space=space,
            benchmark=benchmark,
            preset=preset,
            devices=devices,
            mode=str(MeasureMode(mode)),
            space_backend=space_backend,
            objectives=",".join(objectives),
            memory_budget_bytes=memory_budget_bytes,
            plan=dict(plan) if plan is not None else None,
        )
        existing = self._get_or_insert(lambda session: _study_named(session, name), wanted)
        _check_same_settings(existing, wanted)
        return existing.to_record()

    def _get_or_insert(self, find: Callable[[Session], _T | None], row: Base) -> _T:
        """What `find` finds, after inserting `row` if it finds nothing (race-safe)."""
        with self._session() as session:
            found = find(session)
        if found is None:
            try:
                with self._session() as session:
                    session.add(row)
            except exc.IntegrityError:  # another process inserted the same row first
                pass
            with self._session() as session:
                found = find(session)
        if found is None:
            raise StorageError(f"the database {self._shown} lost a row it just stored: {row!r}")
        return found

    def get_study(self, name: str) -> StudyRecord:
        """The study called `name`.

        Raises:
            StudyNotFoundError: no such study; the message lists the known ones.
        """
        with self._session() as session:
            return self._study_row(session, name).to_record()

    def _study_row(self, session: Session, name: str) -> StudyRow:
        row = _study_named(session, name)
        if row is None:
            names = session.scalars(select(StudyRow.name).order_by(StudyRow.name)).all()
            raise StudyNotFoundError(_study_not_found(name, self._shown, names))
        return row

    def save_fit(self, study_name: str, fit: Mapping[str, Any]) -> bool:
        """Store the study's fitted space (a JSON-ready document) unless one is stored.

        One `UPDATE ... WHERE space_fit IS NULL`: of several processes that
        fit the same study, the first to store wins and every one then reads
        that fit back (`get_study(...).space_fit`). Returns True when this call
        stored it.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study = self._study_row(session, study_name)
            done = session.execute(update(StudyRow).where(
                StudyRow.id == study.id, StudyRow.space_fit.is_(None)).values(
                space_fit=dict(fit)).execution_options(synchronize_session=False))
            return bool(getattr(done, "rowcount", 0))

    def set_recipe(self, study_name: str, recipe: Mapping[str, Any]) -> None:
        """Store how workers rebuild the study's plan (`plan["recipe"]`, JSON-ready),
        replacing the one stored: every `autotune study` run writes its own, the last wins.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study = self._study_row(session, study_name)
            study.plan = {**(study.plan or {}), "recipe": dict(recipe)}

    def list_studies(self) -> list[StudyRecord]:
        """Every study, oldest first."""
        with self._session() as session:
            rows = session.scalars(select(StudyRow).order_by(StudyRow.id)).all()
            return [row.to_record() for row in rows]

    def record_run(
        self,
        study_name: str,
        trial_number: int | None,
        role: Role | str,
        flags: Mapping[str, FlagValue],
        env: Mapping[str, str],
        outcome: TrialOutcome,
        environment: Environment | None = None,
        ratio: float | None = None,
        env_key: str | None = None,
        claim_id: int | None = None,
        claim_state: ClaimState = ClaimState.DONE,
    ) -> int:
        """Store one measurement run and return its id.

        Args:
            study_name: the study (created by `ensure_study`).
            trial_number: the Optuna trial number, or None for a run outside a trial.
            role: why the configuration was measured.
            flags: flag name -> typed value of the configuration.
            env: the environment variables the trial was given (e.g. XLA_FLAGS).
            outcome: how the trial ended, with its measurement if any.
            environment: where it ran; equal environments share one row.
            ratio: candidate over baseline step time; defaults to the measurement's
                in-process (paired) ratio. A DIRECT-mode run passes its ratio
                against the study's baseline run.
            env_key: the environment the run belongs to (see `Store.claim`).
            claim_id: the claim this run fulfils; it is set to `claim_state`
                and linked to the run in the same transaction, so a run and the
                end of its claim are stored together or not at all.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        environment_id = self._environment_id(environment)
        with self._session() as session:
            row = RunRow(
                study_id=self._study_row(session, study_name).id,
                trial_number=trial_number,
                role=str(Role(role)),
                flags=dict(flags),
                env=dict(env),
                environment_id=environment_id,
                env_key=env_key,
                **outcome_columns(outcome),
            )
            if ratio is not None:
                row.ratio = ratio
            session.add(row)
            session.flush()
            if claim_id is not None:
                session.execute(update(ClaimRow).where(ClaimRow.id == claim_id).values(
                    state=str(claim_state), run_id=row.id, updated_at=utcnow()))
            return row.id

    def record_runs(self, study_name: str, runs: Sequence[NewRun]) -> list[int]:
        """Store many finished runs in one transaction; return their ids, in order.

        What `record_run` does for each run, as one bulk insert (an import, a
        benchmark's fixture: 10,000 runs take seconds, not minutes). A run
        with a `claim_key` is stored with its claim, as if it had been taken
        with `claim` and ended by `record_run(claim_id=...)`: the claim is in
        the run's `claim_state`, linked to the run, and the study's
        `claims_made` counts it. Either everything is stored or nothing.

        Raises:
            StudyNotFoundError: no study called `study_name`.
            StorageError: a `claim_key` is claimed already in that environment.
        """
        environments = {e: self._environment_id(e)
                        for e in dict.fromkeys(r.environment for r in runs) if e is not None}
        with self._session() as session:
            study_id = self._study_row(session, study_name).id
            if not runs:
                return []
            ids = list(session.scalars(
                insert(RunRow).returning(RunRow.id, sort_by_parameter_order=True),
                [_run_values(study_id, run, environments) for run in runs]))
            claims = [_claim_values(study_id, run, run_id) for run, run_id
                      in zip(runs, ids, strict=True) if run.claim_key is not None]
            if claims:
                try:
                    session.execute(insert(ClaimRow), claims)
                except exc.IntegrityError as error:  # the transaction is rolled back whole
                    raise StorageError(
                        f"cannot store the runs of study {study_name!r} in {self._shown}: a "
                        f"claim key among them is claimed already ({_reason(error)}); "
                        "nothing was stored") from error
                session.execute(update(StudyRow).where(StudyRow.id == study_id).values(
                    claims_made=StudyRow.claims_made + len(claims)))
        return ids

    def _environment_id(self, environment: Environment | None) -> int | None:
        if environment is None:
            return None
        fingerprint = environment.fingerprint  # every fact: one row per environment
        query = select(EnvironmentRow.id).where(EnvironmentRow.fingerprint == fingerprint)
        return self._get_or_insert(lambda session: session.scalar(query), EnvironmentRow(
            **asdict(environment), fingerprint=fingerprint))

    def runs(
        self,
        study_name: str,
        roles: Iterable[Role | str] | None = None,
        kinds: Iterable[OutcomeKind | str] | None = None,
        env_key: str | None = None,
        after: int | None = None,
    ) -> list[RunRecord]:
        """The runs of a study in the order they were recorded.

        Args:
            study_name: the study.
            roles: keep only runs with one of these roles (None: all).
            kinds: keep only runs whose outcome is one of these kinds (None: all).
            env_key: keep only runs of this environment, and runs that belong
                to none (stored before environments were told apart); None: all.
            after: keep only runs stored after the run with this id. Runs are
                never changed once stored, so a reader that holds a study's runs
                up to id N brings them up to date with `after=N`.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study = self._study_row(session, study_name)
            conditions = [RunRow.study_id == study.id]
            if after is not None:
                conditions.append(RunRow.id > after)
            if roles is not None:
                conditions.append(RunRow.role.in_(_enum_values(roles, Role)))
            if kinds is not None:
                conditions.append(RunRow.kind.in_(_enum_values(kinds, OutcomeKind)))
            if env_key is not None:
                conditions.append((RunRow.env_key == env_key) | RunRow.env_key.is_(None))
            # Columns, not ORM objects: a study may hold thousands of runs, and each of
            # its few environments becomes one record that its runs share.
            used = select(RunRow.environment_id).where(*conditions).distinct()
            environments = {row.id: row.to_record() for row in session.scalars(
                select(EnvironmentRow).where(EnvironmentRow.id.in_(used)))}
            keys = [column.key for column in RUN_COLUMNS]
            with _collector_paused():
                rows = session.execute(select(*RUN_COLUMNS).where(*conditions)
                                       .order_by(RunRow.id))
                return [run_record(values, study.name, environments.get(values["environment_id"]))
                        for values in (dict(zip(keys, row, strict=True)) for row in rows)]

    # --- claims ---------------------------------------------------------------------------

    def claim(
        self,
        study_name: str,
        env_key: str,
        key: str,
        role: Role | str,
        flags: Mapping[str, FlagValue],
        trial_number: int | None,
        owner: tuple[str, int],
        budget: tuple[int, Sequence[Role]] | None = None,
    ) -> tuple[ClaimVerdict, ClaimRecord | None]:
        """Claim the right to measure `key` in the environment `env_key`, atomically.

        One transaction first bumps the study's `claims_made` (a write, so a
        second claimer of the same study waits here: SQLite's write lock,
        PostgreSQL's row lock), then decides:

        - FULL: `budget` = (trials, roles) and the study already holds that
          many runs of those roles plus running claims of them;
        - TAKEN: `key` is claimed in `env_key` and that claim is running or
          done; the record is that claim;
        - CLAIMED: a new claim, or one that was interrupted or marked for a
          retry, taken over by `owner` (host, pid); the record is ours.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        key_hash = hashlib.sha256(key.encode()).hexdigest()
        with self._session() as session:
            study = self._study_row(session, study_name)
            session.execute(update(StudyRow).where(StudyRow.id == study.id).values(
                claims_made=StudyRow.claims_made + 1))
            if budget is not None and self._held(session, study.id, budget[1]) >= budget[0]:
                return ClaimVerdict.FULL, None
            row = session.scalar(select(ClaimRow).where(
                ClaimRow.study_id == study.id, ClaimRow.env_key == env_key,
                ClaimRow.key_hash == key_hash))
            if row is not None and ClaimState(row.state) in (ClaimState.RUNNING, ClaimState.DONE):
                return ClaimVerdict.TAKEN, row.to_record(study.name)
            if row is None:
                row = ClaimRow(study_id=study.id, env_key=env_key, key_hash=key_hash, key=key)
                session.add(row)
            row.role, row.flags, row.trial_number = str(Role(role)), dict(flags), trial_number
            row.state, row.run_id, row.claimed_at = str(ClaimState.RUNNING), None, utcnow()
            row.heartbeat_at = row.claimed_at
            row.owner_host, row.owner_pid = owner
            session.flush()
            return ClaimVerdict.CLAIMED, row.to_record(study.name)

    @staticmethod
    def _held(session: Session, study_id: int, roles: Sequence[Role]) -> int:
        """Runs of `roles` in the study plus its running claims of them (what a budget counts)."""
        names = [str(r) for r in roles]
        runs = session.scalar(select(func.count(RunRow.id)).where(
            RunRow.study_id == study_id, RunRow.role.in_(names))) or 0
        running = session.scalar(select(func.count(ClaimRow.id)).where(
            ClaimRow.study_id == study_id, ClaimRow.role.in_(names),
            ClaimRow.state == str(ClaimState.RUNNING))) or 0
        return runs + running

    def held(self, study_name: str, roles: Sequence[Role]) -> int:
        """What a budget of `roles` counts now (see `claim`)."""
        with self._session() as session:
            return self._held(session, self._study_row(session, study_name).id, roles)

    def count_runs(self, study_name: str, roles: Sequence[Role]) -> int:
        """How many runs of `roles` the study has stored (a progress display's count)."""
        with self._session() as session:
            study = self._study_row(session, study_name)
            return session.scalar(select(func.count(RunRow.id)).where(
                RunRow.study_id == study.id, RunRow.role.in_([str(r) for r in roles]))) or 0

    def release(self, claim_id: int, state: ClaimState = ClaimState.INTERRUPTED) -> bool:
        """End a running claim without a run (default: interrupted, so anyone may claim it
        again). Returns False when the claim was not running (finished or released already)."""
        with self._session() as session:
            done = session.execute(update(ClaimRow).where(
                ClaimRow.id == claim_id, ClaimRow.state == str(ClaimState.RUNNING)).values(
                state=str(state), updated_at=utcnow()))
            return bool(getattr(done, "rowcount", 0))

    def beat(self, claim_id: int) -> bool:
        """Say that the owner of a running claim is alive: its `heartbeat_at` becomes now.

        One UPDATE of a running claim only; returns False when the claim is
        not running (finished, released, or no such claim).
        """
        with self._session() as session:
            done = session.execute(update(ClaimRow).where(
                ClaimRow.id == claim_id, ClaimRow.state == str(ClaimState.RUNNING)).values(
                heartbeat_at=utcnow()))
            return bool(getattr(done, "rowcount", 0))

    def live_claims(self, study_name: str | None = None,
                    within_s: float = LIVE_WITHIN_S) -> list[ClaimRecord]:
        """The running claims whose owner beat within the last `within_s` seconds.

        A claim without a heartbeat (made before heartbeats were stored) counts
        from when it was claimed. The workers' clocks and this one are taken
        to agree (each writes and reads UTC from its own clock). Oldest first.

        Args:
            study_name: the study; None: every study.
            within_s: how recent the last heartbeat must be (default
                `LIVE_WITHIN_S`, three beats of `CLAIM_BEAT_S`).

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            query = (select(ClaimRow, StudyRow.name)
                     .join(StudyRow, ClaimRow.study_id == StudyRow.id)
                     .where(_live(within_s)).order_by(ClaimRow.id))
            if study_name is not None:
                query = query.where(ClaimRow.study_id == self._study_row(session, study_name).id)
            return [row.to_record(name) for row, name in session.execute(query)]

    def version(self, study_name: str, within_s: float = LIVE_WITHIN_S) -> str:
        """A token that changes whenever what a reader shows of the study changes: a run
        stored, a claim taken, ended or released, a worker gone silent (`live_claims`).
        Heartbeats of live workers alone do not change it.

        Aggregates over the study's indexed rows only; reads no run's contents.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        running = ClaimRow.state == str(ClaimState.RUNNING)
        with self._session() as session:
            study_id = self._study_row(session, study_name).id
            runs = session.execute(select(func.count(RunRow.id), func.max(RunRow.id))
                                   .where(RunRow.study_id == study_id)).one()
            claims = session.execute(select(
                func.count(ClaimRow.id), func.max(ClaimRow.claimed_at),
                func.count(ClaimRow.id).filter(running),
                func.count(ClaimRow.id).filter(_live(within_s)))
                .where(ClaimRow.study_id == study_id)).one()
            return ":".join(str(v) for v in (*runs, *claims))

    def workers(self, study_name: str, within_s: float = LIVE_WITHIN_S) -> list[WorkerRecord]:
        """Every process that claimed work in the study, its claims counted by state in
        one grouped query (no claim is read whole): what a progress view shows.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        with self._session() as session:
            study_id = self._study_row(session, study_name).id
            rows = session.execute(
                select(ClaimRow.owner_host, ClaimRow.owner_pid, ClaimRow.state,
                       func.count(ClaimRow.id), func.max(_LAST_SEEN),
                       func.count(ClaimRow.id).filter(_live(within_s)))
                .where(ClaimRow.study_id == study_id)
                .group_by(ClaimRow.owner_host, ClaimRow.owner_pid, ClaimRow.state)).all()
        counts: dict[tuple[str, int], dict[str, Any]] = {}
        for host, pid, state, n, last, n_live in rows:
            c = counts.setdefault((host, pid), {"done": 0, "running": 0, "interrupted": 0,
                                                "last_seen": last, "live": False})
            key = state if state in (ClaimState.DONE, ClaimState.RUNNING) else "interrupted"
            c[key] += n
            c["last_seen"], c["live"] = max(c["last_seen"], last), c["live"] or n_live > 0
        return [WorkerRecord(host, pid, c["done"], c["running"], c["interrupted"],
                             c["last_seen"].replace(tzinfo=UTC), c["live"])
                for (host, pid), c in sorted(counts.items())]

    def claims(self, study_name: str, states: Iterable[ClaimState] | None = None,
               env_key: str | None = None) -> list[ClaimRecord]:
        """The study's claims, oldest first, optionally of some states or one environment."""
        with self._session() as session:
            study = self._study_row(session, study_name)
            query = select(ClaimRow).where(ClaimRow.study_id == study.id).order_by(ClaimRow.id)
            if states is not None:
                query = query.where(ClaimRow.state.in_([str(s) for s in states]))
            if env_key is not None:
                query = query.where(ClaimRow.env_key == env_key)
            return [row.to_record(study.name) for row in session.scalars(query)]

    # --- artifacts ------------------------------------------------------------------------

    def put_artifact(self, study: str, trial_number: int, env_key: str, kind: str,
                     content: str, meta: Mapping[str, Any]) -> None:
        """Store a file trial `trial_number` produced in the environment `env_key`.

        One transaction. An artifact with the same (study, `env_key`,
        `trial_number`, `kind`) is replaced, content, `meta` and time: a
        re-collected profile wins; of two processes storing it at once, the
        last to commit.

        Args:
            study: the study.
            trial_number: the trial that produced it.
            env_key: the environment it was produced in (see `Store.claim`).
            kind: what it is, e.g. `"pgle-profile"` (1 to 32 characters).
            content: the file's text, whole (no NUL characters).
            meta: a JSON-ready document of what it belongs to.

        Raises:
            StudyNotFoundError: no study called `study`.
            ValueError: `kind`, `env_key` or `content` out of what the columns hold.
        """
        _artifacts.check(env_key, kind, content)
        with self._session() as session:
            study_id = self._study_row(session, study).id
            _artifacts.put(session, study_id, trial_number, env_key, kind, content, meta)

    def artifact(self, study: str, trial_number: int, env_key: str,
                 kind: str) -> ArtifactRecord | None:
        """The artifact of that trial, environment and kind; None when none is stored.

        Raises:
            StudyNotFoundError: no study called `study`.
        """
        with self._session() as session:
            row = self._study_row(session, study)
            found = _artifacts.one(session, row.id, trial_number, env_key, kind)
            return None if found is None else found.to_record(row.name)

    def artifacts(self, study: str, kind: str | None = None) -> list[ArtifactRecord]:
        """The study's artifacts (of one `kind`, or all; every environment), by trial
        number, then in the order they were first stored. Each carries its content.

        Raises:
            StudyNotFoundError: no study called `study`.
        """
        with self._session() as session:
            row = self._study_row(session, study)
            return [found.to_record(row.name)
                    for found in _artifacts.of_study(session, row.id, kind)]


_LAST_SEEN = func.coalesce(ClaimRow.heartbeat_at, ClaimRow.claimed_at)
"""When a claim's owner was last heard from: its heartbeat, or (a claim made before
heartbeats were stored) when it claimed."""


def _live(within_s: float) -> ColumnElement[bool]:
    """The rule of a live claim: running, and its owner heard from within `within_s`
    seconds (workers' and readers' clocks are taken to agree, in UTC)."""
    since = utcnow() - timedelta(seconds=within_s)
    return (ClaimRow.state == str(ClaimState.RUNNING)) & (_LAST_SEEN >= since)


def _run_values(study_id: int, run: NewRun, environments: Mapping[Environment, int | None]
                ) -> dict[str, Any]:
    """The `RunRow` attributes of one run of `Store.record_runs`."""
    values = {"study_id": study_id, "trial_number": run.trial_number, "role": str(Role(run.role)),
              "flags": dict(run.flags), "env": dict(run.env), "env_key": run.env_key,
              "environment_id": None if run.environment is None
              else environments[run.environment], "created_at": utcnow(),
              **outcome_columns(run.outcome)}
    if run.ratio is not None:
        values["ratio"] = run.ratio
    return values


def _claim_values(study_id: int, run: NewRun, run_id: int) -> dict[str, Any]:
    """The `ClaimRow` attributes of the claim a run of `Store.record_runs` fulfils."""
    assert run.claim_key is not None
    now = utcnow()
    return {"study_id": study_id, "env_key": run.env_key or "", "key": run.claim_key,
            "key_hash": hashlib.sha256(run.claim_key.encode()).hexdigest(),
            "role": str(Role(run.role)), "flags": dict(run.flags),
            "trial_number": run.trial_number, "state": str(ClaimState(run.claim_state)),
            "owner_host": run.owner[0], "owner_pid": run.owner[1], "run_id": run_id,
            "claimed_at": now, "updated_at": now, "heartbeat_at": now}
