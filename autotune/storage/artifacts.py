"""The queries behind `Store.put_artifact`, `Store.artifact` and `Store.artifacts`.

Each takes the session of the store's transaction and the study's id; the
store finds the study, converts rows into `records.ArtifactRecord` and
translates database errors. Only `put` writes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from autotune.ground.records import ArtifactRecord
from autotune.storage._base import StoreBase, upsert
from autotune.storage.models import ArtifactRow

#: The columns that tell one artifact from another (`uq_autotune_artifacts_identity`).
IDENTITY = ("study_id", "env_key", "trial_number", "kind")
#: The longest `kind` and `env_key` the columns hold (PostgreSQL refuses longer ones,
#: SQLite would keep them: both are refused before either sees them).
KIND_MAX, ENV_KEY_MAX = 32, 255


def check(env_key: str, kind: str, content: str) -> None:
    """Refuse what one of the two databases would refuse or store differently.

    Raises:
        ValueError: `kind` empty or longer than `KIND_MAX`, `env_key` longer than
            `ENV_KEY_MAX`, or `content` holding a NUL character (PostgreSQL's text
            cannot hold one).
    """
    if not kind or len(kind) > KIND_MAX:
        raise ValueError(f"an artifact's kind must be 1 to {KIND_MAX} characters, not {kind!r}")
    if len(env_key) > ENV_KEY_MAX:
        raise ValueError(f"an artifact's environment key must be at most {ENV_KEY_MAX} "
                         f"characters, not {len(env_key)}")
    if "\x00" in content:
        raise ValueError("an artifact's content must be text without NUL characters")


def put(session: Session, study_id: int, trial_number: int, env_key: str, kind: str,
        content: str, meta: Mapping[str, Any]) -> None:
    """Store the artifact, replacing the one with the same identity, in one statement.

    SQLite and PostgreSQL: `INSERT ... ON CONFLICT (identity) DO UPDATE`, so two
    processes that store the same artifact at once both succeed and the last
    one's is kept; another database deletes and inserts in the transaction.
    """
    upsert(session, ArtifactRow, {
        "study_id": study_id, "trial_number": trial_number, "env_key": env_key, "kind": kind,
        "content": content, "meta": dict(meta), "created_at": datetime.now(UTC)}, IDENTITY)


def one(session: Session, study_id: int, trial_number: int, env_key: str,
        kind: str) -> ArtifactRow | None:
    """The artifact of that identity, or None."""
    return session.scalar(select(ArtifactRow).where(
        ArtifactRow.study_id == study_id, ArtifactRow.trial_number == trial_number,
        ArtifactRow.env_key == env_key, ArtifactRow.kind == kind))


def of_study(session: Session, study_id: int, kind: str | None) -> Sequence[ArtifactRow]:
    """The study's artifacts (of one kind, or all), by trial number, then id."""
    query = select(ArtifactRow).where(ArtifactRow.study_id == study_id)
    if kind is not None:
        query = query.where(ArtifactRow.kind == kind)
    return session.scalars(query.order_by(ArtifactRow.trial_number, ArtifactRow.id)).all()


class ArtifactsMixin(StoreBase):
    """The artifacts of `Store` (see its docstring for what every method may raise)."""

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
        check(env_key, kind, content)
        with self._session() as session:
            study_id = self._study_row(session, study).id
            put(session, study_id, trial_number, env_key, kind, content, meta)

    def artifact(self, study: str, trial_number: int, env_key: str,
                 kind: str) -> ArtifactRecord | None:
        """The artifact of that trial, environment and kind; None when none is stored.

        Raises:
            StudyNotFoundError: no study called `study`.
        """
        with self._session() as session:
            row = self._study_row(session, study)
            found = one(session, row.id, trial_number, env_key, kind)
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
                    for found in of_study(session, row.id, kind)]
