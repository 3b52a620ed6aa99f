"""The phases after the search, run again on a study that finished them.

A `ReplayLauncher` hands out the recorded outcomes (no JAX): steps are
constant, and LUCKY's first timed process measures it faster than every
later one, as a lucky search process does.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

from outcomes import paired_outcome
from test_shrink_rules import FAST, WIDTH

from autotune.api.pool import Pool, _Served
from autotune.ground.records import PLAN_FINISHED, MeasureMode, Role
from autotune.launch.launcher import TrialRequest
from autotune.launch.replay import ReplayLauncher, config_key
from autotune.launch.workloads import resolve_benchmark
from autotune.results.table import study_state
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.options import AfterSearch
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.service import Watcher, finish

LUCKY = {FAST: True}  # its search process: 0.6 of the defaults' step; every later one 1.0
STEADY = {WIDTH: 512}  # 0.8 of the defaults' step in every process
AFTER = AfterSearch(confirm=1, confirm_repeats=2, shrink=False, confirm_max=0)


def recorded() -> ReplayLauncher:
    """LUCKY at 0.6, then 1.0 in every later process; STEADY at 0.8; the defaults at 1.0."""
    def outcome(ratio: float, program: str):
        return paired_outcome(ratio, fingerprint=program, baseline_fingerprint="base")

    return ReplayLauncher({
        config_key({}): [outcome(1.0, "base")],
        config_key(LUCKY): [outcome(0.6, "lucky")] + [outcome(1.0, "lucky")] * 20,
        config_key(STEADY): [outcome(0.8, "steady")]})


class Told(Watcher):
    """Keeps what `finish` told it."""

    def __init__(self) -> None:
        self.said: list[str] = []

    def finished_before(self) -> None:
        self.said.append("finished before")

    def confirming(self, count: int, repeats: int) -> None:
        self.said.append(f"confirming {count}")


def searched(tmp_path: Path) -> tuple[StudyRunner, Store, ReplayLauncher]:
    """A study of 2 trials whose search measured LUCKY (trial 1, lucky) and STEADY (trial 2)."""
    url = f"sqlite:///{tmp_path / 'autotune.db'}"
    store = Store.open(url)
    store.ensure_study("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, "cpu")
    launcher = recorded()
    for number, role, flags in ((0, Role.BASELINE, {}), (1, Role.SEARCH, LUCKY),
                                (2, Role.SEARCH, STEADY)):
        request = TrialRequest(Path("w.py"), "tiny", flags=flags)
        store.record_run("s", number, role, flags, {}, launcher.launch(request))
    launcher.launched.clear()
    plan = StudyPlan.of(name="s", space=load_space("cpu"), preset="tiny",
                        workload=resolve_benchmark("matmul"), trials=2)
    return StudyRunner(plan, store, launcher, url), store, launcher


def test_a_study_that_finished_measures_nothing_more_when_its_command_runs_again(tmp_path):
    runner, store, launcher = searched(tmp_path)
    first = Told()
    finish(runner, AFTER, first)
    # the lucky leader was confirmed and measured no faster: STEADY now leads the unconfirmed
    assert first.said == ["confirming 1"]
    assert launcher.launched == [LUCKY, LUCKY]
    record = store.get_study("s")
    assert record.plan[PLAN_FINISHED]["after"] == {
        "confirm": 1, "confirm_repeats": 2, "shrink": False, "pgle": 0, "confirm_max": 0,
        "confirm_steps": None}
    assert study_state(record, store.runs("s"), running=False) == "done"

    again = Told()
    finish(runner, AFTER, again)
    assert len(launcher.launched) == 2
    assert again.said == ["finished before"]
    assert store.get_study("s").plan[PLAN_FINISHED] == record.plan[PLAN_FINISHED]

    # with `again` (`autotune confirm`, here with a cap that is as off as 0) it confirms
    # the leader as the runs stand now: STEADY, which the finished study never confirmed;
    # the study keeps what it was asked, so its own command still finds it done
    assert finish(runner, replace(AFTER, confirm_max=1), again=True) is True
    assert launcher.launched[2:] == [STEADY, STEADY]
    assert store.get_study("s").plan[PLAN_FINISHED]["after"] == record.plan[PLAN_FINISHED][
        "after"]
    assert finish(runner, AFTER) is False and len(launcher.launched) == 4
    # asked for another `after`, it runs the phases as asked: STEADY's third round
    finish(runner, AfterSearch(confirm=1, confirm_repeats=3, shrink=False, confirm_max=0))
    assert launcher.launched[4:] == [STEADY]


def test_what_the_study_was_asked_is_compared_option_by_option_as_kept(tmp_path):
    runner, store, launcher = searched(tmp_path)
    kept = asdict(AFTER)
    del kept["confirm_steps"]  # as if `AfterSearch` had gained it since the study finished
    store.mark_finished("s", 2, kept)
    assert finish(runner, AFTER) is False and launcher.launched == []
    store.mark_finished("s", 2, {**kept, "gone": 1})  # an option autotune no longer has
    assert finish(runner, AFTER) is True and launcher.launched == [LUCKY, LUCKY]


def test_a_study_finished_before_autotune_kept_what_it_was_asked_counts_as_asked_the_same(
        tmp_path):
    runner, store, launcher = searched(tmp_path)
    store.mark_finished("s", 2)  # as autotune did before `after` was kept
    finish(runner, AFTER)
    assert launcher.launched == []
    finish(runner, AFTER, again=True)
    assert launcher.launched == [LUCKY, LUCKY]


def test_a_study_asked_for_more_trials_than_it_finished_runs_its_phases_again(tmp_path):
    runner, store, launcher = searched(tmp_path)
    store.mark_finished("s", 1, asdict(AFTER))
    finish(runner, AFTER)
    assert launcher.launched == [LUCKY, LUCKY]
    assert store.get_study("s").plan[PLAN_FINISHED]["trials"] == 2


def test_a_pool_joins_afresh_a_study_it_finds_done_as_it_joined_it(tmp_path, monkeypatch):
    # listed open (its recipe asks for more trials since) but done as this worker's plan
    # has it: the worker measures nothing, says it had no work, and joins it afresh next
    runner, store, launcher = searched(tmp_path)
    finish(runner, AFTER)
    monkeypatch.setattr(runner, "prepare", lambda: None)  # the study `searched` made is bare
    pool = Pool(store.url)
    pool._served["s"] = _Served(SimpleNamespace(after=AFTER), runner)  # type: ignore[arg-type]
    assert pool._step("s", pool._served["s"], None, None) is False
    assert "s" not in pool._served and len(launcher.launched) == 2
