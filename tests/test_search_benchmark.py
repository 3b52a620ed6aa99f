"""The search benchmark's figures of what a user gets (`benchmarks/scripts/outcome.py`)
and its studies planned with a user's budget (`benchmarks/scripts/replay_study.py`),
on hand-made tables and on a committed one."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from bench_scripts import script

from autotune.flags.catalog import load_catalog
from autotune.flags.compose import config_key
from autotune.launch.replay import ReplayTable
from autotune.spaces import load_space
from autotune.study.samplers import Objective, choose_sampler

ROOT = Path(__file__).resolve().parents[1]
NORM_ACT = ROOT / "benchmarks/tables/norm-act-small.json"
LEVEL = "xla_backend_optimization_level"


def test_captured_gain_is_the_share_of_the_tables_gain_by_true_ratios():
    outcome = script("outcome")
    assert outcome.captured_gain(1.0, 0.9, 0.9) == pytest.approx(1.0)
    assert outcome.captured_gain(1.0, 0.9, 0.95) == pytest.approx(0.5)
    assert outcome.captured_gain(1.0, 0.9, 1.0) == pytest.approx(0.0)
    assert outcome.captured_gain(1.0, 0.9, 1.05) == pytest.approx(-0.5)  # slower
    assert outcome.captured_gain(1.0, 0.9, None) == pytest.approx(0.0)  # nothing measured
    assert outcome.captured_gain(1.0, 0.995, 0.995) is None  # under 1%: nothing to capture


def test_the_summary_counts_slower_and_right_answers_over_seeds():
    outcome = script("outcome")
    found = [0.90, 0.91, 0.95, 1.00, 1.02, None, 0.90, 0.90, 0.90, 0.90]
    kept = [False] * 5 + [True] + [False] * 4
    figures = outcome.summary(found, [1.0] * 9 + [11.0], defaults=1.0, optimum=0.9, kept=kept)
    gains = sorted([1, 0.9, 0.5, 0, -0.2, 0, 1, 1, 1, 1])
    assert figures["captured_gain"]["median"] == pytest.approx(0.95)
    assert figures["captured_gain"]["p10"] == pytest.approx(
        gains[0] + 0.9 * (gains[1] - gains[0]), abs=1e-3)
    assert figures["slower"] == pytest.approx(0.1)  # 1.02 only: the defaults are not slower
    assert figures["right"] == pytest.approx(0.6)  # within 2% of 0.9: 0.918 and below
    assert figures["device_seconds"] == pytest.approx(1.0)
    assert figures["kept"] == pytest.approx(0.1)  # the one that recommended the defaults
    assert figures["sound"] == figures["right"]  # a 10% gain is worth having: right counts
    flat = outcome.summary([1.0, 0.999], [1.0, 2.0], defaults=1.0, optimum=0.999,
                           kept=[True, False])
    assert flat["captured_gain"] is None and flat["right"] == 1.0 and flat["slower"] == 0
    assert flat["kept"] == 0.5 and flat["sound"] == 0.5


def test_an_answer_is_sound_where_it_keeps_the_defaults_of_a_gain_not_worth_having():
    """Below `WORTH` (3%) the bar is the defaults kept, though a recommendation within 2% of
    the optimum is right; from 3% on it is the right recommendation."""
    outcome = script("outcome")
    small = outcome.summary([0.975, 0.98, 1.0, 0.99], [1.0] * 4, defaults=1.0, optimum=0.975,
                            kept=[False, False, True, False])
    assert small["right"] == 0.75 and small["sound"] == 0.25
    worth = outcome.summary([0.97, 1.0], [1.0] * 2, defaults=1.0, optimum=0.97,
                            kept=[False, True])
    assert worth["right"] == 0.5 and worth["sound"] == 0.5 and worth["kept"] == 0.5


def test_a_method_is_behind_another_only_where_its_seeds_lose_beyond_a_fair_coin():
    """Seed by seed: 5 seeds sound under the other alone and none under this one is behind
    (a fair coin gives that 1 in 32); 4 to 0, or 6 to 2, is within the noise; the seeds
    sound under both or neither do not count."""
    outcome = script("outcome")
    five = outcome.paired([False] * 5 + [True] * 10, [True] * 5 + [True] * 10)
    assert five == {"only_mine": 0, "only_theirs": 5, "p_behind": 0.0312, "behind": True}
    four = outcome.paired([False] * 4 + [False] * 3, [True] * 4 + [False] * 3)
    assert four["only_theirs"] == 4 and four["p_behind"] == 0.0625 and not four["behind"]
    six_two = outcome.paired([True, True] + [False] * 6, [False, False] + [True] * 6)
    assert six_two["p_behind"] == round(37 / 256, 4) and not six_two["behind"]
    ahead = outcome.paired([True] * 5, [False] * 5)  # ahead, never behind
    assert ahead["only_mine"] == 5 and ahead["p_behind"] == 1.0 and not ahead["behind"]
    assert outcome.paired([], [])["p_behind"] == 1.0
    with pytest.raises(ValueError, match="same seeds"):
        outcome.paired([True], [True, False])


def test_a_seeds_soundness_is_what_the_summary_counts():
    outcome = script("outcome")
    found, kept = [0.975, 0.98, 1.0, None], [False, False, True, True]
    assert outcome.sound_seeds(found, 1.0, 0.975, kept) == kept  # 2.5%: the defaults
    assert outcome.sound_seeds(found, 1.0, 0.96, kept) == [True, False, False, False]
    assert outcome.sound_seeds(found, 1.0, 0.96, kept, worth=False) == kept
    figures = outcome.summary(found, [1.0] * 4, 1.0, 0.96, kept)
    assert figures["sound"] == 0.25


def _table(tmp_path: Path, best: list[float], noise: float = 0.0) -> ReplayTable:
    """Defaults at 1.0 (three repeats), and a faster configuration (program `fast`) whose
    repeats have the given ratios, each step `noise` apart around its median."""
    def runs(ratios: list[float]) -> list[dict]:
        return [{"status": "ok", "message": "", "compile_time_s": 0.5,
                 "step_times_s": [0.01 * r * (1 + noise * (i % 3 - 1)) for i in range(9)],
                 "baseline_step_times_s": [0.01] * 9} for r in ratios]

    doc = {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
           "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
           "configurations": 2, "distinct": 2, "repeats": 3,
           "entries": [{"flags": {}, "runs": runs([1.0, 1.0, 1.0]), "program": "default"},
                       {"flags": {LEVEL: 2}, "runs": runs(best), "program": "fast"}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return ReplayTable.load(path)


def test_the_oracle_confirms_the_best_program_where_its_processes_can(tmp_path):
    outcome = script("outcome")
    clear = _table(tmp_path, [0.90, 0.91, 0.89])
    assert outcome.best_program_key(clear) == config_key({LEVEL: 2})
    assert outcome.truths(clear) == (1.0, pytest.approx(0.90))
    found, seconds, kept = outcome.oracle_answer(clear, 6, seed=1)
    assert found == pytest.approx(0.90) and not kept
    assert seconds == pytest.approx(6 * (0.5 + 9 * 0.01 * 0.9 + 9 * 0.01), rel=0.02)
    limit = outcome.oracle(clear, [6, 6], [1, 2])
    assert limit["right"] == 1 and limit["captured_gain"]["median"] == pytest.approx(1.0)
    assert limit["kept"] == 0
    # one lucky process among slow ones: the pooled interval includes 1.0, defaults kept
    lucky = _table(tmp_path, [0.80, 1.10, 1.12], noise=0.05)
    assert outcome.oracle_answer(lucky, 3, seed=1)[::2] == (pytest.approx(1.0), True)


def test_a_gain_is_worth_having_where_long_runs_of_its_own_cpu_bear_it_out(tmp_path):
    """`worth_having`: the table's truth must promise `WORTH` (3%), and where the best
    program has runs of confirmation length from the table's own kind of CPU, those must
    show it too; runs from another CPU do not count, and `summary` judges `sound` by it."""
    outcome = script("outcome")

    def with_long(best: list[float], long_ratio: float | None, long_isa: str) -> ReplayTable:
        path = _table(tmp_path, best).path
        doc = json.loads(path.read_text())
        doc["made_on"] = {"vector_isa": "avx2"}
        if long_ratio is not None:
            doc["long"] = [{"steps": 90, "vector_isa": long_isa}]
            doc["entries"][1]["long_runs"] = [
                {"status": "ok", "step_times_s": [0.01 * long_ratio] * 90,
                 "baseline_step_times_s": [0.01] * 90}] * 3
        path.write_text(json.dumps(doc))
        return ReplayTable.load(path)

    assert outcome.worth_having(with_long([0.95] * 3, None, "avx2"))  # no long runs
    assert outcome.worth_having(with_long([0.95] * 3, 0.96, "avx2"))  # borne out
    assert not outcome.worth_having(with_long([0.95] * 3, 1.01, "avx2"))  # not borne out
    assert outcome.worth_having(with_long([0.95] * 3, 1.01, "avx512"))  # another CPU's runs
    assert not outcome.worth_having(with_long([0.98] * 3, 0.90, "avx2"))  # 2% is not 3%
    kept = outcome.summary([0.95, 1.0], [1.0] * 2, 1.0, 0.95, [False, True], worth=False)
    assert kept["right"] == 0.5 and kept["sound"] == 0.5 and \
        outcome.summary([0.95, 0.95], [1.0] * 2, 1.0, 0.95, [False] * 2, worth=False)[
            "sound"] == 0


def test_a_methods_figures_are_fractions_of_the_oracles():
    outcome = script("outcome")
    mine = {"captured_gain": {"median": 0.6, "p10": 0.1}, "right": 0.5}
    limit = {"captured_gain": {"median": 0.8, "p10": 0.5}, "right": 1.0}
    assert outcome.of_oracle(mine, limit) == {"captured_gain": 0.75, "right": 0.5}
    none = {"captured_gain": None, "right": 0.0}
    assert outcome.of_oracle(mine, none) == {"captured_gain": None, "right": None}


def test_the_oracles_confirmation_share_follows_the_cap_a_setting_gives():
    study = script("replay_study")
    assert study.confirm_budget() == max(study.CONFIRM_TOP * study.CONFIRM_REPEATS,
                                         study.CONFIRM_MAX) == 48
    assert study.confirm_budget([("replay_study", "CONFIRM_MAX", 32)]) == 32
    assert study.confirm_budget([("replay_study", "CONFIRM_MAX", 0)]) == 6  # the rounds
    assert study.confirm_budget([("autotune.results.confirmation", "CONFIRM_MAX", 64)]) == 48


def test_a_study_is_planned_with_the_users_budget_and_answers_after_confirmation():
    """`--trials B`: `auto` resolves as for a user with that budget, the search times at
    most B processes, and the answer is the confirmed recommendation with its truth."""
    study = script("replay_study")
    table = ReplayTable.load(NORM_ACT)
    space = load_space(str(ROOT / table.meta["space"]))
    answer = study.run_study(table, space, "random", 1000, 10, load_catalog(), confirm=True)
    assert 0 < answer.timed <= 10
    assert answer.recommended is not None
    assert answer.true_ratio == pytest.approx(table.true_ratio(answer.recommended))
    searched_only = study.run_study(table, space, "random", 1000, 10, load_catalog())
    assert searched_only.recommended is None and searched_only.trace == answer.trace
    assert answer.device_seconds > searched_only.trace.device_seconds[-1]  # confirmation
    # the search's own spend, its trailing compiles included, and nothing of confirmation's
    assert searched_only.trace.device_seconds[-1] <= answer.search_seconds \
        == searched_only.search_seconds < answer.device_seconds
    efficiency = script("search_efficiency")
    assert efficiency.checkpoints(80) == [10, 20, 40, 80]
    assert efficiency.checkpoints(25) == [10, 20, 25]
    assert choose_sampler("auto", (Objective.TIME,), space, 10).name == "tpe"
    assert choose_sampler("auto", (Objective.TIME,), space, 20 * 40).name == "grid"


def test_a_study_that_outdraws_the_table_is_told_and_bounded_by_its_fresh_processes():
    """The GPU's gated MLP, report seed 1000: confirming its optimum took more processes of
    that program than the table holds, so the answer rests on recorded processes drawn
    twice (`Answer.reused`); with `fresh` the study stops where the table runs out, no
    process drawn twice, for fewer device-seconds; the search before it is the same
    either way."""
    study = script("replay_study")
    table = ReplayTable.load(ROOT / "benchmarks/tables/gated-mlp-small-gpu.json.gz")
    space = load_space(str(ROOT / table.meta["space"]))
    reused = study.run_study(table, space, "auto", 1000, 40, load_catalog(), confirm=True)
    optimum = min(table.ratios().values())
    assert reused.true_ratio == pytest.approx(optimum)
    assert reused.reused and reused.served["reused"] > 0 and not reused.exhausted
    fresh = study.run_study(table, space, "auto", 1000, 40, load_catalog(), confirm=True,
                            fresh=True)
    assert fresh.exhausted and not fresh.reused and not fresh.served.get("reused")
    assert fresh.trace == reused.trace
    assert fresh.device_seconds < reused.device_seconds
    figures = script("search_efficiency").figures_at([reused, fresh], 40, optimum,
                                                     table.true_ratio(""))
    assert figures["reused"] == 0.5 and figures["exhausted"] == 0.5
    assert figures["served"]["reused"] == reused.served["reused"]
    outcome = script("outcome")
    held = len(outcome._best_repeats(table))
    assert outcome.oracle(table, [held, held + 1], [1, 2])["reused"] == 0.5
    capped = outcome.oracle_answer(table, held + 30, 1, fresh=True)
    assert capped[1] == pytest.approx(outcome.oracle_answer(table, held, 1)[1])


def test_a_longer_confirmation_is_served_from_the_tables_runs_of_that_length():
    """`CONFIRM_STEPS` (`--confirm-steps`) reaches every confirmation process; the replay
    serves each from a recorded run of that length where the program has them (a committed
    table's leading programs do, `record_table.py --long-for`) and says how many it joined."""
    study = script("replay_study")
    table = ReplayTable.load(ROOT / "benchmarks/tables/norm-act-small-avx512.json.gz")
    assert table.long_comparable and all(len(run["step_times_s"]) >= 160
                                         for runs in table.long_runs.values() for run in runs)
    space = load_space(str(ROOT / table.meta["space"]))
    with study.patched([("replay_study", "CONFIRM_STEPS", 160)]):
        answers = [study.run_study(table, space, "auto", seed, 40, load_catalog(),
                                   confirm=True) for seed in (1002, 1003)]
    # where a leader confirmed is one of the programs recorded at that length
    assert sum(a.served.get("long", 0) for a in answers) >= 1
    answer = answers[0]
    short = study.run_study(table, space, "auto", 1002, 40, load_catalog(), confirm=True)
    # the search's own steps: nothing longer was asked for
    assert not short.served.get("long") and not short.served.get("joined")
    # a confirmation process of 160 steps costs more than one of the table's 20
    assert answer.device_seconds - answer.trace.device_seconds[-1] > \
        short.device_seconds - short.trace.device_seconds[-1]


def _identification_table(tmp_path: Path, fast: list[float], rival: list[float]) -> Path:
    """A table of three programs: XLA's defaults (1.0), a fast one whose two configurations
    recorded `fast` between them (the last process the second's) and a rival (`rival`);
    the fast one's truth is the table's optimum."""
    def run(ratio: float) -> dict:
        return {"status": "ok", "message": "", "step_times_s": [0.01 * ratio] * 4,
                "baseline_step_times_s": [0.01] * 4}

    doc = {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
           "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
           "configurations": 4, "distinct": 4, "repeats": 2, "steps": 4,
           "entries": [{"flags": {}, "runs": [run(1.0)] * 2, "program": "d"},
                       {"flags": {LEVEL: 1}, "runs": [run(r) for r in fast[:-1]],
                        "program": "p"},
                       # another configuration of the fast program: one program, not two
                       {"flags": {LEVEL: 2}, "runs": [run(fast[-1])], "program": "p"},
                       {"flags": {LEVEL: 0}, "runs": [run(r) for r in rival], "program": "q"}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    return path


def test_identification_counts_the_draws_that_rank_a_right_program_first(tmp_path, capsys):
    """Each program timed n times, ranked by the median of its log ratios: the share of
    draws whose first k programs hold one within 2% of the optimum."""
    check = script("identification")
    # the fast program's truth (median of 0.80, 0.84 and 1.5) is 0.84; the rival's 0.90
    path = _identification_table(tmp_path, [0.80, 1.5, 0.84], [0.90])
    check.main([str(path), "--draws", "1,3", "--top", "1,2", "--seeds", "2000", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["draws"] == [1, 3] and doc["top"] == [1, 2] and doc["seeds"] == 2000
    [row] = doc["tables"]
    assert (row["programs"], row["right"]) == (3, 1)  # two configurations, one program
    assert row["optimum"] == pytest.approx(0.84) and row["defaults"] == pytest.approx(1.0)
    assert row["processes"] == {"1": 3, "3": 9}
    # one process: the fast program is first unless its 1.5 is drawn (a third of draws),
    # and then it is last (1.5 against the defaults' 1.0 and the rival's 0.90)
    assert row["shares"]["1"]["1"] == pytest.approx(2 / 3, abs=0.04)
    assert row["shares"]["1"]["2"] == pytest.approx(2 / 3, abs=0.04)
    # all three processes: its median, 0.84, is first on every draw
    assert row["shares"]["3"] == {"1": 1.0, "2": 1.0}
    # over the fast program's three processes and the defaults' two (no spread): 3 degrees
    logs = [math.log(r) for r in (0.80, 0.84, 1.5)]
    mean = sum(logs) / 3
    assert row["noise"] == pytest.approx(math.sqrt(sum((x - mean) ** 2 for x in logs) / 3))
    check.main([str(path), "--draws", "1", "--top", "1", "--seeds", "10"])
    text = capsys.readouterr().out
    assert "t.json: 3 programs, 1 right" in text and "n=1 (  3 processes)  top 1" in text
    with pytest.raises(SystemExit):
        check.main([str(path), "--seeds", "0"])


def test_the_truth_check_sets_a_tables_short_truth_beside_its_long_runs(tmp_path, capsys):
    def run(ratio: float, steps: int) -> dict:
        return {"status": "ok", "message": "", "step_times_s": [0.01 * ratio] * steps,
                "baseline_step_times_s": [0.01] * steps}

    doc = {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
           "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
           "configurations": 2, "distinct": 2, "repeats": 2, "steps": 4,
           "long": [{"steps": 40, "vector_isa": "avx512f"}],
           "entries": [{"flags": {}, "runs": [run(1.0, 4)] * 2, "program": "d"},
                       {"flags": {LEVEL: 1}, "runs": [run(0.9, 4), run(0.92, 4)],
                        "program": "p", "long_runs": [run(0.97, 40)] * 3}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    check = script("truth_check")
    check.main([str(path), "--json"])
    [table] = json.loads(capsys.readouterr().out)["tables"]
    assert table["defaults"]["ratio"] == pytest.approx(1.0)
    [program] = table["programs"]
    assert program["configuration"] == config_key({LEVEL: 1})
    # the median of two processes' log ratios: their geometric mean
    assert program["short"]["ratio"] == pytest.approx((0.9 * 0.92) ** 0.5)
    assert program["short"]["processes"] == 2
    assert program["long"]["ratio"] == pytest.approx(0.97) and program["long"]["processes"] == 3
    check.main([str(path)])
    text = capsys.readouterr().out
    assert "saves +9.0%" in text and "saves +3.0%" in text and " 40 steps" in text
    # the table's CPU is not known: its long runs (from an AVX-512 CPU) do not compare
    assert table["comparable"] is False and table["long_vector_isa"] == ["avx512f"]
    assert "not comparable: the table's runs on an unknown CPU" in text


def test_the_interval_coverage_counts_draws_whose_interval_holds_the_truth(tmp_path, capsys):
    """A program of 24 processes whose medians agree (0.9) while their steps scatter: from 8
    processes on the shipped and processes-only intervals shrink to the truth; the
    hierarchical one stays wide. A second program has 12 processes: drawn 4 at a time,
    never 8 (a program needs three times N)."""
    def run(ratio: float) -> dict:
        steps = [0.8, 0.9, 1.0, 1.1, 1.2]
        return {"status": "ok", "message": "", "baseline_step_times_s": steps,
                "step_times_s": [ratio * x for x in steps]}

    doc = {"schema_version": 1, "kind": "autotune-replay-table", "benchmark": "matmul",
           "preset": "tiny", "devices": 1, "space": "benchmarks/tables/cpu-table.yaml",
           "configurations": 2, "distinct": 2, "repeats": 24, "steps": 5,
           "entries": [{"flags": {}, "runs": [run(0.9)] * 24, "program": "d"},
                       {"flags": {LEVEL: 1}, "program": "p",
                        "runs": [run(r) for r in (0.8, 1.0, 1.2) * 4]}]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    coverage = script("interval_coverage")
    coverage.main([str(path), "--processes", "4,8,9", "--draws", "3", "--json"])
    [table] = json.loads(capsys.readouterr().out)["tables"]
    assert table["steps"] == 5
    [four, eight, nine] = table["rows"]
    assert (four["processes"], four["draws"], eight["draws"]) == (4, 6, 3)
    assert nine["draws"] == 0 and nine["shipped"] is None  # 24 < 3 x 9 processes
    assert eight["processes_only"]["width"] == pytest.approx(0.0, abs=1e-9)  # agreeing
    assert eight["shipped"] == eight["processes_only"]  # from 8 on: processes only
    assert eight["hierarchical"]["width"] > 0.05 and eight["hierarchical"]["covered"] == 1
    coverage.main([str(path), "--processes", "4", "--draws", "1"])
    assert "t.json (5 steps per process): covered / width" in capsys.readouterr().out
    from autotune.rules import stats
    assert stats.STEPS_RESAMPLED_BELOW == 8  # restored after each method


def test_a_constant_is_picked_on_the_other_tables_only():
    loo = script("leave_one_out")
    assert loo.parse_tune("autotune.results.evidence:BACKED_BY=2,3") == [
        ("autotune.results.evidence", "BACKED_BY", 2), ("autotune.results.evidence",
                                                         "BACKED_BY", 3)]
    with pytest.raises(ValueError, match="module:ATTRIBUTE=value"):
        loo.parse_tune("BACKED_BY=2")
    # a boolean either way, not the text "False" (which is true), and text stays text
    assert [v for *_, v in loo.parse_tune("m:X=False,true,None,cap,0.05")] == [
        False, True, None, "cap", 0.05]
    a, b = (("m", "X", 1),), (("m", "X", 2),)
    # a wins on table one, b on tables two and three: left out, each is judged by the rest
    scores = {a: {"one": (1.0, 0.9, -5.0), "two": (0.0, 0.0, -5.0), "three": (0.4, 0.0, -5.0)},
              b: {"one": (0.0, 0.0, -5.0), "two": (0.5, 0.5, -5.0), "three": (0.5, 0.1, -5.0)}}
    each = {"one": "one", "two": "two", "three": "three"}
    assert loo.pick(scores, each, "one") == b
    assert loo.pick(scores, each, "two") == a  # 1.4 sound on one and three, against b's 0.5
    # "two" and "three" one workload: left out together, only "one" chooses, so a
    assert loo.pick(scores, {"one": "one", "two": "w", "three": "w"}, "w") == a
    with pytest.raises(ValueError, match="nothing to choose on"):
        loo.pick(scores, dict.fromkeys(each, "w"), "w")
    # a workload counts once however many tables it has: its tables' mean score
    scores[a]["four"], scores[b]["four"] = (0.0, 0.0, -5.0), (0.5, 0.0, -5.0)
    # as tables, b sums 1.5 sound against a's 1.4; with "two" and "three" one workload
    # (their mean), a has 1.0 + 0.2 + 0.0 = 1.2 against b's 0.0 + 0.5 + 0.5 = 1.0
    two_sizes = {"one": "one", "two": "two", "three": "two", "four": "four"}
    assert loo.pick(scores, two_sizes, "none") == a
    assert loo.totals(scores, two_sizes, "none") == {a: pytest.approx((1.2, 0.9, -15.0)),
                                                     b: pytest.approx((1.0, 0.3, -15.0))}
    assert loo.label(a + (("n", "Y", "x"),)) == 'm:X=1 n:Y="x"'
    # the bar, not the share right: a table without a gain worth having wants the defaults
    figures = {"right": 0.9, "sound": 0.5, "captured_gain": None, "device_seconds": 3.0}
    assert loo.score(figures) == (0.5, 0.0, -3.0)


def test_a_workload_is_its_benchmark_so_its_sizes_and_devices_are_left_out_together():
    from autotune.launch.replay import ReplayTable

    loo = script("leave_one_out")
    names = {p.name: loo.workload_of(ReplayTable.load(str(p)).meta)
             for p in script("replay_study").committed_tables()}
    norm_act = {n for n, w in names.items() if w == "norm-act"}
    assert {"norm-act-small.json", "norm-act-tiny.json.gz", "norm-act-small-avx512.json.gz",
            "norm-act-batch-small.json.gz"} <= norm_act
    assert names["attention-small.json.gz"] == names["attention-small-gpu.json.gz"]
    assert names["lj-md-tiny.json.gz"] == names["lj-md-small.json.gz"]
    assert names["lj-md-tiny.json.gz"] != names["conv-small.json.gz"]


def test_a_patched_constant_holds_for_the_study_and_is_restored():
    import autotune.results.evidence as evidence

    study = script("replay_study")
    shipped = evidence.BACKED_BY
    with study.patched([("autotune.results.evidence", "BACKED_BY", shipped + 5)]):
        assert evidence.BACKED_BY == shipped + 5
    assert evidence.BACKED_BY == shipped
    with pytest.raises(RuntimeError), study.patched(
            [("autotune.results.evidence", "BACKED_BY", 0)]):
        raise RuntimeError
    assert evidence.BACKED_BY == shipped


def test_a_replayed_study_answers_the_same_with_its_ratios_remembered(monkeypatch):
    """`memoised_ratios` only saves time: every module's `paired_ratio` then remembers its
    answers, and a seeded study's answer (trace, recommendation, truth, device-seconds)
    is the one it gave without."""
    import importlib

    study = script("replay_study")
    names = ("autotune.rules.stats", "autotune.results.confirmation",
             "autotune.results.evidence", "autotune.results.shrink")
    modules = [importlib.import_module(name) for name in names]
    for module in modules:  # restored after the test
        monkeypatch.setattr(module, "paired_ratio", module.paired_ratio)
    table = ReplayTable.load(NORM_ACT)
    space = load_space(str(ROOT / table.meta["space"]))
    plain = study.run_study(table, space, "auto", 1001, 10, load_catalog(), confirm=True)
    study.memoised_ratios()
    assert all(getattr(m.paired_ratio, "memoised", False) for m in modules)
    remembered = study.run_study(table, space, "auto", 1001, 10, load_catalog(),
                                 confirm=True)
    assert remembered == plain and remembered.recommended is not None


def test_a_runner_runs_each_study_once_and_a_shipped_value_counts_as_unset(monkeypatch):
    """Leave-one-out asks for the shipped constants' studies again (the pick is often
    what ships): the runner answers from the studies it ran, and runs only new ones."""
    import autotune.results.evidence as evidence

    study = script("replay_study")
    ran: list[tuple] = []
    monkeypatch.setattr(study, "_answer_job", lambda job: ran.append(job) or job[2])
    runner = study.Runner(1)
    assert runner.answers(NORM_ACT, "auto", [1, 2], 10) == [1, 2]
    same = [("autotune.results.evidence", "BACKED_BY", evidence.BACKED_BY)]
    assert runner.answers(NORM_ACT, "auto", [2, 3, 3], 10, settings=same) == [2, 3, 3]
    assert [job[2] for job in ran] == [1, 2, 3] and all(job[4] == () for job in ran)
    other = [("autotune.results.evidence", "BACKED_BY", evidence.BACKED_BY + 1)]
    assert runner.answers(NORM_ACT, "auto", [2], 10, settings=other) == [2]
    assert ran[-1][4] == tuple(other) and len(ran) == 4


def test_the_remembered_ratios_answer_anew_when_a_job_sets_a_stats_constant():
    """`memoised_ratios` keys on `stats`' constants: 8 agreeing processes have a point for
    an interval, and with `STEPS_RESAMPLED_BELOW` set past 8 a wide one, not the one
    remembered."""
    from autotune.rules import stats

    replay = script("replay_study")
    replay.memoised_ratios()
    steps = [0.8, 0.9, 1.0, 1.1, 1.2]
    cand, base = [[0.9 * x for x in steps]] * 8, [steps] * 8
    narrow = stats.paired_ratio(cand, base)
    with replay.patched([("autotune.rules.stats", "STEPS_RESAMPLED_BELOW", 9)]):
        wide = stats.paired_ratio(cand, base)
    assert narrow.high - narrow.low < 1e-9 < wide.high - wide.low - 0.05
    assert stats.paired_ratio(cand, base) == narrow


def test_the_oracle_is_judged_by_the_rules_of_the_value_it_bounds(monkeypatch):
    """The oracle of a left-out table recommends by the pick's constants (here a least gain
    of 5%), not by those the code ships; they are restored after it."""
    from autotune.results import confirmation

    loo, replay = script("leave_one_out"), script("replay_study")
    seen, real = [], loo.outcome.oracle

    def spy(*args, **kwargs):
        seen.append(confirmation.MIN_GAIN)
        return real(*args, **kwargs)

    monkeypatch.setattr(loo.outcome, "oracle", spy)
    runner = replay.Runner(jobs=1)
    try:
        rows = loo.run([NORM_ACT, ROOT / "benchmarks/tables/mlp-dp-small.json"],
                       [[("autotune.results.confirmation", "MIN_GAIN", 0.05)]], 10, "auto",
                       [0], [1000], runner)
    finally:
        runner.close()
    assert seen == [0.05, 0.05] and len(rows) == 2
    assert confirmation.MIN_GAIN == 0.02


@pytest.mark.slow
def test_leave_one_out_reports_each_table_with_a_pick_made_without_it():
    import subprocess

    args = [sys.executable, "benchmarks/scripts/leave_one_out.py", str(NORM_ACT),
            str(ROOT / "benchmarks/tables/mlp-dp-small.json"), "--tune",
            "autotune.results.evidence:BACKED_BY=2,3", "--tune", "replay_study:CONFIRM_MAX=8",
            "--budget", "10", "--choose-seeds", "0-1", "--report-seeds", "1000-1001", "--jobs",
            "2", "--json"]  # a short confirmation cap: one value, so every pick holds it
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert [t["table"] for t in doc["tables"]] == ["norm-act-small.json", "mlp-dp-small.json"]
    assert [t["workload"] for t in doc["tables"]] == ["norm-act", "mlp-dp"]
    assert doc["fresh"] is False
    for row in doc["tables"]:
        assert {"reused", "exhausted"} <= set(row["left_out"]) and "reused" in row["oracle"]
        assert set(row) == {"table", "workload", "pick", "left_out", "shipped", "oracle",
                            "of_oracle", "scores"}
        # the other workload's score of each combination, the pick's the highest
        assert set(row["scores"]) == {"autotune.results.evidence:BACKED_BY=2 "
                                      "replay_study:CONFIRM_MAX=8",
                                      "autotune.results.evidence:BACKED_BY=3 "
                                      "replay_study:CONFIRM_MAX=8"}
        best = max(row["scores"].values())
        assert row["scores"][f"autotune.results.evidence:BACKED_BY="
                             f"{row['pick']['autotune.results.evidence:BACKED_BY']} "
                             "replay_study:CONFIRM_MAX=8"] == best
        assert row["pick"]["autotune.results.evidence:BACKED_BY"] in (2, 3)
        assert row["pick"]["replay_study:CONFIRM_MAX"] == 8
        assert 0 <= row["left_out"]["right"] <= 1 and 0 <= row["oracle"]["right"] <= 1
        assert row["left_out"]["device_seconds"] > 0
    # progress on standard error, one line per table and phase; standard output is the JSON
    assert "reporting: mlp-dp-small.json (2/2), 2 seeds" in done.stderr
    bad = subprocess.run(args[:2] + [str(NORM_ACT), "--tune", "x=1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "module:ATTRIBUTE=value" in bad.stderr
    one = subprocess.run(args[:2] + [str(NORM_ACT), str(ROOT / "benchmarks/tables/norm-act-tiny"
                                                         ".json.gz"), "--tune", "m:X=1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert one.returncode == 2 and "at least two workloads" in one.stderr


@pytest.mark.slow
def test_the_warm_start_benchmark_names_each_pair_in_full_within_80_columns():
    import subprocess

    args = [sys.executable, "benchmarks/scripts/warm_start.py", "--pairs", "5", "--seeds",
            "1000-1001", "--budgets", "3", "--jobs", "2"]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert max(map(len, lines)) <= 80, done.stdout
    # both directions of the pair, each named in full on a line of its own, one row after it
    pairs = ["norm-act-small-avx512.json.gz -> norm-act-batch-small.json.gz",
             "norm-act-batch-small.json.gz -> norm-act-small-avx512.json.gz"]
    assert [line for line in lines if "->" in line] == pairs
    for pair in pairs:
        row = lines[lines.index(pair) + 1].split()
        assert row[0] == "3" and row[1].count("%") == 2, done.stdout
    paired = [line for line in lines if "warm only/cold only: 3: " in line]
    assert len(paired) == 2, done.stdout  # each direction says how its seeds split
    # both tables offer a gain worth having: each direction says how often one was lent
    assert sum(line.strip().startswith("a right one on ") for line in lines) == 2, done.stdout


def test_a_right_configuration_was_lent_where_one_lent_lies_within_two_percent():
    """`lent_right`: the share of seeds whose lent configurations hold one within 2% of
    the optimum by the truth (the most any rule over what is lent can be right on)."""
    warm_start = script("warm_start")
    optimum = 0.95  # right: at most 0.969
    assert warm_start.lent_right([[0.99, 0.96], [1.0, None], [], [0.969]], optimum) == 0.5
    assert warm_start.lent_right([[0.97], [None]], optimum) == 0.0
    assert script("outcome").right_ratio(0.95 * 1.02, optimum)


@pytest.mark.slow
def test_the_warm_start_benchmark_runs_its_studies_with_a_constant_set():
    """`--set` reaches the processes that run the studies (`--jobs 2`): with no earlier
    study to draw from (`WARM_FROM` 0) no warm study draws a configuration, where by
    default every one does; a setting not of the form is refused."""
    import subprocess

    args = [sys.executable, "benchmarks/scripts/warm_start.py", "--pairs", "7", "--seeds",
            "1000-1001", "--budgets", "3", "--jobs", "2", "--json"]

    def drew(extra: list[str]) -> list[float]:
        done = subprocess.run(args + extra, cwd=ROOT, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return [r["budgets"]["3"]["warm"]["drew"] for r in json.loads(done.stdout)]

    assert all(n > 0 for n in drew([]))
    assert drew(["--set", "autotune.study.warm:WARM_FROM=0"]) == [0, 0]
    bad = subprocess.run(args + ["--set", "WARM_FROM=0"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and "module:ATTRIBUTE=value" in bad.stderr


@pytest.mark.slow
def test_the_noise_benchmark_gives_each_step_count_the_spread_of_real_a_a_ratios():
    import subprocess

    args = [sys.executable, "benchmarks/scripts/noise_steps.py", "--benchmark", "norm-act",
            "--preset", "tiny", "--processes", "2", "--steps", "5,10"]
    done = subprocess.run(args + ["--json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert [r["steps"] for r in doc["rows"]] == [5, 10]
    for r in doc["rows"]:
        assert len(r["ratios"]) == r["processes"] == 2
        # the baseline against itself: positive ratios (5 steps of a tiny step on a busy
        # machine bound them no closer than that)
        assert all(0 < x < float("inf") for x in r["ratios"])
        assert r["median_ratio"] == pytest.approx(sum(r["ratios"]) / 2)
        assert r["spread"] == pytest.approx(max(r["ratios"]) / min(r["ratios"]))
        assert r["sd_times_sqrt_steps"] == pytest.approx(r["sd_log_ratio"] * r["steps"] ** 0.5)
    bad = subprocess.run(args[:2] + ["--benchmark", "no-such"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and "unknown benchmark 'no-such'" in bad.stderr


def test_the_cost_to_match_random_is_the_first_checkpoint_as_good_as_it():
    """`matching`: the device-seconds a method spends to reach random search's captured gain
    and share right at the last checkpoint, as a ratio of random's."""
    outcome = script("outcome")

    def figures(gains, rights, seconds):
        return {"captured_gain": {b: None if g is None else {"median": g, "p10": 0.0}
                                  for b, g in zip(("10", "20", "40"), gains, strict=True)},
                "right": dict(zip(("10", "20", "40"), rights, strict=True)),
                "device_seconds": dict(zip(("10", "20", "40"), seconds, strict=True))}

    rand = figures([0.2, 0.6, 1.0], [0.3, 0.6, 0.85], [5.0, 9.0, 16.0])
    study = figures([0.5, 1.0, 1.0], [0.5, 0.9, 0.9], [4.0, 8.0, 15.0])
    assert outcome.cost_to_match(study, rand, "40") == {
        "at": 20, "device_seconds": 8.0, "reference_at": 40,
        "reference_device_seconds": 16.0, "ratio": 0.5}
    worse = figures([0.5, 0.9, 0.95], [0.9, 0.9, 0.9], [4.0, 8.0, 15.0])
    assert outcome.cost_to_match(worse, rand, "40")["at"] is None  # never the same gain
    flat_rand = figures([None] * 3, [1.0, 1.0, 0.95], [5.0, 9.0, 16.0])
    flat = figures([None] * 3, [0.9, 1.0, 1.0], [4.0, 8.0, 15.0])
    assert outcome.cost_to_match(flat, flat_rand, "40")["at"] == 20  # right alone


def test_random_searchs_cost_to_match_a_method_reads_its_checkpoints_past_the_last():
    """`random_matching`: random search's first checkpoint (it may run past the method's
    last, `--random-to`) as good as the method at its last, and the method's device-seconds
    over random's there; where none is, a bound from random's last checkpoint."""
    outcome = script("outcome")
    marks = ("10", "20", "40", "80", "160")

    def figures(gains, rights, seconds):
        def by_mark(values):
            return dict(zip(marks[:len(values)], values, strict=True))
        return {"captured_gain": {b: {"median": g, "p10": 0.0} for b, g in by_mark(gains).items()},
                "right": by_mark(rights), "device_seconds": by_mark(seconds)}

    study = figures([0.5, 1.0, 1.0], [0.5, 0.9, 0.95], [4.0, 8.0, 15.0])
    rand = figures([0.2, 0.6, 0.9, 1.0, 1.0], [0.3, 0.6, 0.8, 0.9, 0.95],
                   [5.0, 9.0, 16.0, 24.0, 40.0])
    assert outcome.cost_for_random(study, rand, "40") == {
        "at": 160, "device_seconds": 40.0, "method_at": 40, "method_device_seconds": 15.0,
        "last": 160, "ratio": 0.375, "at_most": None}
    short = figures([0.2, 0.6, 0.9, 1.0, 1.0], [0.3, 0.6, 0.8, 0.9, 0.9],
                    [5.0, 9.0, 16.0, 24.0, 30.0])
    assert outcome.cost_for_random(study, short, "40") == {
        "at": None, "device_seconds": None, "method_at": 40, "method_device_seconds": 15.0,
        "last": 160, "ratio": None, "at_most": 0.5}


def test_confirmations_floor_is_its_own_spend_over_randoms_whole():
    """`confirmation_floor`: the method's confirmation seconds at the checkpoint over
    random search's whole device-seconds there, below which the method's own ratio of
    device-seconds at that checkpoint cannot lie."""
    outcome = script("outcome")
    study = {"confirmation_seconds": {"20": 3.0, "40": 6.0}}
    rand = {"device_seconds": {"20": 10.0, "40": 16.0}}
    assert outcome.confirmation_floor(study, rand, "40") == {
        "at": 40, "confirmation_seconds": 6.0, "reference_device_seconds": 16.0,
        "floor": 0.375}
    assert outcome.confirmation_floor(study, {"device_seconds": {"40": 0.0}}, "40")[
        "floor"] is None


def test_random_search_runs_on_past_the_last_checkpoint_by_doubling():
    """`--random-to N`: random search's extra checkpoints double from `--trials` up to N."""
    efficiency = script("search_efficiency")
    assert efficiency.beyond(40, 160) == [80, 160]
    assert efficiency.beyond(40, 100) == [80]
    assert efficiency.beyond(40, 79) == [] and efficiency.beyond(40, None) == []
    assert efficiency.beyond(0, 100) == []  # no endless doubling of nothing
    with pytest.raises(SystemExit) as refused:  # before any table is read
        efficiency.main(["--trials", "0"])
    assert refused.value.code == 2
