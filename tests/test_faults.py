"""The fast part of the fault-injection suite (`benchmarks/scripts/fault_check.py`): real
`autotune` processes, one SIGKILLed at a phase, the case resumed with the same command and
checked. The whole table (every process at every phase, both backends, outages, crowds)
is the script's; the README quotes it."""

from __future__ import annotations

import argparse
import os

import pytest
from bench_scripts import script

POSTGRES_ENV = "AUTOTUNE_TEST_POSTGRES_URL"

fault_check = script("fault_check")


def _assert_clean(result) -> None:
    assert result.reached, f"{result.case.label}: the phase never came"
    assert result.complete, (result.note, result.outputs[-1][-3000:])
    assert (result.lost, result.duplicated, result.left, result.tracebacks) == (0, 0, 0, 0), (
        result, "\n---\n".join(o[-2000:] for o in result.outputs))


@pytest.mark.slow
def test_a_study_killed_while_it_searches_resumes_to_exactly_its_trials():
    _assert_clean(fault_check.run_case(fault_check.Case("kill", "sqlite", "study", "leader",
                                                        "search")))


@pytest.mark.slow
def test_a_trial_child_killed_while_it_confirms_loses_nothing_with_workers():
    _assert_clean(fault_check.run_case(fault_check.Case("kill", "sqlite", "workers", "child",
                                                        "confirm")))


@pytest.mark.slow
def test_a_worker_killed_at_the_baseline_on_postgresql_loses_nothing():
    url = os.environ.get(POSTGRES_ENV)
    if not url:
        pytest.skip(f"set {POSTGRES_ENV} to run PostgreSQL tests")
    _assert_clean(fault_check.run_case(
        fault_check.Case("kill", "postgresql", "worker", "worker", "baseline"), url))


def test_the_suite_covers_every_phase_target_and_mode_on_both_backends():
    args = argparse.Namespace(
        backends=["sqlite", "postgresql"], modes=list(fault_check.MODES),
        targets=["leader", "worker", "child"], phases=list(fault_check.PHASES),
        outages=[3.0, 20.0], crowds=[2, 4])
    found = fault_check.cases(args)
    kills = {(c.backend, c.mode, c.target, c.phase) for c in found if c.kind == "kill"}
    assert len(kills) == 2 * 8 * 7
    assert {c.seconds for c in found if c.kind == "outage"} == {3.0, 20.0}
    assert {(c.backend, c.processes) for c in found if c.kind == "crowd"} == {
        (b, n) for b in ("sqlite", "postgresql") for n in (2, 4)}


@pytest.mark.parametrize(("role", "key", "phase"), [
    ("baseline", "baseline:0", "baseline"), ("fingerprint", "fit:space", "fit"),
    ("search", "trial:3", "search"), ("race", "race:3:1", "race"),
    ("confirm", "confirm:3:0", "confirm"), ("ablation", "shrink:3", "shrink"),
    ("pgle", "pgle:3:profile:0", "pgle"), ("fingerprint", "warm:prior", None)])
def test_each_running_claim_is_put_in_its_phase(role, key, phase):
    from types import SimpleNamespace

    assert fault_check.phase_of(SimpleNamespace(role=role, key=key)) == phase


def test_a_case_is_resumed_with_its_own_commands():
    """An outage's study is the slow-building workload's: running the matmul study again
    on its database was refused (other settings), which the first full table showed."""
    outage = fault_check.resume_commands(fault_check.Case("outage", "postgresql", seconds=3),
                                         "postgresql://x/y")
    assert [argv[argv.index("--script") + 1] for argv in outage] == [str(fault_check.SLOW_BUILD)]
    shrink = fault_check.resume_commands(
        fault_check.Case("kill", "sqlite", "workers", "child", "shrink"), "sqlite:///a.db")
    assert [argv[argv.index("--script") + 1] for argv in shrink] == [
        str(fault_check.ROOT / "tests" / "workloads" / "wide_vectors.py")]
    assert "--benchmark" not in shrink[0] and "--workers" in shrink[0]
    worker = fault_check.resume_commands(
        fault_check.Case("kill", "sqlite", "worker", "worker", "search"), "sqlite:///a.db")
    assert [argv[0] for argv in worker] == ["study", "worker"]


def test_a_left_process_is_named_with_where_it_waits(tmp_path, monkeypatch):
    """The suite names each process a case left (command line, parent, whether it ended,
    where it waits), so a rare leftover shows its cause in the table."""
    import subprocess
    import sys

    monkeypatch.setattr(fault_check, "LEFT_WATCH_S", 1.0)
    procs = fault_check.Processes(tmp_path)
    stays = subprocess.Popen([sys.executable, "-c",
                              "import time; print('up', flush=True); time.sleep(60)"],
                             env=procs.env, stdout=subprocess.PIPE, text=True)
    try:
        # its environment shows the case's folder only once it runs Python, not at fork
        assert stays.stdout is not None and stays.stdout.readline() == "up\n"
        result = fault_check.Result(fault_check.Case("kill", "sqlite", "study", "leader",
                                                     "search"))
        left = procs.alive()
        assert left == [stays.pid]
        fault_check._name_left(result, left, procs)
        assert f"pid {stays.pid} of {os.getpid()}" in result.note
        assert "time.sleep(60)" in result.note and "still alive after 1 s" in result.note
        assert "stack:" in result.note or "threads waiting in:" in result.note
    finally:
        stays.kill()
        stays.wait()
