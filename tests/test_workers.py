"""Many workers, one study: the plan read back from the database, heartbeats, dead workers.

In-process: the recipe a study stores and `join_study` rebuilds, what a worker refuses
(another autotune, another space file, a missing study, a study without a recipe), and
a worker on another host that stopped beating (its trial failed, its configuration
queued again, its claim released). Then real worker processes: `autotune study
--workers 2` on one SQLite file, and a worker SIGKILLed mid-trial on PostgreSQL.
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
from pathlib import Path

import pytest
from sql_rows import rows as _rows
from sqlalchemy import create_engine, text

from autotune.api import join_study, plan_study
from autotune.ground.errors import StudyMismatchError, StudyNotFoundError, UsageError
from autotune.ground.records import ClaimState, ClaimVerdict, Role
from autotune.spaces.loader import spaces_dir
from autotune.storage import Store
from autotune.storage._optuna import outcome_of, rdb_storage
from autotune.study.runner import StudyRunner

TINY = {"benchmark": "matmul", "preset": "tiny", "devices": 1, "steps": 5, "warmup": 1,
        "max_warmup": 3}


@pytest.fixture(scope="module")
def planned():
    """One plan (its preflight probe runs a real JAX child once for the module)."""
    return plan_study(space="cpu", name="shared", trials=4, heartbeat_s=1, **TINY)


def _prepared(planned, url: str, **changes) -> StudyRunner:
    """A runner whose study and recipe are stored; nothing measured."""
    plan = planned.plan
    if changes:  # options of the plan changed, as if the study had been made with them
        plan = replace(plan, options=plan.options.model_copy(update=changes))
    runner = StudyRunner(plan, Store.open(url), launcher=None, storage=url)  # type: ignore[arg-type]
    runner.prepare()
    return runner


def _counts(url: str) -> dict[str, int]:
    """Rows per table: what "nothing written" compares."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            names = [r[0] for r in connection.execute(text(
                "select name from sqlite_master where type='table'"))]
            return {n: connection.execute(text(f'select count(*) from "{n}"')).scalar_one()
                    for n in names}
    finally:
        engine.dispose()


# --- the recipe ------------------------------------------------------------------------


def test_a_worker_rebuilds_the_plan_from_the_database_alone(planned, sqlite_url, tmp_path,
                                                             monkeypatch):
    _prepared(planned, sqlite_url)
    monkeypatch.chdir(tmp_path)  # another folder: nothing but the database is needed
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_thunk_runtime=false")  # this worker's own
    joined = join_study("shared", sqlite_url)
    mine, theirs = joined.planned.plan, planned.plan
    assert mine.recorded() == theirs.recorded()
    assert (mine.name, mine.trials, mine.space_name, mine.workload.name, mine.options.preset,
            mine.options.devices, mine.mode, mine.options.heartbeat_s) == (
        "shared", 4, "cpu", "matmul", "tiny", 1, theirs.mode, 1)
    assert mine.space.params == theirs.space.params
    # the creator's XLA variables win over the worker's: both measure the same baseline
    assert mine.base_env.get("XLA_FLAGS") == theirs.base_env.get("XLA_FLAGS")
    assert (joined.after.confirm, joined.after.confirm_repeats, joined.after.shrink) == (3, 2, True)
    assert join_study("shared", sqlite_url, trials=9).planned.plan.trials == 9


def test_a_worker_of_another_autotune_is_refused_and_writes_nothing(planned, sqlite_url):
    runner = _prepared(planned, sqlite_url)
    recipe = dict(planned.recipe)
    runner.store.set_recipe("shared", {**recipe, "autotune": {"version": "0.0.1",
                                                              "source": "0123456789abcdef"}})
    before = _counts(sqlite_url)
    with pytest.raises(StudyMismatchError, match="install the same autotune on every worker"):
        join_study("shared", sqlite_url)
    assert _counts(sqlite_url) == before


def test_a_worker_whose_space_file_differs_is_refused(tmp_path, sqlite_url):
    space = tmp_path / "mine.yaml"
    space.write_text((spaces_dir() / "cpu.yaml").read_text())
    planned = plan_study(space=str(space), name="filed", trials=2, **TINY)
    _prepared(planned, sqlite_url)
    space.write_text(space.read_text() + "\n# edited on this machine\n")
    before = _counts(sqlite_url)
    with pytest.raises(StudyMismatchError, match="space_sha256") as caught:
        join_study("filed", sqlite_url)
    assert "give every worker the same files" in str(caught.value)
    assert _counts(sqlite_url) == before


def test_a_worker_needs_a_study_and_its_recipe(planned, sqlite_url):
    with Store.open(sqlite_url) as store:
        store.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired", plan={"steps": 5})
    with pytest.raises(StudyNotFoundError, match="old"):
        join_study("nope", sqlite_url)
    with pytest.raises(UsageError, match="holds no recipe"):
        join_study("old", sqlite_url)


def test_the_cli_worker_names_what_is_wrong_and_exits_2(tmp_path):
    db, newer = tmp_path / "a.db", tmp_path / "newer.db"
    with Store.open(f"sqlite:///{db}") as store:
        store.ensure_study("old", "cpu", "matmul", "tiny", 1, "paired")
    Store.open(f"sqlite:///{newer}").close()
    engine = create_engine(f"sqlite:///{newer}")
    with engine.begin() as connection:  # a database a newer autotune migrated
        connection.execute(text("UPDATE autotune_alembic_version SET version_num = '9999'"))
    engine.dispose()
    cases = {("--study", "nope", "--storage", f"sqlite:///{db}"): "nope",
             ("--study", "old", "--storage", f"sqlite:///{db}"): "holds no recipe",
             ("--study", "x", "--storage", "mysq1://u@h/db"): "storage URL",
             ("--study", "x", "--storage", f"sqlite:///{tmp_path}/missing.db"): "no database",
             ("--study", "x", "--storage", f"sqlite:///{newer}"): "is at '9999'",
             ("--study", "x", "--storage", "postgresql+psycopg://nobody:s3cret@127.0.0.1:1/x"):
                 "refused"}
    for args, words in cases.items():
        done = subprocess.run([sys.executable, "-m", "autotune", "worker", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert words in done.stderr and "Traceback" not in done.stderr, done.stderr
        assert "s3cret" not in done.stderr
    assert not (tmp_path / "missing.db").exists()


# --- heartbeats ------------------------------------------------------------------------


def test_a_worker_on_another_host_that_stops_beating_loses_nothing(planned, url):
    runner = _prepared(planned, url)
    study = runner.prepare()
    trial = study.ask()
    config = runner.space.sample(trial)
    trial.set_user_attr("role", Role.SEARCH.value)
    trial.set_user_attr("owner", "elsewhere:1")
    study._storage.record_heartbeat(trial._trial_id)  # then the machine went away
    dead = ("elsewhere", 1)
    verdict, claim = runner.store.claim("shared", runner.env_key, "dead", Role.SEARCH, config,
                                        trial.number, dead)
    assert verdict is ClaimVerdict.CLAIMED and claim is not None
    _, alive = runner.store.claim("shared", runner.env_key, "alive", Role.CONFIRM, {}, 0,
                                  ("elsewhere", 2))
    assert alive is not None
    deadline = time.monotonic() + 3.5  # two heartbeats of 1 s, and a margin
    while time.monotonic() < deadline:
        runner.store.beat(alive.id)  # this one keeps beating
        time.sleep(0.3)
    runner.reap()
    frozen = study._storage.get_trial(trial._trial_id)
    assert frozen.state.name == "FAIL" and outcome_of(frozen) == "interrupted"
    again = [t for t in study.get_trials(deepcopy=False)
             if t.system_attrs.get("failed_trial") == trial.number]
    assert len(again) == 1 and again[0].state.name == "WAITING"
    assert again[0].params == frozen.params and again[0].user_attrs["role"] == "search"
    states = {c.key: c.state for c in runner.store.claims("shared")}
    assert states["dead"] is ClaimState.INTERRUPTED and states["alive"] is ClaimState.RUNNING
    runner.store.close()


def test_the_last_worker_is_the_one_that_finds_no_other_live_search(planned, sqlite_url):
    runner = _prepared(planned, sqlite_url, heartbeat_s=1)
    assert not runner.others_searching()
    _, mine = runner.store.claim("shared", runner.env_key, "mine", Role.SEARCH, {}, 1,
                                 runner.owner)
    _, confirming = runner.store.claim("shared", runner.env_key, "c", Role.CONFIRM, {}, 1,
                                       ("elsewhere", 3))
    assert mine is not None and confirming is not None
    assert not runner.others_searching()  # its own trial, and a confirmation: not a search
    _, other = runner.store.claim("shared", runner.env_key, "other", Role.SEARCH, {}, 2,
                                  ("elsewhere", 2))
    _, away = runner.store.claim("shared", "another-environment", "x", Role.SEARCH, {}, 3,
                                 ("elsewhere", 4))
    assert other is not None and away is not None
    assert runner.others_searching()
    time.sleep(2.5)  # the other worker falls silent for two heartbeats: it is dead
    runner.store.beat(mine.id)
    assert not runner.others_searching()
    states = {c.key: c.state for c in runner.store.claims("shared")}
    assert states["other"] is ClaimState.INTERRUPTED and states["mine"] is ClaimState.RUNNING
    runner.store.close()


# --- real workers ----------------------------------------------------------------------


def _measured_once(url: str) -> list[str]:
    """The flags of every measured configuration, serialised; duplicates are the bug."""
    runs = _rows(url, "select role, flags from autotune_runs "
                      "where role in ('baseline', 'search', 'recommended')")
    return [json.dumps(json.loads(f) if isinstance(f, str) else f, sort_keys=True)
            for _, f in runs]


@pytest.mark.slow
def test_study_with_two_local_workers_on_one_sqlite_file(tmp_path):
    url = f"sqlite:///{tmp_path}/w.db"
    done = subprocess.run(
        [sys.executable, "-m", "autotune", "study", "--space", "cpu", "--name", "two",
         "--benchmark", "matmul", "--preset", "tiny", "--devices", "1", "--steps", "5",
         "--warmup", "1", "--max-warmup", "3", "--trials", "5", "--confirm", "1",
         "--confirm-repeats", "2", "--confirm-max", "0", "--no-racing", "--workers", "2",
         "--storage", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "starting 2 local workers" in done.stdout and "rank" in done.stdout, done.stdout
    runs = _rows(url, "select role from autotune_runs")
    assert sum(r in ("baseline", "search", "recommended") for (r,) in runs) == 5
    assert [c for c in Counter(_measured_once(url)).values() if c > 1] == []
    owners = {pid for (pid,) in _rows(url, "select distinct owner_pid from autotune_claims")}
    assert len(owners) == 2, owners  # both workers measured
    assert sum(r == "confirm" for (r,) in runs) <= 2  # one leader, two rounds, once
    assert _rows(url, "select count(*) from autotune_claims where state = 'running'") == [(0,)]
    journal = _rows(url, "pragma journal_mode")
    assert journal == [("wal",)]
    confirmed = Counter(t for r, t in _rows(url, "select role, trial_number from autotune_runs")
                        if r == "confirm")
    assert set(confirmed.values()) <= {2}, confirmed
    again = subprocess.run(  # three rounds of the best, from any machine
        [sys.executable, "-m", "autotune", "confirm", "two", "--confirm", "1",
         "--confirm-repeats", "3", "--no-shrink", "--storage", url],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "confirming the best configuration:" in again.stdout
    after = Counter(t for r, t in _rows(url, "select role, trial_number from autotune_runs")
                    if r == "confirm")
    # the leader by the evidence now (the first rounds count toward it) has its 3 rounds;
    # nothing measured before is lost
    assert max(after.values()) == 3 and all(after[t] >= n for t, n in confirmed.items()), after
    assert sum(after.values()) - sum(confirmed.values()) <= 3, (confirmed, after)


@pytest.mark.slow
def test_a_worker_killed_mid_trial_loses_nothing_and_nothing_is_measured_twice(
        planned, postgres_url):
    runner = _prepared(planned, postgres_url, trials=6, heartbeat_s=2, racing=False)
    recipe = planned.recipe
    runner.store.set_recipe("shared", {**recipe, "options": {
        **recipe["options"], "trials": 6, "heartbeat_s": 2, "racing": False, "confirm": 0}})
    argv = [sys.executable, "-m", "autotune", "worker", "--study", "shared",
            "--storage", postgres_url, "--until-done"]
    workers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for _ in range(2)]
    claim = _wait_for_claim(runner.store, workers, (Role.SEARCH, Role.RECOMMENDED), timeout=300)
    survivor, output = _kill_the_holder(workers, claim, timeout=400)  # mid-trial
    assert survivor.returncode == 0, output
    counted = _rows(postgres_url, "select role from autotune_runs where role in "
                                  "('baseline', 'search', 'recommended', 'race')")
    assert len(counted) == 6, counted  # --trials exactly: the lost trial was made up once
    assert [c for c in Counter(_measured_once(postgres_url)).values() if c > 1] == []
    claims = {c.id: c for c in runner.store.claims("shared")}
    assert ClaimState.RUNNING not in {c.state for c in claims.values()}
    study = runner.prepare()
    killed = next(t for t in study.get_trials() if t.number == claim.trial_number)
    assert killed.state.name == "FAIL" and outcome_of(killed) == "interrupted"
    retried = [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retried) == 1 and retried[0].state.is_finished(), retried
    assert retried[0].params == killed.params  # its configuration went back to the queue
    again, lost = retried[0], claims[claim.id]
    if outcome_of(again) == "not_needed":  # the survivor had filled the study meanwhile
        assert lost.state is ClaimState.INTERRUPTED
    else:  # the survivor took the configuration over and measured it, once
        assert lost.state is ClaimState.DONE and lost.owner_pid == survivor.pid, (lost, output)
        assert lost.trial_number == again.number
    assert not [t for t in study.get_trials() if t.state.name in ("RUNNING", "WAITING")]
    runner.store.close()


@pytest.mark.slow
def test_a_worker_killed_while_it_measures_the_baseline_does_not_block_the_study(url, tmp_path):
    """The survivor waited for the dead worker's baseline for good: `trials 0/5: 1 workers
    searching` after 5 minutes on SQLite, no trial in 15 on PostgreSQL (issue 31). The
    first process to build the workload hangs, so the other is surely waiting for it."""
    script = Path(__file__).parent / "workloads" / "first_hangs.py"
    planned = plan_study(space="cpu", name="shared", trials=3, heartbeat_s=2, racing=False,
                         confirm=0, script=str(script), preset="tiny", devices=1, steps=5,
                         warmup=1, max_warmup=3, timeout_per_trial=600)
    runner = StudyRunner(planned.plan, Store.open(url), launcher=None,  # type: ignore[arg-type]
                         storage=url)
    runner.prepare()
    runner.store.set_recipe("shared", planned.recipe)
    env = {**os.environ, "FIRST_HANGS_MARKER": str(tmp_path / "first")}
    argv = [sys.executable, "-m", "autotune", "worker", "--study", "shared",
            "--storage", url, "--until-done"]
    workers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=env) for _ in range(2)]
    claim = _wait_for_claim(runner.store, workers, (Role.BASELINE,), timeout=300)
    while not (tmp_path / "first").exists():  # the holder's child hangs from here on
        time.sleep(0.1)
    time.sleep(8)  # the other worker is past its start (which reaps) and waits
    survivor, output = _kill_the_holder(workers, claim, timeout=300)
    assert survivor.returncode == 0, output
    counted = _rows(url, "select role from autotune_runs where role in "
                         "('baseline', 'search', 'recommended', 'race')")
    assert len(counted) == 3 and counted.count(("baseline",)) == 1, counted
    claims = runner.store.claims("shared")
    assert ClaimState.RUNNING not in {c.state for c in claims}
    assert [c.owner_pid for c in claims if c.role is Role.BASELINE
            and c.state is ClaimState.DONE] == [survivor.pid]
    runner.store.close()


def _kill_the_holder(workers: list[subprocess.Popen[str]], claim, timeout: float
                     ) -> tuple[subprocess.Popen[str], str]:
    """SIGKILL the worker that holds `claim`; (the other worker, its output once it ended).
    Whatever happens, no worker is left running."""
    try:
        victim, survivor = sorted(workers, key=lambda w: w.pid != claim.owner_pid)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=30)
        return survivor, survivor.communicate(timeout=timeout)[0]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()


def _wait_for_claim(store: Store, workers: list[subprocess.Popen[str]], roles: tuple[Role, ...],
                    timeout: float):
    """The first running claim of `roles` held by one of `workers`."""
    pids = {w.pid for w in workers}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in store.claims("shared", [ClaimState.RUNNING]):
            if c.owner_pid in pids and c.role in roles:
                return c
        if any(w.poll() is not None for w in workers):
            raise AssertionError("a worker ended first: "
                                 + "".join(w.communicate()[0] for w in workers))
        time.sleep(0.05)
    raise AssertionError(f"no worker of {sorted(pids)} claimed {roles}")


POP = """
import sys, time, optuna
from autotune.storage._optuna import rdb_storage
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.create_study(study_name="s", storage=rdb_storage(sys.argv[1], create=True),
                            load_if_exists=True)
popped = []
for i in range(int(sys.argv[3])):
    if sys.argv[2] == "enqueue":
        study.enqueue_trial({}, user_attrs={"i": i})
    time.sleep(0.2 - time.time() % 0.2)  # both processes ask at the same moment
    trial = study.ask()
    if "i" in trial.user_attrs:
        popped.append(trial.number)
print(popped)
"""


def test_two_processes_never_pop_the_same_queued_trial_on_sqlite(tmp_path):
    """On SQLite, two processes' `ask()` popped the same WAITING trial (7 of 40 here); the
    second `tell` then raised UpdateFinishedTrialError in 2 of 6 double starts (issue 31)."""
    url = f"sqlite:///{tmp_path / 'pop.db'}"
    rdb_storage(url, create=True)  # the tables first, as a study's first process makes them
    procs = [subprocess.Popen([sys.executable, "-c", POP, url, role, "30"], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for role in ("enqueue", "ask")]
    popped = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    assert set(popped[0]).isdisjoint(popped[1]), popped
    assert len(popped[0]) + len(popped[1]) == 30
