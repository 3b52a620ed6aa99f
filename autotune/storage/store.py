"""The store: the only door to autotune's tables in the database.

Optuna's RDB storage keeps the optimisation history in the same database; the
store keeps what Optuna does not (studies' settings, environments, every
measurement run, the files trials produced). It owns its engine and sessions,
migrates its tables with Alembic (version table `autotune_alembic_version`,
apart from Optuna's `alembic_version`), translates database errors into
`StorageError` and hands out plain records from `autotune.ground.records`, never ORM
rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import (
    delete,
    func,
    select,
    update,
)

from autotune.ground.records import (
    PLAN_FINISHED,
    PLAN_SUBMITTED,
    PLAN_WARM,
    MeasureMode,
    StudyRecord,
)
from autotune.storage._base import _check_same_settings, _study_named, asked_again
from autotune.storage.artifacts import ArtifactsMixin
from autotune.storage.claims import ClaimsMixin
from autotune.storage.engine import (
    HEAD_REVISION,
    _check_sqlite_folder,
    _create_engine,
    _open_schema,
    _parse_url,
    _write_ahead,
    reading_url,
    revision_of,
)
from autotune.storage.models import (
    ArtifactRow,
    ClaimRow,
    RunRow,
    StudyRow,
    ViewRow,
    utcnow,
)
from autotune.storage.runs import RunsMixin
from autotune.storage.views import ViewsMixin

#: What other modules take from here: the store, its schema revision, reading a revision.
__all__ = ["HEAD_REVISION", "Store", "revision_of"]


class Store(RunsMixin, ClaimsMixin, ArtifactsMixin, ViewsMixin):
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



    @classmethod
    def open(cls, url: str, *, upgrade: bool = True, foreign_ok: bool = False) -> Store:
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
            foreign_ok: with `upgrade`, create autotune's tables even in a
                database that holds other tables than autotune's and Optuna's
                (`autotune db upgrade --force`); without it that is refused.

        Raises:
            StorageError: see the class docstring; the message names the URL
                (password masked) and what to do.
        """
        parsed = _parse_url(url)
        shown = parsed.render_as_string(hide_password=True)
        _check_sqlite_folder(parsed, shown)
        engine = _create_engine(parsed if upgrade else reading_url(parsed), shown)
        try:
            _open_schema(engine, shown, upgrade, foreign_ok)
            if upgrade:
                _write_ahead(engine)
        except BaseException:
            engine.dispose()
            raise
        return cls(engine)

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
        if PLAN_SUBMITTED in (existing.plan or {}) and wanted.plan is not None:
            return self._adopt(name, wanted)
        _check_same_settings(existing, wanted)
        return existing.to_record()

    def submit_study(self, name: str, space: str, benchmark: str, preset: str, devices: int,
                     mode: MeasureMode | str, recipe: Mapping[str, Any],
                     objectives: Sequence[str] = ("time",),
                     memory_budget_bytes: int | None = None) -> StudyRecord:
        """Store a study that no process has planned yet (`autotune study --submit`): its
        columns and the recipe workers rebuild it from, its plan marked `PLAN_SUBMITTED`. The
        first process that prepares it stores the plan it made (`ensure_study`); until
        then only the columns must match. A study that exists already gets the new recipe.

        Raises:
            StudyMismatchError: the study exists with other columns.
        """
        self.ensure_study(name, space, benchmark, preset, devices, mode, objectives=objectives,
                          memory_budget_bytes=memory_budget_bytes)
        with self._session() as session:
            study = self._study_row(session, name)
            plan = dict(study.plan or {PLAN_SUBMITTED: True})
            study.plan = {**plan, "recipe": dict(recipe)}
            return study.to_record()

    def _adopt(self, name: str, wanted: StudyRow) -> StudyRecord:
        """The first plan of a submitted study: `wanted`'s, beside the stored recipe (its
        columns must match)."""
        with self._session() as session:
            study = self._study_row(session, name)
            _check_same_settings(study, StudyRow(**{
                key: getattr(wanted, key) for key in StudyRow.SETTINGS}, plan=None))
            plan = dict(study.plan or {})
            if PLAN_SUBMITTED in plan:
                recipe = plan.get("recipe")
                study.plan = {**dict(wanted.plan or {}),
                              **({"recipe": recipe} if recipe is not None else {})}
            study.space_backend = study.space_backend or wanted.space_backend
            return study.to_record()

    def save_warm_start(self, name: str, drawn: Sequence[Mapping[str, Any]],
                        key: str = PLAN_WARM) -> None:
        """Record the earlier studies a warm start drew from (`plan[key]`, JSON-ready: the
        configurations queued under `PLAN_WARM`, the evidence given to the sampler under
        `PLAN_PRIOR`), unless a process of the study recorded them already (the first wins).

        Raises:
            StudyNotFoundError: no study called `name`.
        """
        with self._session() as session:
            study = self._study_row(session, name)
            if key not in (study.plan or {}):
                study.plan = {**(study.plan or {}), key: [dict(d) for d in drawn]}

    def mark_finished(self, name: str, trials: int,
                      after: dict[str, Any] | None = None) -> None:
        """Note that the phases after the search (confirmation, shrinking, PGLE) ended for a
        study of `trials` trials (`plan["finished"]`: the trials, when, UTC, and `after`,
        what those phases were asked; None keeps the `after` noted before, if any): a
        study asked for more trials since is not done.

        Raises:
            StudyNotFoundError: no study called `name`.
        """
        with self._session() as session:
            study = self._study_row(session, name)
            before = (study.plan or {}).get(PLAN_FINISHED) or {}
            finished: dict[str, Any] = {"trials": trials, "at": utcnow().isoformat()}
            if (kept := before.get("after") if after is None else dict(after)) is not None:
                finished["after"] = kept
            study.plan = {**(study.plan or {}), PLAN_FINISHED: finished}

    @asked_again
    def get_study(self, name: str) -> StudyRecord:
        """The study called `name`.

        Raises:
            StudyNotFoundError: no such study; the message lists the known ones.
        """
        with self._session() as session:
            return self._study_row(session, name).to_record()


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

    def delete_study(self, name: str) -> int:
        """Delete the study called `name` with its runs, claims, artifacts and stored page,
        in one transaction (Optuna's study of the same name is `_optuna.delete_optuna_study`'s).
        Returns how many runs it held.

        Raises:
            StudyNotFoundError: no study called `name`; the message lists the known ones.
        """
        with self._session() as session:
            study = self._study_row(session, name)
            runs = session.scalar(select(func.count()).select_from(RunRow).where(
                RunRow.study_id == study.id)) or 0
            for table in (ClaimRow, ArtifactRow, ViewRow, RunRow):
                session.execute(delete(table).where(table.study_id == study.id))
            session.delete(study)
            return runs

    def current_view(self, name: str) -> str | None:
        """The study's stored page (JSON text, `save_view`) where it is still current: made
        by this autotune at the study's present `version`. None otherwise (nothing
        stored, an older version, another autotune): the reader computes the page.
        Two indexed queries; reads no run.

        Raises:
            StudyNotFoundError: no study called `name`.
        """
        stored = self.stored_view(name)
        if stored is None:
            return None
        version, page = stored
        return page if version == self.version(name) else None

    @asked_again
    def list_studies(self) -> list[StudyRecord]:
        """Every study, oldest first."""
        with self._session() as session:
            rows = session.scalars(select(StudyRow).order_by(StudyRow.id)).all()
            return [row.to_record() for row in rows]

