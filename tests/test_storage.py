"""Tests of autotune.storage: round trips, migrations, Optuna next door, errors.

The round-trip, migration and Optuna tests run on SQLite and, when
AUTOTUNE_TEST_POSTGRES_URL is set, on PostgreSQL, each test in a schema of its own.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import multiprocessing
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import optuna
import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from migrations_util import alembic_config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from autotune.ground import resources as _resources
from autotune.ground.errors import StorageError, StudyMismatchError, StudyNotFoundError
from autotune.ground.records import (
    CollectiveStats,
    Environment,
    Measurement,
    MeasureMode,
    NewRun,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.ground.resources import data_dir
from autotune.storage import HEAD_REVISION, Store
from autotune.storage.models import Base, EnvironmentRow, include_name

# autotune's own migration history; Optuna keeps its own in `alembic_version`.
VERSION_TABLE = "autotune_alembic_version"
AUTOTUNE_TABLES = {
    VERSION_TABLE,
    "autotune_environments",
    "autotune_studies",
    "autotune_runs",
    "autotune_claims",
    "autotune_artifacts",
    "autotune_views",
}

FULL = Measurement(
    step_times_s=(0.0121, 0.0119, 0.0124),
    compile_time_s=1.75,
    mode=MeasureMode.PAIRED,
    baseline_step_times_s=(0.0130, 0.0131, 0.0129),
    first_step_time_s=0.21,
    peak_memory_bytes=12 * 2**30,
    memory_source="memory_stats",
    rss_peak_bytes=3 * 2**30,
    checksum=123.456,
    baseline_checksum=123.457,
    hlo_stats={"fusion": 12, "all-reduce": 2},
    fingerprint="sha256:ab12",
    baseline_fingerprint="sha256:cd34",
    jax_version="0.10.2",
    jaxlib_version="0.10.2",
    backend="gpu",
    device_kind="NVIDIA H100 80GB HBM3",
    device_count=8,
    warmup_steps=7,
    warmup_settled=True,
    warmup_times_s=(0.02, 0.013, 0.0122),
    baseline_warmup_times_s=(0.021, 0.014, 0.0131),
    output_dtype="bfloat16",
    abs_sum=4567.25,
    numerics_error=1.5e-6,
    same_program_as=3,
    collectives={"all-reduce": CollectiveStats(count=2, bytes=4096, loop_count=1,
                                               loop_bytes=1024, smallest_bytes=4,
                                               largest_bytes=3072)},
    pgle={"mode": "manual", "profile": "/p/profile.pbtxt", "collected": True, "costs": 12,
          "source": "trace-events", "names_in_program": 12,
          "profile_fingerprint": "0123456789abcdef", "note": ""},
)
OK = TrialOutcome(
    OutcomeKind.OK, "ok", FULL, duration_s=9.5, exit_code=0, stdout_tail="out", stderr_tail="err"
)
CRASH = TrialOutcome(
    OutcomeKind.CRASHED,
    "the child was killed by signal 11 (SIGSEGV)",
    None,
    duration_s=3.25,
    exit_code=None,
    signal=11,
    stdout_tail="step 1\n",
    stderr_tail="Fatal Python error: Segmentation fault\n",
)
HERE = Environment("node-1", "3.11.7", "0.10.2", "0.10.2", "gpu", "NVIDIA H100 80GB HBM3", 8)
FLAGS = {"xla_gpu_enable_latency_hiding_scheduler": True, "combine_bytes": 2**28, "slop": 1.5}
ENV = {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true"}


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with Store.open(url) as opened:
        opened.ensure_study("s1", "gpu-collectives", "transformer", "small", 8, "paired")
        yield opened


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _count(url: str, table: str) -> int:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())
    finally:
        engine.dispose()


def _schema_diffs(url: str, **opts: object) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(
                connection, opts={"version_table": VERSION_TABLE, "compare_type": True, **opts}
            )
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


# --- resources -------------------------------------------------------------------------


def test_data_dir_finds_the_checkout_folders() -> None:
    root = Path(__file__).resolve().parents[1]
    for name in ("search_spaces", "benchmarks", "alembic"):
        assert data_dir(name) == root / name


def test_data_dir_prefers_the_packaged_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "alembic").mkdir()
    monkeypatch.setattr(_resources, "_PACKAGE_DATA", tmp_path)
    assert data_dir("alembic") == tmp_path / "alembic"


def test_data_dir_missing_everywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_resources, "_PACKAGE_DATA", tmp_path / "pkg")
    monkeypatch.setattr(_resources, "_CHECKOUT_ROOT", tmp_path / "repo")
    with pytest.raises(FileNotFoundError, match="'benchmarks' folder is missing"):
        data_dir("benchmarks")


# --- migrations ------------------------------------------------------------------------


def test_head_revision_is_the_newest_migration() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert script.get_heads() == [HEAD_REVISION]


def test_fresh_database_gets_exactly_autotune_tables_at_head(url: str) -> None:
    with Store.open(url) as store:
        assert store.current_revision() == HEAD_REVISION
    assert _tables(url) == AUTOTUNE_TABLES
    engine = create_engine(url)
    with engine.connect() as connection:
        stamped = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    engine.dispose()
    assert [row[0] for row in stamped] == [HEAD_REVISION]


def test_models_agree_with_migrations(url: str) -> None:
    Store.open(url).close()
    assert _schema_diffs(url, include_name=include_name) == []


def test_alembic_command_line_path_upgrades_and_downgrades(url: str) -> None:
    config = alembic_config(url)  # env.py without a connection: the sqlalchemy.url option
    command.upgrade(config, "head")
    assert _tables(url) == AUTOTUNE_TABLES
    command.downgrade(config, "base")
    assert _tables(url) == {VERSION_TABLE}
    with Store.open(url) as store:  # and the store migrates it back
        assert store.current_revision() == HEAD_REVISION


def test_autogenerate_after_head_writes_an_empty_revision(sqlite_url: str, tmp_path: Path) -> None:
    scripts = tmp_path / "alembic"
    shutil.copytree(data_dir("alembic"), scripts, ignore=shutil.ignore_patterns("__pycache__"))
    Store.open(sqlite_url).close()
    command.revision(
        alembic_config(sqlite_url, scripts), message="nothing", autogenerate=True, rev_id="9999"
    )
    (written,) = (scripts / "versions").glob("9999_*.py")
    source = written.read_text()
    compile(source, str(written), "exec")
    assert f"down_revision: str | Sequence[str] | None = '{HEAD_REVISION}'" in source
    assert "op." not in source  # the models and the migrations agree; Optuna is left alone


def test_upgrade_from_0001_keeps_studies_and_says_they_optimised_time(
        sqlite_url: str, tmp_path: Path) -> None:
    command.upgrade(alembic_config(sqlite_url, data_dir("alembic")), "0001")
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO autotune_studies (name, space, benchmark, preset, devices, mode, "
            "created_at) VALUES ('old', 'cpu', 'matmul', 'tiny', 1, 'paired', '2026-01-01')"))
    engine.dispose()
    with Store.open(sqlite_url) as store:
        assert store.current_revision() == HEAD_REVISION
        record = store.get_study("old")
    assert record.objectives == ("time",)
    assert record.memory_budget_bytes is None


def test_upgrade_from_0004_keeps_claims_without_a_heartbeat_and_indexes_reads(url: str) -> None:
    command.upgrade(alembic_config(url), "0004")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO autotune_studies (name, space, benchmark, preset, devices, mode, "
            "created_at, objectives, claims_made) VALUES ('old', 'cpu', 'matmul', 'tiny', 1, "
            "'paired', '2026-01-01', 'time', 1)"))
        conn.execute(text(
            "INSERT INTO autotune_claims (study_id, env_key, key_hash, key, role, flags, "
            "state, owner_host, owner_pid, claimed_at, updated_at) SELECT id, 'h', 'x', '', "
            "'baseline', '{}', 'running', 'h', 1, :now, :now FROM autotune_studies"),
            {"now": datetime.now(UTC).replace(tzinfo=None)})
    with Store.open(url) as store:
        assert store.current_revision() == HEAD_REVISION
        (old,) = store.claims("old")
        assert old.heartbeat_at is None and old.last_seen == old.claimed_at
        assert [c.id for c in store.live_claims("old")] == [old.id]  # claimed just now
        assert store.beat(old.id) is True and store.claims("old")[0].heartbeat_at is not None
    indexes = {i["name"] for table in ("autotune_runs", "autotune_claims")
               for i in inspect(engine).get_indexes(table)}
    engine.dispose()
    assert {"ix_autotune_runs_study_id_role", "ix_autotune_claims_state_study_id"} <= indexes


def test_upgrade_from_0005_keeps_studies_and_runs_without_a_fit(url: str) -> None:
    """A study stored before fitting existed: no fit, runs without collectives, a plan
    without `fit`, which resumes as the default (fitting on) asks and takes a fit."""
    command.upgrade(alembic_config(url), "0005")
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO autotune_studies (name, space, benchmark, preset, devices, mode, "
            "created_at, objectives, claims_made, plan) VALUES ('old', 'cpu', 'matmul', "
            "'tiny', 1, 'paired', '2026-01-01', 'time', 0, :plan)"), {"plan": '{"steps": 20}'})
        conn.execute(text(
            "INSERT INTO autotune_runs (study_id, trial_number, role, flags, env, kind, "
            "message, duration_s, mode, compile_time_s, step_times, baseline_step_times, "
            "extras, hlo_stats, stdout_tail, stderr_tail, created_at) SELECT id, 0, "
            "'baseline', '{}', '{}', 'ok', '', 1.0, 'paired', 0.5, '[0.1]', '[0.1]', "
            "'{\"warmup_steps\": 2}', '{}', '', '', :now FROM autotune_studies"),
            {"now": datetime.now(UTC).replace(tzinfo=None)})
    engine.dispose()
    with Store.open(url) as store:
        assert store.current_revision() == HEAD_REVISION
        assert store.get_study("old").space_fit is None
        (run,) = store.runs("old")
        assert run.outcome.measurement is not None
        assert run.outcome.measurement.collectives is None
        assert run.outcome.measurement.warmup_steps == 2
        store.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired",
                           plan={"steps": 20, "fit": True})
        with pytest.raises(StudyMismatchError, match="fit True \\(asked for False\\)"):
            store.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired",
                               plan={"steps": 20, "fit": False})
        assert store.save_fit("old", {"schema_version": 1, "changes": []}) is True
        assert store.save_fit("old", {"schema_version": 1, "probes": 9}) is False  # first wins
        assert store.get_study("old").space_fit == {"schema_version": 1, "changes": []}


def test_resuming_with_other_objectives_is_refused(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired", objectives=("time",))
        with pytest.raises(StudyMismatchError) as raised:
            store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired",
                               objectives=("time", "memory"))
    assert "objectives 'time' (asked for 'time,memory')" in str(raised.value)


def test_upgrade_false_on_an_unmigrated_database(sqlite_url: str) -> None:
    with pytest.raises(StorageError) as raised:
        Store.open(sqlite_url, upgrade=False)
    assert raised.value.exit_code == 2
    assert "is not an autotune database (it holds no autotune tables)" in str(raised.value)
    assert "run `autotune study ...` to create a study there" in str(raised.value)


def test_upgrade_false_at_head_opens(sqlite_url: str) -> None:
    Store.open(sqlite_url).close()
    with Store.open(sqlite_url, upgrade=False) as store:
        assert store.current_revision() == HEAD_REVISION


def test_unknown_revision_says_to_upgrade_autotune(sqlite_url: str) -> None:
    Store.open(sqlite_url).close()
    engine = create_engine(sqlite_url)
    with engine.begin() as connection:
        connection.execute(text(f"UPDATE {VERSION_TABLE} SET version_num = '9999'"))
    engine.dispose()
    with pytest.raises(StorageError, match="upgrade autotune"):
        Store.open(sqlite_url)
    with pytest.raises(StorageError, match="is at '9999'"):
        Store.open(sqlite_url, upgrade=False)


# --- Optuna in the same database -------------------------------------------------------


@contextmanager
def _optuna_storage(url: str) -> Iterator[optuna.storages.RDBStorage]:
    """Optuna's storage for `url`, its connections closed afterwards."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    try:
        yield storage
    finally:
        storage.remove_session()
        storage.engine.dispose()


def _create_optuna_study(url: str) -> None:
    with _optuna_storage(url) as storage:
        optuna.create_study(storage=storage, study_name="s1")


@pytest.mark.parametrize("optuna_first", [True, False], ids=["optuna-first", "autotune-first"])
def test_coexists_with_optuna(url: str, optuna_first: bool) -> None:
    if optuna_first:
        _create_optuna_study(url)
    with Store.open(url) as store:
        store.ensure_study("s1", "cpu", "transformer", "small", 8, MeasureMode.DIRECT)
    if not optuna_first:
        _create_optuna_study(url)
    with _optuna_storage(url) as storage:
        study = optuna.load_study(study_name="s1", storage=storage)
        study.optimize(lambda trial: trial.suggest_float("x", 0, 1), n_trials=2)
    with Store.open(url, upgrade=False) as store:
        assert [s.name for s in store.list_studies()] == ["s1"]
    tables = _tables(url)
    assert AUTOTUNE_TABLES <= tables
    assert {"alembic_version", "studies", "trials"} <= tables
    engine = create_engine(url)
    with engine.connect() as connection:
        optunas = connection.execute(text("SELECT version_num FROM alembic_version")).scalars()
        assert HEAD_REVISION not in list(optunas)
    engine.dispose()
    assert _schema_diffs(url, include_name=include_name) == []
    # Without the filter, autogenerate would propose dropping Optuna's tables.
    assert any(diff[0] == "remove_table" for diff in _schema_diffs(url))  # type: ignore[index]


def test_store_url_is_the_one_to_give_optuna(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        assert store.url == sqlite_url
        _create_optuna_study(store.url)


def test_plain_postgresql_url_uses_the_installed_driver(postgres_url: str) -> None:
    plain = make_url(postgres_url).set(drivername="postgresql")
    with Store.open(plain.render_as_string(hide_password=False)) as store:
        expected = "postgresql://" if _importable("psycopg2") else "postgresql+psycopg://"
        assert store.url.startswith(expected)
        _create_optuna_study(store.url)


# --- round trips -----------------------------------------------------------------------


# FULL as it must read back, field by field, written out by hand rather than taken from FULL.
FULL_READ_BACK = {
    "step_times_s": (0.0121, 0.0119, 0.0124),
    "compile_time_s": 1.75,
    "mode": MeasureMode.PAIRED,
    "baseline_step_times_s": (0.0130, 0.0131, 0.0129),
    "first_step_time_s": 0.21,
    "peak_memory_bytes": 12884901888,
    "memory_source": "memory_stats",
    "rss_peak_bytes": 3221225472,
    "checksum": 123.456,
    "baseline_checksum": 123.457,
    "hlo_stats": {"fusion": 12, "all-reduce": 2},
    "fingerprint": "sha256:ab12",
    "baseline_fingerprint": "sha256:cd34",
    "jax_version": "0.10.2",
    "jaxlib_version": "0.10.2",
    "backend": "gpu",
    "device_kind": "NVIDIA H100 80GB HBM3",
    "device_count": 8,
    "warmup_steps": 7,
    "warmup_settled": True,
    "warmup_times_s": (0.02, 0.013, 0.0122),
    "baseline_warmup_times_s": (0.021, 0.014, 0.0131),
    "output_dtype": "bfloat16",
    "abs_sum": 4567.25,
    "numerics_error": 1.5e-6,
    "same_program_as": 3,
    "collectives": {"all-reduce": CollectiveStats(count=2, bytes=4096, loop_count=1,
                                                  loop_bytes=1024, smallest_bytes=4,
                                                  largest_bytes=3072)},
    "pgle": {"mode": "manual", "profile": "/p/profile.pbtxt", "collected": True, "costs": 12,
             "source": "trace-events", "names_in_program": 12,
             "profile_fingerprint": "0123456789abcdef", "note": ""},
}


def test_every_measurement_field_is_stored_and_read_back(store: Store, url: str) -> None:
    fields = dataclasses.fields(Measurement)
    assert [f.name for f in fields] == list(FULL_READ_BACK)  # a new field: say what it stores
    for field in fields:  # none left at its default, where losing it would go unseen
        default = field.default_factory() if callable(field.default_factory) else field.default
        assert FULL_READ_BACK[field.name] != default, f"set {field.name} in FULL"

    store.record_run("s1", 7, Role.SEARCH, FLAGS, ENV, OK, HERE)
    (run,) = store.runs("s1")

    measured = run.outcome.measurement
    assert measured is not None
    assert {name: getattr(measured, name) for name in FULL_READ_BACK} == FULL_READ_BACK
    assert type(measured.mode) is MeasureMode and type(measured.step_times_s) is tuple
    # the derived columns kept for queries: medians of the steps and their ratio
    engine = create_engine(url)
    with engine.connect() as connection:
        row = connection.execute(text(
            "SELECT median_s, baseline_median_s, ratio, mode, kind, role, trial_number "
            "FROM autotune_runs")).one()
    engine.dispose()
    assert row.median_s == pytest.approx(0.0121) and row.baseline_median_s == pytest.approx(0.0130)
    assert row.ratio == pytest.approx(0.0121 / 0.0130)
    assert (row.mode, row.kind, row.role, row.trial_number) == ("paired", "ok", "search", 7)


def test_full_measurement_round_trip(store: Store) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    run_id = store.record_run("s1", 7, Role.SEARCH, FLAGS, ENV, OK, HERE)
    (run,) = store.runs("s1")
    assert run.id == run_id
    assert (run.study_name, run.trial_number, run.role) == ("s1", 7, Role.SEARCH)
    assert run.outcome == OK
    assert run.flags == FLAGS and run.env == ENV and run.environment == HERE
    assert run.ratio == pytest.approx(0.0121 / 0.0130)  # median step over baseline median
    assert type(run.role) is Role and run.outcome.kind is OutcomeKind.OK
    assert run.outcome.measurement is not None
    assert run.outcome.measurement.mode is MeasureMode.PAIRED
    assert [type(v) for v in run.flags.values()] == [bool, int, float]
    assert before <= run.created_at <= datetime.now(UTC) + timedelta(seconds=5)


def test_failure_round_trip(store: Store) -> None:
    store.record_run("s1", None, "baseline", {}, {}, CRASH, None)
    (run,) = store.runs("s1")
    assert run.outcome == CRASH
    assert (run.trial_number, run.role, run.environment, run.ratio) == (
        None,
        Role.BASELINE,
        None,
        None,
    )


def test_nan_checksum_round_trip(store: Store) -> None:
    measured = dataclasses.replace(FULL, checksum=math.nan, baseline_checksum=math.inf)
    outcome = TrialOutcome(OutcomeKind.NONFINITE, "the checksum is NaN", measured)
    store.record_run("s1", 1, Role.SEARCH, FLAGS, ENV, outcome, HERE)
    (run,) = store.runs("s1")
    assert run.outcome.measurement is not None
    assert math.isnan(run.outcome.measurement.checksum or 0.0)
    assert run.outcome.measurement.baseline_checksum == math.inf


def test_environments_are_deduplicated(store: Store, url: str) -> None:
    elsewhere = dataclasses.replace(HERE, host="node-2")
    for environment in (HERE, HERE, elsewhere, HERE):
        store.record_run("s1", 0, Role.SEARCH, FLAGS, ENV, OK, environment)
    assert _count(url, "autotune_environments") == 2
    assert [r.environment for r in store.runs("s1")] == [HERE, HERE, elsewhere, HERE]


def test_runs_filters_by_role_and_kind_in_order(store: Store) -> None:
    ids = [
        store.record_run("s1", None, Role.BASELINE, {}, ENV, OK, HERE),
        store.record_run("s1", 0, Role.SEARCH, FLAGS, ENV, CRASH, HERE),
        store.record_run("s1", 1, Role.SEARCH, FLAGS, ENV, OK, HERE),
        store.record_run("s1", 2, Role.CONFIRM, FLAGS, ENV, OK, HERE),
    ]
    assert [r.id for r in store.runs("s1")] == ids
    assert [r.id for r in store.runs("s1", roles=[Role.SEARCH])] == ids[1:3]
    assert [r.id for r in store.runs("s1", kinds=["crashed"])] == [ids[1]]
    assert [r.id for r in store.runs("s1", roles=["search", "confirm"], kinds=["ok"])] == ids[2:]
    assert store.runs("s1", roles=[]) == []


def test_record_runs_stores_in_one_go_what_record_run_stores_one_at_a_time(
    store: Store, url: str
) -> None:
    elsewhere = dataclasses.replace(HERE, host="node-2")
    batch = [NewRun(None, Role.BASELINE, {}, ENV, OK, HERE),
             NewRun(3, Role.SEARCH, FLAGS, ENV, CRASH),
             NewRun(4, Role.SEARCH, FLAGS, ENV, OK, elsewhere, ratio=0.5, env_key="node-2"),
             NewRun(4, Role.CONFIRM, FLAGS, ENV, OK, HERE)]
    ids = store.record_runs("s1", batch)
    store.ensure_study("s2", "gpu-collectives", "transformer", "small", 8, "paired")
    for run in batch:
        store.record_run("s2", run.trial_number, run.role, run.flags, run.env, run.outcome,
                         run.environment, ratio=run.ratio, env_key=run.env_key)

    def comparable(record: RunRecord) -> RunRecord:
        return dataclasses.replace(record, id=0, study_name="", created_at=datetime.min)

    bulk, single = store.runs("s1"), store.runs("s2")
    assert [r.id for r in bulk] == ids == sorted(ids) and len(ids) == 4
    assert [comparable(r) for r in bulk] == [comparable(r) for r in single]
    assert bulk[2].ratio == 0.5 and bulk[2].env_key == "node-2"
    assert _count(url, "autotune_environments") == 2
    assert store.record_runs("s1", []) == []


def test_reading_a_study_never_imports_alembic(url: str) -> None:
    """Alembic takes longer to import than a large study takes to read: only migrating
    needs it."""
    with Store.open(url) as store:
        store.ensure_study("s1", "cpu", "matmul", "tiny", 1, "paired")
    code = ("import sys; from autotune.storage import Store; "
            f"store = Store.open({url!r}, upgrade=False); store.runs('s1'); "
            "print(store.current_revision(), 'alembic' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [HEAD_REVISION, "False"]


def test_the_json_columns_read_back_whatever_their_spacing() -> None:
    from autotune.storage.engine import _json_loads

    assert _json_loads('{"a": [1, 2.5]}') == {"a": [1, 2.5]}
    assert _json_loads(' [1] ') == [1] and _json_loads("null") is None
    assert _json_loads(b'{"a": 1}') == {"a": 1}  # psycopg hands bytes
    with pytest.raises(json.JSONDecodeError):
        _json_loads("[1] [2]")


def test_environment_inserted_meanwhile_by_another_process(
    store: Store, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store._get_or_insert
    looked: list[bool] = []

    def racing(find: Callable[[Session], object], row: Base) -> object:
        def late_find(session: Session) -> object:
            if looked:
                return find(session)
            looked.append(True)
            with Store.open(url) as other:  # it stores HERE between our look-up and our insert
                other.record_run("s1", 0, Role.SEARCH, FLAGS, ENV, OK, HERE)
            return None

        return real(late_find if isinstance(row, EnvironmentRow) else find, row)

    monkeypatch.setattr(store, "_get_or_insert", racing)
    store.record_run("s1", 1, Role.SEARCH, FLAGS, ENV, OK, HERE)
    assert [run.environment for run in store.runs("s1")] == [HERE, HERE]
    assert _count(url, "autotune_environments") == 1


def _record_many(url: str, worker: int, count: int) -> list[int]:
    with Store.open(url, upgrade=False) as store:
        return [
            store.record_run("s1", worker, Role.SEARCH, FLAGS, ENV, OK, HERE) for _ in range(count)
        ]


def test_concurrent_workers_share_one_sqlite_file(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.ensure_study("s1", "cpu", "transformer", "small", 8, "paired")
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        ids = pool.starmap(_record_many, [(sqlite_url, worker, 25) for worker in range(4)])
    with Store.open(sqlite_url) as store:
        runs = store.runs("s1")
    assert sorted(run.id for run in runs) == sorted(i for chunk in ids for i in chunk)
    assert len(runs) == 100 and {run.environment for run in runs} == {HERE}
    assert _count(sqlite_url, "autotune_environments") == 1


# --- studies ---------------------------------------------------------------------------


def test_ensure_study_returns_the_existing_one(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        first = store.ensure_study("s1", "cpu", "transformer", "small", 8, "direct")
        again = store.ensure_study("s1", "cpu", "transformer", "small", 8, MeasureMode.DIRECT)
        assert again == first == store.get_study("s1")
        assert first.mode is MeasureMode.DIRECT
        store.ensure_study("s2", "cpu", "mlp", "tiny", 1, "paired")
        assert [s.name for s in store.list_studies()] == ["s1", "s2"]


def test_study_mismatch_names_the_setting(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.ensure_study("s1", "cpu", "transformer", "small", 8, "direct")
        with pytest.raises(StudyMismatchError) as raised:
            store.ensure_study("s1", "cpu", "transformer", "large", 8, "direct")
    message = str(raised.value)
    assert raised.value.exit_code == 2
    assert "preset 'small' (asked for 'large')" in message
    assert "space" not in message.split(";")[0]
    assert "pick a new --name" in message


def test_study_not_found_when_there_are_none(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store, pytest.raises(StudyNotFoundError) as raised:
        store.get_study("nope")
    assert raised.value.exit_code == 2
    assert "no study named 'nope'" in str(raised.value)
    assert "holds no studies yet" in str(raised.value)
    assert "`autotune study" in str(raised.value)


def test_study_not_found_lists_the_known_ones(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        store.ensure_study("beta", "cpu", "mlp", "tiny", 1, "direct")
        store.ensure_study("alpha", "cpu", "mlp", "tiny", 1, "direct")
        with pytest.raises(StudyNotFoundError, match="known studies: alpha, beta"):
            store.get_study("gamma")
        with pytest.raises(StudyNotFoundError):
            store.record_run("gamma", 0, Role.SEARCH, {}, {}, CRASH)
        with pytest.raises(StudyNotFoundError):
            store.runs("gamma")


# --- opening errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("notaurl", ["invalid storage URL 'notaurl'", "sqlite:///path.db"]),
        ("foo://x", ["unknown database kind 'foo'", "foo://x", "postgresql://user@host/db"]),
        ("postgresql://u:s3cret@h:port/db", ["invalid storage URL", "u:***@h"]),
        ("postgresql+pg8000://u:s3cret@h/db", ["driver", "pg8000", "not installed", "u:***@h"]),
    ],
)
def test_bad_urls(bad: str, words: list[str]) -> None:
    if "pg8000" in bad and _importable("pg8000"):
        pytest.skip("pg8000 is installed here")
    with pytest.raises(StorageError) as raised:
        Store.open(bad)
    assert raised.value.exit_code == 2
    for word in words:
        assert word in str(raised.value)
    assert "s3cret" not in str(raised.value)


def _importable(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def test_sqlite_folder_must_exist(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    with pytest.raises(StorageError) as raised:
        Store.open(f"sqlite:///{missing / 'autotune.db'}")
    assert raised.value.exit_code == 2
    assert f"the folder {missing} does not exist" in str(raised.value)
    assert not missing.exists()


@pytest.mark.parametrize("user", ["nobody", "nobody:s3cret"])
def test_unreachable_postgres(user: str) -> None:
    if not (_importable("psycopg") or _importable("psycopg2")):
        pytest.skip("no PostgreSQL driver installed (pip install 'psycopg[binary]')")
    with pytest.raises(StorageError) as raised:
        Store.open(f"postgresql://{user}@127.0.0.1:1/x")
    message = str(raised.value)
    assert raised.value.exit_code == 2
    assert "cannot open the database postgresql" in message
    assert f"{user.replace('s3cret', '***')}@127.0.0.1:1/x" in message
    assert "s3cret" not in message
    assert "refused" in message and "check that the database is reachable" in message


def test_a_file_that_is_no_database(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not a database\n" * 100)
    with pytest.raises(StorageError, match="cannot open the database .*not a database"):
        Store.open(f"sqlite:///{junk}")


# --- the study's plan ----------------------------------------------------------------------

PLAN = {"space_sha256": "aaaa", "workload_sha256": "bbbb", "command": None, "steps": 20,
        "warmup": 2, "max_warmup": 30, "sampler": "auto", "prune_margin": 1.3,
        "timeout_per_trial": 300.0, "memory_limit_bytes": None}


def test_a_study_keeps_its_plan_and_refuses_another_naming_each_field(url: str) -> None:
    with Store.open(url) as opened:
        opened.ensure_study("p", "cpu", "matmul", "tiny", 1, "paired", plan=PLAN)
        opened.ensure_study("p", "cpu", "matmul", "tiny", 1, "paired", plan=dict(PLAN))  # same
        other = {**PLAN, "steps": 7, "space_sha256": "cccc"}
        with pytest.raises(StudyMismatchError) as raised:
            opened.ensure_study("p", "cpu", "matmul", "small", 1, "paired", plan=other)
    message = str(raised.value)
    assert raised.value.exit_code == 2
    assert message.startswith("study 'p' was created with preset 'tiny' (asked for 'small'); "
                              "space_sha256 'aaaa' (asked for 'cccc'); steps 20 (asked for 7): ")
    assert "resume it with its original settings" in message and "pick a new --name" in message


def test_a_study_made_before_plans_were_stored_is_compared_on_its_columns(url: str) -> None:
    with Store.open(url) as opened:
        opened.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired")  # no plan
        record = opened.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired", plan=PLAN)
    assert record.name == "old"


# --- a brand-new database opened by several processes at once ----------------------------

OPENER = """
import sys, time
from autotune.storage._optuna import rdb_storage
from autotune.storage import Store
url, start = sys.argv[1], float(sys.argv[2])
while time.time() < start:
    pass
store = Store.open(url)
store.ensure_study("race", "cpu", "matmul", "tiny", 1, "paired")
import optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
optuna.create_study(study_name="race", storage=rdb_storage(url, create=True),
                    load_if_exists=True)
print("opened")
"""


def test_processes_creating_one_new_database_at_once_all_succeed(url: str) -> None:
    """Seen before the fix: 'table ... already exists' and 'UNIQUE constraint failed:
    alembic_version.version_num' tracebacks from the losers of the race."""
    import time

    start = time.time() + 3.0  # every process imported and waiting by then
    procs = [subprocess.Popen([sys.executable, "-c", OPENER, url, str(start)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    results = [p.communicate(timeout=120) for p in procs]
    for (stdout, stderr), proc in zip(results, procs, strict=True):
        assert proc.returncode == 0 and stdout.strip() == "opened", stderr[-2000:]
        assert "Traceback" not in stderr
    with Store.open(url) as opened:
        assert [s.name for s in opened.list_studies()] == ["race"]


def test_a_database_another_connection_writes_is_put_in_write_ahead_mode_once_it_commits(
        tmp_path: Path) -> None:
    """SQLite refuses a journal-mode change at once, busy timeout or not, while another
    connection holds a write lock: seen in CI as 'database is locked' from one of four
    processes opening one new database. Now it waits for the writer's commit."""
    import sqlite3
    import threading

    from sqlalchemy import create_engine

    from autotune.storage.engine import _write_ahead

    db = tmp_path / "held.db"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")  # the write lock of another process's first write
    holder.execute("PRAGMA user_version = 7")  # a write, and no table autotune would refuse
    threading.Timer(0.5, holder.execute, ["COMMIT"]).start()
    engine = create_engine(f"sqlite:///{db}", connect_args={"timeout": 5})
    _write_ahead(engine)  # before: "database is locked" at once
    engine.dispose()
    holder.close()
    with sqlite3.connect(db) as check:
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with Store.open(f"sqlite:///{db}") as store:
        store.ensure_study("s1", "cpu", "matmul", "tiny", 1, "paired")
        assert [s.name for s in store.list_studies()] == ["s1"]


def test_a_sqlite_file_holds_no_idle_connection_so_a_forgotten_reader_changes_nothing(
        tmp_path: Path) -> None:
    """Write-ahead mode: the last connection to close folds the log into the file. With
    no pool, that is the writer's own, at once; a reader left open and collected later
    (an in-process caller that never closes it) changes no byte."""
    import gc

    db = tmp_path / "a.db"
    writer = Store.open(f"sqlite:///{db}")
    writer.ensure_study("s1", "gpu-collectives", "transformer", "small", 8, "paired")
    writer.record_run("s1", 1, Role.SEARCH, FLAGS, ENV, OK, HERE)
    assert not Path(f"{db}-wal").exists()  # folded in when the writer's connection closed
    before = db.read_bytes()
    reader = Store.open(f"sqlite:///{db}", upgrade=False)
    assert len(reader.runs("s1")) == 1
    writer.record_run("s1", 2, Role.SEARCH, FLAGS, ENV, OK, HERE)  # another write meanwhile
    after_write = db.read_bytes()
    assert after_write != before
    del reader
    gc.collect()
    assert db.read_bytes() == after_write
