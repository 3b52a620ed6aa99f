"""A claim's heartbeat: beaten from a thread while a measurement runs, always stopped.

The store's side (`Store.beat`, `Store.live_claims`) is in test_claims.py, on
every backend.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import autotune.study.context
from autotune.ground.errors import StorageError
from autotune.ground.records import (
    ClaimRecord,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    TrialOutcome,
)
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.launch.workloads import resolve_benchmark
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.heartbeat import claim_heartbeat
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner

EVERY_S = 0.02


class Beats:
    """A store's `beat`: counts calls; fails the first `failing` of them; says the claim
    stopped running after `running_for` calls."""

    def __init__(self, failing: int = 0, running_for: int | None = None) -> None:
        self.calls: list[int] = []
        self.failing, self.running_for = failing, running_for

    def beat(self, claim_id: int) -> bool:
        self.calls.append(claim_id)
        if len(self.calls) <= self.failing:
            raise StorageError("the database sqlite:///x.db failed: database is locked")
        return self.running_for is None or len(self.calls) < self.running_for


def heartbeats() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-heartbeat")]


def test_the_heartbeat_beats_while_the_block_runs_and_stops_with_it():
    store = Beats()
    with claim_heartbeat(store, 7, every_s=EVERY_S):
        assert [t.daemon for t in heartbeats()] == [True]
        time.sleep(12 * EVERY_S)
    beaten = len(store.calls)
    assert beaten >= 3 and set(store.calls) == {7}
    assert heartbeats() == []
    time.sleep(5 * EVERY_S)
    assert len(store.calls) == beaten  # not one beat after the block


def test_the_heartbeat_stops_when_the_block_is_interrupted():
    store = Beats()
    with pytest.raises(KeyboardInterrupt), claim_heartbeat(store, 7, every_s=EVERY_S):
        time.sleep(3 * EVERY_S)
        raise KeyboardInterrupt
    assert heartbeats() == []


def test_a_failing_database_does_not_stop_the_heartbeat(caplog):
    store = Beats(failing=2)
    with claim_heartbeat(store, 7, every_s=EVERY_S):
        time.sleep(15 * EVERY_S)
    assert len(store.calls) >= 4  # two failures, then it went on beating
    warned = [r for r in caplog.records if "cannot record the heartbeat of claim 7" in r.message]
    assert len(warned) == 1  # said once per run of failures
    assert heartbeats() == []


def test_one_failed_beat_is_tried_again_without_a_word(caplog):
    """A lone failure is not worth a warning (the claim lives on several missed beats), and
    a fault the block meets at once (a full disk) is told by the block, in one line."""
    store = Beats(failing=1)
    with claim_heartbeat(store, 7, every_s=EVERY_S):
        time.sleep(10 * EVERY_S)
    assert len(store.calls) >= 3
    assert not [r for r in caplog.records if "cannot record the heartbeat" in r.message]


def test_the_heartbeat_ends_once_the_claim_is_no_longer_running():
    store = Beats(running_for=2)
    with claim_heartbeat(store, 7, every_s=EVERY_S):
        time.sleep(15 * EVERY_S)
        assert heartbeats() == []  # released under it: nothing left to keep alive
    assert len(store.calls) == 2


class SlowLauncher(Launcher):
    """Takes `seconds` per measurement; meanwhile looks at the claims being measured."""

    def __init__(self, store: Store, seconds: float) -> None:
        self.store, self.seconds = store, seconds
        self.seen: list[tuple[list[ClaimRecord], list[ClaimRecord]]] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        before = self.store.live_claims("s")
        time.sleep(self.seconds)
        self.seen.append((before, self.store.live_claims("s")))
        fast = 0.8 if request.flags else 1.0
        return TrialOutcome(OutcomeKind.OK, "", Measurement(
            (fast,) * 4, 0.5, mode=MeasureMode.PAIRED, baseline_step_times_s=(1.0,) * 4,
            fingerprint="fast" if request.flags else "base", baseline_fingerprint="base"))


def test_a_confirmation_round_beats_its_claim_while_it_measures(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(autotune.study.context, "CLAIM_BEAT_S", EVERY_S)
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
    launcher = SlowLauncher(store, 10 * EVERY_S)
    winner = {"xla_cpu_enable_fast_math": True}
    store.record_run("s", 0, Role.BASELINE, {}, {}, launcher.launch(TrialRequest(
        Path("w.py"), "tiny", flags={})))
    store.record_run("s", 1, Role.SEARCH, winner, {}, launcher.launch(TrialRequest(
        Path("w.py"), "tiny", flags=winner)))
    launcher.seen.clear()
    plan = StudyPlan.of(name="s", space=load_space("cpu"), preset="tiny",
                     workload=resolve_benchmark("matmul"), trials=2)
    StudyRunner(plan, store, launcher, store.url).confirm(top=1, repeats=1)
    [(before, after)] = launcher.seen
    assert [c.key for c in before] == [c.key for c in after] == ["confirm:1:0"]
    assert after[0].heartbeat_at > before[0].heartbeat_at  # beaten from the other thread
    assert heartbeats() == [] and store.live_claims("s") == []  # done: no longer running
