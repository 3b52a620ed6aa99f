"""The dashboard's read model (`results.view`), in-process, on studies built by hand.

Every page is a mapping computed from plain records; these tests pin what each
key says, so the dashboard and the report (which only lay them out) say it too.
"""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from test_ranking import FAST, LEVEL, WIDTH, MiB, Runs, confirmed, measurement, tiered_study

from autotune.flags.catalog import load_catalog
from autotune.ground.records import (
    ClaimRecord,
    ClaimState,
    Environment,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    WorkerRecord,
)
from autotune.results.fitted import with_fit
from autotune.results.table import best_row_json, best_rows
from autotune.results.view import (
    best_so_far,
    compare_studies,
    compare_trials,
    environment_text,
    failures,
    program_groups,
    progress,
    scatter,
    slices,
    study_header,
    study_page,
    study_summary,
    timeline,
    trial_page,
)

CATALOG = load_catalog()
WHEN = datetime(2026, 1, 1, tzinfo=UTC)
HOST = Environment("h1", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 8)


def record(name: str = "s", **changes: object) -> StudyRecord:
    base = StudyRecord(name, "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, WHEN)
    return replace(base, **changes)  # type: ignore[arg-type]


def worker(host: str, pid: int, done: int, running: int, interrupted: int, live: bool,
           seen: datetime = WHEN) -> WorkerRecord:
    return WorkerRecord(host, pid, done, running, interrupted, seen, live)


def test_the_best_key_is_exactly_best_format_json():
    runs = tiered_study().runs
    page = study_page(record(), runs, CATALOG)
    expected = with_fit([best_row_json(r) for r in best_rows(runs, CATALOG)], record())
    assert page["best"] == expected
    assert [row["trial"] for row in page["best"]] == [0, 2, 3, 4, 7, 1, 5, 6]


def test_the_recommendation_names_the_winner_with_its_interval_or_the_defaults():
    page = study_page(record(), tiered_study().runs, CATALOG)
    rec = page["recommendation"]
    assert (rec["recommended"], rec["trial"], rec["flags"]) == (True, 2, {FAST: True})
    assert rec["speedup"] == 1.25 and rec["interval"] == [1.25, 1.25]
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, trial=1)
    rec = study_page(record(), s.runs, CATALOG)["recommendation"]
    assert rec["recommended"] is False and rec["flags"] == {} and rec["speedup"] is None
    assert rec["text"].startswith("defaults: nothing measurably faster (no configuration "
                                  "was confirmed")


def test_best_so_far_is_the_pooled_incumbent_never_one_lucky_process():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    s.add(Role.SEARCH, {FAST: True}, 0.7)  # lucky and alone: not an answer yet
    s.add(Role.SEARCH, {LEVEL: 1}, None, kind=OutcomeKind.PRUNED)
    s.add(Role.SEARCH, {LEVEL: 2}, 0.9)
    s.add(Role.RACE, {LEVEL: 2}, 0.9, trial=3)
    s.add(Role.RACE, {LEVEL: 2}, 0.9, trial=3)  # backed by three processes: the answer
    s.add(Role.CONFIRM, {FAST: True}, 0.8, trial=1)
    s.add(Role.CONFIRM, {FAST: True}, 0.8, trial=1)  # [0.7, 0.8, 0.8]: pooled 0.8
    points = best_so_far(s.runs)
    assert [(p["n"], p["trial"], p["role"], p["speedup"]) for p in points] == [
        (1, 0, "baseline", 1.0), (2, 1, "search", 1 / 0.7), (3, 2, "search", None),
        (4, 3, "search", 1 / 0.9), (5, 3, "race", 1 / 0.9), (6, 3, "race", 1 / 0.9),
        (7, 1, "confirm", 1.25), (8, 1, "confirm", 1.25)]
    assert [(p["best"], p["best_trial"], p["best_n"]) for p in points] == [
        (1.0, None, None)] * 5 + [(pytest.approx(1 / 0.9), 3, 3)] * 2 + [(1.25, 1, 3)]


def test_best_so_far_starts_with_the_baseline_and_keeps_to_the_memory_budget():
    s = Runs()
    s.add(Role.SEARCH, {LEVEL: 1}, 0.9, m=measurement(0.9, memory=10 * MiB))
    s.add(Role.BASELINE, {}, 1.0)
    for _ in range(2):
        s.add(Role.RACE, {LEVEL: 1}, 0.9, trial=0, m=measurement(0.9, memory=10 * MiB))
    assert [p["best"] for p in best_so_far(s.runs)] == [None, 1.0, 1.0, pytest.approx(1 / 0.9)]
    assert [p["best"] for p in best_so_far(s.runs, memory_budget=MiB)] == [None, 1.0, 1.0, 1.0]


def test_the_timeline_is_one_bar_per_measured_claim_by_worker_and_phase():
    s = Runs()
    base = s.add(Role.BASELINE, {}, 1.0)
    race = s.add(Role.RACE, {FAST: True}, 0.9, trial=1)

    def claim(i: int, role: Role, run: RunRecord | None, host: str, at: int) -> ClaimRecord:
        return ClaimRecord(i, "s", "env", f"k{i}", role, {}, None if run is None else
                           run.trial_number, ClaimState.DONE if run else ClaimState.RUNNING,
                           host, 7, None if run is None else run.id,
                           WHEN + timedelta(seconds=at))

    bars = timeline(s.runs, [claim(2, Role.RACE, race, "b", 5), claim(1, Role.BASELINE, base,
                                                                       "a", 1),
                             claim(3, Role.SEARCH, None, "a", 9)])  # still running: no bar
    assert [(b["worker"], b["role"], b["trial"], b["outcome"]) for b in bars] == [
        ("a:7", "baseline", 0, "ok"), ("b:7", "race", 1, "ok")]
    assert bars[0]["start"] == (WHEN + timedelta(seconds=1)).isoformat()
    assert bars[0]["end"] == base.created_at.isoformat()


def test_each_flags_slice_plots_its_values_against_the_speedups_most_moving_first():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    s.add(Role.SEARCH, {FAST: True, WIDTH: 512}, 0.8)
    s.add(Role.SEARCH, {FAST: True, WIDTH: 128}, 0.82)
    s.add(Role.SEARCH, {WIDTH: 512}, 1.0)
    s.add(Role.SEARCH, {LEVEL: 1}, None, kind=OutcomeKind.PRUNED)  # timed nothing whole
    s.add(Role.CONFIRM, {FAST: True, WIDTH: 512}, 0.5, trial=1)  # not the search's
    got = slices(s.runs, CATALOG)
    assert [g["flag"] for g in got] == [FAST, WIDTH]  # fast math moved the median most
    assert [(p["value"], p["trial"]) for p in got[0]["points"]] == [
        ("true", 1), ("true", 2), ("default", 3)]
    assert {p["value"] for p in got[1]["points"]} == {"512", "128"}
    assert got[0]["points"][0]["speedup"] == pytest.approx(1.25)


def test_a_slice_plots_one_point_per_program_and_value_not_one_per_process():
    """A study of thousands of processes on a few programs sends a few points a flag (a
    10,000-trial study's page was 9 MB, 7.5 of them slices)."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    for ratio, program in [(0.8, "a"), (0.9, "b"), (0.5, "a"), (0.4, "a")]:
        s.add(Role.SEARCH, {FAST: True}, ratio,
              m=replace(measurement(ratio), fingerprint=program))
    s.add(Role.SEARCH, {WIDTH: 512}, 1.0)
    got = {g["flag"]: g["points"] for g in slices(s.runs, CATALOG)}
    assert [(p["value"], p["trial"]) for p in got[FAST]] == [
        ("true", 1), ("true", 2), ("default", 5)]
    assert got[FAST][0]["speedup"] == pytest.approx(2.0)  # the median of 1.25, 2.0 and 2.5
    assert got[FAST][1]["speedup"] == pytest.approx(1 / 0.9)


def test_failures_group_by_kind_most_frequent_first_with_distinct_messages():
    s = Runs()
    for i in range(7):
        run = s.add(Role.SEARCH, {LEVEL: i}, None, kind=OutcomeKind.TIMEOUT)
        s.runs[-1] = replace(run, outcome=replace(run.outcome, message=f"timed out {i % 6}"))
    run = s.add(Role.SEARCH, {FAST: True}, None, kind=OutcomeKind.COMPILE_ERROR)
    s.runs[-1] = replace(run, outcome=replace(run.outcome, message="<b>bad</b>"))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9)
    got = failures(s.runs)
    assert [(f["kind"], f["count"]) for f in got] == [("timeout", 7), ("compile_error", 1)]
    assert [m["message"] for m in got[0]["messages"]] == [f"timed out {i}" for i in range(5)]
    assert got[1]["messages"] == [{"trial": 7, "role": "search", "message": "<b>bad</b>"}]


def test_program_groups_join_the_trials_of_one_fingerprint():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.9))
    s.add(Role.SEARCH, {LEVEL: 2}, 0.95, m=measurement(0.9))  # same fingerprint "p0.9"
    s.add(Role.SEARCH, {LEVEL: 1}, 1.1)
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=measurement(0.9))
    s.add(Role.SEARCH, {WIDTH: 512}, 0.9, m=measurement(0.9))
    assert program_groups(s.runs, [0, 2, 7, None]) == {
        "0": {"count": 3, "trials": [1, 3, 4]}, "2": {"count": 0, "trials": []}}
    assert program_groups(s.runs, [4], most=2) == {"4": {"count": 3, "trials": [0, 1]}}


def test_progress_counts_per_environment_and_lists_each_worker():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, environment=HOST)
    s.add(Role.SEARCH, {FAST: True}, None, kind=OutcomeKind.OOM, environment=HOST)
    got = progress(s.runs, [worker("h1", 10, 1, 1, 0, True), worker("h2", 20, 0, 1, 1, False)])
    assert got["environments"] == [{"env_key": "h1", "where": "h1: cpu x8, jax 0.10.2",
                                    "runs": 2, "ok": 1, "failed": 1, "baseline": True}]
    assert got["workers"] == [
        {"owner": "h1:10", "done": 1, "running": 1, "interrupted": 0,
         "last_seen": WHEN.isoformat(), "live": True},
        {"owner": "h2:20", "done": 0, "running": 1, "interrupted": 1,
         "last_seen": WHEN.isoformat(), "live": False}]


def test_the_summary_is_running_only_with_a_live_worker_and_names_the_best_confirmed():
    runs = tiered_study().runs
    idle = study_summary(record(), runs, [worker("h1", 1, 3, 0, 0, False)])
    assert (idle["running"], idle["recommended"], idle["trials"]) == (False, True, 8)
    assert idle["best_confirmed"] == {"trial": 2, "speedup": 1.25, "interval": [1.25, 1.25],
                                      "verdict": "faster"}
    assert idle["failed"] == 1 and idle["last_activity"] == WHEN.isoformat()
    later = WHEN + timedelta(hours=2)
    busy = study_summary(record(), runs, [worker("h1", 1, 3, 1, 0, True, later)])
    assert busy["running"] is True and busy["last_activity"] == later.isoformat()


def test_a_trial_page_holds_every_run_its_flags_and_the_xla_flags_line():
    runs = tiered_study().runs
    page = trial_page(record(), runs, 2, CATALOG)
    assert page is not None
    assert page["flags"] == {FAST: True} and page["changed"] == {FAST: True}
    assert page["xla_flags"] == "--xla_cpu_enable_fast_math=true"
    assert [r["role"] for r in page["runs"]] == ["search", *["confirm"] * 4]
    assert list(page["runs"][1]["step_times_s"]) == [0.8] * 6
    assert list(page["runs"][1]["baseline_step_times_s"]) == [1.0] * 6
    assert page["confirmation"] == "×1.250 [1.250, 1.250] faster"
    assert trial_page(record(), runs, 99, CATALOG) is None


def test_a_proposal_that_reused_a_run_opens_the_page_of_the_trial_that_measured_it():
    runs = tiered_study().runs
    measured = next(r for r in runs if r.trial_number == 2)
    page = trial_page(record(), runs, 40, CATALOG, reused_run=measured.id)
    assert page is not None and (page["trial"], page["proposal"]) == (2, 40)
    assert page == {**trial_page(record(), runs, 2, CATALOG), "proposal": 40}
    assert trial_page(record(), runs, 40, CATALOG) is None  # no run of its own, none named
    assert trial_page(record(), runs, 40, CATALOG, reused_run=10**6) is None  # gone
    own = trial_page(record(), runs, 3, CATALOG, reused_run=measured.id)
    assert own is not None and (own["trial"], own["proposal"]) == (3, None)  # its own runs
    unnumbered = replace(measured, id=10**6 + 1, trial_number=None)
    assert trial_page(record(), [*runs, unnumbered], 40, CATALOG,
                      reused_run=unnumbered.id) is None


def test_a_trial_page_gives_a_confirmation_only_to_a_ranked_run_that_succeeded():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True))
    s.add(Role.SEARCH, {FAST: True}, None, kind=OutcomeKind.CRASHED)
    for _ in range(4):
        s.add(Role.CONFIRM, {FAST: True}, 0.8, trial=1, m=measurement(0.8))
    assert trial_page(record(), s.runs, 1, CATALOG)["confirmation"] is None  # it crashed
    assert trial_page(record(), s.runs, 0, CATALOG)["confirmation"] is None  # the baseline


@pytest.mark.parametrize(("a", "b", "diff"), [
    ({"fusion": 5}, None, []),
    (None, {"fusion": 5}, []),
    ({}, {"fusion": 5}, []),
    ({"fusion": 5}, {}, []),
    ({"fusion": 5, "exp": 2}, {"fusion": 5, "dot": 1},
     [{"op": "dot", "a": 0, "b": 1}, {"op": "exp", "a": 2, "b": 0}]),
    ({"fusion": 5}, {"fusion": 5, "dot": 0}, []),  # an op counted 0 is an op absent
    ({"fusion": 5, "dot": 0}, {"fusion": 5}, []),
    ({"fusion": 5, "dot": 1}, {"fusion": 5}, [{"op": "dot", "a": 1, "b": 0}]),
])
def test_a_program_diff_needs_both_programs_counts_and_counts_a_missing_op_as_0(a, b, diff):
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=replace(measurement(0.8), hlo_stats=a))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=replace(measurement(0.9), hlo_stats=b))
    assert compare_trials(s.runs, 0, 1, CATALOG)["program_diff"] == diff


def test_comparing_two_trials_shows_the_flag_diff_and_whether_they_are_one_program():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True, WIDTH: 128}, 0.9, m=measurement(0.9))
    s.add(Role.SEARCH, {FAST: True, LEVEL: 2}, 0.9, m=measurement(0.9))
    s.add(Role.SEARCH, {LEVEL: 2}, 0.7)
    got = compare_trials(s.runs, 0, 1, CATALOG)
    assert got is not None and got["same_program"] is True
    assert got["diff"] == [{"flag": LEVEL, "a": None, "b": 2, "default": 3},
                           {"flag": WIDTH, "a": 128, "b": None, "default": 256}]
    assert got["same"] == {FAST: True}
    other = compare_trials(s.runs, 0, 2, CATALOG)
    assert other is not None and other["same_program"] is False


def test_comparing_two_trials_shows_each_ones_confirmed_figure_and_program_difference():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=replace(measurement(0.8),
                                                    hlo_stats={"fusion": 5, "exp": 2}))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=replace(measurement(0.9),
                                                    hlo_stats={"fusion": 7, "exp": 2, "dot": 1}))
    for _ in range(4):
        s.add(Role.CONFIRM, {FAST: True}, 0.8, trial=0, m=measurement(0.8))
    got = compare_trials(s.runs, 0, 1, CATALOG)
    assert got is not None
    assert got["claimed_a"]["verdict"] == "×1.250 [1.250, 1.250] faster"
    assert got["claimed_a"]["interval"] == [1.25, 1.25]
    assert got["claimed_b"] == {"trial": 1, "speedup": pytest.approx(1 / 0.9),
                                "interval": None, "verdict": "not confirmed"}
    assert got["program_diff"] == [{"op": "dot", "a": 0, "b": 1},
                                   {"op": "fusion", "a": 5, "b": 7}]
    assert compare_trials(s.runs, 0, 42, CATALOG) is None


def test_comparing_two_studies_says_whether_each_winner_holds_on_the_other():
    a = tiered_study().runs  # recommends FAST (confirmed x1.25)
    b = Runs()
    b.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    b.add(Role.SEARCH, {FAST: True}, 0.9, trial=1)
    for cand in (1.0, 1.05, 0.98):  # FAST confirmed as no measurable gain on B
        b.add(Role.CONFIRM, {FAST: True}, None, trial=1, m=measurement(cand))
    b.add(Role.SEARCH, {"xla_cpu_use_xnnpack": False}, 0.95, trial=2)
    got = compare_studies(record("a"), a, record("b"), b.runs, CATALOG)
    assert got["same_space"] is True
    assert got["winner_a_on_b"]["holds"] is False
    assert got["winner_a_on_b"]["text"] == "does not hold"
    assert got["winner_a_on_b"]["there"]["trial"] == 1
    assert got["winner_b_on_a"] is None  # B recommends XLA's defaults
    common = {tuple(sorted(row["flags"])): row for row in got["common"]}
    assert set(common) == {(FAST,), ("xla_cpu_use_xnnpack",)}
    assert common[(FAST,)]["a"]["speedup"] == 1.25
    c = Runs()
    c.add(Role.SEARCH, {LEVEL: 0}, 0.9, trial=1)
    far = compare_studies(record("a"), a, record("c", space="gpu-runtime"), c.runs, CATALOG)
    assert far["same_space"] is False and far["common"] == []
    assert far["winner_a_on_b"]["text"] == "not measured in the other study"


def test_contributions_list_the_ablation_with_no_program_change_flags_apart():
    from autotune.results.ranking import Recommendation
    from autotune.results.shrink import Effect, Removal, Shrink
    from autotune.results.view import contributions
    from autotune.rules.stats import RatioEstimate

    run = tiered_study().runs[2]
    state = Shrink(run.trial_number or 0, {FAST: True, WIDTH: 128, LEVEL: 2}, {FAST: True},
                   [Removal(FAST, True, Effect.SLOWER, False,
                            RatioEstimate(1.2, 1.1, 1.3, 0.95, 4, 80)),
                    Removal(WIDTH, 128, Effect.NO_PROGRAM_CHANGE, True),
                    Removal(LEVEL, 2, Effect.NOT_SLOWER, True,
                            RatioEstimate(1.0, 0.95, 1.05, 0.95, 4, 80))])
    got = contributions(Recommendation(run, None, "why"), state)
    assert [(f["flag"], f["measurable"], f["dropped"]) for f in got["measured"]] == [
        (FAST, True, False), (LEVEL, False, True)]
    assert [f["flag"] for f in got["no_program_change"]] == [WIDTH]
    assert got["trial"] == run.trial_number and got["done"] is True
    nothing = contributions(Recommendation(None, None, "keep XLA's defaults"), None)
    assert (nothing["measured"], nothing["no_program_change"], nothing["note"]) == (
        [], [], "keep XLA's defaults")


# --- every key, exactly: a renamed key or a changed value is a page that says otherwise ----

HEADER = {"name": "s", "space": "cpu", "benchmark": "matmul", "preset": "tiny", "devices": 1,
          "mode": "paired", "objectives": ["time"], "memory_budget_bytes": None,
          "space_backend": None, "created": "2026-01-01T00:00:00+00:00"}


def test_the_header_and_the_summary_hold_exactly_these_keys():
    assert study_header(record()) == HEADER
    runs = tiered_study().runs
    assert study_summary(record(), runs, []) == {
        **HEADER, "environments": [], "trials": 8, "failed": 1, "stopped": 0, "runs": 29,
        "best_confirmed": {"trial": 2, "speedup": 1.25, "interval": [1.25, 1.25],
                           "verdict": "faster"},
        "recommended": True, "last_activity": WHEN.isoformat(), "running": False,
        "state": "searching"}
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, environment=HOST)
    s.add(Role.SEARCH, {FAST: True}, 0.9, environment=replace(HOST, host="h2"))
    got = study_summary(record(memory_budget_bytes=5, objectives=("time", "memory")), s.runs, [])
    assert got["environments"] == ["h1: cpu x8, jax 0.10.2", "h2: cpu x8, jax 0.10.2"]
    assert (got["best_confirmed"], got["recommended"], got["memory_budget_bytes"],
            got["objectives"]) == (None, False, 5, ["time", "memory"])


def test_where_names_the_device_kind_else_the_backend():
    assert environment_text(HOST) == "h1: cpu x8, jax 0.10.2"
    assert environment_text(replace(HOST, device_kind="", backend="gpu")) == \
        "h1: gpu x8, jax 0.10.2"
    assert environment_text(None) == "unknown"


def test_the_recommendation_holds_exactly_these_keys():
    page = study_page(record(), tiered_study().runs, CATALOG)
    assert page["recommendation"] == {
        "recommended": True, "trial": 2, "flags": {FAST: True},
        "xla_flags": f"--{FAST}=true", "speedup": 1.25,
        "interval": [1.25, 1.25], "text": "trial 2: ×1.250 [1.250, 1.250] faster",
        "reason": "confirmed ×1.250 [1.250, 1.250] faster than XLA's defaults in 4 fresh "
                  "processes; the numerics guard passed"}
    assert sorted(page) == ["best", "best_so_far", "contributions", "failures", "notes",
                            "programs", "progress", "recommendation", "scatter", "slices",
                            "space_fit", "study", "summary", "timeline"]
    assert page["timeline"] == []  # no claims given
    assert page["study"] == HEADER and page["summary"]["trials"] == 8
    assert page["notes"][0] == {"kind": "outcomes",
                                "text": "runs by outcome: numerics_mismatch: 1, ok: 28"}
    assert page["programs"]["0"] == {"count": 1, "trials": [7]}  # 7: the baseline's program
    assert page["failures"] == [{"kind": "numerics_mismatch", "count": 1, "messages": [
        {"trial": 6, "role": "confirm", "message": ""}]}]
    assert [p["trial"] for p in page["best_so_far"] if p["role"] != "confirm"] == [
        0, 1, 2, 3, 4, 5, 6, 7]
    # the best pooled estimate at the end (trial 6 broke the numerics guard: no answer),
    # also the recommendation
    assert page["best_so_far"][-1]["best_trial"] == 2
    assert page["progress"] == {"environments": [{
        "env_key": "unknown", "where": "unknown", "runs": 29, "ok": 28, "failed": 1,
        "baseline": True}], "workers": []}
    assert page["contributions"]["trial"] == 2


def test_the_scatter_holds_every_ranked_configuration_and_rings_the_front_of_two_objectives():
    from test_ranking import memory_study

    runs = memory_study().runs
    one = scatter(record(), runs)
    assert one["two_objectives"] is False and not any(p["pareto"] for p in one["points"])
    two = scatter(record(objectives=("time", "memory")), runs)
    assert two["two_objectives"] is True
    assert [(p["trial"], p["median_step_s"], p["peak_memory_bytes"] >> 20, p["pareto"])
            for p in two["points"]] == [(0, 1.0, 100, False), (1, 0.8, 300, True),
                                        (2, 0.9, 80, True), (4, 0.9, 90, False),
                                        (3, 0.95, 200, False), (5, 1.5, 80, False)]
    assert two["points"][1]["speedup"] == 1.25
    budget = scatter(record(objectives=("time", "memory"), memory_budget_bytes=250 << 20), runs)
    assert [p["trial"] for p in budget["points"] if p["pareto"]] == [2]
    assert 1 not in [p["trial"] for p in budget["points"]]


def test_a_run_on_the_trial_page_holds_its_figures_and_logs():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, environment=HOST)
    m = replace(measurement(0.5), peak_memory_bytes=7, memory_source="memory_stats",
                rss_peak_bytes=9, hlo_stats={"all-gather": 3}, first_step_time_s=2.0)
    run = s.add(Role.SEARCH, {FAST: True}, 0.5, m=m, environment=HOST)
    s.runs[-1] = replace(run, env={"XLA_FLAGS": "--x"}, outcome=replace(
        run.outcome, stdout_tail="out", stderr_tail="err", duration_s=3.5, exit_code=0))
    failed = s.add(Role.SEARCH, {LEVEL: 0}, None, kind=OutcomeKind.TIMEOUT)
    s.runs[-1] = replace(failed, outcome=replace(failed.outcome, message="slow", signal=9))
    page = trial_page(record(), s.runs, 1, CATALOG)
    assert page is not None
    assert {k: v for k, v in page.items() if k != "runs"} == {
        "study": HEADER, "trial": 1, "role": "search", "flags": {FAST: True},
        "changed": {FAST: True}, "env": {"XLA_FLAGS": "--x"},
        "xla_flags": "--xla_cpu_enable_fast_math=true", "confirmation": None,
        "same_program_as_baseline": False, "proposal": None}
    (got,) = page["runs"]
    assert {k: got[k] for k in ("run", "role", "outcome", "message", "created", "speedup",
                                "duration_s", "exit_code", "signal", "where", "stdout_tail",
                                "stderr_tail", "median_step_s", "compile_time_s",
                                "first_step_time_s", "peak_memory_bytes", "memory_source",
                                "rss_peak_bytes", "hlo_stats", "fingerprint",
                                "same_program_as")} == {
        "run": 2, "role": "search", "outcome": "ok", "message": "", "created": WHEN.isoformat(),
        "speedup": 2.0, "duration_s": 3.5, "exit_code": 0, "signal": None,
        "where": "h1: cpu x8, jax 0.10.2", "stdout_tail": "out", "stderr_tail": "err",
        "median_step_s": 0.5, "compile_time_s": 1.0, "first_step_time_s": 2.0,
        "peak_memory_bytes": 7, "memory_source": "memory_stats", "rss_peak_bytes": 9,
        "hlo_stats": {"all-gather": 3}, "fingerprint": "p0.5", "same_program_as": None}
    (lost,) = trial_page(record(), s.runs, 2, CATALOG)["runs"]  # type: ignore[index]
    assert (lost["outcome"], lost["message"], lost["signal"], lost["speedup"]) == (
        "timeout", "slow", 9, None)
    assert (lost["step_times_s"], lost["baseline_step_times_s"], lost["hlo_stats"],
            lost["median_step_s"], lost["peak_memory_bytes"]) == ((), (), {}, None, None)


def test_two_trials_compared_hold_exactly_these_keys():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True, WIDTH: 128}, 0.8, m=replace(measurement(0.8),
                                                                fingerprint=None))
    s.add(Role.SEARCH, {FAST: True}, 0.5)
    assert compare_trials(s.runs, 0, 1, CATALOG) == {
        "a": 0, "b": 1, "diff": [{"flag": WIDTH, "a": 128, "b": None, "default": 256}],
        "same": {FAST: True}, "same_program": None, "speedup_a": 1.25, "speedup_b": 2.0,
        "claimed_a": {"trial": 0, "speedup": 1.25, "interval": None,
                      "verdict": "not confirmed"},
        "claimed_b": {"trial": 1, "speedup": 2.0, "interval": None,
                      "verdict": "not confirmed"},
        "program_diff": []}
    assert compare_trials(s.runs, 42, 1, CATALOG) is None


def test_a_winner_that_holds_on_the_other_study_says_so_with_its_figure_there():
    a, b = tiered_study().runs, tiered_study().runs
    got = compare_studies(record("a"), a, record("b", space="cpu"), b, CATALOG)
    there = {"trial": 2, "speedup": 1.25, "interval": [1.25, 1.25],
             "verdict": "×1.250 [1.250, 1.250] faster"}
    assert got["winner_a_on_b"] == {
        "recommended": True, "trial": 2, "flags": {FAST: True},
        "xla_flags": f"--{FAST}=true", "speedup": 1.25,
        "interval": [1.25, 1.25], "text": "holds", "there": there, "holds": True,
        "reason": "confirmed ×1.250 [1.250, 1.250] faster than XLA's defaults in 4 fresh "
                  "processes; the numerics guard passed"}
    assert got["winner_b_on_a"]["holds"] is True
    assert got["a"] == {**HEADER, "name": "a", "environments": []}
    assert got["b"]["name"] == "b" and got["same_space"] is True
    assert got["common"][1] == {"flags": {"xla_cpu_use_xnnpack": False},
                                "a": {"trial": 1, "speedup": 1 / 0.7, "interval": None,
                                      "verdict": "not confirmed"},
                                "b": {"trial": 1, "speedup": 1 / 0.7, "interval": None,
                                      "verdict": "not confirmed"}}
    # by A's claimed figure, confirmed where it was: trial 6 (x1.667, broke the guard) first
    assert [row["a"]["trial"] for row in got["common"]] == [6, 1, 2, 3, 7, 4, 5]
    c = Runs()
    c.add(Role.SEARCH, {FAST: True}, 0.9, trial=1)  # measured there, never confirmed
    unconfirmed = compare_studies(record("a"), a, record("c"), c.runs, CATALOG)
    assert (unconfirmed["winner_a_on_b"]["holds"], unconfirmed["winner_a_on_b"]["text"]) == (
        None, "measured there, not confirmed")


def test_the_recommendation_of_defaults_and_of_a_shrunk_configuration():
    from autotune.results.ranking import Recommendation
    from autotune.results.shrink import Shrink, Step
    from autotune.results.view import recommendation_view
    from autotune.rules.stats import RatioEstimate

    assert recommendation_view(Recommendation(None, None, "why"), None, CATALOG) == {
        "recommended": False, "trial": None, "reason": "why", "flags": {}, "xla_flags": "",
        "speedup": None, "interval": None, "text": "defaults: nothing measurably faster (why)"}
    runs = tiered_study().runs
    run = runs[2]
    rec = Recommendation(run, None, "because")
    done = Shrink(2, {FAST: True, LEVEL: 2}, {LEVEL: 2})
    assert recommendation_view(rec, done, CATALOG) == {
        "recommended": True, "trial": 2, "reason": "because", "flags": {LEVEL: 2},
        "xla_flags": f"--{LEVEL}=2", "speedup": None, "interval": None,
        "text": "trial 2: not confirmed"}
    checked = Shrink(2, {FAST: True, LEVEL: 2}, {LEVEL: 2},
                     check=RatioEstimate(0.8, 0.75, 0.84, 0.95, 4, 40))
    shown = recommendation_view(rec, checked, CATALOG)
    # the headline is the minimal set's own figure, not the confirmed set's
    assert shown["flags"] == {LEVEL: 2} and shown["xla_flags"] == f"--{LEVEL}=2"
    assert shown["speedup"] == pytest.approx(1.25)
    assert shown["interval"] == pytest.approx([1 / 0.84, 1 / 0.75])
    assert shown["text"] == "trial 2, shrunk to 1 of 2 flags: ×1.250 [1.190, 1.333] faster"
    pending = Shrink(2, {FAST: True, LEVEL: 2}, {LEVEL: 2}, next=Step({}, Role.MINIMAL))
    assert recommendation_view(rec, pending, CATALOG)["flags"] == {FAST: True}  # as confirmed


def test_the_best_key_shows_ten_configurations_unless_told_and_respects_the_budget():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=10, same=True))
    for i in range(12):
        s.add(Role.SEARCH, {WIDTH: 100 + i}, 0.5 + i / 100,
              m=measurement(0.5 + i / 100, memory=100 if i == 0 else 10))
    assert len(study_page(record(), s.runs, CATALOG)["best"]) == 11
    assert len(study_page(record(), s.runs, CATALOG, limit=3)["best"]) == 4
    page = study_page(record(memory_budget_bytes=50), s.runs, CATALOG)
    assert [row["trial"] for row in page["best"]][:3] == [0, 2, 3]  # 1 is over the budget
    assert page["notes"][-1]["kind"] == "memory_budget"


def test_the_scatter_has_one_point_per_program_with_its_pooled_speedup():
    """Two configurations compiled to one program timed twice: one point, at the pooled
    speedup with n=2, named by the trial that first timed it (issue 33: the chart said
    one point per configuration and showed the first process's luck)."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.5, m=replace(measurement(0.5), fingerprint="shared"))
    s.add(Role.SEARCH, {LEVEL: 2}, 1.0, m=replace(measurement(1.0), fingerprint="shared"))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=measurement(0.9))
    points = scatter(record(), s.runs)["points"]
    assert [(p["trial"], p["n"]) for p in points] == [(0, 1), (1, 2), (3, 1)]  # best first
    assert points[1]["speedup"] == pytest.approx(1 / math.sqrt(0.5))  # median of the logs
    assert points[2]["speedup"] == pytest.approx(1 / 0.9)


def test_the_warm_start_notes_name_what_was_drawn_and_what_the_sampler_was_given():
    from autotune.ground.records import PLAN_PRIOR, PLAN_WARM
    from autotune.results.notes import warm_notes

    assert warm_notes(record()) == []
    plan = {PLAN_WARM: [{"study": "a", "trial": 4, "likeness": 2.5, "key": "--x=1"}],
            PLAN_PRIOR: [{"study": "a", "programs": 7, "likeness": 2.5, "copies": 2},
                         {"study": "b", "programs": 3, "likeness": 1.2, "copies": 1}]}
    notes = warm_notes(record(plan=plan))
    assert [n.kind for n in notes] == ["warm_start", "warm_start"]
    assert notes[0].text == (
        "warm start: the search began with the confirmed configurations of 'a' trial 4 "
        "(likeness 2.5 of 3), each measured and confirmed here like any other "
        "(--no-warm-start: from nothing)")
    assert notes[1].text == (
        "warm start: the sampler was given the programs earlier studies measured as "
        "evidence: 7 of 'a' (likeness 2.5 of 3, each counted 2x); 3 of 'b' (likeness 1.2 "
        "of 3, each counted 1x); none counts toward --trials or is recommended without "
        "being measured here")
    (only,) = warm_notes(record(plan={PLAN_PRIOR: plan[PLAN_PRIOR]}))
    assert only.text.startswith("warm start: the sampler was given")
    leaders = [{"study": "c", "trial": 9, "likeness": 1.0, "key": "--y=2", "confirmed": False},
               *plan[PLAN_WARM]]  # a leader recorded first is still named after
    (confirmed, leader) = warm_notes(record(plan={PLAN_WARM: leaders}))
    assert confirmed.text == notes[0].text
    assert leader.kind == "warm_start" and leader.text == (
        "warm start: the search then measured the leaders of 'c' trial 9 (likeness 1.0 of 3), "
        "faster there but not confirmed, each measured and confirmed here like any other")


def test_the_runs_page_filters_pages_and_counts_every_run():
    from autotune.results.view import runs_page

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    for k in range(5):
        s.add(Role.SEARCH, {FAST: k % 2 == 0, LEVEL: k}, 0.9 + 0.01 * k)
    s.add(Role.SEARCH, {LEVEL: 7}, None, kind=OutcomeKind.PRUNED)
    s.add(Role.CONFIRM, {FAST: True, LEVEL: 0}, 0.9, trial=1)
    whole = runs_page(s.runs, per_page=3)
    assert (whole["total"], whole["matched"], whole["page"], whole["pages"],
            whole["per_page"]) == (8, 8, 1, 3, 3)
    assert [r["run"] for r in whole["rows"]] == [1, 2, 3]
    assert whole["filters"] == {"role": None, "outcome": None, "flag": None}
    assert whole["roles"] == {"baseline": 1, "confirm": 1, "search": 6}
    assert whole["outcomes"] == {"ok": 7, "pruned": 1}
    last = runs_page(s.runs, per_page=3, page=99)  # clamped to the last page
    assert (last["page"], [r["run"] for r in last["rows"]]) == (3, [7, 8])
    first = runs_page(s.runs, per_page=3, page=0)  # and to the first
    assert first["page"] == 1
    search = runs_page(s.runs, role="search")
    assert search["matched"] == 6 and {r["role"] for r in search["rows"]} == {"search"}
    assert search["filters"]["role"] == "search" and search["total"] == 8
    pruned = runs_page(s.runs, outcome="pruned")
    assert [r["run"] for r in pruned["rows"]] == [7] and pruned["pages"] == 1
    # a flag filter reads name=value as XLA_FLAGS writes it, in any case
    fast = runs_page(s.runs, flag=f"{FAST.upper()}=TRUE")
    assert [r["run"] for r in fast["rows"]] == [2, 4, 6, 8]
    assert runs_page(s.runs, flag=f"{FAST}=True")["matched"] == 4
    assert runs_page(s.runs, flag=f"{LEVEL}=7", role="search")["matched"] == 1
    assert runs_page(s.runs, flag="no_such_flag")["matched"] == 0
    assert runs_page(s.runs, flag="no_such_flag")["pages"] == 1
    assert runs_page([], per_page=3)["pages"] == 1


def test_every_figure_of_the_study_page_keeps_to_the_memory_budget():
    """The fastest configuration, confirmed, is over the budget: the recommendation, the
    summary, the best-so-far line and a comparison all leave it out."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=10, same=True))
    confirmed(s, 1, {WIDTH: 128}, 0.6, [0.6] * 4)
    confirmed(s, 2, {FAST: True}, 0.8, [0.8] * 4)
    s.runs[:] = [replace(r, outcome=replace(r.outcome, measurement=replace(
        r.outcome.measurement, peak_memory_bytes=100 if r.trial_number == 1 else 10)))
        if r.outcome.measurement is not None else r for r in s.runs]
    live = [worker("h1", 1, 9, 1, 0, True)]
    free = study_page(record(), s.runs, CATALOG, live)
    assert free["recommendation"]["trial"] == 1  # without a budget, the fastest
    page = study_page(record(memory_budget_bytes=50), s.runs, CATALOG, live)
    assert page["recommendation"]["trial"] == 2
    assert page["summary"]["recommended"] is True
    assert page["summary"]["best_confirmed"]["trial"] == 2
    assert {p["best_trial"] for p in page["best_so_far"]} <= {None, 2}
    assert 1 in {p["best_trial"] for p in free["best_so_far"]}
    other = compare_studies(record(memory_budget_bytes=50), s.runs, record("t"), s.runs,
                            CATALOG)
    assert other["winner_a_on_b"]["trial"] == 2 and other["winner_b_on_a"]["trial"] == 1
    assert [row["flags"] for row in other["common"]] == [{FAST: True}]  # 1 is over a's budget
    over = [r for r in s.runs if r.trial_number != 2]  # only the configuration over it
    assert study_summary(record(), over, live)["recommended"] is True
    assert study_summary(record(memory_budget_bytes=50), over, live)["recommended"] is False


def test_a_study_nothing_measured_yet_is_searching_while_a_worker_is_live():
    assert study_summary(record(), [], [worker("h1", 1, 0, 1, 0, True)])["state"] == "searching"
    assert study_summary(record(), [], [worker("h1", 1, 0, 0, 0, False)])["state"] == "queued"


# --- what each chart and comparison says at its edges ------------------------------------------


def test_the_recommendation_is_the_shrunk_minimal_set_once_shrinking_is_done():
    """Confirmed with two flags; compiled without the level it is the same program, so the
    page (and a comparison) recommends the fast math flag alone."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(s, 1, {FAST: True, LEVEL: 2}, 0.9, [0.8] * 4)
    for flags, program in [({FAST: True, LEVEL: 2}, "w"), ({FAST: True}, "w"), ({}, "base")]:
        s.add(Role.FINGERPRINT, flags, None, trial=1,
              m=replace(measurement(), fingerprint=program))
    page = study_page(record(), s.runs, CATALOG)
    assert page["recommendation"]["flags"] == {FAST: True}
    assert page["recommendation"]["xla_flags"] == f"--{FAST}=true"
    assert page["contributions"]["done"] is True
    assert [f["flag"] for f in page["contributions"]["no_program_change"]] == [LEVEL]
    both = compare_studies(record("a"), s.runs, record("b"), s.runs, CATALOG)
    assert both["winner_a_on_b"]["flags"] == {FAST: True}


def test_program_groups_read_the_search_programs_only():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=measurement(0.9))
    s.add(Role.SEARCH, {LEVEL: 2}, None, kind=OutcomeKind.CRASHED)  # no program
    s.add(Role.CONFIRM, {WIDTH: 128}, 0.9, trial=5, m=measurement(0.9))  # not a search's
    assert program_groups(s.runs, [0, 1, 5]) == {"0": {"count": 0, "trials": []}}


def test_best_so_far_gives_a_failed_process_no_speedup_even_with_a_ratio_stored():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    s.add(Role.SEARCH, {FAST: True}, 0.5, kind=OutcomeKind.NUMERICS_MISMATCH,
          m=measurement(0.5))
    assert [p["speedup"] for p in best_so_far(s.runs)] == [1.0, None]


def test_a_slice_counts_each_run_of_an_unknown_program_as_a_program_of_its_own():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0)
    for ratio in (0.8, 0.5):
        s.add(Role.SEARCH, {FAST: True}, ratio, m=replace(measurement(ratio), fingerprint=None))
    s.add(Role.SEARCH, {}, 1.0)
    (got,) = slices(s.runs, CATALOG)
    assert [(p["value"], p["trial"], p["speedup"]) for p in got["points"]] == [
        ("true", 1, 1.25), ("true", 2, 2.0), ("default", 3, 1.0)]


def test_a_flag_every_timed_run_gave_one_value_has_no_slice():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True, WIDTH: 128}, 0.8)
    s.add(Role.SEARCH, {FAST: True, WIDTH: 512}, 0.9)
    assert [g["flag"] for g in slices(s.runs, CATALOG)] == [WIDTH]


def test_a_slice_plots_an_infinitely_slower_run_at_speedup_0():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, math.inf)
    s.add(Role.SEARCH, {}, 1.0)
    (got,) = slices(s.runs, CATALOG)
    assert [(p["value"], p["speedup"]) for p in got["points"]] == [("true", 0.0),
                                                                   ("default", 1.0)]


def test_the_timeline_skips_a_running_claim_and_draws_the_claims_after_it():
    s = Runs()
    base = s.add(Role.BASELINE, {}, 1.0)
    running = ClaimRecord(1, "s", "env", "k1", Role.SEARCH, {}, 1, ClaimState.RUNNING, "a", 7,
                          None, WHEN)
    done = ClaimRecord(2, "s", "env", "k2", Role.BASELINE, {}, 0, ClaimState.DONE, "b", 8,
                       base.id, WHEN + timedelta(seconds=1))
    assert [b["worker"] for b in timeline(s.runs, [running, done])] == ["b:8"]


def test_the_scatter_draws_the_first_baseline_that_succeeded_once():
    s = Runs()
    s.add(Role.BASELINE, {}, None, trial=0, kind=OutcomeKind.CRASHED)
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, same=True))
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=replace(measurement(1.1), fingerprint="base"))
    s.add(Role.SEARCH, {FAST: True}, 0.8, trial=1)
    assert [(p["trial"], p["median_step_s"], p["n"]) for p in scatter(record(), s.runs)[
        "points"]] == [(0, 1.0, 1), (1, 0.8, 1)]


def test_a_scatter_point_of_a_run_that_kept_no_measurement_has_no_step_time():
    s = Runs()
    base = s.add(Role.BASELINE, {}, 1.0)
    s.runs[0] = replace(base, outcome=replace(base.outcome, measurement=None))
    assert scatter(record(), s.runs)["points"] == [
        {"trial": 0, "median_step_s": None, "peak_memory_bytes": None, "speedup": 1.0, "n": 1,
         "pareto": False}]


def test_the_pareto_front_under_a_budget_is_of_the_runs_within_it():
    """One program timed twice, once over the budget: within it, its point is the run that
    kept to the budget, which beats XLA's defaults on both axes."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, memory=100 * MiB, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8,
          m=replace(measurement(0.8, memory=300 * MiB), fingerprint="shared"))
    s.add(Role.SEARCH, {LEVEL: 2}, 0.85,
          m=replace(measurement(0.85, memory=100 * MiB), fingerprint="shared"))
    got = scatter(record(objectives=("time", "memory"), memory_budget_bytes=250 * MiB), s.runs)
    assert [(p["trial"], p["pareto"]) for p in got["points"]] == [(0, False), (2, True)]


def test_failures_of_equally_many_runs_list_their_kinds_alphabetically():
    s = Runs()
    for kind in (OutcomeKind.TIMEOUT, OutcomeKind.OOM, OutcomeKind.COMPILE_ERROR):
        s.add(Role.SEARCH, {}, None, kind=kind)
    assert [f["kind"] for f in failures(s.runs)] == ["compile_error", "oom", "timeout"]


def test_an_environment_without_a_baseline_that_succeeded_says_so():
    s = Runs()
    s.add(Role.BASELINE, {}, None, kind=OutcomeKind.CRASHED, environment=HOST)
    s.add(Role.SEARCH, {FAST: True}, 0.9, environment=HOST)
    (env,) = progress(s.runs, [])["environments"]
    assert (env["runs"], env["ok"], env["failed"], env["baseline"]) == (2, 1, 1, False)


def test_comparing_a_trial_that_measured_nothing_has_no_program_to_compare():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, None, kind=OutcomeKind.CRASHED)
    s.add(Role.SEARCH, {WIDTH: 128}, 0.9, m=replace(measurement(0.9), hlo_stats={"dot": 1}))
    got = compare_trials(s.runs, 0, 1, CATALOG)
    assert got is not None
    assert (got["same_program"], got["program_diff"], got["speedup_a"]) == (None, [], None)


def test_a_compared_flag_the_catalog_does_not_know_has_no_stated_default():
    s = Runs()
    s.add(Role.SEARCH, {"MY_RUNTIME_KNOB": "1"}, 0.9)
    s.add(Role.SEARCH, {}, 1.0)
    got = compare_trials(s.runs, 0, 1, CATALOG)
    assert got is not None
    assert got["diff"] == [{"flag": "MY_RUNTIME_KNOB", "a": "1", "b": None, "default": None}]


def test_a_winner_not_measured_in_the_other_study_holds_exactly_these_keys():
    a = tiered_study().runs
    c = Runs()
    c.add(Role.SEARCH, {LEVEL: 0}, 0.9, trial=1)
    got = compare_studies(record("a"), a, record("c"), c.runs, CATALOG)["winner_a_on_b"]
    assert {k: got[k] for k in ("trial", "flags", "there", "holds", "text")} == {
        "trial": 2, "flags": {FAST: True}, "there": None, "holds": None,
        "text": "not measured in the other study"}
    assert sorted(got) == ["flags", "holds", "interval", "reason", "recommended", "speedup",
                           "text", "there", "trial", "xla_flags"]


def test_a_winner_whose_interval_there_starts_at_exactly_1_does_not_hold():
    a = tiered_study().runs
    b = Runs()
    b.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(same=True))
    confirmed(b, 1, {FAST: True}, 0.9, [1.0] * 4)
    got = compare_studies(record("a"), a, record("b"), b.runs, CATALOG)["winner_a_on_b"]
    assert got["there"]["interval"] == [1.0, 1.0]
    assert (got["holds"], got["text"]) == (False, "does not hold")


def test_common_configurations_sort_by_the_first_studys_figure_none_last():
    """A run stored without a ratio of its own (its paired steps say 0.5) has no figure to
    show: it goes after the slower configuration, though its program ranks first."""
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(same=True))
    s.add(Role.SEARCH, {FAST: True}, None, m=measurement(0.5))
    s.add(Role.SEARCH, {WIDTH: 128}, 2.0)
    got = compare_studies(record("a"), s.runs, record("b"), s.runs, CATALOG)
    assert [(row["a"]["trial"], row["a"]["speedup"]) for row in got["common"]] == [
        (2, 0.5), (1, None)]


def test_a_comparison_keeps_to_the_second_studys_budget_too():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, trial=0, m=measurement(1.0, memory=10, same=True))
    s.add(Role.SEARCH, {WIDTH: 128}, 0.6, m=measurement(0.6, memory=100))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=measurement(0.8, memory=10))
    got = compare_studies(record("a"), s.runs, record("b", memory_budget_bytes=50), s.runs,
                          CATALOG)
    assert [row["flags"] for row in got["common"]] == [{FAST: True}]
