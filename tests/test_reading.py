"""Reading never writes: read commands on foreign, old and current databases; JSON output.

Each test runs on SQLite and on PostgreSQL (`url` in conftest.py: a fresh database
of each kind). "Left as it was" is the file's bytes on SQLite and every table's
rows on PostgreSQL.
"""

from __future__ import annotations

import json
from dataclasses import replace

import outcomes
import pytest
import yaml
from sql_rows import snapshot
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from autotune.cli import app
from autotune.ground.errors import StorageError
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store
from autotune.storage._optuna import rdb_storage
from autotune.storage.store import HEAD_REVISION

runner = CliRunner()
READERS = [["studies"], ["best", "s"], ["trials", "s"], ["export", "s", "-o", "x.yaml"],
           ["importance", "s"], ["export", "s", "--format", "json", "-o", "-"],
           ["importance", "s", "--format", "json"]]
IDS = [" ".join(a) for a in READERS]


def invoke(*args: str, url: str):
    return runner.invoke(app, [*args, "--storage", url])


def execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def paired(ratio: float, fingerprint: str, same: int | None = None) -> Measurement:
    """Three pairs; none timed for a program trial `same` measured."""
    return outcomes.paired(ratio, baseline=outcomes.BASELINE_S[:3] if same is None else (),
                           compile_time_s=0.5, fingerprint=fingerprint,
                           baseline_fingerprint="base", same_program_as=same)


@pytest.fixture
def study_db(url: str) -> str:
    """An autotune database with one study: a baseline, a search run, one not timed."""
    return make_study_db(url)


def make_study_db(url: str) -> str:
    """`study_db` at `url`."""
    store = Store.open(url)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
    ok = OutcomeKind.OK
    store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(ok, "", paired(1.0, "base")),
                     ratio=1.0)
    store.record_run("s", 1, Role.SEARCH, {"xla_cpu_enable_fast_math": True}, {},
                     TrialOutcome(ok, "", paired(0.9, "fast")), ratio=0.9)
    store.record_run("s", 2, Role.SEARCH, {"xla_backend_optimization_level": 2}, {},
                     TrialOutcome(ok, "the same program as trial 1, which measured it",
                                  paired(0.9, "fast", same=1)), ratio=0.9)
    store.close()
    _optuna_trials(url)
    return url


def _optuna_trials(url: str) -> None:
    """Optuna's side of the same three trials (importance reads it)."""
    import optuna

    fast = optuna.distributions.CategoricalDistribution([False, True])
    level = optuna.distributions.CategoricalDistribution([0, 1, 2, 3])
    # autotune's own way in (no idle connection left to fold the log in mid-test)
    study = optuna.create_study(study_name="s", storage=rdb_storage(url, create=True))
    for role, params, value in (("baseline", {}, 1.0),
                                ("search", {"xla_cpu_enable_fast_math": True}, 0.9),
                                ("search", {"xla_backend_optimization_level": 2}, 0.9)):
        study.add_trial(optuna.trial.create_trial(
            params=params, value=value, user_attrs={"role": role},
            distributions={k: fast if "fast" in k else level for k in params}))


@pytest.mark.parametrize("args", READERS, ids=IDS)
def test_a_database_without_autotune_tables_is_refused_and_left_as_it_was(url, args):
    execute(url, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")
    before = snapshot(url)
    result = invoke(*args, url=url)
    assert result.exit_code == 2, result.output
    assert "is not an autotune database (it holds no autotune tables)" \
        in result.output.replace("\n", " ")
    assert snapshot(url) == before


@pytest.mark.parametrize("args", READERS, ids=IDS)
def test_a_database_at_an_older_revision_asks_for_db_upgrade_and_is_left_as_it_was(
        study_db, args):
    execute(study_db, "UPDATE autotune_alembic_version SET version_num = '0001'")
    before = snapshot(study_db)
    result = invoke(*args, url=study_db)
    assert result.exit_code == 2, result.output
    said = result.output.replace("\n", " ")
    assert f"is at schema revision '0001', this autotune needs '{HEAD_REVISION}': run " \
           "`autotune db upgrade`" in said
    assert snapshot(study_db) == before


@pytest.mark.parametrize("args", [a for a in READERS if "-o" not in a or "-" in a],
                         ids=[i for i, a in zip(IDS, READERS, strict=True)
                              if "-o" not in a or "-" in a])
def test_reading_a_current_database_writes_nothing(study_db, args):
    before = snapshot(study_db)
    result = invoke(*args, url=study_db)
    assert result.exit_code == 0, result.output
    assert snapshot(study_db) == before


def test_db_current_reads_the_revision_and_db_upgrade_creates_the_tables(url):
    assert invoke("db", "upgrade", url=url).exit_code == 0
    shown = invoke("db", "current", "--format", "json", url=url)
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {"current": HEAD_REVISION, "head": HEAD_REVISION,
                                        "up_to_date": True}
    said = invoke("db", "current", url=url).output
    assert f"database at revision {HEAD_REVISION}; this autotune needs {HEAD_REVISION} " \
           "(up to date)" in said


def test_db_current_of_a_missing_sqlite_file_creates_nothing(tmp_path):
    path = tmp_path / "new.db"
    missing = invoke("db", "current", url=f"sqlite:///{path}")
    assert missing.exit_code == 2 and "no database at" in missing.output and not path.exists()


def test_db_current_on_a_foreign_database_says_none(url):
    execute(url, "CREATE TABLE notes (body TEXT)")
    before = snapshot(url)
    shown = invoke("db", "current", "--format", "json", url=url)
    assert json.loads(shown.output) == {"current": None, "head": HEAD_REVISION,
                                        "up_to_date": False}
    assert snapshot(url) == before


def test_db_upgrade_refuses_a_foreign_database_unless_forced(url):
    """`db upgrade` on a file of someone else's added six autotune tables without asking
    (issue 31); so did the first `study` there."""
    execute(url, "CREATE TABLE notes (body TEXT)", "INSERT INTO notes VALUES ('mine')")
    before = snapshot(url)
    for args in (["db", "upgrade"], ["best", "s"]):
        refused = invoke(*args, url=url)
        assert refused.exit_code == 2, refused.output
        assert snapshot(url) == before
    said = " ".join(invoke("db", "upgrade", url=url).output.split())
    assert "holds tables that are not autotune's (notes): autotune leaves it as it is; point " \
           "--storage at a database of its own, or run `autotune db upgrade --force`" in said
    with pytest.raises(StorageError, match="not autotune's"):  # a study's way in: the same
        Store.open(url)
    assert snapshot(url) == before
    forced = invoke("db", "upgrade", "--force", url=url)
    assert forced.exit_code == 0, forced.output
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            assert "autotune_studies" in inspect(connection).get_table_names()
            assert list(connection.execute(text("SELECT body FROM notes"))) == [("mine",)]
    finally:
        engine.dispose()
    Store.open(url).close()  # at head now: opens without asking again


def _read_only_mount_works() -> bool:
    import shutil
    import subprocess

    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount --bind /tmp /tmp && "
                            "mount -o remount,ro,bind /tmp /tmp"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_mount_works(),
                    reason="needs `unshare -m` and mount (root in a mount namespace) to make a "
                           "read-only folder that root cannot write")
def test_reading_works_in_a_folder_this_process_cannot_write(study_db_sqlite_folder):
    """best and trials exited 2 with "attempt to write a readonly database" on a WAL
    database in a read-only folder (issue 31): reading never needs to write."""
    import shlex
    import subprocess
    import sys

    folder, url = study_db_sqlite_folder
    commands = [["best", "s"], ["trials", "s", "--format", "json"], ["studies"],
                ["db", "current"], ["importance", "s"], ["export", "s", "-o", "-"]]
    script = " && ".join(
        [f"mount --bind {folder} {folder}", f"mount -o remount,ro,bind {folder} {folder}",
         f"! touch {folder}/probe"]
        + [shlex.join([sys.executable, "-m", "autotune", *c, "--storage", url])
           for c in commands])
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "readonly" not in done.stderr and "unable to open" not in done.stderr
    assert '"run": 1' in done.stdout  # the trials JSON was read


@pytest.fixture
def study_db_sqlite_folder(tmp_path):
    """A study (`study_db`'s three runs) in a SQLite file in write-ahead-log mode, alone in
    its folder: (folder, url)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    url = f"sqlite:///{folder / 'autotune.db'}"
    make_study_db(url)
    return folder, url


def test_optunas_tables_are_not_foreign():
    from optuna.storages._rdb import models

    from autotune.storage.engine import OPTUNA_TABLES

    assert set(models.BaseModel.metadata.tables) | {"alembic_version"} == OPTUNA_TABLES


def test_trials_as_json_has_one_object_per_run_with_stable_keys(study_db):
    result = invoke("trials", "s", "--format", "json", url=study_db)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [sorted(row) for row in rows] == [sorted([
        "run", "trial", "role", "outcome", "message", "flags", "fingerprint",
        "same_program_as", "timed_steps", "median_step_s", "median_ci_s", "iqr_s", "cv",
        "outliers", "compile_time_s", "first_step_time_s", "warmup_steps",
        "warmup_settled"])] * 3
    assert [(r["run"], r["trial"], r["role"], r["outcome"]) for r in rows] == [
        (1, 0, "baseline", "ok"), (2, 1, "search", "ok"), (3, 2, "search", "ok")]
    assert rows[1]["flags"] == {"xla_cpu_enable_fast_math": True}
    assert [r["timed_steps"] for r in rows] == [3, 3, 0]
    assert rows[2]["same_program_as"] == 1 and rows[2]["median_step_s"] is None
    assert rows[1]["median_step_s"] == pytest.approx(0.9e-3)
    assert rows[2]["fingerprint"] == "fast"


def test_studies_as_json_lists_each_study_with_stable_keys(study_db):
    result = invoke("studies", "--format", "json", url=study_db)
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert {k: row[k] for k in ("name", "space", "benchmark", "preset", "devices", "trials",
                                "runs")} == {
        "name": "s", "space": "cpu", "benchmark": "matmul", "preset": "tiny", "devices": 1,
        "trials": 3, "runs": 3}
    assert row["created"][:4].isdigit() and "T" in row["created"]


def test_best_as_json_lists_the_baseline_then_the_ranked_programs(study_db):
    result = invoke("best", "s", "--format", "json", url=study_db)
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["rank"], r["trial"]) for r in rows] == [(None, 0), (1, 1)]  # trial 2: trial 1's
    assert rows[1]["flags_changed"] == {"xla_cpu_enable_fast_math": True}
    assert rows[1]["search_speedup"] == pytest.approx(1 / 0.9)
    assert rows[1]["verdict"] is None and rows[1]["confirmed_speedup"] is None


def test_best_marks_memory_figures_that_do_not_compare_with_the_baselines(url):
    """A PAIRED baseline's program footprint beside a DIRECT run's allocator peak: the
    second is marked `*` and the note says why (seen on an H200)."""
    store = Store.open(url)
    store.ensure_study("s", "gpu-runtime", "transformer", "small", 1, "paired")
    ok = OutcomeKind.OK
    store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(ok, "", replace(
        paired(1.0, "base"), peak_memory_bytes=20 << 20, memory_source="memory_analysis")),
        ratio=1.0)
    direct = Measurement(step_times_s=(0.8e-3,) * 3, compile_time_s=0.5, fingerprint="env",
                         mode=MeasureMode.DIRECT,
                         peak_memory_bytes=150 << 20, memory_source="memory_stats")
    store.record_run("s", 1, Role.SEARCH, {"NCCL_PROTO": "SIMPLE"}, {},
                     TrialOutcome(ok, "", direct), ratio=0.8)
    store.close()
    result = runner.invoke(app, ["best", "s", "--storage", url], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "│ 20.0 MiB │" in result.output and "MiB*" in result.output  # 150.0 MiB, folded
    text = " ".join(result.output.split())
    assert ("* marks memory_stats (the device allocator's peak, in a process of its own), "
            "not comparable with the baseline's memory_analysis") in text


def test_an_unknown_format_is_refused(study_db):
    result = invoke("studies", "--format", "xml", url=study_db)
    assert result.exit_code == 2 and "xml" in result.output


def test_export_as_json_is_the_yaml_document_with_the_same_keys(study_db, tmp_path):
    as_yaml = tmp_path / "best.yaml"
    assert invoke("export", "s", "--rank", "1", "-o", str(as_yaml), url=study_db).exit_code == 0
    result = invoke("export", "s", "--rank", "1", "--format", "json", "-o", "-", url=study_db)
    assert result.exit_code == 0, result.output
    document, written = json.loads(result.output), yaml.safe_load(as_yaml.read_text())
    document.pop("exported_at"), written.pop("exported_at")
    assert document == written
    assert document["trial"] == 1 and document["flags"] == {"xla_cpu_enable_fast_math": True}
    assert document["measured"]["search_speedup"] == pytest.approx(1 / 0.9)


def test_export_writes_json_to_best_json_by_default(study_db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("export", "s", "--format", "json", url=study_db)
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "best.json").read_text())["schema_version"] == 2
    refused = invoke("export", "s", "--format", "toml", url=study_db)
    assert refused.exit_code == 2 and "toml" in refused.output


def test_importance_as_json_has_one_object_per_param_with_stable_keys(study_db):
    result = invoke("importance", "s", "--format", "json", url=study_db)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert sorted(document) == ["ablation", "flags", "noise", "study", "trials"]
    assert document["ablation"]["trial"] is None and document["ablation"]["flags"] == []
    assert document["study"] == "s" and document["trials"] == 2
    assert sorted(f["param"] for f in document["flags"]) == [
        "xla_backend_optimization_level", "xla_cpu_enable_fast_math"]
    assert {tuple(sorted(f)) for f in document["flags"]} == {(
        "above_noise", "best_ratio", "best_value", "param", "rank", "spread", "trials",
        "values_tried", "variance_share", "worst_ratio", "worst_value")}
    assert all(f["values_tried"] == 1 and f["rank"] is None for f in document["flags"])


def test_importance_as_json_with_nothing_to_compare_says_so_in_its_keys(url):
    with Store.open(url) as store:
        store.ensure_study("young", "cpu", "matmul", "tiny", 1, "paired")
    import optuna

    optuna.create_study(study_name="young", storage=rdb_storage(url, create=True))
    result = invoke("importance", "young", "--format", "json", url=url)
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document.pop("ablation")["trial"] is None
    assert document == {"study": "young", "trials": 0, "noise": None, "flags": []}
