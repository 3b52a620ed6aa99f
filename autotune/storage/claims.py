"""Claims of a study: who measures which configuration now, taken in one statement
(STYLE 13), beaten while the work runs, and read as live workers."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, timedelta
from typing import Any

from sqlalchemy import (
    ColumnElement,
    func,
    select,
    update,
)
from sqlalchemy.orm import Session

from autotune.ground.records import (
    LIVE_WITHIN_S,
    PLAN_FINISHED,
    ClaimRecord,
    ClaimState,
    ClaimVerdict,
    FlagValue,
    OutcomeKind,
    Role,
    WorkerRecord,
)
from autotune.storage._base import StoreBase, asked_again
from autotune.storage.models import (
    ClaimRow,
    RunRow,
    StudyRow,
    utcnow,
)


class ClaimsMixin(StoreBase):
    """The claims of `Store` (see its docstring for what every method may raise)."""

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
        free_compiles: int = 0,
    ) -> tuple[ClaimVerdict, ClaimRecord | None]:
        """Claim the right to measure `key` in the environment `env_key`, atomically.

        One transaction first bumps the study's `claims_made` (a write, so a
        second claimer of the same study waits here: SQLite's write lock,
        PostgreSQL's row lock), then decides:

        - FULL: `budget` = (trials, roles) and the study already holds that
          many runs of those roles plus running claims of them, its first
          `free_compiles` compile-only runs not counted (`_held`);
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
            if budget is not None and self._held(
                    session, study.id, budget[1], free_compiles) >= budget[0]:
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
    def _counted(session: Session, study_id: int, roles: Sequence[Role], free_compiles: int = 0
                 ) -> int:
        """Stored runs of `roles` in the study, less its compile-only runs (OK, nothing
        timed: a program timed already) up to `free_compiles`."""
        of_roles = (RunRow.study_id == study_id, RunRow.role.in_([str(r) for r in roles]))
        runs = session.scalar(select(func.count(RunRow.id)).where(*of_roles)) or 0
        compiled = 0 if free_compiles <= 0 else session.scalar(
            select(func.count(RunRow.id)).where(
                *of_roles, RunRow.kind == str(OutcomeKind.OK), RunRow.median_s.is_(None))) or 0
        return runs - min(compiled, free_compiles)

    @classmethod
    def _held(cls, session: Session, study_id: int, roles: Sequence[Role],
              free_compiles: int = 0) -> int:
        """What a budget counts: `_counted` plus the study's running claims of `roles` (a
        running claim counts in full until its run says otherwise)."""
        running = session.scalar(select(func.count(ClaimRow.id)).where(
            ClaimRow.study_id == study_id, ClaimRow.role.in_([str(r) for r in roles]),
            ClaimRow.state == str(ClaimState.RUNNING))) or 0
        return cls._counted(session, study_id, roles, free_compiles) + running

    @asked_again
    def held(self, study_name: str, roles: Sequence[Role], free_compiles: int = 0) -> int:
        """What a budget of `roles` counts now (see `claim` and `_held`)."""
        with self._session() as session:
            return self._held(session, self._study_row(session, study_name).id, roles,
                              free_compiles)

    @asked_again
    def count_runs(self, study_name: str, roles: Sequence[Role], free_compiles: int = 0) -> int:
        """How many runs of `roles` the study has stored, less the compile-only ones up to
        `free_compiles` (a progress display's count of what `--trials` counts)."""
        with self._session() as session:
            return self._counted(session, self._study_row(session, study_name).id, roles,
                                 free_compiles)

    @asked_again
    def release(self, claim_id: int, state: ClaimState = ClaimState.INTERRUPTED) -> bool:
        """End a running claim without a run (default: interrupted, so anyone may claim it
        again). Returns False when the claim was not running (finished or released already)."""
        with self._session() as session:
            done = session.execute(update(ClaimRow).where(
                ClaimRow.id == claim_id, ClaimRow.state == str(ClaimState.RUNNING)).values(
                state=str(state), updated_at=utcnow()))
            return bool(getattr(done, "rowcount", 0))

    @asked_again
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

    @asked_again
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

    @asked_again
    def version(self, study_name: str, within_s: float = LIVE_WITHIN_S) -> str:
        """A token that changes whenever what a reader shows of the study changes: a run
        stored, a claim taken, ended or released, a worker gone silent (`live_claims`),
        the phases after the search ended (`mark_finished`). Heartbeats of live workers
        alone do not change it.

        Aggregates over the study's indexed rows only; reads no run's contents.

        Raises:
            StudyNotFoundError: no study called `study_name`.
        """
        running = ClaimRow.state == str(ClaimState.RUNNING)
        with self._session() as session:
            study = self._study_row(session, study_name)
            study_id = study.id
            finished = ((study.plan or {}).get(PLAN_FINISHED) or {}).get("at", "")
            runs = session.execute(select(func.count(RunRow.id), func.max(RunRow.id))
                                   .where(RunRow.study_id == study_id)).one()
            claims = session.execute(select(
                func.count(ClaimRow.id), func.max(ClaimRow.claimed_at),
                func.count(ClaimRow.id).filter(running),
                func.count(ClaimRow.id).filter(_live(within_s)))
                .where(ClaimRow.study_id == study_id)).one()
            return ":".join(str(v) for v in (*runs, *claims, finished))

    @asked_again
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

    @asked_again
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



_LAST_SEEN = func.coalesce(ClaimRow.heartbeat_at, ClaimRow.claimed_at)
"""When a claim's owner was last heard from: its heartbeat, or (a claim made before
heartbeats were stored) when it claimed."""


def _live(within_s: float) -> ColumnElement[bool]:
    """The rule of a live claim: running, and its owner heard from within `within_s`
    seconds (workers' and readers' clocks are taken to agree, in UTC)."""
    since = utcnow() - timedelta(seconds=within_s)
    return (ClaimRow.state == str(ClaimState.RUNNING)) & (_LAST_SEEN >= since)

