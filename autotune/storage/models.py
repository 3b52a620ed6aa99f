"""SQLAlchemy models of autotune's own tables (prefix `autotune_`).

Optuna's tables in the same database hold the optimisation history; these hold
what Optuna does not: environments, every measurement run, failures and logs.
The schema changes only through the migrations under `alembic/`; the test
suite checks that these models and the migrations agree. Rows never leave
`autotune.storage`: the store converts them into records of `autotune.ground.records`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from autotune.ground.records import (
    PLAN_FINISHED,
    PLAN_PRIOR,
    PLAN_WARM,
    ArtifactRecord,
    ClaimRecord,
    ClaimState,
    Environment,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
)
from autotune.rules.collectives import profile_from_json, profile_json

TABLE_PREFIX = "autotune_"
VERSION_TABLE = "autotune_alembic_version"

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic filter: autogenerate considers only autotune's own tables.

    Optuna's tables (`studies`, `trials`, ...) share the database; without
    this filter autogenerate proposes dropping them.
    """
    if type_ == "table":
        return name is not None and name.startswith(TABLE_PREFIX)
    return True


def utcnow() -> datetime:
    """The current time in UTC, naive (stored the same way on every backend)."""
    return datetime.now(UTC).replace(tzinfo=None)


def _aware(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class NonFiniteFloat(TypeDecorator[float]):
    """A float column that keeps NaN on SQLite (which otherwise stores NULL).

    A checksum of a run that produced NaN must read back as NaN, not as
    "no checksum". SQLite keeps the text 'NaN' in a FLOAT column as text;
    PostgreSQL stores NaN natively.
    """

    impl = Float
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return _sqlite_float
        return super().bind_processor(dialect)

    def process_result_value(self, value: Any, dialect: Dialect) -> float | None:
        return None if value is None else float(value)


def _sqlite_float(value: float | None) -> float | str | None:
    if value is None:
        return None
    return "NaN" if math.isnan(value) else float(value)


class Base(DeclarativeBase):
    """Declarative base carrying the constraint naming convention."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class EnvironmentRow(Base):
    """Where measurements were taken; one row per distinct environment.

    `fingerprint` is `records.Environment.fingerprint`: every fact, the host
    included (rows stored before migration `0007` got theirs there, with no
    driver or runtime). Rows are told apart by it alone: two environments that
    differ only in their driver are two rows.
    """

    __tablename__ = "autotune_environments"
    __table_args__ = (
        UniqueConstraint("fingerprint", name="uq_autotune_environments_fingerprint"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    python_version: Mapped[str] = mapped_column(String(64))
    jax_version: Mapped[str] = mapped_column(String(64))
    jaxlib_version: Mapped[str] = mapped_column(String(64))
    backend: Mapped[str] = mapped_column(String(32))
    device_kind: Mapped[str] = mapped_column(String(255))
    device_count: Mapped[int] = mapped_column(Integer)
    driver_version: Mapped[str | None] = mapped_column(String(64))
    runtime_version: Mapped[str | None] = mapped_column(String(255))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)

    def to_record(self) -> Environment:
        """The plain record of this row."""
        return Environment(
            host=self.host,
            python_version=self.python_version,
            jax_version=self.jax_version,
            jaxlib_version=self.jaxlib_version,
            backend=self.backend,
            device_kind=self.device_kind,
            device_count=self.device_count,
            driver_version=self.driver_version,
            runtime_version=self.runtime_version,
        )


class StudyRow(Base):
    """The settings a study was created with."""

    __tablename__ = "autotune_studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(255), unique=True)
    space: Mapped[str] = mapped_column(String(255))
    benchmark: Mapped[str] = mapped_column(String(255))
    preset: Mapped[str] = mapped_column(String(255))
    devices: Mapped[int] = mapped_column(Integer)
    mode: Mapped[str] = mapped_column(String(16))
    space_backend: Mapped[str | None] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)
    objectives: Mapped[str] = mapped_column(String(64), server_default="time")
    memory_budget_bytes: Mapped[int | None] = mapped_column(BigInteger)
    plan: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    claims_made: Mapped[int] = mapped_column(Integer, server_default="0")
    # The space fitted to the workload (`autotune.spaces.fit`), stored once (`Store.save_fit`).
    space_fit: Mapped[dict[str, Any] | None] = mapped_column(JSON)

    SETTINGS: ClassVar[tuple[str, ...]] = ("space", "benchmark", "preset", "devices", "mode",
                                           "objectives", "memory_budget_bytes")
    #: Plan fields added after plans were first stored, with the value a re-run that does
    #: not name them asks for: a plan stored before one existed compares as if it held this.
    PLAN_DEFAULTS: ClassVar[dict[str, Any]] = {"fit": True, "launcher": None,
                                                "per_compile_open": []}
    #: Plan keys that are not settings to compare: how workers rebuild the plan
    #: (`recipe`, rewritten by every `autotune study`) and when the phases after the search
    #: last ended (`finished`, `Store.mark_finished`), where a warm start came from.
    NOT_COMPARED: ClassVar[frozenset[str]] = frozenset({"recipe", PLAN_FINISHED, PLAN_WARM,
                                                        PLAN_PRIOR})

    def differences(self, other: StudyRow) -> list[str]:
        """`setting mine (asked for other's)` for each setting in which the two studies differ.

        The columns always count; the plan's fields count when both rows have a
        plan (a study made before plans were stored has none).
        """
        mine = {key: getattr(self, key) for key in self.SETTINGS}
        theirs = {key: getattr(other, key) for key in self.SETTINGS}
        if self.plan is not None and other.plan is not None:
            mine.update({k: v for k, v in {**self.PLAN_DEFAULTS, **self.plan}.items()
                         if k not in self.NOT_COMPARED})
            theirs.update({k: v for k, v in {**self.PLAN_DEFAULTS, **other.plan}.items()
                           if k not in self.NOT_COMPARED})
        return [f"{key} {mine.get(key)!r} (asked for {theirs.get(key)!r})"
                for key in dict.fromkeys([*mine, *theirs]) if mine.get(key) != theirs.get(key)]

    def to_record(self) -> StudyRecord:
        """The plain record of this row."""
        return StudyRecord(
            name=self.name,
            space=self.space,
            benchmark=self.benchmark,
            preset=self.preset,
            devices=self.devices,
            mode=MeasureMode(self.mode),
            created_at=_aware(self.created_at),
            space_backend=self.space_backend,
            objectives=tuple(self.objectives.split(",")),
            memory_budget_bytes=self.memory_budget_bytes,
            space_fit=self.space_fit,
            plan=self.plan,
        )


class RunRow(Base):
    """One measurement run: a configuration, how it ended and what it measured.

    Measurement columns are NULL (JSON columns empty) when the outcome carries
    no measurement; `mode` is set exactly when a measurement was stored.
    `median_s`, `baseline_median_s` and `ratio` are derived, stored for queries.
    """

    __tablename__ = "autotune_runs"
    __table_args__ = (
        Index("ix_autotune_runs_study_id_trial_number", "study_id", "trial_number"),
        # what a budget counts (`Store.claim`) and the runs of some roles (`Store.runs`)
        Index("ix_autotune_runs_study_id_role", "study_id", "role"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"))
    trial_number: Mapped[int | None] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(32))
    flags: Mapped[dict[str, Any]] = mapped_column(JSON)
    env: Mapped[dict[str, str]] = mapped_column(JSON)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)
    duration_s: Mapped[float] = mapped_column(Float)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("autotune_environments.id"))
    env_key: Mapped[str | None] = mapped_column(String(255))
    mode: Mapped[str | None] = mapped_column(String(16))
    compile_time_s: Mapped[float | None] = mapped_column(Float)
    first_step_time_s: Mapped[float | None] = mapped_column(Float)
    step_times: Mapped[list[float]] = mapped_column(JSON)
    baseline_step_times: Mapped[list[float]] = mapped_column(JSON)
    median_s: Mapped[float | None] = mapped_column(Float)
    baseline_median_s: Mapped[float | None] = mapped_column(Float)
    ratio: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    memory_source: Mapped[str | None] = mapped_column(String(64))
    rss_peak_bytes: Mapped[int | None] = mapped_column(BigInteger)
    # Warm-up and numerics-guard facts: read rarely, kept together.
    extras: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    checksum: Mapped[float | None] = mapped_column(NonFiniteFloat)
    baseline_checksum: Mapped[float | None] = mapped_column(NonFiniteFloat)
    hlo_stats: Mapped[dict[str, int]] = mapped_column(JSON)
    fingerprint: Mapped[str | None] = mapped_column(String(128))
    baseline_fingerprint: Mapped[str | None] = mapped_column(String(128))
    jax_version: Mapped[str | None] = mapped_column(String(64))
    jaxlib_version: Mapped[str | None] = mapped_column(String(64))
    backend: Mapped[str | None] = mapped_column(String(32))
    device_kind: Mapped[str | None] = mapped_column(String(255))
    device_count: Mapped[int | None] = mapped_column(Integer)
    stdout_tail: Mapped[str] = mapped_column(Text)
    stderr_tail: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)

    study: Mapped[StudyRow] = relationship(lazy="raise")
    environment: Mapped[EnvironmentRow | None] = relationship(lazy="raise")

    def to_record(self, study_name: str) -> RunRecord:
        """The plain record of this row (its `environment` must be loaded)."""
        environment = None if self.environment is None else self.environment.to_record()
        values = {column.key: getattr(self, column.key) for column in RUN_COLUMNS}
        return run_record(values, study_name, environment)


#: The columns of `autotune_runs`, in the order `Store.runs` selects them.
RUN_COLUMNS = tuple(RunRow.__table__.columns)

# Members by value: a dict lookup, where calling the enum costs a microsecond per row.
_ROLES = {str(member): member for member in Role}
_KINDS = {str(member): member for member in OutcomeKind}
_MODES = {str(member): member for member in MeasureMode}


def run_record(values: Mapping[str, Any], study_name: str,
               environment: Environment | None) -> RunRecord:
    """The plain record of a run from its column values (`RUN_COLUMNS` keys).

    `Store.runs` reads the columns without building ORM objects (a study may
    hold thousands of runs) and hands each environment's record to every run
    of that environment.
    """
    return RunRecord(
        id=values["id"],
        study_name=study_name,
        trial_number=values["trial_number"],
        role=_ROLES.get(values["role"]) or Role(values["role"]),
        flags=dict(values["flags"]),
        env=dict(values["env"]),
        outcome=TrialOutcome(
            kind=_KINDS.get(values["kind"]) or OutcomeKind(values["kind"]),
            message=values["message"],
            measurement=_measurement(values),
            duration_s=values["duration_s"],
            exit_code=values["exit_code"],
            signal=values["signal"],
            stdout_tail=values["stdout_tail"],
            stderr_tail=values["stderr_tail"],
        ),
        created_at=_aware(values["created_at"]),
        environment=environment,
        ratio=values["ratio"],
        env_key=values["env_key"],
    )


def _measurement(values: Mapping[str, Any]) -> Measurement | None:
    mode = values["mode"]
    if mode is None:
        return None
    return Measurement(
        step_times_s=tuple(values["step_times"]),
        compile_time_s=values["compile_time_s"] or 0.0,
        mode=_MODES.get(mode) or MeasureMode(mode),
        baseline_step_times_s=tuple(values["baseline_step_times"]),
        first_step_time_s=values["first_step_time_s"],
        peak_memory_bytes=values["peak_memory_bytes"],
        memory_source=values["memory_source"] or "",
        rss_peak_bytes=values["rss_peak_bytes"],
        checksum=values["checksum"],
        baseline_checksum=values["baseline_checksum"],
        hlo_stats=dict(values["hlo_stats"]),
        fingerprint=values["fingerprint"],
        baseline_fingerprint=values["baseline_fingerprint"],
        jax_version=values["jax_version"] or "",
        jaxlib_version=values["jaxlib_version"] or "",
        backend=values["backend"] or "",
        device_kind=values["device_kind"] or "",
        device_count=values["device_count"] or 0,
        **_extras_fields(values["extras"] or {}),
    )


class ClaimRow(Base):
    """A claim: one process's right to measure one configuration in one environment.

    Unique per (study, environment key, hash of the measurement's key), so two
    processes never measure the same configuration in the same environment.
    `claims_made` on the study row is bumped by every claim: that write is the
    lock that serialises claims on SQLite and PostgreSQL alike.
    """

    __tablename__ = "autotune_claims"
    __table_args__ = (
        UniqueConstraint("study_id", "env_key", "key_hash", name="uq_autotune_claims_identity"),
        # running claims, of one study or of all (`Store.claims`, `Store.live_claims`)
        Index("ix_autotune_claims_state_study_id", "state", "study_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"))
    env_key: Mapped[str] = mapped_column(String(255))
    key_hash: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(Text)
    role: Mapped[str] = mapped_column(String(32))
    flags: Mapped[dict[str, Any]] = mapped_column(JSON)
    trial_number: Mapped[int | None] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    owner_host: Mapped[str] = mapped_column(String(255))
    owner_pid: Mapped[int] = mapped_column(Integer)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("autotune_runs.id"))
    claimed_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(), default=utcnow, onupdate=utcnow)
    # The last sign of life of its owner (`Store.beat`); NULL for claims made before 0005.
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime())

    def to_record(self, study_name: str) -> ClaimRecord:
        """The plain record of this row."""
        return ClaimRecord(
            id=self.id, study_name=study_name, env_key=self.env_key, key=self.key,
            role=Role(self.role), flags=dict(self.flags), trial_number=self.trial_number,
            state=ClaimState(self.state), owner_host=self.owner_host, owner_pid=self.owner_pid,
            run_id=self.run_id, claimed_at=_aware(self.claimed_at),
            heartbeat_at=None if self.heartbeat_at is None else _aware(self.heartbeat_at),
        )



class ArtifactRow(Base):
    """A file a trial produced (a PGLE profile...), kept for later processes and the export.

    Unique per (study, environment key, trial, kind): `Store.put_artifact` replaces
    the one stored. `created_at` is stored with its time zone (UTC).
    """

    __tablename__ = "autotune_artifacts"
    __table_args__ = (
        UniqueConstraint("study_id", "env_key", "trial_number", "kind",
                         name="uq_autotune_artifacts_identity"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"))
    trial_number: Mapped[int] = mapped_column(Integer)
    env_key: Mapped[str] = mapped_column(String(255))
    kind: Mapped[str] = mapped_column(String(32))
    content: Mapped[str] = mapped_column(Text)
    meta: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))

    def to_record(self, study_name: str) -> ArtifactRecord:
        """The plain record of this row."""
        return ArtifactRecord(
            study=study_name, trial_number=self.trial_number, env_key=self.env_key,
            kind=self.kind, content=self.content, meta=dict(self.meta),
            created_at=_aware(self.created_at),
        )

class ViewRow(Base):
    """A study's page as its writer computed it (`Store.save_view`), so that a reader of
    an unchanged study shows it without reading every run.

    One per study. `version` is `Store.version` when the writer began reading;
    `made_by` is the autotune that computed it (`ground.resources.source_digest`
    with its version): a page is current only while both match the reader's.
    `page` is the page's JSON text (`results.view.study_page`).
    """

    __tablename__ = "autotune_views"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("autotune_studies.id"), unique=True)
    version: Mapped[str] = mapped_column(String(255))
    made_by: Mapped[str] = mapped_column(String(64))
    page: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


_EXTRAS = ("warmup_steps", "warmup_settled", "warmup_times_s", "baseline_warmup_times_s",
           "output_dtype", "abs_sum", "numerics_error", "same_program_as", "collectives",
           "pgle")


def _extras_fields(extras: dict[str, Any]) -> dict[str, Any]:
    """Measurement fields from the `extras` column; a key a run stored before the field
    existed is absent, and the field keeps its default."""
    fields = {k: extras[k] for k in _EXTRAS if k in extras}
    for key in ("warmup_times_s", "baseline_warmup_times_s"):
        if key in fields:
            fields[key] = tuple(fields[key])
    if "collectives" in fields:
        fields["collectives"] = profile_from_json(fields["collectives"])
    return fields


def _extras_column(m: Measurement) -> dict[str, Any]:
    extras = {k: getattr(m, k) for k in _EXTRAS}
    for key in ("warmup_times_s", "baseline_warmup_times_s"):
        extras[key] = list(extras[key])
    if m.pgle is None:
        del extras["pgle"]
    else:
        extras["pgle"] = dict(m.pgle)
    if m.collectives is None:
        del extras["collectives"]
    else:
        extras["collectives"] = profile_json(m.collectives)
    return extras


def outcome_columns(outcome: TrialOutcome) -> dict[str, Any]:
    """The `RunRow` column values that store `outcome` and its measurement."""
    return {
        "kind": str(outcome.kind),
        "message": outcome.message,
        "duration_s": outcome.duration_s,
        "exit_code": outcome.exit_code,
        "signal": outcome.signal,
        "stdout_tail": outcome.stdout_tail,
        "stderr_tail": outcome.stderr_tail,
        **measurement_columns(outcome.measurement),
    }


def measurement_columns(measurement: Measurement | None) -> dict[str, Any]:
    """The `RunRow` column values that store `measurement` (empty ones for None)."""
    if measurement is None:
        return {"step_times": [], "baseline_step_times": [], "hlo_stats": {}, "extras": {}}
    m = measurement
    return {
        "mode": str(m.mode),
        "compile_time_s": m.compile_time_s,
        "first_step_time_s": m.first_step_time_s,
        "step_times": list(m.step_times_s),
        "baseline_step_times": list(m.baseline_step_times_s),
        "median_s": m.median_s,
        "baseline_median_s": m.baseline_median_s,
        "ratio": m.paired_ratio,
        "peak_memory_bytes": m.peak_memory_bytes,
        "memory_source": m.memory_source,
        "rss_peak_bytes": m.rss_peak_bytes,
        "extras": _extras_column(m),
        "checksum": m.checksum,
        "baseline_checksum": m.baseline_checksum,
        "hlo_stats": dict(m.hlo_stats),
        "fingerprint": m.fingerprint,
        "baseline_fingerprint": m.baseline_fingerprint,
        **{key: getattr(m, key) for key in _MEASURED_ON},
    }


_MEASURED_ON = ("jax_version", "jaxlib_version", "backend", "device_kind", "device_count")
