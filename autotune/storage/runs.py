"""The measurement runs of a study: stored one at a time or in bulk, read back as
plain records."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from sqlalchemy import (
    JSON,
    Text,
    cast,
    exc,
    insert,
    inspect,
    select,
    text,
    update,
)

from autotune.ground.errors import StorageError
from autotune.ground.records import (
    ClaimState,
    Environment,
    FlagValue,
    NewRun,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.storage._base import StoreBase, _enum_values, asked_again
from autotune.storage.engine import _collector_paused, _json_loads, _reason
from autotune.storage.models import (
    RUN_COLUMNS,
    ClaimRow,
    EnvironmentRow,
    RunRow,
    StudyRow,
    outcome_columns,
    run_record,
    utcnow,
)


class RunsMixin(StoreBase):
    """The runs of `Store` (see its docstring for what every method may raise)."""

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

    @asked_again
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
                # Core, not the ORM, and the JSON columns as text decoded here: the
                # per-value processing of thousands of rows cost more than the query.
                rows = session.connection().execute(
                    select(*_AS_TEXT).where(*conditions).order_by(RunRow.id))
                return [run_record(values, study.name, environments.get(values["environment_id"]))
                        for values in (_decoded(dict(zip(keys, row, strict=True)))
                                       for row in rows)]


    @asked_again
    def reused_run(self, study_name: str, number: int) -> int | None:
        """The id of the run that Optuna's trial `number` of the study reused, or None.

        A proposal that repeated a configuration measured already stores no run of
        its own: Optuna's trial keeps the run it reused as its user attribute
        `reused_run_id` (`autotune.study.search`). None when the trial measured its
        own, when there is no such trial, or when the database holds no Optuna tables.
        Reads Optuna's tables (`studies`, `trials`, `trial_user_attributes`), never
        writes them.
        """
        with self._session() as session:
            if not inspect(session.connection()).has_table("trial_user_attributes"):
                return None
            value = session.execute(_REUSED, {"name": study_name, "number": number}).scalar()
        try:
            reused = json.loads(value) if value is not None else None
        except ValueError:
            return None
        return reused if isinstance(reused, int) else None


#: Optuna's user attribute `reused_run_id` of one trial of one study (Optuna's RDB schema).
_REUSED = text(
    "SELECT a.value_json FROM trial_user_attributes a"
    " JOIN trials t ON t.trial_id = a.trial_id JOIN studies s ON s.study_id = t.study_id"
    " WHERE s.study_name = :name AND t.number = :number AND a.key = 'reused_run_id'")


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


#: `RUN_COLUMNS` with each JSON column read as its text (`Store.runs` decodes it).
_JSON_KEYS = frozenset(c.key for c in RUN_COLUMNS if isinstance(c.type, JSON))
_AS_TEXT = tuple(cast(c, Text).label(c.key) if c.key in _JSON_KEYS else c for c in RUN_COLUMNS)


def _decoded(values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each JSON column's text decoded (None stays None)."""
    for key in _JSON_KEYS:
        text = values[key]
        if text is not None:
            values[key] = _json_loads(text)
    return values
