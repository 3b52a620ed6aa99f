"""A standing pool of workers: `autotune study --submit`, `autotune worker` without
`--study`, and each study's state in `autotune studies` (issue 34).

In-process: a submitted study takes the first plan a worker stores; the states a study
goes through; the order in which a pool serves studies (priority, then fewest trials in
flight) and the studies it refuses. Then real processes: one pool worker serves two
submitted studies to completion on SQLite, and three on PostgreSQL, one SIGKILLed
mid-trial, lose nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from cli_runner import invoke
from sql_rows import rows as _rows

from autotune.api.plan import submit_study
from autotune.api.pool import Pool, other_devices
from autotune.ground.errors import StudyMismatchError
from autotune.ground.records import (
    PLAN_SUBMITTED,
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
from autotune.results.confirmation import needs_confirmation
from autotune.results.ranking import ranked
from autotune.results.table import study_row, study_state
from autotune.rules import stopping
from autotune.storage import Store

TINY = ["--benchmark", "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5",
        "--warmup", "1", "--max-warmup", "3"]
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
CPU1 = Environment("h", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 1)


def _submit(url: str, name: str, **options: object) -> None:
    submit_study(url, space="cpu", benchmark="matmul", preset="tiny", devices=1, name=name,
                 **options)


# --- submitting ------------------------------------------------------------------------


def test_a_submitted_study_takes_the_first_plan_a_worker_stores(sqlite_url):
    _submit(sqlite_url, "s", trials=7, priority=3)
    with Store.open(sqlite_url) as store:
        record = store.get_study("s")
        assert record.plan is not None and record.plan[PLAN_SUBMITTED] is True
        assert record.plan["recipe"]["options"]["trials"] == 7
        assert record.plan["recipe"]["options"]["priority"] == 3
        adopted = store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED,
                                     plan={"steps": 5, "fit": True})
        assert adopted.plan is not None and PLAN_SUBMITTED not in adopted.plan
        assert adopted.plan["steps"] == 5 and adopted.plan["recipe"]["options"]["trials"] == 7
        with pytest.raises(StudyMismatchError, match="steps 5"):  # from now on: as any study
            store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED,
                               plan={"steps": 9, "fit": True})
        _submit(sqlite_url, "t")
        with pytest.raises(StudyMismatchError, match="preset 'tiny'"):  # columns always count
            store.ensure_study("t", "cpu", "matmul", "small", 1, MeasureMode.PAIRED,
                               plan={"steps": 5})


def test_submit_refuses_workers_and_bad_input_storing_nothing(tmp_path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    done = invoke("study", "--space", "cpu", *TINY, "--submit", "--workers", "2",
                  "--storage", url, cwd=tmp_path)
    assert done.exit_code == 2 and "drop --workers" in done.output
    done = invoke("study", "--space", "no-such-space", *TINY, "--submit", "--storage", url,
                  cwd=tmp_path)
    assert done.exit_code == 2 and "no-such-space" in done.output
    assert not (tmp_path / "a.db").exists()
    done = invoke("study", "--space", "cpu", *TINY, "--submit", "--storage", url, cwd=tmp_path)
    assert done.exit_code == 0 and "submitted study 'cpu-matmul-tiny-1dev'" in done.output
    listed = json.loads(invoke("studies", "--storage", url, "--format", "json",
                               cwd=tmp_path).output)
    assert [(s["name"], s["state"], s["target"], s["runs"]) for s in listed] == [
        ("cpu-matmul-tiny-1dev", "queued", 12, 0)]  # 12: the default --trials


# --- states ----------------------------------------------------------------------------


def _record(trials: int | None = 3, **plan: object) -> StudyRecord:
    recipe = {} if trials is None else {"recipe": {"options": {"trials": trials}}}
    return StudyRecord("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, WHEN,
                       plan={**recipe, **plan})


def _run(number: int, role: Role, ok: bool = True, timed: bool = True) -> RunRecord:
    kind = OutcomeKind.OK if ok else OutcomeKind.CRASHED
    m = Measurement((0.1,) if timed else (), 1.0) if ok else None
    return RunRecord(number + 1, "s", number, role, {}, {}, TrialOutcome(kind, "", m), WHEN)


def test_a_study_is_queued_searching_confirming_done_or_failed():
    base, one, two = _run(0, Role.BASELINE), _run(1, Role.SEARCH), _run(2, Role.SEARCH)
    assert study_state(_record(), [], running=False) == "queued"
    assert study_state(_record(), [], running=True) == "searching"
    assert study_state(_record(), [base, one], running=False) == "searching"
    assert study_state(_record(), [base, one, two], running=False) == "confirming"
    race = replace(_run(1, Role.RACE), id=9)  # racing counts toward --trials
    assert study_state(_record(), [base, one, race], running=True) == "confirming"
    finished = {"finished": {"trials": 3, "at": "2026-01-01T00:00:00"}}
    assert study_state(_record(**finished), [base, one, two], running=False) == "done"
    assert study_state(_record(trials=5, **finished), [base, one, two], False) == "searching"
    assert study_state(_record(trials=None, **finished), [base], running=False) == "done"
    failed = _run(0, Role.BASELINE, ok=False)
    assert study_state(_record(), [failed], running=False) == "failed"
    assert study_state(_record(), [failed], running=True) == "searching"  # a retry runs
    row = study_row(_record(**finished), [base, one, two], running=False)
    assert (row["state"], row["target"], row["priority"]) == ("done", 3, 0)


def test_compile_only_trials_leave_a_study_searching_while_the_budget_frees_them(monkeypatch):
    base, one = _run(0, Role.BASELINE), _run(1, Role.SEARCH)
    compiled = [_run(n, Role.SEARCH, timed=False) for n in (2, 3, 4)]
    runs = [base, one, *compiled]
    assert study_state(_record(), runs, running=False) == "confirming"  # all count
    monkeypatch.setattr(stopping, "FREE_COMPILES", 1.0)  # 3 free for --trials 3
    assert study_state(_record(), runs, running=True) == "searching"
    assert study_state(_record(), [*runs, _run(5, Role.SEARCH)], False) == "confirming"
    assert study_row(_record(), runs, running=True)["counted"] == 2


def test_the_pool_serves_the_highest_priority_then_the_fewest_trials_in_flight(sqlite_url):
    for name, priority in (("a", 0), ("b", 0), ("c", 5), ("d", 0), ("other", 9)):
        _submit(sqlite_url, name, priority=priority)
    with Store.open(sqlite_url) as store:
        store.claim("a", "env", "k", Role.SEARCH, {}, 1, ("h", os.getpid()))
        store.ensure_study("b", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, plan={})
        store.record_run("b", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.CRASHED, ""))
    pool = Pool(sqlite_url, "[a-d]")
    try:
        # c first (priority 5); then d before a (a has a trial in flight); b's baseline
        # failed and nobody is on it: not open
        assert [r.name for r in pool.candidates()] == ["c", "d", "a"]
        assert [r.name for r in Pool(sqlite_url).candidates()] == ["other", "c", "d", "a"]
    finally:
        pool.close()


def test_a_pool_leaves_a_study_measured_on_other_devices():
    gpu = replace(CPU1, backend="gpu", device_kind="NVIDIA H100", device_count=8)
    runs = [replace(_run(0, Role.BASELINE), environment=gpu)]
    assert other_devices([], CPU1) is None and other_devices(runs, gpu) is None
    assert other_devices(runs, CPU1) == ("it is measured on 8 NVIDIA H100 (gpu); this worker "
                                         "has 1 cpu (cpu)")


# --- real pools ------------------------------------------------------------------------


def _study(url: str, name: str, *extra: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--name", name, *TINY,
         "--trials", "3", "--confirm", "1", "--confirm-repeats", "2", "--confirm-max", "0",
         "--no-shrink", "--heartbeat", "2", "--submit", "--storage", url, *extra],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def _complete(url: str, names: list[str]) -> None:
    """Each study: exactly --trials counted, no configuration measured twice, confirmed
    where the search timed a program other than the baseline's, no running claim, done."""
    for name in names:
        runs = _rows(url, "select r.role, r.flags from autotune_runs r join autotune_studies s "
                          f"on s.id = r.study_id where s.name = '{name}'")
        counted = [f for role, f in runs if role in ("baseline", "search", "recommended",
                                                     "race")]
        assert len(counted) == 3, (name, runs)
        measured = [json.dumps(json.loads(f) if isinstance(f, str) else f, sort_keys=True)
                    for role, f in runs if role in ("baseline", "search", "recommended")]
        assert [c for c in Counter(measured).values() if c > 1] == [], (name, measured)
        with Store.open(url, upgrade=False) as store:  # what the confirm phase takes up
            targets = [r for r in ranked(store.runs(name)) if needs_confirmation(r)]
        # confirmed, unless every program timed was the baseline's (nothing to confirm)
        assert any(role == "confirm" for role, _ in runs) or not targets, (name, runs)
    assert _rows(url, "select count(*) from autotune_claims where state = 'running'") == [(0,)]
    listed = json.loads(subprocess.run(
        [sys.executable, "-m", "autotune", "studies", "--storage", url, "--format", "json"],
        capture_output=True, text=True, timeout=120).stdout)
    assert {s["name"]: s["state"] for s in listed} == dict.fromkeys(names, "done")


@pytest.mark.slow
def test_one_pool_worker_serves_two_submitted_studies_to_completion(tmp_path):
    url = f"sqlite:///{tmp_path / 'pool.db'}"
    _study(url, "low")
    _study(url, "high", "--priority", "5")
    done = subprocess.run([sys.executable, "-m", "autotune", "worker", "--storage", url,
                           "--until-idle"], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    trials = [line.split(": ")[1] for line in done.stdout.splitlines()
              if line.startswith("worker ") and ": trial " in line]
    assert trials[:3] == ["high"] * 3 and trials[3:] == ["low"] * 3, done.stdout
    assert "no open study is left for this worker" in done.stdout
    _complete(url, ["high", "low"])


@pytest.mark.slow
def test_three_pool_workers_on_postgresql_lose_nothing_when_one_is_killed_mid_trial(
        postgres_url):
    _study(postgres_url, "one")
    _study(postgres_url, "two")
    argv = [sys.executable, "-m", "autotune", "worker", "--storage", postgres_url,
            "--until-idle"]
    workers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for _ in range(3)]
    try:
        victim, claim_id = _holder_of_a_search_trial(postgres_url, workers, timeout=300)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        outputs = [w.communicate(timeout=900)[0] for w in workers if w is not victim]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers if w is not victim] == [0, 0], outputs
    assert not [o for o in outputs if "Traceback" in o], outputs
    _complete(postgres_url, ["one", "two"])
    with Store.open(postgres_url) as store:
        (lost,) = [c for name in ("one", "two") for c in store.claims(name) if c.id == claim_id]
    # the killed worker's trial: measured by a survivor, or left interrupted when the
    # survivors had filled its study meanwhile
    assert (lost.state is ClaimState.DONE and lost.owner_pid != victim.pid) or (
        lost.state is ClaimState.INTERRUPTED), lost


def _holder_of_a_search_trial(url: str, workers: list[subprocess.Popen[str]], timeout: float
                              ) -> tuple[subprocess.Popen[str], int]:
    """The worker that holds a running search claim, as soon as one does, and the claim."""
    by_pid = {w.pid: w for w in workers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        held = _rows(url, "select owner_pid, id from autotune_claims where state = 'running' "
                          "and role = 'search'")
        for pid, claim_id in held:
            if pid in by_pid:
                return by_pid[pid], claim_id
        if any(w.poll() is not None for w in workers):
            raise AssertionError("a worker ended first: "
                                 + "".join(w.communicate()[0] for w in workers))
        time.sleep(0.05)
    raise AssertionError("no pool worker claimed a search trial")

