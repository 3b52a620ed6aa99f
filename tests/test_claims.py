"""Claims: one measurement per configuration per environment, `--trials` never overshot.

The store's rules on SQLite and PostgreSQL (each test on both), then real
processes racing for claims, then two real `autotune study` processes on one
new database.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import random
import subprocess
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sql_rows import rows as _rows
from sqlalchemy import create_engine, text

from autotune.ground.errors import StorageError, StudyNotFoundError
from autotune.ground.records import (
    LIVE_WITHIN_S,
    ClaimState,
    ClaimVerdict,
    Measurement,
    NewRun,
    OutcomeKind,
    Role,
    TrialOutcome,
)
from autotune.storage import Store

ME = ("host-a", 4242)
MEASURED = (Role.BASELINE, Role.RECOMMENDED, Role.SEARCH)


@pytest.fixture
def store(url: str):
    with Store.open(url) as opened:
        opened.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
        yield opened


def claim(store: Store, key: str, env: str = "host-a", budget: int | None = None,
          role: Role = Role.SEARCH):
    return store.claim("s", env, key, role, {"f": key}, 1, ME,
                       budget=None if budget is None else (budget, MEASURED))


def test_a_configuration_is_claimed_once_per_environment(store):
    verdict, mine = claim(store, "--a=1")
    assert verdict is ClaimVerdict.CLAIMED and mine.state is ClaimState.RUNNING
    assert (mine.owner_host, mine.owner_pid, mine.env_key) == ("host-a", 4242, "host-a")
    again, held = claim(store, "--a=1")
    assert again is ClaimVerdict.TAKEN and held.id == mine.id
    elsewhere, theirs = claim(store, "--a=1", env="host-b")
    assert elsewhere is ClaimVerdict.CLAIMED and theirs.id != mine.id
    assert claim(store, "--a=2")[0] is ClaimVerdict.CLAIMED


def test_a_finished_claim_stays_taken_and_is_linked_to_its_run(store):
    _, mine = claim(store, "--a=1")
    run_id = store.record_run("s", 1, Role.SEARCH, {"a": 1}, {}, TrialOutcome(OutcomeKind.OK, ""),
                              env_key="host-a", claim_id=mine.id)
    [done] = store.claims("s")
    assert (done.state, done.run_id) == (ClaimState.DONE, run_id)
    assert claim(store, "--a=1")[0] is ClaimVerdict.TAKEN
    assert store.release(mine.id) is False  # a finished claim is not released


def test_an_interrupted_or_retried_claim_can_be_claimed_again(store):
    _, first = claim(store, "--a=1")
    assert store.release(first.id) is True
    assert store.claims("s")[0].state is ClaimState.INTERRUPTED
    verdict, second = claim(store, "--a=1")
    assert verdict is ClaimVerdict.CLAIMED and second.id == first.id
    store.record_run("s", 1, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.CRASHED, "x"),
                     claim_id=second.id, claim_state=ClaimState.RETRY)
    assert claim(store, "--a=1")[0] is ClaimVerdict.CLAIMED


def test_the_budget_counts_runs_and_running_claims_of_the_measured_roles(store):
    store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, ""))
    store.record_run("s", 0, Role.CONFIRM, {}, {}, TrialOutcome(OutcomeKind.OK, ""))  # not counted
    assert claim(store, "--a=1", budget=3)[0] is ClaimVerdict.CLAIMED
    assert claim(store, "--a=2", budget=3)[0] is ClaimVerdict.CLAIMED
    assert claim(store, "--a=3", budget=3) == (ClaimVerdict.FULL, None)
    assert store.held("s", MEASURED) == 3
    assert store.claims("s", [ClaimState.RUNNING], env_key="host-b") == []


def test_compile_only_runs_are_free_up_to_their_allowance_and_no_further(store):
    timed = TrialOutcome(OutcomeKind.OK, "", Measurement((0.1, 0.1), 1.0))
    compiled = TrialOutcome(OutcomeKind.OK, "the same program as trial 0",
                            Measurement((), 1.0, same_program_as=0))
    store.record_run("s", 0, Role.BASELINE, {}, {}, timed)
    for number in (1, 2, 3):
        store.record_run("s", number, Role.SEARCH, {"a": number}, {}, compiled)
    store.record_run("s", 4, Role.SEARCH, {"a": 4}, {}, TrialOutcome(OutcomeKind.CRASHED, "x"))
    assert store.held("s", MEASURED) == 5  # no allowance: every run counts
    assert store.held("s", MEASURED, free_compiles=2) == 3  # two of the three are free
    assert store.held("s", MEASURED, free_compiles=9) == 2  # a crash is never free
    assert store.count_runs("s", MEASURED, free_compiles=2) == 3
    budget = (3, MEASURED)
    assert store.claim("s", "host-a", "--a=5", Role.SEARCH, {}, 5, ME, budget=budget,
                       free_compiles=2)[0] is ClaimVerdict.FULL
    assert store.claim("s", "host-a", "--a=5", Role.SEARCH, {}, 5, ME, budget=budget,
                       free_compiles=3)[0] is ClaimVerdict.CLAIMED
    assert store.held("s", MEASURED, free_compiles=3) == 3  # the running claim counts


def test_runs_can_be_read_for_one_environment(store):
    for env in ("host-a", "host-b", None):
        store.record_run("s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, ""),
                         env_key=env)
    assert [r.env_key for r in store.runs("s", env_key="host-a")] == ["host-a", None]
    assert len(store.runs("s")) == 3


def _claim_all(url: str, seed: int, keys: int, budget: int, start_at: float) -> list[str]:
    """One process: from `start_at` on, claim every key in a shuffled order; return those
    it won."""
    order = [f"--k={i}" for i in range(keys)]
    random.Random(seed).shuffle(order)
    won = []
    with Store.open(url) as store:
        store.claims("s")  # connected before the start
        time.sleep(max(0.0, start_at - time.time()))
        for key in order:
            verdict, _ = store.claim("s", "host-a", key, Role.SEARCH, {}, None,
                                     ("host-a", seed), budget=(budget, MEASURED))
            if verdict is ClaimVerdict.CLAIMED:
                won.append(key)
            # A breath between claims, as a measurement would take: without it the first
            # process to win SQLite's lock can take all 12 while the others back off.
            time.sleep(0.02)
    return won


def test_processes_racing_for_claims_never_share_one_nor_overshoot_the_budget(url):
    with Store.open(url) as store:
        store.ensure_study("s", "cpu", "matmul", "tiny", 1, "paired")
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        start_at = time.time() + 8  # every process started and connected: they race
        won = pool.starmap(_claim_all, [(url, seed, 30, 12, start_at) for seed in range(4)])
    every = [key for chunk in won for key in chunk]
    assert len(every) == 12 == len(set(every))
    assert sum(1 for chunk in won if chunk) >= 2  # they did race


# --- two real `autotune study` processes --------------------------------------------------

STUDY = ["study", "--benchmark", "matmul", "--preset", "tiny", "--devices", "1",
         "--steps", "5", "--warmup", "1", "--space", "cpu", "--name", "shared",
         "--trials", "6", "--confirm", "1", "--confirm-repeats", "2",
         "--confirm-max", "0"]


def _start(folder: Path, url: str, seed: int) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-c", "from autotune.cli import main; main()", *STUDY,
           "--storage", url, "--seed", str(seed)]
    return subprocess.Popen(cmd, cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


@pytest.mark.slow
def test_two_study_processes_on_one_new_database_share_the_trials_exactly(tmp_path, url):
    first, second = _start(tmp_path, url, 1), _start(tmp_path, url, 1)
    outputs = [p.communicate(timeout=600)[0] for p in (first, second)]
    for proc, output in zip((first, second), outputs, strict=True):
        assert proc.returncode == 0, output
        assert "Traceback" not in output and "IntegrityError" not in output, output
    runs = _rows(url, "select role, flags, trial_number from autotune_runs order by id")
    # what --trials counts: the search's processes, races included (a recommendation's
    # shrinking, ablation and minimal runs, comes after the search and is not counted)
    counted = [role for role, _, _ in runs if role in ("baseline", "recommended", "search",
                                                         "race")]
    assert len(counted) == 6, runs  # --trials counts the search's processes, races included
    measured = [json.dumps(json.loads(f) if isinstance(f, str) else f, sort_keys=True)
                for role, f, _ in runs if role in ("baseline", "search", "recommended")]
    # the space was fitted once, by one process, its compiles outside the trials
    fits = _rows(url, "select space_fit from autotune_studies")
    assert len(fits) == 1 and fits[0][0] is not None
    assert len(_rows(url, "select id from autotune_claims where key = 'fit:space'")) == 1
    assert all(t is None for role, _, t in runs if role == "fingerprint")
    assert [c for c in Counter(measured).values() if c > 1] == [], measured
    # one leader, two rounds, no more: its races in the search count as rounds
    confirms = Counter(t for role, _, t in runs if role == "confirm")
    assert len(confirms) <= 1, runs
    for trial, made in confirms.items():
        raced = sum(role == "race" and t == trial for role, _, t in runs)
        assert made == max(0, 2 - raced), runs
    states = Counter(s for (s,) in _rows(url, "select state from autotune_claims"))
    assert set(states) == {"done"}, states
    assert _rows(url, "select count(*) from trials where state = 'RUNNING'") == [(0,)]


# --- runs stored in bulk with their claims -----------------------------------------------


def test_runs_stored_in_bulk_carry_their_done_claims(store, url):
    ok = TrialOutcome(OutcomeKind.OK, "")
    ids = store.record_runs("s", [
        NewRun(0, Role.BASELINE, {}, {}, ok, env_key="host-a", claim_key="", owner=ME),
        NewRun(1, Role.SEARCH, {"f": 1}, {}, ok, env_key="host-a", claim_key="--f=1",
               owner=("host-a", 7)),
        NewRun(1, Role.FINGERPRINT, {"f": 1}, {}, ok, env_key="host-a"),  # no claim
    ])
    claims = store.claims("s")
    assert [(c.key, c.state, c.run_id, c.owner_pid, c.role) for c in claims] == [
        ("", ClaimState.DONE, ids[0], 4242, Role.BASELINE),
        ("--f=1", ClaimState.DONE, ids[1], 7, Role.SEARCH)]
    assert all(c.heartbeat_at == c.claimed_at for c in claims)
    assert claim(store, "--f=1")[0] is ClaimVerdict.TAKEN
    assert _rows(url, "select claims_made from autotune_studies") == [(3,)]  # 2 + that claim


def test_runs_stored_in_bulk_with_a_key_claimed_already_store_nothing(store):
    claim(store, "--f=1")
    run = NewRun(1, Role.SEARCH, {"f": 1}, {}, TrialOutcome(OutcomeKind.OK, ""),
                 env_key="host-a", claim_key="--f=1")
    with pytest.raises(StorageError, match="claimed already.*nothing was stored"):
        store.record_runs("s", [dataclasses.replace(run, claim_key="--f=2"), run])
    assert store.runs("s") == [] and [c.key for c in store.claims("s")] == ["--f=1"]


# --- heartbeats ----------------------------------------------------------------------------


def _age_heartbeat(url: str, claim_id: int, seconds: float, column: str = "heartbeat_at"):
    """Move the claim's heartbeat (or claim time) `seconds` into the past."""
    engine = create_engine(url)
    then = datetime.now(UTC).replace(tzinfo=None) - timedelta(seconds=seconds)
    with engine.begin() as connection:
        connection.execute(text(f"update autotune_claims set {column} = :then where id = :id"),
                           {"then": then, "id": claim_id})
    engine.dispose()


def test_a_new_claim_is_live_and_its_beat_moves_its_heartbeat(store, url):
    _, mine = claim(store, "--a=1")
    assert mine.heartbeat_at == mine.claimed_at
    assert [c.id for c in store.live_claims("s")] == [mine.id]
    _age_heartbeat(url, mine.id, 20)
    (aged,) = store.claims("s")
    assert store.beat(mine.id) is True
    (beaten,) = store.claims("s")
    assert beaten.heartbeat_at > aged.heartbeat_at and beaten.claimed_at == mine.claimed_at
    assert beaten.last_seen == beaten.heartbeat_at


def test_a_claim_whose_heartbeat_is_old_is_not_live(store, url):
    _, stale = claim(store, "--a=1")
    _, fresh = claim(store, "--a=2")
    _age_heartbeat(url, stale.id, 3 * LIVE_WITHIN_S)
    assert [c.id for c in store.live_claims("s")] == [fresh.id]
    assert [c.id for c in store.live_claims("s", within_s=10 * LIVE_WITHIN_S)] == [
        stale.id, fresh.id]
    assert store.beat(stale.id) is True  # its worker was only slow: live again
    assert [c.id for c in store.live_claims("s")] == [stale.id, fresh.id]


def test_a_claim_made_before_heartbeats_counts_from_when_it_was_claimed(store, url):
    _, old = claim(store, "--a=1")
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text("update autotune_claims set heartbeat_at = null"))
    engine.dispose()
    assert store.claims("s")[0].heartbeat_at is None
    assert [c.id for c in store.live_claims("s")] == [old.id]
    _age_heartbeat(url, old.id, 3 * LIVE_WITHIN_S, column="claimed_at")
    assert store.live_claims("s") == []


def test_a_released_or_finished_claim_is_not_live_and_does_not_beat(store):
    _, released = claim(store, "--a=1")
    _, finished = claim(store, "--a=2")
    store.release(released.id)
    store.record_run("s", 1, Role.SEARCH, {}, {}, TrialOutcome(OutcomeKind.OK, ""),
                     claim_id=finished.id)
    assert store.live_claims("s") == []
    assert store.beat(released.id) is False and store.beat(finished.id) is False
    assert store.beat(10_000) is False  # no such claim
    assert [c.state for c in store.claims("s")] == [ClaimState.INTERRUPTED, ClaimState.DONE]


def test_live_claims_of_every_study_name_their_study(store):
    store.ensure_study("t", "cpu", "matmul", "tiny", 1, "paired")
    _, mine = claim(store, "--a=1")
    _, theirs = store.claim("t", "host-b", "--b=1", Role.CONFIRM, {}, 2, ("host-b", 1))
    assert [(c.id, c.study_name) for c in store.live_claims()] == [(mine.id, "s"),
                                                                    (theirs.id, "t")]
    assert [c.id for c in store.live_claims("t")] == [theirs.id]
    with pytest.raises(StudyNotFoundError):
        store.live_claims("nope")
