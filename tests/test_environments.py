"""Environments kept apart: each worker's facts, the key they make, where they are stored,
and `best` ranking each environment against its own baseline.

The storage tests run on SQLite and, when AUTOTUNE_TEST_POSTGRES_URL is set, on
PostgreSQL (a schema of its own per test).
"""

from __future__ import annotations

import dataclasses
import json
import platform
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from cli_runner import invoke
from migrations_util import alembic_config
from sqlalchemy import create_engine, text

from autotune.flags import Catalog, FlagSpec
from autotune.flags import _probe_runner as runner
from autotune.flags.catalog import load_catalog
from autotune.flags.probe import ProbeReport, probe
from autotune.ground.records import (
    Environment,
    Measurement,
    MeasureMode,
    NewRun,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
)
from autotune.results.notes import environment_header, study_notes
from autotune.results.ranking import environments, find_environment, main_runs, recommend
from autotune.results.table import best_row_json, best_rows
from autotune.storage import Store
from autotune.study.trials import RequestSettings, TrialJudge, environment_key, environment_of

H100 = Environment("node-1", "3.11.7", "0.10.2", "0.10.2", "gpu", "NVIDIA H100 80GB HBM3", 8,
                   driver_version="550.54.15", runtime_version="cuda 12080")
HEX16 = re.compile(r"[0-9a-f]{16}")


# --- the key rule ------------------------------------------------------------------------


def test_the_key_is_16_hex_digits_and_paired_mode_ignores_the_host() -> None:
    twin = dataclasses.replace(H100, host="node-2")
    for mode in MeasureMode:
        assert HEX16.fullmatch(H100.key(mode))
    assert H100.key(MeasureMode.PAIRED) == twin.key(MeasureMode.PAIRED)  # identical machines
    assert H100.key(MeasureMode.DIRECT) != twin.key(MeasureMode.DIRECT)   # another machine
    assert H100.key(MeasureMode.DIRECT) == H100.fingerprint != twin.fingerprint
    assert H100.key(MeasureMode.PAIRED) != H100.key(MeasureMode.DIRECT)


@pytest.mark.parametrize(("fact", "other"), [
    ("python_version", "3.12.1"), ("jax_version", "0.10.3"), ("jaxlib_version", "0.10.3"),
    ("backend", "cpu"), ("device_kind", "NVIDIA A100-SXM4-80GB"), ("device_count", 4),
    ("driver_version", "560.28.03"), ("driver_version", None),
    ("runtime_version", "cuda 12060"), ("runtime_version", None),
])
def test_any_other_fact_changes_the_key_in_both_modes(fact: str, other: Any) -> None:
    changed = dataclasses.replace(H100, **{fact: other})
    for mode in MeasureMode:
        assert changed.key(mode) != H100.key(mode), (fact, mode)
    assert changed.fingerprint != H100.fingerprint


def test_environment_key_takes_the_facts_and_the_mode() -> None:
    assert environment_key(H100, MeasureMode.PAIRED) == H100.key(MeasureMode.PAIRED)
    assert environment_key(H100, MeasureMode.DIRECT) == H100.key(MeasureMode.DIRECT)
    assert environment_key() == platform.node()  # no facts: the host, as keys used to be


def test_environment_of_takes_the_childs_devices_and_the_facts_driver() -> None:
    m = Measurement(step_times_s=(0.01,), compile_time_s=1.0, jax_version="0.10.2",
                    jaxlib_version="0.10.2", backend="gpu", device_kind="NVIDIA H100 80GB HBM3",
                    device_count=8)
    assert environment_of(m, H100) == H100
    assert environment_of(dataclasses.replace(m, device_count=4), H100) == \
        dataclasses.replace(H100, device_count=4)  # the child says where it ran
    bare = environment_of(m)
    assert bare is not None and bare.host == platform.node()
    assert (bare.driver_version, bare.runtime_version, bare.device_count) == (None, None, 8)
    assert environment_of(None, H100) is None


# --- what the probe reports --------------------------------------------------------------


@pytest.mark.parametrize(("text", "backend", "runtime"), [
    ("cpu", "cpu", None), ("<unknown>", "cpu", None), ("", "gpu", None),
    ("PJRT C API\ncuda 12080", "gpu", "cuda 12080"), ("rocm 60342", "gpu", "rocm 60342"),
    ("PJRT C API\nTFRT TPU v5 lite", "tpu", "PJRT C API TFRT TPU v5 lite"),
])
def test_runtime_version_keeps_what_the_platform_version_names(
        text: str, backend: str, runtime: str | None) -> None:
    assert runner.runtime_version(text, backend) == runtime


NVIDIA_PROC = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.90.07  Release "
               "Build  (dvs-builder@U16-I3-B03-4-3)  Fri May 31 09:30:47 UTC 2024\n"
               "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n")


def test_driver_version_reads_nvidia_and_amd_and_nothing_on_cpu(tmp_path: Path) -> None:
    nvidia = tmp_path / "nvidia"
    (nvidia / "proc/driver/nvidia").mkdir(parents=True)
    (nvidia / "proc/driver/nvidia/version").write_text(NVIDIA_PROC, encoding="utf-8")
    amd = tmp_path / "amd"
    (amd / "sys/module/amdgpu").mkdir(parents=True)
    (amd / "sys/module/amdgpu/version").write_text("6.8.5\n", encoding="utf-8")
    assert runner.driver_version("gpu", "cuda 12080", nvidia) == "550.90.07"
    assert runner.driver_version("gpu", "rocm 60342", amd) == "6.8.5"
    assert runner.driver_version("gpu", "rocm 60342", nvidia) is None  # no amdgpu version
    assert runner.driver_version("gpu", "cuda 12080", amd) is None     # nor NVIDIA's file
    assert runner.driver_version("cpu", None, nvidia) is None          # not the backend's
    assert runner.nvidia_driver("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  "
                                "Sat Aug 19 01:15:15 UTC 2023") == "535.104.05"
    assert runner.nvidia_driver("550.54.15\n550.54.15\n") == "550.54.15"  # nvidia-smi's


def test_the_report_gives_its_facts_and_keeps_them_through_its_cache() -> None:
    report = ProbeReport(
        jax_version="0.10.2", jaxlib_version="0.10.2", backend="gpu",
        device_kind="NVIDIA H100 80GB HBM3", libtpu=False, accepted=frozenset(),
        unknown=frozenset(), rejected_values={}, checked_values={}, per_compile={},
        usage_defaults={}, device_count=8, host="node-1", python_version="3.11.7",
        runtime_version="cuda 12080", driver_version="550.54.15")
    assert report.environment == H100
    assert ProbeReport.from_json(report.to_json()).environment == H100


TINY = Catalog([FlagSpec.model_validate({
    "name": "xla_cpu_enable_fast_math", "type": "bool", "backend": "any",
    "channel": "xla_flags", "per_compile": True, "source": "test", "help": "test flag",
    "default": False})])


@pytest.mark.slow
def test_a_real_probe_reports_this_machine_with_the_studys_device_count(
        tmp_path: Path) -> None:
    three = probe(TINY, cache_dir=tmp_path, devices=3).environment
    assert (three.backend, three.device_kind, three.device_count) == ("cpu", "cpu", 3)
    assert (three.driver_version, three.runtime_version) == (None, None)  # a CPU: no driver
    assert three.host == platform.node() and three.python_version == platform.python_version()
    two = probe(TINY, cache_dir=tmp_path, devices=2).environment
    assert two.device_count == 2, "another device count is probed, not read from the cache"
    assert two.key(MeasureMode.PAIRED) != three.key(MeasureMode.PAIRED)
    assert probe(TINY, cache_dir=tmp_path, devices=3).environment == three  # cached
    assert len(list(tmp_path.glob("probe-*.json"))) == 2


# --- storage -----------------------------------------------------------------------------


OLD = Environment("node-1", "3.11.7", "0.10.2", "0.10.2", "gpu", "NVIDIA H100 80GB HBM3", 8)


def test_upgrade_from_0006_fingerprints_old_environments_and_tells_drivers_apart(
        url: str) -> None:
    command.upgrade(alembic_config(url), "0006")
    engine = create_engine(url)
    now = datetime.now(UTC).replace(tzinfo=None)
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO autotune_environments (host, python_version, jax_version, "
            "jaxlib_version, backend, device_kind, device_count, created_at) VALUES "
            "(:host, :python_version, :jax_version, :jaxlib_version, :backend, :device_kind, "
            ":device_count, :now)"), {**dataclasses.asdict(OLD), "now": now})
        conn.execute(text(
            "INSERT INTO autotune_studies (name, space, benchmark, preset, devices, mode, "
            "created_at, objectives, claims_made) VALUES ('old', 'gpu', 'matmul', 'tiny', 8, "
            "'paired', :now, 'time', 0)"), {"now": now})
        conn.execute(text(
            "INSERT INTO autotune_runs (study_id, trial_number, role, flags, env, kind, "
            "message, duration_s, environment_id, env_key, mode, compile_time_s, step_times, "
            "baseline_step_times, extras, hlo_stats, stdout_tail, stderr_tail, created_at) "
            "SELECT s.id, 0, 'baseline', '{}', '{}', 'ok', '', 1.0, e.id, 'node-1', 'paired', "
            "0.5, '[0.1]', '[0.1]', '{}', '{}', '', '', :now FROM autotune_studies s, "
            "autotune_environments e"), {"now": now})
    with Store.open(url) as store:
        (run,) = store.runs("old")
        assert run.environment == OLD and run.env_key == "node-1"  # kept as it was
        with engine.connect() as conn:
            stored = conn.execute(text("SELECT fingerprint, driver_version, runtime_version "
                                       "FROM autotune_environments")).one()
        assert tuple(stored) == (OLD.fingerprint, None, None)  # as the code computes it
        outcome = TrialOutcome(OutcomeKind.OK, "ok", Measurement((0.1,), 0.5))
        store.record_run("old", 1, Role.SEARCH, {}, {}, outcome, OLD, env_key="node-1")
        store.record_run("old", 2, Role.SEARCH, {}, {}, outcome, H100,
                         env_key=H100.key(MeasureMode.PAIRED))
        store.record_run("old", 3, Role.SEARCH, {}, {}, outcome, H100,
                         env_key=H100.key(MeasureMode.PAIRED))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM autotune_environments")).scalar() == 2
        assert [r.environment for r in store.runs("old")] == [OLD, OLD, H100, H100]
    command.downgrade(alembic_config(url), "0006")  # the driver's row folds into the first
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM autotune_environments")).scalar() == 1
        assert conn.execute(text("SELECT COUNT(DISTINCT environment_id) FROM autotune_runs"
                                 )).scalar() == 1
    engine.dispose()


# --- best, per environment ---------------------------------------------------------------

FAST = "xla_cpu_enable_fast_math"
SMALL = Environment("small-1", "3.11.7", "0.10.2", "0.10.2", "cpu", "cpu", 8)
BIG = Environment("big-1", "3.11.7", "0.10.2", "0.10.2", "cpu", "cpu", 8)


def _direct(step_s: float, fingerprint: str) -> TrialOutcome:
    m = Measurement(step_times_s=(step_s,) * 5, compile_time_s=0.5, mode=MeasureMode.DIRECT,
                    fingerprint=fingerprint, backend="cpu", device_kind="cpu", device_count=8)
    return TrialOutcome(OutcomeKind.OK, "ok", m)


def _judge(store: Store, key: str) -> TrialJudge:
    settings = RequestSettings(Path("w.py"), "tiny", MeasureMode.DIRECT, {}, 5, 1, 2, 60.0)
    return TrialJudge(settings, load_catalog(), lambda: store.runs(
        "s", roles=[Role.BASELINE], env_key=key))


def _fill(store: Store) -> tuple[str, str]:
    """A DIRECT study measured on two machines: `small-1` (baseline 20 ms) first, then
    `big-1` (baseline 10 ms, and one more trial). Each search run's ratio is taken by
    `TrialJudge` against the baselines its environment's key reads."""
    store.ensure_study("s", "cpu", "matmul", "tiny", 8, "direct")
    small, big = SMALL.key(MeasureMode.DIRECT), BIG.key(MeasureMode.DIRECT)
    store.record_runs("s", [NewRun(0, Role.BASELINE, {}, {}, _direct(0.020, "base"), SMALL,
                              env_key=small)])
    store.record_run("s", 1, Role.SEARCH, {FAST: True}, {}, _direct(0.016, "fast"), SMALL,
                     ratio=_judge(store, small).ratio(_direct(0.016, "fast")), env_key=small)
    store.record_run("s", 2, Role.BASELINE, {}, {}, _direct(0.010, "base"), BIG, env_key=big)
    store.record_runs("s", [
        NewRun(n, Role.SEARCH, flags, {}, _direct(step, fp), BIG, env_key=big,
               ratio=_judge(store, big).ratio(_direct(step, fp)))
        for n, flags, step, fp in ((3, {FAST: True}, 0.009, "fast"), (4, {}, 0.0075, "other"))])
    return small, big


def test_best_ranks_each_environment_against_its_own_baseline(url: str) -> None:
    with Store.open(url) as store:
        small, big = _fill(store)
        runs = store.runs("s")
    assert {r.env_key for r in runs} == {small, big}
    assert [g.key for g in environments(runs)] == [big, small]  # most timed runs first
    rows = [best_row_json(row) for row in best_rows(runs, load_catalog())]
    assert [(r["environment"], r["rank"], r["trial"]) for r in rows] == [
        (big, None, 2), (big, 1, 4), (big, 2, 3), (small, None, 0), (small, 1, 1)]
    speedups = {(r["environment"], r["trial"]): r["search_speedup"] for r in rows}
    # against its own baseline: 10 ms for big-1, 20 ms for small-1 (not the first stored)
    assert speedups[big, 3] == pytest.approx(0.010 / 0.009)
    assert speedups[big, 4] == pytest.approx(0.010 / 0.0075)
    assert speedups[small, 1] == pytest.approx(0.020 / 0.016)
    # the same program in two environments is two programs' evidence, one process each
    assert [r["observations"] for r in rows if r["rank"] is not None] == [1, 1, 1]
    assert [r["program_trials"] for r in rows if r["rank"] is not None] == [[4], [3], [1]]
    assert {r.env_key for r in main_runs(runs)} == {big}
    assert recommend(runs).reason == recommend(main_runs(runs)).reason


def test_one_environment_is_ranked_as_before_with_its_key(sqlite_url: str) -> None:
    with Store.open(sqlite_url) as store:
        small, _ = _fill(store)
        runs = [r for r in store.runs("s") if r.env_key == small]
    rows = best_rows(runs, load_catalog())
    assert [(r.rank, r.run.trial_number, r.environment) for r in rows] == [
        (None, 0, small), (1, 1, small)]
    assert len(environments(runs)) == 1 and main_runs(runs) == runs
    assert "environments" not in {n.kind for n in study_notes(_record(), runs, rows)}


def _record() -> StudyRecord:
    return StudyRecord("s", "cpu", "matmul", "tiny", 8, MeasureMode.DIRECT,
                       datetime(2026, 1, 1, tzinfo=UTC))


def _run(i: int, key: str | None, role: Role = Role.SEARCH, timed: bool = True) -> RunRecord:
    m = Measurement((0.01,) if timed else (), 0.5)
    return RunRecord(i, "s", i, role, {}, {}, TrialOutcome(OutcomeKind.OK, "ok", m),
                     datetime(2026, 1, 1, tzinfo=UTC), SMALL, env_key=key)


def test_the_main_environment_has_the_most_timed_runs_then_the_first_baseline() -> None:
    tied = [_run(0, "b", Role.SEARCH), _run(1, "a", Role.BASELINE), _run(2, "b", Role.BASELINE),
            _run(3, "a"), _run(4, None)]
    assert [g.key for g in environments(tied)] == ["a", "b"]  # a's baseline came first
    assert [r.id for r in main_runs(tied)] == [1, 3, 4]  # a keyless run belongs to both
    more = [*tied, _run(5, "b"), _run(6, "a", timed=False)]
    assert [g.key for g in environments(more)] == ["b", "a"]
    assert [g.timed for g in environments(more)] == [4, 3]
    assert find_environment(more, "a") is not None and find_environment(more, "") is None
    assert find_environment(more, "c") is None


def test_the_header_names_devices_versions_runtime_driver_hosts_and_key() -> None:
    runs = [dataclasses.replace(_run(i, "k" * 16), environment=dataclasses.replace(
        H100, host=f"node-{i}")) for i in range(4)]
    (group,) = environments(runs)
    assert environment_header(group) == (
        f"environment {'k' * 16}: 8 × NVIDIA H100 80GB HBM3, gpu, jax 0.10.2, cuda 12080, "
        "driver 550.54.15, hosts node-0 and 3 more")
    cpu = environments([_run(0, "c" * 16)])[0]
    assert environment_header(cpu) == (
        f"environment {'c' * 16}: 8 × cpu, cpu, jax 0.10.2, host small-1")


def test_the_cli_prints_a_section_per_environment_and_can_show_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    with Store.open(url) as store:
        small, big = _fill(store)
    table = invoke("best", "s", "--storage", url, cwd=tmp_path)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    headers = [line for line in lines if line.startswith("environment ")]
    assert headers == [f"environment {big}: 8 × cpu, cpu, jax 0.10.2, host big-1",
                       f"environment {small}: 8 × cpu, cpu, jax 0.10.2, host small-1"]
    assert max(len(line) for line in lines if "│" in line) <= 80
    words = " ".join(table.output.split())
    assert (f"measured in 2 environments, each ranked against its own baseline; the "
            f"recommendation, export and notes use {big}") in words
    doc = json.loads(invoke("best", "s", "--storage", url, "--format", "json",
                            cwd=tmp_path).output)
    assert [row["environment"] for row in doc] == [big, big, big, small, small]
    alone = invoke("best", "s", "--storage", url, "--environment", small[:6], "--format",
                   "json", cwd=tmp_path)
    assert [(row["environment"], row["trial"]) for row in json.loads(alone.output)] == [
        (small, 0), (small, 1)]
    one = invoke("best", "s", "--storage", url, "--environment", small, cwd=tmp_path)
    assert one.exit_code == 0 and "environment " not in one.output
    missing = invoke("best", "s", "--storage", url, "--environment", "zz", cwd=tmp_path)
    assert missing.exit_code == 2 and big in missing.output


def test_a_long_header_is_cut_to_one_line_of_80_columns(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    with Store.open(url) as store:
        store.ensure_study("s", "gpu", "matmul", "tiny", 8, "paired")
        for n, facts in enumerate((H100, dataclasses.replace(H100, driver_version="560.1"))):
            store.record_run("s", n, Role.BASELINE, {}, {}, _direct(0.01, "base"), facts,
                             env_key=facts.key(MeasureMode.PAIRED))
    table = invoke("best", "s", "--storage", url, cwd=tmp_path)
    headers = [line for line in table.output.splitlines() if line.startswith("environment ")]
    assert [(len(line), line[-1]) for line in headers] == [(80, "…")] * 2
    assert headers[0].startswith(f"environment {H100.key(MeasureMode.PAIRED)}: 8 × NVIDIA H100")


def test_another_environments_confirmation_counts_for_no_trial_of_the_main_one(
        sqlite_url: str) -> None:
    """Confirmation runs stored under `small-1`'s key for a trial searched on `big-1` (the
    main environment) confirm nothing there: every reader ranks and recommends from the
    main environment's runs alone, with or without the order computed first."""
    from autotune.results.ranking import ordered

    with Store.open(sqlite_url) as store:
        small, big = _fill(store)
        store.record_runs("s", [NewRun(4, Role.CONFIRM, {}, {}, _direct(0.005, "other"), SMALL,
                                       env_key=small, ratio=0.5) for _ in range(4)])
        store.record_runs("s", [NewRun(n, Role.SEARCH, {}, {}, _direct(0.011, f"p{n}"), BIG,
                                       env_key=big, ratio=1.1) for n in range(5, 10)])
        runs = store.runs("s")
    assert {r.env_key for r in main_runs(runs)} == {big}
    order = ordered(runs)
    assert [conf for run, conf in order if run.trial_number == 4] == [None]
    assert recommend(runs, order=order).reason == recommend(runs).reason
    assert not recommend(runs).recommended
    assert not any(row.recommended for row in best_rows(runs, load_catalog(), order=order))
