"""Small pieces of Optuna plumbing: its storage opened on autotune's database, its trials
read back, and the ask/tell loop's helpers for `autotune.study`.

Optuna is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from autotune.ground.errors import StudyNotFoundError
from autotune.ground.records import SQLITE_TIMEOUT_S, Role, sqlite_file

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial


#: How often opening Optuna's storage is retried while another process creates its tables.
STORAGE_ATTEMPTS = 12

#: How often a configuration whose worker died is queued again (a configuration that kills
#: every worker that measures it is given up after this many).
MAX_RETRY = 2


def rdb_storage(url: str, *, create: bool, heartbeat_s: int | None = None) -> Any:
    """The one way autotune opens Optuna's storage for a database URL.

    Reading (`create=False`) never creates Optuna's tables. Creating retries,
    with a short backoff, while another process creates the same tables at
    the same moment (a brand-new database opened by two processes). With
    `heartbeat_s`, a worker that stops beating for twice that long has its
    trial failed by the next `fail_stale_trials` and its configuration queued
    again (`requeue`, at most `MAX_RETRY` times).
    """
    import random
    import time

    import optuna
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError
    from sqlalchemy.pool import NullPool

    from autotune.storage.engine import database_failure, reading_url
    from autotune.storage.outage import ride_out_outages

    if not create:  # a reader: a SQLite file in a folder it cannot write is opened read-only
        url = reading_url(make_url(url)).render_as_string(hide_password=False)
    extra: dict[str, Any] = {}
    if sqlite_file(make_url(url)):  # wait for another worker's commit, as autotune's store
        # does, and keep no idle connection (`sqlite_file`)
        extra["engine_kwargs"] = {"connect_args": {"timeout": SQLITE_TIMEOUT_S},
                                  "poolclass": NullPool}
    else:  # a server restarted under a study left dead pooled connections, which the next
        # `fail_stale_trials` used and failed on (issue 31): test each before use, as the store,
        # and wait for a server that went away (`ride_out_outages`)
        extra["engine_kwargs"] = {"pool_pre_ping": True}
    if heartbeat_s:
        extra.update({"heartbeat_interval": heartbeat_s, "grace_period": 2 * heartbeat_s,
                      "heartbeat_stale_trial_callback": requeue})
    for attempt in range(STORAGE_ATTEMPTS):
        try:
            with quiet_experimental():
                storage = optuna.storages.RDBStorage(url, skip_table_creation=not create,
                                                     **extra)
            if create and sqlite_file(make_url(url)):
                immediate_transactions(storage.engine)
            ride_out_outages(storage.engine, make_url(url).render_as_string(hide_password=True),
                             reached=True)
            return storage
        except SQLAlchemyError as error:
            if not create or attempt == STORAGE_ATTEMPTS - 1:
                raise database_failure(
                    error, make_url(url).render_as_string(hide_password=True)) from error
            time.sleep(0.05 * (attempt + 1) + random.uniform(0, 0.05))
    raise AssertionError("unreachable")


def delete_optuna_study(url: str, name: str) -> bool:
    """Delete Optuna's study called `name` from the database at `url`, if there is one (a
    database without Optuna's tables has none). Returns whether one was deleted."""
    import optuna

    if not _has_optuna_tables(url):
        return False
    storage = rdb_storage(url, create=True)  # a writer: SQLite's immediate transactions
    try:
        optuna.delete_study(study_name=name, storage=storage)
    except KeyError:  # Optuna's word for "no such study"
        return False
    finally:
        storage.engine.dispose()
    return True


def _has_optuna_tables(url: str) -> bool:
    """Whether the database at `url` holds Optuna's tables (its `studies` table)."""
    from sqlalchemy import create_engine, inspect

    engine = create_engine(url)
    try:
        return "studies" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def immediate_transactions(engine: Any) -> None:
    """Begin every transaction of `engine` (a writer's, on a SQLite file) as `BEGIN
    IMMEDIATE`, holding the write lock from its first read.

    SQLite's default deferred transactions let two processes read the same WAITING
    trial before either writes: both `ask()` popped it (7 of 40 asks in a test
    here), and the second `tell` raised `UpdateFinishedTrialError` (two `autotune
    study` on one new file, issue 31). Immediate transactions serialise the pop; the
    busy timeout makes the other writer wait. (pysqlite's own transaction handling
    is switched off on each new connection, as SQLAlchemy's SQLite notes describe.)
    """
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_pysqlite_transactions(dbapi_connection: Any, record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")


#: `outcome` user attributes of trials that measured nothing and stand for nothing:
#: stopped by a signal or a dead process, or set aside because another process had claimed
#: the configuration (`duplicate`) or the study was full (`not_needed`).
SET_ASIDE = frozenset({"interrupted", "duplicate", "not_needed"})


def set_aside(study: optuna.Study, trial: optuna.Trial, why: str) -> None:
    """Fail `trial` unmeasured, its `outcome` saying `why` (one of `SET_ASIDE`)."""
    from optuna.trial import TrialState

    assert why in SET_ASIDE
    trial.set_user_attr("outcome", why)
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


def requeue(study: optuna.Study, trial: Any) -> None:
    """Queue the configuration of `trial`, failed because its worker died, again for any
    worker: Optuna's `RetryHeartbeatStaleTrialCallback` (the new WAITING trial records the
    failed one in `failed_trial` and `retry_history`; at most `MAX_RETRY` times), with the
    dead attempt's own attributes (outcome, owner, message) left behind."""
    import copy

    import optuna

    again = copy.copy(trial)
    again.user_attrs = {k: v for k, v in trial.user_attrs.items()
                        if k not in ("outcome", "owner", "message", "run_id")}
    with quiet_experimental():
        optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=MAX_RETRY)(study, again)


def outcome_of(trial: Any) -> str | None:
    """A trial's `outcome` user attribute; `interrupted` for a trial Optuna's heartbeat
    failed (FAIL with no outcome told: its worker died mid-trial)."""
    from optuna.trial import TrialState

    told = trial.user_attrs.get("outcome")
    return "interrupted" if told is None and trial.state is TrialState.FAIL else told


def fail_trial_id(study: optuna.Study, trial_id: int) -> int:
    """Fail the RUNNING trial `trial_id` of a dead process as `interrupted`; 1 if it was
    still running, 0 if another process finished it first."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    storage = study._storage
    try:
        storage.set_trial_user_attr(trial_id, "outcome", "interrupted")
        return int(storage.set_trial_state_values(trial_id, TrialState.FAIL))
    except UpdateFinishedTrialError:
        return 0


def fail_open_trial(study: optuna.Study, trial: optuna.Trial) -> None:
    """Tell Optuna an interrupted trial failed, unless it was told already."""
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        trial.set_user_attr("outcome", "interrupted")
    except UpdateFinishedTrialError:
        return  # told already: nothing is left open
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


@contextmanager
def quiet_experimental() -> Iterator[None]:
    """Optuna's heartbeat API is experimental and meant for `Study.optimize`; autotune
    drives it through ask/tell and beats itself (`_launch`): the warnings are noise."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed")
        yield


@contextmanager
def beating(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Beat `trial`'s heartbeat (if the storage has heartbeats on) for the block.

    Optuna's own heartbeat thread ends at the first failed beat (a database
    server that went away for a moment, issue 31), with a traceback on stderr,
    and then the trial goes stale and is failed under the running process. So
    this thread beats at Optuna's interval and, when a beat fails, logs it once
    and tries again at the next one.

    Contract: however the block ends, Ctrl-C included, the thread has stopped
    when this returns (a daemon besides, so none ever holds up the exit).
    """
    from optuna.storages._heartbeat import BaseHeartbeat, is_heartbeat_enabled

    from autotune.ground.beat import beating as beat_while
    from autotune.storage.engine import _reason  # the driver's words under Optuna's

    storage = study._storage
    if not is_heartbeat_enabled(storage):
        yield
        return
    assert isinstance(storage, BaseHeartbeat)
    every = storage.get_heartbeat_interval()
    assert every is not None
    trial_id = trial._trial_id
    with beat_while(lambda: storage.record_heartbeat(trial_id), every, f"trial {trial_id}",
                    first_now=True, reason=lambda error: _reason(error.__cause__ or error)):
        yield


def trials_in(study: optuna.Study, state: str) -> list[Any]:
    """The study's trials in `state` (a TrialState name), not copied."""
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState[state],))


def has_role(study: optuna.Study, role: Role) -> bool:
    """Whether a trial of `role` is queued, running or finished, not counting those set
    aside (interrupted, duplicate, not needed): those are to be run again."""
    return any(t.user_attrs.get("role") == role.value
               and outcome_of(t) not in SET_ASIDE
               for t in study.get_trials(deepcopy=False))


def load_trials(storage_url: str, study_name: str) -> list[FrozenTrial]:
    """Every Optuna trial of `study_name` in the database at `storage_url`.

    Raises:
        StudyNotFoundError: Optuna holds no study of that name.
    """
    import optuna
    from sqlalchemy.exc import SQLAlchemyError

    try:
        study = optuna.load_study(study_name=study_name,
                                  storage=rdb_storage(storage_url, create=False))
    except (KeyError, SQLAlchemyError, optuna.exceptions.StorageInternalError) as error:
        # no such study, or no Optuna tables at all (reading never creates them)
        raise StudyNotFoundError(
            f"study {study_name!r} has no Optuna trials in the database yet; "
            "start it with `autotune study --name NAME ...`"
        ) from error
    return study.get_trials(deepcopy=False)
