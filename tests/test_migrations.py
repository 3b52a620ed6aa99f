"""`autotune db upgrade` on a database made at the first migration, full of data, with
Optuna's tables beside autotune's: nothing of either is lost or changed.

Runs on SQLite and, when AUTOTUNE_TEST_POSTGRES_URL is set, on PostgreSQL (a schema of
its own per test). The assertions hold at any head: the head is read from the
migrations the package carries, and only what revision 0001 stored is compared.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import optuna
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from migrations_util import alembic_config
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import Engine

from autotune.ground.resources import data_dir
from autotune.storage.models import Base, include_name

#: autotune's migration history; Optuna keeps its own in `alembic_version` (Alembic's
#: default name) and its schema and library version in `version_info`.
VERSION_TABLE = "autotune_alembic_version"
OPTUNA_VERSION_TABLES = {"alembic_version", "version_info"}
CLI = [sys.executable, "-c", "from autotune.cli import main; main()"]

# The columns of revision 0001 (alembic/versions/0001_initial.py), written out by hand: the
# test checks them against the database it built at 0001, so the inserts match that schema.
COLUMNS_0001 = {
    "autotune_environments": ["id", "host", "python_version", "jax_version", "jaxlib_version",
                              "backend", "device_kind", "device_count", "created_at"],
    "autotune_studies": ["id", "name", "space", "benchmark", "preset", "devices", "mode",
                         "space_backend", "created_at"],
    "autotune_runs": [
        "id", "study_id", "trial_number", "role", "flags", "env", "kind", "message",
        "duration_s", "exit_code", "signal", "environment_id", "mode", "compile_time_s",
        "first_step_time_s", "step_times", "baseline_step_times", "median_s",
        "baseline_median_s", "ratio", "peak_memory_bytes", "memory_source", "rss_peak_bytes",
        "extras", "checksum", "baseline_checksum", "hlo_stats", "fingerprint",
        "baseline_fingerprint", "jax_version", "jaxlib_version", "backend", "device_kind",
        "device_count", "stdout_tail", "stderr_tail", "created_at"],
}
JSON_COLUMNS = {"flags", "env", "step_times", "baseline_step_times", "extras", "hlo_stats"}

GPU_STUDY = "gpu-collectives-transformer-large"
CPU_STUDY = "cpu-matmul-tiny"

ENVIRONMENTS = [
    {"host": "node-1", "python_version": "3.11.7", "jax_version": "0.4.35",
     "jaxlib_version": "0.4.35", "backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3",
     "device_count": 8, "created_at": datetime(2025, 11, 22, 9, 15, 2, 123456)},
    {"host": "login-2.cluster", "python_version": "3.12.1", "jax_version": "0.4.36",
     "jaxlib_version": "0.4.36", "backend": "cpu", "device_kind": "cpu", "device_count": 1,
     "created_at": datetime(2025, 11, 23, 17, 0, 0)},
]
STUDIES = [
    {"name": GPU_STUDY, "space": "gpu-collectives", "benchmark": "transformer",
     "preset": "large", "devices": 8, "mode": "paired", "space_backend": "gpu",
     "created_at": datetime(2025, 11, 22, 9, 15, 0, 5)},
    {"name": CPU_STUDY, "space": "cpu", "benchmark": "matmul", "preset": "tiny", "devices": 1,
     "mode": "direct", "space_backend": None, "created_at": datetime(2025, 11, 23, 16, 59, 59)},
]
LHS = {"xla_gpu_enable_latency_hiding_scheduler": True,
       "xla_gpu_all_reduce_combine_threshold_bytes": 2**28}
LHS_ENV = {"XLA_FLAGS": "--xla_gpu_enable_latency_hiding_scheduler=true "
                        "--xla_gpu_all_reduce_combine_threshold_bytes=268435456"}
STEPS = [0.0121, 0.0119, 0.0124, 0.01205]
BASE_STEPS = [0.0130, 0.0131, 0.0129, 0.01302]


def _measured(**overrides: Any) -> dict[str, Any]:
    """A run with a measurement, as 0001 stored one (study and environment by name)."""
    row = {
        "study": GPU_STUDY, "environment": "node-1", "trial_number": 0, "role": "baseline",
        "flags": {}, "env": {}, "kind": "ok", "message": "ok", "duration_s": 41.25,
        "exit_code": 0, "signal": None, "mode": "paired", "compile_time_s": 12.5,
        "first_step_time_s": 0.84, "step_times": BASE_STEPS, "baseline_step_times": BASE_STEPS,
        "median_s": statistics.median(BASE_STEPS),
        "baseline_median_s": statistics.median(BASE_STEPS), "ratio": 1.0,
        "peak_memory_bytes": 71 * 2**30, "memory_source": "memory_stats",
        "rss_peak_bytes": 5 * 2**30 + 17,
        "extras": {"warmup_steps": 7, "warmup_settled": True, "output_dtype": "bfloat16",
                   "abs_sum": 4567.25, "numerics_error": 1.5e-6},
        "checksum": 123.456, "baseline_checksum": 123.456,
        "hlo_stats": {"fusion": 212, "all-reduce": 4, "all-gather": 9},
        "fingerprint": "sha256:" + "ab" * 32, "baseline_fingerprint": "sha256:" + "ab" * 32,
        "jax_version": "0.4.35", "jaxlib_version": "0.4.35", "backend": "gpu",
        "device_kind": "NVIDIA H100 80GB HBM3", "device_count": 8,
        "stdout_tail": "step 20/20\n", "stderr_tail": "W0000 00:00:1732 … cuda_blas\n",
        "created_at": datetime(2025, 11, 22, 9, 16, 0, 1),
    }
    return {**row, **overrides}


def _failed(**overrides: Any) -> dict[str, Any]:
    """A run that measured nothing (no mode, empty step lists)."""
    row = {
        "study": GPU_STUDY, "environment": None, "trial_number": 2, "role": "search",
        "flags": {"xla_gpu_enable_pipelined_all_gather": True}, "env": {},
        "kind": "crashed", "message": "the child was killed by signal 11 (SIGSEGV)",
        "duration_s": 3.25, "exit_code": None, "signal": 11, "mode": None,
        "compile_time_s": None, "first_step_time_s": None, "step_times": [],
        "baseline_step_times": [], "median_s": None, "baseline_median_s": None, "ratio": None,
        "peak_memory_bytes": None, "memory_source": None, "rss_peak_bytes": None,
        "extras": {}, "checksum": None, "baseline_checksum": None, "hlo_stats": {},
        "fingerprint": None, "baseline_fingerprint": None, "jax_version": None,
        "jaxlib_version": None, "backend": None, "device_kind": None, "device_count": None,
        "stdout_tail": "", "stderr_tail": "Fatal Python error: Segmentation fault\n",
        "created_at": datetime(2025, 11, 22, 9, 20, 0),
    }
    return {**row, **overrides}


RUNS = [
    _measured(),
    _measured(trial_number=1, role="search", flags=LHS, env=LHS_ENV, step_times=STEPS,
              median_s=statistics.median(STEPS),
              ratio=statistics.median(STEPS) / statistics.median(BASE_STEPS),
              fingerprint="sha256:" + "cd" * 32, peak_memory_bytes=70 * 2**30 + 3,
              created_at=datetime(2025, 11, 22, 9, 18, 30)),
    _failed(),
    _failed(trial_number=3, kind="unknown_flag", signal=None, exit_code=1,
            flags={"xla_gpu_enable_triton_softmax_fusion": True},
            message="XLA does not know --xla_gpu_enable_triton_softmax_fusion",
            stderr_tail="Unknown flags in XLA_FLAGS: --xla_gpu_enable_triton_softmax_fusion"
                        "=true\n", created_at=datetime(2025, 11, 22, 9, 21, 0)),
    _measured(trial_number=4, role="search", flags={**LHS, "slop": 1.5}, step_times=[],
              median_s=None, ratio=statistics.median(STEPS) / statistics.median(BASE_STEPS),
              extras={"same_program_as": 1}, fingerprint="sha256:" + "cd" * 32,
              created_at=datetime(2025, 11, 22, 9, 22, 0)),
    _measured(trial_number=1, role="confirm", flags=LHS, env=LHS_ENV,
              step_times=[0.0122, 0.0120, 0.0121], median_s=0.0121, ratio=0.0121 / 0.0130,
              baseline_step_times=[0.0130, 0.0130, 0.0131], baseline_median_s=0.0130,
              created_at=datetime(2025, 11, 22, 9, 30, 0)),
    _measured(study=CPU_STUDY, environment="login-2.cluster", mode="direct",
              baseline_step_times=[], baseline_median_s=None, ratio=None,
              step_times=[0.00031, 0.00029, 0.0003], median_s=0.0003, backend="cpu",
              device_kind="cpu", device_count=1, jax_version="0.4.36",
              jaxlib_version="0.4.36", peak_memory_bytes=None, memory_source="rss",
              hlo_stats={"fusion": 1}, extras={}, checksum=-8.25, baseline_checksum=None,
              created_at=datetime(2025, 11, 23, 17, 1, 0)),
]


# --- helpers -----------------------------------------------------------------------------


def head_revision() -> str:
    """The newest migration the package carries (whatever it is today)."""
    head = ScriptDirectory(str(data_dir("alembic"))).get_current_head()
    assert head is not None
    return head


@contextmanager
def _engine(url: str) -> Iterator[Engine]:
    engine = create_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


def autotune(*args: str) -> subprocess.CompletedProcess[str]:
    """The real CLI, in a process of its own."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120)


def _plain(column: str, value: Any) -> Any:
    """A value as read back with plain SQL, made comparable across dialects: JSON decoded
    (SQLite hands back its text), timestamps as datetimes (SQLite stores text)."""
    if column in JSON_COLUMNS and isinstance(value, str):
        return json.loads(value)
    if column == "created_at" and isinstance(value, str):
        return datetime.fromisoformat(value)
    return value


def _rows_0001(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    """autotune's rows, the columns of revision 0001 only, by id."""
    out = {}
    with engine.connect() as connection:
        for table, columns in COLUMNS_0001.items():
            rows = connection.execute(text(
                f"SELECT {', '.join(columns)} FROM {table} ORDER BY id")).mappings().all()
            out[table] = [{c: _plain(c, row[c]) for c in columns} for row in rows]
    return out


def _optuna_tables(engine: Engine) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every table that is not autotune's, with its columns and its rows (sorted), as is."""
    out = {}
    names = [n for n in inspect(engine).get_table_names() if not n.startswith("autotune_")]
    with engine.connect() as connection:
        for name in sorted(names):
            result = connection.execute(text(f'SELECT * FROM "{name}"'))
            rows = sorted((tuple(row) for row in result), key=repr)
            out[name] = (list(result.keys()), rows)
    return out


def _trials_of(url: str, name: str) -> list[tuple[Any, ...]]:
    """What Optuna itself reads of a study's trials."""
    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        return [(t.number, t.state, t.values, t.params, t.user_attrs, t.system_attrs,
                 t.intermediate_values, t.datetime_start) for t in study.get_trials()]
    finally:
        storage.remove_session()
        storage.engine.dispose()


def _fill_optuna(url: str) -> None:
    """Optuna's tables as autotune's studies of that time left them: the GPU study with
    finished, failed and running trials, user and system attributes, reported steps."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = optuna.storages.RDBStorage(url)
    try:
        study = optuna.create_study(study_name=GPU_STUDY, storage=storage,
                                    direction="minimize")
        study.set_user_attr("autotune_space", "gpu-collectives")
        study.enqueue_trial({"lhs": True, "combine": 2**28})
        for number, value in enumerate([1.0, 0.93, None, None, 0.93]):
            trial = study.ask()
            trial.suggest_categorical("lhs", [False, True])
            trial.suggest_int("combine", 2**24, 2**30, log=True)
            trial.set_user_attr("owner", f"node-1:{4100 + number}")
            if value is None:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            trial.report(value * 1.1, step=5)
            trial.report(value, step=10)
            study.tell(trial, value)
        running = study.ask()  # a worker that died with its trial in flight
        running.suggest_categorical("lhs", [False, True])
        running.set_user_attr("owner", "node-7:999")
    finally:
        storage.remove_session()
        storage.engine.dispose()


def _build_at_0001(url: str) -> None:
    """autotune's tables at revision 0001 with ENVIRONMENTS, STUDIES and RUNS in them."""
    command.upgrade(alembic_config(url), "0001")
    with _engine(url) as engine:
        inspector = inspect(engine)
        for table, columns in COLUMNS_0001.items():
            assert [c["name"] for c in inspector.get_columns(table)] == columns
        with engine.begin() as connection:
            for table, rows in (("autotune_environments", ENVIRONMENTS),
                                ("autotune_studies", STUDIES)):
                for row in rows:
                    connection.execute(text(
                        f"INSERT INTO {table} ({', '.join(row)}) "
                        f"VALUES ({', '.join(':' + c for c in row)})"), row)
            studies = dict(connection.execute(text("SELECT name, id FROM autotune_studies")).all())
            hosts = dict(connection.execute(text("SELECT host, id FROM autotune_environments"))
                         .all())
            for run in RUNS:
                values = {k: json.dumps(v) if k in JSON_COLUMNS else v
                          for k, v in run.items() if k not in ("study", "environment")}
                values["study_id"] = studies[run["study"]]
                values["environment_id"] = hosts.get(run["environment"])
                connection.execute(text(
                    f"INSERT INTO autotune_runs ({', '.join(values)}) "
                    f"VALUES ({', '.join(':' + c for c in values)})"), values)


# --- the test -----------------------------------------------------------------------------


def test_head_is_a_later_revision_than_0001() -> None:
    scripts = ScriptDirectory(str(data_dir("alembic")))
    head = head_revision()
    assert head != "0001"
    assert [s.revision for s in scripts.walk_revisions("base", head)][-1] == "0001"


def test_db_upgrade_from_0001_keeps_every_row_and_leaves_optuna_alone(url: str) -> None:
    head = head_revision()
    _build_at_0001(url)
    _fill_optuna(url)
    with _engine(url) as engine:
        before = _rows_0001(engine)
        optuna_before = _optuna_tables(engine)
    trials_before = _trials_of(url, GPU_STUDY)

    # What was inserted is what 0001 holds (the comparison below starts from it).
    assert [{k: v for k, v in row.items() if k != "id"}
            for row in before["autotune_environments"]] == ENVIRONMENTS
    assert [{k: v for k, v in row.items() if k != "id"}
            for row in before["autotune_studies"]] == STUDIES
    assert len(before["autotune_runs"]) == len(RUNS)
    # Optuna's own version tables are there, and they are not autotune's.
    assert OPTUNA_VERSION_TABLES <= set(optuna_before)
    assert VERSION_TABLE not in optuna_before
    assert {"studies", "trials", "trial_params", "trial_values"} <= set(optuna_before)
    assert optuna_before["alembic_version"][1] != [("0001",)]

    # Before the upgrade: `db current` says what to do, and readers refuse, changing nothing.
    current = autotune("db", "current", "--storage", url, "--format", "json")
    assert current.returncode == 0, current.stderr
    assert json.loads(current.stdout) == {"current": "0001", "head": head, "up_to_date": False}
    refused = autotune("trials", GPU_STUDY, "--storage", url, "--format", "json")
    said = " ".join((refused.stdout + refused.stderr).split())  # however rich wrapped it
    assert refused.returncode == 2 and "autotune db upgrade" in said, said

    upgraded = autotune("db", "upgrade", "--storage", url)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert f"database at revision {head}" in upgraded.stdout

    current = autotune("db", "current", "--storage", url, "--format", "json")
    assert current.returncode == 0, current.stderr
    assert json.loads(current.stdout) == {"current": head, "head": head, "up_to_date": True}

    with _engine(url) as engine:
        # Every study, environment and run row, with the values 0001 stored.
        assert _rows_0001(engine) == before
        # Optuna's tables, its `alembic_version` and `version_info` included: row for row.
        assert _optuna_tables(engine) == optuna_before
        with engine.connect() as connection:
            stamped = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}"))
            assert stamped.scalars().all() == [head]
            # The columns added since 0001 say what studies of that time were.
            studies = connection.execute(text(
                "SELECT objectives, memory_budget_bytes, plan, claims_made, space_fit "
                "FROM autotune_studies ORDER BY id")).all()
            assert [tuple(s) for s in studies] == [("time", None, None, 0, None)] * 2
            keys = connection.execute(text(
                "SELECT r.env_key, e.host FROM autotune_runs r LEFT JOIN "
                "autotune_environments e ON e.id = r.environment_id ORDER BY r.id")).all()
            assert [key for key, host in keys] == [host for key, host in keys]
            assert connection.execute(text("SELECT COUNT(*) FROM autotune_claims")).scalar() == 0
            assert connection.execute(text(
                "SELECT COUNT(*) FROM autotune_artifacts")).scalar() == 0
            assert connection.execute(text("SELECT COUNT(*) FROM autotune_views")).scalar() == 0
        # The upgraded schema is the models' (the path through every migration ends where
        # a fresh database starts), and autogenerate proposes nothing of Optuna's.
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={
                "version_table": VERSION_TABLE, "compare_type": True,
                "include_name": include_name})
            assert compare_metadata(context, Base.metadata) == []
    assert _trials_of(url, GPU_STUDY) == trials_before

    # The reading commands read the old runs.
    for name in (GPU_STUDY, CPU_STUDY):
        shown = autotune("trials", name, "--storage", url, "--format", "json")
        assert shown.returncode == 0, shown.stderr
        runs = [r for r in RUNS if r["study"] == name]
        ids = [row["id"] for row, run in zip(before["autotune_runs"], RUNS, strict=True)
               if run["study"] == name]
        assert json.loads(shown.stdout) == [_trial_row(run_id, run)
                                            for run_id, run in zip(ids, runs, strict=True)]
    listed = autotune("studies", "--storage", url, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert [(s["name"], s["trials"], s["runs"]) for s in json.loads(listed.stdout)] == [
        (GPU_STUDY, 5, 6), (CPU_STUDY, 1, 1)]


def _trial_row(run_id: int, run: dict[str, Any]) -> dict[str, Any]:
    """The row `trials --format json` must show for a run stored at 0001."""
    measured = run["mode"] is not None
    steps = run["step_times"]
    return {
        "run": run_id, "trial": run["trial_number"], "role": run["role"],
        "outcome": run["kind"], "message": run["message"], "flags": run["flags"],
        "fingerprint": run["fingerprint"],
        "same_program_as": run["extras"].get("same_program_as") if measured else None,
        "timed_steps": len(steps),
        "median_step_s": statistics.median(steps) if steps else None,
        **_figures(run, steps, measured),
    }


def _figures(run: dict[str, Any], steps: list[float], measured: bool) -> dict[str, Any]:
    """The step figures `trials` adds (issue 33), from the stored steps and columns."""
    from autotune.rules.stats import step_stats

    summary = step_stats(steps) if steps else None
    return {
        "median_ci_s": [summary.ci_low, summary.ci_high] if summary else None,
        "iqr_s": summary.iqr if summary else None, "cv": summary.cv if summary else None,
        "outliers": summary.n_outliers if summary else None,
        "compile_time_s": run["compile_time_s"] if measured else None,
        "first_step_time_s": run["first_step_time_s"] if measured else None,
        "warmup_steps": run["extras"].get("warmup_steps") if measured else None,
        "warmup_settled": run["extras"].get("warmup_settled") if measured else None,
    }


def test_db_upgrade_of_a_database_already_at_head_changes_nothing(url: str) -> None:
    _build_at_0001(url)
    _fill_optuna(url)
    assert autotune("db", "upgrade", "--storage", url).returncode == 0
    with _engine(url) as engine:
        rows, tables = _rows_0001(engine), _optuna_tables(engine)
    again = autotune("db", "upgrade", "--storage", url)
    assert again.returncode == 0, again.stderr
    assert f"database at revision {head_revision()}" in again.stdout
    with _engine(url) as engine:
        assert _rows_0001(engine) == rows
        assert _optuna_tables(engine) == tables
