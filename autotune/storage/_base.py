"""The store's shared ground: one engine, short sessions, errors translated."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from enum import StrEnum
from typing import Any, ParamSpec, Self, TypeVar

from sqlalchemy import Engine, delete, exc, insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from autotune.ground.errors import StorageError, StudyMismatchError, StudyNotFoundError
from autotune.storage.engine import _current_revision, database_failure
from autotune.storage.models import Base, StudyRow

_T = TypeVar("_T")
_P = ParamSpec("_P")

log = logging.getLogger(__name__)


def asked_again(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """A read (or a write that may run twice, like a heartbeat) asked once more when the
    connection it ran on died under it: the server went away while it was in flight.

    The second call takes a new connection, which waits for the server as every new
    connection does (`storage.outage`), so a statement in flight at a restart is
    answered once the server is back. Any other failure, or a second one, is raised as
    it was. Writes that must not run twice (a run recorded, a claim taken) are not
    wrapped: their failure still stops the study with one line.
    """

    @functools.wraps(method)
    def again(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except StorageError as error:
            cause = error.__cause__
            if not (isinstance(cause, exc.DBAPIError) and cause.connection_invalidated):
                raise
            log.info("the connection died under %s; asking again", method.__name__)
            return method(*args, **kwargs)

    return again


def upsert(session: Session, model: type[Base], values: Mapping[str, Any],
           identity: Sequence[str]) -> None:
    """Store the row `values`, replacing the one with the same `identity` columns (a unique
    constraint), in one statement on SQLite and PostgreSQL (`INSERT ... ON CONFLICT DO
    UPDATE`): two processes storing at once both succeed, the last to commit wins.
    Another database deletes and inserts in the session's transaction."""
    name = session.get_bind().dialect.name
    if name in ("sqlite", "postgresql"):
        statement = (sqlite.insert if name == "sqlite" else postgresql.insert)(model).values(
            dict(values))
        session.execute(statement.on_conflict_do_update(
            index_elements=list(identity),
            set_={key: statement.excluded[key] for key in values if key not in identity}))
        return
    session.execute(delete(model).where(
        *(getattr(model, key) == values[key] for key in identity)))
    session.execute(insert(model).values(dict(values)))


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
            "with its original settings (the first value of each), pick a new --name to "
            "study other settings, or add --restart to delete this study and start over"
        )




class StoreBase:
    """What every part of the store shares: the engine, its sessions, the translation of
    database errors into `StorageError`, and finding a study's row (see `Store`)."""

    def __init__(self, engine: Engine) -> None:
        """Wrap an engine whose schema is at head; use `Store.open` instead."""
        self._engine = engine
        self._shown = engine.url.render_as_string(hide_password=True)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

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
            raise database_failure(error, self._shown) from error

    @contextmanager
    def _session(self) -> Iterator[Session]:
        """One session in one transaction, committed on success."""
        with self._translated(), self._sessions() as session, session.begin():
            yield session


    def _study_row(self, session: Session, name: str) -> StudyRow:
        row = _study_named(session, name)
        if row is None:
            names = session.scalars(select(StudyRow.name).order_by(StudyRow.name)).all()
            raise StudyNotFoundError(_study_not_found(name, self._shown, names))
        return row

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
