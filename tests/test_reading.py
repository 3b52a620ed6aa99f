"""Reading never writes: read commands on foreign, old and current databases; JSON output."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.records import Measurement, MeasureMode, OutcomeKind, Role, TrialOutcome
from autotune.storage import Store
from autotune.storage.store import HEAD_REVISION

runner = CliRunner()
READERS = [["studies"], ["best", "s"], ["trials", "s"], ["export", "s", "-o", "x.yaml"],
           ["importance", "s"]]


def invoke(*args: str, url: str):
    return runner.invoke(app, [*args, "--storage", url])


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def paired(ratio: float, fingerprint: str, same: int | None = None) -> Measurement:
    base = (1.0e-3, 1.02e-3, 0.98e-3)
    steps = () if same is not None else tuple(t * ratio for t in base)
    return Measurement(step_times_s=steps, baseline_step_times_s=base if steps else (),
                       compile_time_s=0.5, mode=MeasureMode.PAIRED, fingerprint=fingerprint,
                       baseline_fingerprint="base", same_program_as=same)


@pytest.fixture
def study_db(tmp_path: Path) -> Path:
    """An autotune database with one study: a baseline, a search run, one not timed."""
    path = tmp_path / "autotune.db"
    store = Store.open(url_of(path))
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
    return path


@pytest.mark.parametrize("args", READERS, ids=[a[0] for a in READERS])
def test_a_database_without_autotune_tables_is_refused_and_left_byte_identical(tmp_path, args):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
        db.execute("INSERT INTO notes VALUES ('mine')")
    before = path.read_bytes()
    result = invoke(*args, url=url_of(path))
    assert result.exit_code == 2, result.output
    assert f"the database sqlite:///{path} is not an autotune database (it holds no autotune " \
           "tables)" in result.output.replace("\n", " ")
    assert path.read_bytes() == before


@pytest.mark.parametrize("args", READERS, ids=[a[0] for a in READERS])
def test_a_database_at_an_older_revision_asks_for_db_upgrade_and_is_left_as_it_was(
        study_db, args):
    with sqlite3.connect(study_db) as db:
        db.execute("UPDATE autotune_alembic_version SET version_num = '0001'")
    before = study_db.read_bytes()
    result = invoke(*args, url=url_of(study_db))
    assert result.exit_code == 2, result.output
    text = result.output.replace("\n", " ")
    assert f"is at schema revision '0001', this autotune needs '{HEAD_REVISION}': run " \
           "`autotune db upgrade`" in text
    assert study_db.read_bytes() == before


@pytest.mark.parametrize("args", READERS[:3], ids=[a[0] for a in READERS[:3]])
def test_reading_a_current_database_writes_nothing(study_db, args):
    before = study_db.read_bytes()
    result = invoke(*args, url=url_of(study_db))
    assert result.exit_code == 0, result.output
    assert study_db.read_bytes() == before


def test_db_current_reads_the_revision_and_db_upgrade_creates_the_tables(tmp_path):
    path = tmp_path / "new.db"
    missing = invoke("db", "current", url=url_of(path))
    assert missing.exit_code == 2 and "no database at" in missing.output and not path.exists()
    assert invoke("db", "upgrade", url=url_of(path)).exit_code == 0
    shown = invoke("db", "current", "--format", "json", url=url_of(path))
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.output) == {"current": HEAD_REVISION, "head": HEAD_REVISION,
                                        "up_to_date": True}
    text = invoke("db", "current", url=url_of(path)).output
    assert f"database at revision {HEAD_REVISION}; this autotune needs {HEAD_REVISION} " \
           "(up to date)" in text


def test_db_current_on_a_foreign_database_says_none(tmp_path):
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
    before = path.read_bytes()
    shown = invoke("db", "current", "--format", "json", url=url_of(path))
    assert json.loads(shown.output) == {"current": None, "head": HEAD_REVISION,
                                        "up_to_date": False}
    assert path.read_bytes() == before


def test_trials_as_json_has_one_object_per_run_with_stable_keys(study_db):
    result = invoke("trials", "s", "--format", "json", url=url_of(study_db))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [sorted(row) for row in rows] == [sorted([
        "run", "trial", "role", "outcome", "message", "flags", "fingerprint",
        "same_program_as", "timed_steps", "median_step_s"])] * 3
    assert [(r["run"], r["trial"], r["role"], r["outcome"]) for r in rows] == [
        (1, 0, "baseline", "ok"), (2, 1, "search", "ok"), (3, 2, "search", "ok")]
    assert rows[1]["flags"] == {"xla_cpu_enable_fast_math": True}
    assert [r["timed_steps"] for r in rows] == [3, 3, 0]
    assert rows[2]["same_program_as"] == 1 and rows[2]["median_step_s"] is None
    assert rows[1]["median_step_s"] == pytest.approx(0.9e-3)
    assert rows[2]["fingerprint"] == "fast"


def test_studies_as_json_lists_each_study_with_stable_keys(study_db):
    result = invoke("studies", "--format", "json", url=url_of(study_db))
    assert result.exit_code == 0, result.output
    [row] = json.loads(result.output)
    assert {k: row[k] for k in ("name", "space", "benchmark", "preset", "devices", "trials",
                                "runs")} == {
        "name": "s", "space": "cpu", "benchmark": "matmul", "preset": "tiny", "devices": 1,
        "trials": 3, "runs": 3}
    assert row["created"][:4].isdigit() and "T" in row["created"]


def test_best_as_json_lists_the_baseline_then_the_ranked_programs(study_db):
    result = invoke("best", "s", "--format", "json", url=url_of(study_db))
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert [(r["rank"], r["trial"]) for r in rows] == [(None, 0), (1, 1)]  # trial 2: trial 1's
    assert rows[1]["flags_changed"] == {"xla_cpu_enable_fast_math": True}
    assert rows[1]["search_speedup"] == pytest.approx(1 / 0.9)
    assert rows[1]["verdict"] is None and rows[1]["confirmed_speedup"] is None


def test_an_unknown_format_is_refused(study_db):
    result = invoke("studies", "--format", "xml", url=url_of(study_db))
    assert result.exit_code == 2 and "xml" in result.output
