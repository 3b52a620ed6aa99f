"""The notes under `autotune best` (`autotune.results.notes`), word for word.

In-process and quick, so that the mutation run (`[tool.mutmut]` in pyproject.toml)
selects them: these are the sentences a user reads to decide whether to trust a figure.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from test_environments import H100
from test_ranking import FAST, LEVEL, WHEN, Runs, measurement

from autotune.flags.catalog import load_catalog
from autotune.ground.records import (
    PLAN_WARM,
    Measurement,
    MeasureMode,
    Role,
    StudyRecord,
)
from autotune.results.evidence import BACKED_BY
from autotune.results.notes import (
    Note,
    environment_header,
    environments_note,
    fit_notes,
    incumbent_note,
    memory_note,
    pgle_notes,
    study_notes,
    warm_notes,
)
from autotune.results.ranking import EnvironmentGroup
from autotune.results.table import best_rows
from autotune.spaces.fit import Action, FitChange, SpaceFit

GPU = "8 × NVIDIA H100 80GB HBM3, gpu"


def _record(**fields) -> StudyRecord:
    return replace(StudyRecord("s", "cpu", "matmul", "tiny", 8, MeasureMode.PAIRED, WHEN),
                   **fields)


@pytest.mark.parametrize(("facts", "hosts", "text"), [
    (None, (), "environment k"),
    (None, ("a",), "environment k: host a"),
    (H100, ("a", "b"),
     f"environment k: {GPU}, jax 0.10.2, cuda 12080, driver 550.54.15, hosts a, b"),
    (replace(H100, jaxlib_version="0.10.1", driver_version=None, runtime_version=None),
     ("a", "b", "c"), f"environment k: {GPU}, jax 0.10.2, jaxlib 0.10.1, hosts a and 2 more"),
    (replace(H100, driver_version=None), (), f"environment k: {GPU}, jax 0.10.2, cuda 12080"),
    (replace(H100, runtime_version=None), ("a",),
     f"environment k: {GPU}, jax 0.10.2, driver 550.54.15, host a"),
])
def test_an_environment_header_names_what_it_has(facts, hosts, text):
    assert environment_header(EnvironmentGroup("k", [], facts, hosts, 0)) == text


def _timed(s: Runs, key: str, ratio: float, role: Role = Role.SEARCH,
           trial: int | None = None) -> None:
    s.add(role, {FAST: True}, ratio, trial=trial)
    s.runs[-1] = replace(s.runs[-1], env_key=key)


def test_several_environments_are_named_with_the_one_the_answers_use():
    s = Runs()
    _timed(s, "a", 1.0, Role.BASELINE)
    _timed(s, "a", 0.9)
    assert environments_note(_record(), s.runs) is None  # one environment: nothing to say
    for ratio in (1.0, 0.95, 0.97):
        _timed(s, "b", ratio, Role.BASELINE if ratio == 1.0 else Role.SEARCH)
    assert environments_note(_record(name="mine"), s.runs) == Note(
        "environments", "measured in 2 environments, each ranked against its own baseline; "
        "the recommendation, export and notes use b (3 timed runs, the most); `autotune best "
        "mine --environment KEY` shows one alone")


def _program(ratio: float, fingerprint: str) -> Measurement:
    m = measurement(ratio)
    return replace(m, step_times_s=(ratio * 0.99, ratio * 1.01) * 3, fingerprint=fingerprint)


def test_the_incumbent_note_says_the_defaults_until_a_program_is_backed():
    s = Runs()
    assert incumbent_note(_record(), s.runs) is None  # nothing timed
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.8, m=_program(0.8, "A"))
    defaults = Note("incumbent", f"search incumbent: XLA's defaults (no program backed by "
                    f"{BACKED_BY} processes measured faster than them)")
    assert incumbent_note(_record(), s.runs) == defaults  # one process: not yet believed
    for _ in range(BACKED_BY - 1):
        s.add(Role.RACE, {FAST: True}, 0.8, trial=1, m=_program(0.8, "A"))
    note = incumbent_note(_record(), s.runs)
    assert note is not None and note.kind == "incumbent"
    found = re.fullmatch(r"search incumbent: trial 1's program, ×1\.250 \[(\S+), (\S+)\] "
                         rf"pooled over {BACKED_BY} processes", note.text)
    assert found, note.text
    assert float(found.group(1)) < 1.25 < float(found.group(2))


def test_the_incumbent_note_leaves_out_what_the_memory_budget_does():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=replace(measurement(1.0, same=True), peak_memory_bytes=100))
    for trial in (None, *[1] * (BACKED_BY - 1)):
        s.add(Role.SEARCH if trial is None else Role.RACE, {LEVEL: 2}, 0.8, trial=trial,
              m=replace(_program(0.8, "A"), peak_memory_bytes=500))
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=replace(_program(0.9, "B"), peak_memory_bytes=150))
    assert incumbent_note(_record(), s.runs).text.startswith("search incumbent: trial 1's")
    over = incumbent_note(_record(memory_budget_bytes=200), s.runs)
    assert over is not None and over.text.startswith("search incumbent: XLA's defaults")


def test_the_memory_note_names_its_sources_and_marks_those_that_do_not_compare():
    s = Runs()
    assert memory_note(s.runs, []) == Note("memory_source", "peak memory from: -")
    s.add(Role.BASELINE, {}, 1.0, m=replace(measurement(1.0, same=True, memory=100),
                                            memory_source="memory_analysis"))
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=replace(measurement(0.9, memory=100),
                                                    memory_source="memory_analysis"))
    rows = best_rows(s.runs, load_catalog())
    assert memory_note(s.runs, rows).text == "peak memory from: memory_analysis"
    s.add(Role.SEARCH, {LEVEL: 2}, 0.8, m=replace(measurement(0.8, None, memory=300),
                                                  memory_source="memory_stats"))
    rows = best_rows(s.runs, load_catalog())
    assert memory_note(s.runs, rows).text == (
        "peak memory from: memory_analysis, memory_stats; * marks memory_stats (the device "
        "allocator's peak, in a process of its own), not comparable with the baseline's "
        "memory_analysis (the compiled program's footprint)")


def test_the_fit_notes_say_what_fitting_dropped_and_clipped():
    assert fit_notes(_record()) == []  # --no-fit, or not fitted yet
    fit = SpaceFit((FitChange("p", "xla_a", Action.DROPPED, "no collective", (1, 2), ()),),
                   probes=1)
    assert fit_notes(_record(space_fit=fit.to_json())) == [
        Note("space_fitted", "search space fitted to the baseline's program: 1 param dropped, "
             "0 clipped; 1 compile-only run"),
        Note("space_fitted", "dropped xla_a: no collective")]


def test_a_warm_start_names_each_trial_it_drew_and_its_likeness():
    drawn = [{"study": "old", "trial": 3, "likeness": 2}, {"study": "other", "trial": 1,
                                                            "likeness": 1}]
    assert [n.text for n in warm_notes(_record(plan={PLAN_WARM: drawn}))] == [
        "warm start: the search began with the confirmed configurations of 'old' trial 3 "
        "(likeness 2 of 3); 'other' trial 1 (likeness 1 of 3), each measured and confirmed "
        "here like any other (--no-warm-start: from nothing)"]


def test_a_lent_configuration_the_budget_never_measured_is_named_apart():
    """Given the runs, only what a search run measured is said to be measured: a
    configuration queued after `--trials` ran out is named as not measured."""
    from autotune.flags.compose import config_key, effective_config

    catalog = load_catalog()
    measured, late = {LEVEL: 2}, {FAST: True, LEVEL: 1}
    drawn = [{"study": "old", "trial": 3, "likeness": 2,
              "key": config_key(effective_config(measured, catalog))},
             {"study": "old", "trial": 5, "likeness": 2, "confirmed": False,
              "key": config_key(effective_config(late, catalog))}]
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, measured, 0.9)
    s.add(Role.RACE, late, 0.9)  # not a search run: the configuration was not searched
    texts = [n.text for n in warm_notes(_record(plan={PLAN_WARM: drawn}), s.runs)]
    assert texts == [
        "warm start: the search began with the confirmed configurations of 'old' trial 3 "
        "(likeness 2 of 3), each measured and confirmed here like any other "
        "(--no-warm-start: from nothing)",
        "warm start: --trials ran out before 'old' trial 5 (likeness 2 of 3) was measured"]
    assert {n.kind for n in warm_notes(_record(plan={PLAN_WARM: drawn}), s.runs)} == {
        "warm_start"}
    two = [{**d, "key": "never"} for d in drawn]  # the notes under `best` are given the runs
    under_best = [n for n in study_notes(_record(plan={PLAN_WARM: two}), s.runs,
                                         best_rows(s.runs, catalog)) if n.kind == "warm_start"]
    assert [n.text for n in under_best] == [
        "warm start: --trials ran out before 'old' trial 3 (likeness 2 of 3); 'old' trial 5 "
        "(likeness 2 of 3) were measured"]
    s.add(Role.SEARCH, late, 0.95)
    texts = [n.text for n in warm_notes(_record(plan={PLAN_WARM: drawn}), s.runs)]
    assert len(texts) == 2 and "leaders of 'old' trial 5" in texts[1]


def test_a_direct_incumbent_has_no_interval_to_show():
    s = Runs()
    for trial in (None, *[0] * (BACKED_BY - 1)):
        s.add(Role.SEARCH if trial is None else Role.RACE, {FAST: True}, 0.8, trial=trial,
              m=replace(measurement(0.8, None), fingerprint="A"))
    assert incumbent_note(_record(mode=MeasureMode.DIRECT), s.runs) == Note(
        "incumbent", f"search incumbent: trial 0's program, ×1.250 pooled over {BACKED_BY} "
        "processes")


def test_the_memory_note_names_a_source_it_does_not_know_as_it_is():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=replace(measurement(1.0, same=True, memory=100),
                                            memory_source="odd"))
    for ratio, source in ((0.9, "memory_stats"), (0.8, "zz")):
        s.add(Role.SEARCH, {FAST: ratio == 0.9, LEVEL: 2}, ratio,
              m=replace(measurement(ratio, None, memory=300), memory_source=source))
    assert memory_note(s.runs, best_rows(s.runs, load_catalog())).text == (
        "peak memory from: memory_stats, odd, zz; * marks memory_stats, zz (the device "
        "allocator's peak, in a process of its own; zz), not comparable with the baseline's "
        "odd (odd)")


def test_each_configuration_pgle_measured_gets_one_note_in_trial_order():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    for trial in (3, 1, 3, 1):
        s.add(Role.PGLE, {FAST: True}, 0.9, trial=trial, m=_program(0.9, f"pgle{trial}"))
    notes = pgle_notes(s.runs)
    assert [n.kind for n in notes] == ["pgle", "pgle"]
    assert [n.text.split(":")[0] for n in notes] == ["PGLE on trial 1's flags",
                                                     "PGLE on trial 3's flags"]
    assert all(", 2 processes: " in n.text for n in notes), notes


def test_the_notes_of_a_study_in_two_environments_name_the_study():
    s = Runs()
    _timed(s, "a", 1.0, Role.BASELINE)
    _timed(s, "b", 1.0, Role.BASELINE)
    record = _record(name="mine")
    notes = study_notes(record, s.runs, best_rows(s.runs, load_catalog()))
    assert [n.text for n in notes if n.kind == "environments"] == [
        environments_note(record, s.runs).text]
    assert "`autotune best mine --environment KEY`" in environments_note(record, s.runs).text
