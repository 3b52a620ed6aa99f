"""Fitting the space inside a study: computed once after the baseline, stored with the
study, read back on resume, shown by `best` and the dashboard (no JAX: the recorded
mlp-dp table answers, its baseline reporting mlp-dp's real collectives)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_runner import invoke
from sqlalchemy import create_engine, text

from autotune.flags.catalog import load_catalog
from autotune.ground.errors import StudyMismatchError
from autotune.ground.records import ClaimState, CollectiveStats, Role, TrialOutcome
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.launch.replay import ReplayTable, TableLauncher
from autotune.launch.workloads import resolve_benchmark
from autotune.results.view import study_page
from autotune.spaces import load_space_text
from autotune.spaces.fit import Action, SpaceFit, apply_fit
from autotune.storage import Store
from autotune.study.plan import FIT_KEY, StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.trials import environment_key

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "benchmarks/tables/mlp-dp-small.json"
#: What the child reads from mlp-dp's program on 8 devices (test_collectives checks it).
MLP_DP = {"all-reduce": CollectiveStats(count=1, bytes=2660420, smallest_bytes=4,
                                        largest_bytes=2660420)}
A2A = "xla_tpu_enable_async_all_to_all"
NO_OPS = ("xla_cpu_use_xnnpack", "xla_cpu_multi_thread_eigen")  # same program as the baseline


def table_space():
    """The recorded table's space, plus an all-to-all flag mlp-dp has nothing for."""
    text = (ROOT / "benchmarks/tables/cpu-table.yaml").read_text()
    text = text.replace("backend: cpu", "backend: any").replace(
        "\nparams:\n", f"\nparams:\n  {A2A}:\n    type: bool\n\n", 1)
    return load_space_text(text)


class Profiled(Launcher):
    """The table's answers; the baseline's measurement carries mlp-dp's collectives."""

    def __init__(self, seed: int = 0) -> None:
        self.table = TableLauncher(ReplayTable.load(TABLE), load_catalog(), seed=seed)
        self.requests: list[TrialRequest] = []

    def launch(self, request: TrialRequest) -> TrialOutcome:
        self.requests.append(request)
        outcome = self.table.launch(request)
        if request.flags or outcome.measurement is None:
            return outcome
        return replace(outcome, measurement=replace(outcome.measurement, collectives=MLP_DP))

    def compile_only(self) -> list[dict]:
        return [dict(r.flags) for r in self.requests if not r.timed]


def runner(tmp_path: Path, launcher: Launcher, trials: int, **plan: object) -> StudyRunner:
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    space = table_space()
    settings: dict[str, object] = {"name": "s", "space": space,
                                   "workload": resolve_benchmark("mlp-dp"), "trials": trials,
                                   "sampler": "random", "seed": 0, **plan}
    return StudyRunner(StudyPlan.of(**settings), Store.open(url), launcher, url)  # type: ignore[arg-type]


@pytest.fixture
def fitted(tmp_path: Path) -> tuple[StudyRunner, Profiled]:
    launcher = Profiled()
    first = runner(tmp_path, launcher, trials=6)
    first.run()
    return first, launcher


def test_the_fit_drops_an_absent_kind_and_no_op_flags_and_is_stored(fitted):
    first, launcher = fitted
    stored = first.store.get_study("s").space_fit
    assert stored is not None
    fit = SpaceFit.from_json(stored)
    assert [(c.flag, c.action, c.evidence) for c in fit.changes] == [
        (A2A, Action.DROPPED, "collectives"),
        *((flag, Action.DROPPED, "probe") for flag in NO_OPS)]
    assert fit.changes[0].reason == "the program has no all-to-all: nothing for it to act on"
    assert fit.collectives == MLP_DP
    # one compile per value other than XLA's default, the no-op flags among them; the
    # baseline's own program came from its run
    compiled = launcher.compile_only()
    assert {"xla_cpu_use_xnnpack": False} in compiled and len(compiled) == fit.probes == 6
    assert first.space == apply_fit(first.plan.space, fit)
    assert not set(first.space.params) & {A2A, *NO_OPS}


def test_probe_runs_are_stored_as_fingerprints_outside_the_trials(fitted):
    first, launcher = fitted
    runs = first.store.runs("s")
    probes = [r for r in runs if r.role is Role.FINGERPRINT]
    assert len(probes) == 6 and all(r.trial_number is None for r in probes)
    assert len([r for r in runs if r.role is not Role.FINGERPRINT]) == 6  # what --trials counts
    sampled = [r.flags for r in runs if r.role is Role.SEARCH]
    assert sampled and not [f for f in sampled if set(f) & {A2A, *NO_OPS}]
    (claim,) = [c for c in first.store.claims("s") if c.key == FIT_KEY]
    assert claim.role is Role.FINGERPRINT and claim.state is ClaimState.DONE


def test_a_resumed_study_reads_the_stored_fit_and_compiles_nothing(fitted, tmp_path):
    first, _ = fitted
    again = Profiled(seed=1)
    second = runner(tmp_path, again, trials=10)
    second.run()
    assert again.compile_only() == []
    assert second.space == first.space
    runs = second.store.runs("s")
    assert len([r for r in runs if r.role is Role.FINGERPRINT]) == 6
    assert not [r for r in runs if r.role is Role.SEARCH and set(r.flags) & {A2A, *NO_OPS}]


def test_best_and_the_dashboard_say_what_was_dropped_and_why(fitted, tmp_path):
    first, _ = fitted
    shown = invoke("best", "s", cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    assert ("search space fitted to the baseline's program: 3 params dropped, 0 clipped; "
            "6 compile-only runs") in text
    assert (f"dropped {A2A}: the program has no all-to-all: nothing for it to act on") in text
    assert ("dropped xla_cpu_use_xnnpack: no effect on the compiled program: its value "
            "compiled to the baseline's program") in text

    rows = json.loads(invoke("best", "s", "--format", "json", cwd=tmp_path).output)
    baseline = next(r for r in rows if r["rank"] is None)
    assert all(r["space_fit"] is None for r in rows if r["rank"] is not None)
    fit = baseline["space_fit"]
    assert [c["flag"] for c in fit["changes"]] == [A2A, *NO_OPS]
    assert fit["changes"][0]["action"] == "dropped" and fit["probes"] == 6
    assert fit["collectives"]["all-reduce"]["bytes"] == 2660420

    record = first.store.get_study("s")
    page = study_page(record, first.store.runs("s"), load_catalog())
    assert page["space_fit"] == fit and page["best"] == rows
    assert [n["kind"] for n in page["notes"]].count("space_fitted") == 4


def test_the_dashboard_page_shows_the_fit(fitted, tmp_path):
    from starlette.testclient import TestClient

    from autotune.dashboard.app import create_app

    first, _ = fitted
    with TestClient(create_app(Store.open(first.store.url, upgrade=False), refresh_s=0)) as c:
        html = c.get("/study/s").text
    assert 'id="space-fit"' in html and "3 params dropped, 0 clipped" in html
    assert f"<code>{A2A}</code>" in html and "nothing for it to act on" in html


def test_no_fit_searches_the_space_as_documented_and_is_part_of_the_plan(tmp_path):
    launcher = Profiled()
    plain = runner(tmp_path, launcher, trials=4, fit=False)
    plain.run()
    assert plain.store.get_study("s").space_fit is None and launcher.compile_only() == []
    assert plain.space is plain.plan.space
    rows = json.loads(invoke("best", "s", "--format", "json", cwd=tmp_path).output)
    assert rows and [r["space_fit"] for r in rows] == [None] * len(rows)
    with pytest.raises(StudyMismatchError, match="fit False \\(asked for True\\)"):
        runner(tmp_path, Profiled(), trials=6).prepare()


def test_a_study_that_sampled_before_its_fit_keeps_the_documented_space(tmp_path):
    old = runner(tmp_path, Profiled(), trials=4)
    old.fit_space = lambda study: None  # type: ignore[method-assign] # as before fitting existed
    old.run()
    later = runner(tmp_path, Profiled(), trials=6)
    later.run()
    fit = SpaceFit.from_json(later.store.get_study("s").space_fit or {})
    assert fit.skipped is not None and fit.changes == ()
    assert later.space is later.plan.space
    text = " ".join(invoke("best", "s", cwd=tmp_path).output.split())
    assert "search space not fitted to the workload: the study sampled configurations" in text


def baseline_only(tmp_path: Path) -> StudyRunner:
    """A study whose baseline is measured and whose space is not fitted yet."""
    first = runner(tmp_path, Profiled(), trials=1)
    first.run()
    assert first.store.get_study("s").space_fit is None
    return first


def test_a_worker_waits_for_the_fit_another_process_is_computing(tmp_path):
    """Only the claim's holder fits; a worker that finds the claim running waits, then
    samples what the holder stored."""
    baseline_only(tmp_path)
    holder = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    here = environment_key()  # one environment: one claim of the fit between them
    _, claim = holder.claim("s", here, FIT_KEY, Role.FINGERPRINT, {}, None, ("elsewhere", 1))
    assert claim is not None
    # the holder beats as a live worker does, so a slow machine cannot make it look dead
    released = threading.Event()

    def beat_until_released() -> None:
        while not released.wait(1):
            holder.beat(claim.id)

    beating = threading.Thread(target=beat_until_released)
    beating.start()
    launcher = Profiled()
    worker = runner(tmp_path, launcher, trials=4)
    got: list[SpaceFit | None] = []
    waiting = threading.Thread(target=lambda: got.append(worker.fit_space(worker.prepare())))
    waiting.start()
    time.sleep(2.5)
    assert got == [] and waiting.is_alive()  # the holder's heartbeat is fresh: it waits
    stored = SpaceFit(skipped="fitted by the other process")
    assert holder.save_fit("s", stored.to_json())
    holder.release(claim.id, ClaimState.DONE)
    released.set()
    beating.join(timeout=30)
    waiting.join(timeout=30)
    assert got == [stored] and launcher.compile_only() == []
    assert worker.space is worker.plan.space


def test_a_fit_claim_whose_owner_stopped_beating_is_taken_over(tmp_path):
    baseline_only(tmp_path)
    holder = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}")
    holder.claim("s", environment_key(), FIT_KEY, Role.FINGERPRINT, {}, None, ("gone", 1))
    engine = create_engine(f"sqlite:///{tmp_path / 'autotune.db'}")
    with engine.begin() as connection:  # its last beat, a minute ago
        connection.execute(text("UPDATE autotune_claims SET heartbeat_at = :then WHERE key = "
                                f"'{FIT_KEY}'"), {"then": datetime.now(UTC).replace(
                                    tzinfo=None) - timedelta(minutes=1)})
    engine.dispose()
    launcher = Profiled()
    worker = runner(tmp_path, launcher, trials=3)
    worker.run()
    fit = SpaceFit.from_json(worker.store.get_study("s").space_fit or {})
    assert [c.flag for c in fit.changes] == [A2A, *NO_OPS] and launcher.compile_only()
    assert [c.state for c in worker.store.claims("s") if c.key == FIT_KEY] == [ClaimState.DONE]


def test_study_offers_no_fit():
    shown = invoke("study", "--help", cwd=ROOT)
    assert shown.exit_code == 0 and "--no-fit" in shown.output


@pytest.mark.slow
def test_a_real_study_fits_its_space_with_real_compiles(tmp_path):
    """`autotune study` on matmul: the probe's compile-only children fingerprint the
    flags' values; a param is dropped only where every one matched the baseline's."""
    done = invoke("study", "--space", "cpu", "--benchmark", "matmul", "--preset", "tiny",
                  "--devices", "1", "--steps", "5", "--warmup", "1", "--seed", "3",
                  "--confirm", "0", "--trials", "3", cwd=tmp_path)
    assert done.exit_code == 0, done.output
    store = Store.open(f"sqlite:///{tmp_path / 'autotune.db'}", upgrade=False)
    fit = SpaceFit.from_json(store.get_study("cpu-matmul-tiny-1dev").space_fit or {})
    runs = store.runs("cpu-matmul-tiny-1dev")
    base = next(r for r in runs if r.role is Role.BASELINE).outcome.measurement
    assert base is not None and base.fingerprint and base.collectives == {}  # one device
    probes = [r for r in runs if r.role is Role.FINGERPRINT]
    assert len(probes) == fit.probes > 0 and all(r.trial_number is None for r in probes)
    assert len([r for r in runs if r.role is not Role.FINGERPRINT]) == 3
    for change in fit.changes:
        if change.evidence == "probe":
            compiled = [r for r in probes if r.flags.get(change.flag) is not None]
            assert compiled and all(r.outcome.measurement is not None and
                                    r.outcome.measurement.fingerprint == base.fingerprint
                                    for r in compiled)
    sampled = {flag for r in runs if r.role is Role.SEARCH for flag in r.flags}
    assert not sampled & {c.flag for c in fit.changes}
    text = " ".join(done.output.split())
    assert "search space fitted to the baseline's program:" in text
    # the probe goes in rounds, one child each (`Launcher.launch_all`): the runs of a round
    # share their child's time, so there are fewer durations than compiles
    rounds = {r.outcome.duration_s for r in probes}
    assert len(probes) >= 3 and len(rounds) < len(probes), (len(rounds), len(probes))


def test_a_study_whose_fit_leaves_nothing_to_search_stops_at_once_saying_why(tmp_path):
    text = (
        "schema_version: 1\nname: no-ops\ndescription: flags that never change mlp-dp\n"
        "backend: any\nparams:\n"
        + "".join(f"  {flag}:\n    type: bool\n" for flag in NO_OPS))
    space = load_space_text(text)
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    plan = StudyPlan.of(name="s", space=space,
                     workload=resolve_benchmark("mlp-dp"), trials=20, sampler="random", seed=0)
    launcher = Profiled()
    summary = StudyRunner(plan, Store.open(url), launcher, url).run()
    from autotune.study.runner import EMPTY_FIT_NOTE

    assert summary.stopped == EMPTY_FIT_NOTE
    assert [r.flags for r in launcher.requests if r.timed] == [{}]  # the baseline alone
    assert sorted(k for flags in launcher.compile_only() for k in flags) == sorted(NO_OPS)
