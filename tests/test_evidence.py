"""Evidence pooled by program, the incumbent rule, and racing the leaders (no JAX).

The pure rules are tested on runs stated by hand; racing runs through a real
`StudyRunner` (Optuna, SQLite) whose trials a recorded table answers.
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout
from pathlib import Path

import optuna
import pytest
from outcomes import trial_request
from test_ranking import FAST, LEVEL, WHEN, WIDTH, Runs, measurement

from autotune.flags.catalog import load_catalog
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, Role
from autotune.launch.launcher import TrialRequest
from autotune.launch.replay import ReplayTable, TableLauncher
from autotune.launch.workloads import resolve_benchmark
from autotune.results.evidence import BACKED_BY, incumbent, pooled, race_target
from autotune.results.table import best_rows
from autotune.results.view import best_so_far
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.measured import BUDGET_ROLES
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner

ROOT = Path(__file__).resolve().parents[1]
NORM_ACT = ROOT / "benchmarks/tables/norm-act-small.json"


def program(ratio: float, fingerprint: str, *, same_as: int | None = None) -> Measurement:
    """A PAIRED measurement of `fingerprint` at `ratio`; with `same_as`, nothing timed."""
    if same_as is not None:
        return Measurement((), 1.0, mode=MeasureMode.PAIRED, fingerprint=fingerprint,
                           baseline_fingerprint="base", same_program_as=same_as)
    m = measurement(ratio)
    return Measurement(m.step_times_s, 1.0, mode=MeasureMode.PAIRED,
                       baseline_step_times_s=m.baseline_step_times_s, fingerprint=fingerprint,
                       baseline_fingerprint="base")


def test_every_timed_observation_of_a_program_counts_whichever_configuration_made_it():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.80, m=program(0.80, "A"))  # 1: lucky once
    s.add(Role.SEARCH, {LEVEL: 2}, 0.90, m=program(0.90, "B"))  # 2
    s.add(Role.SEARCH, {WIDTH: 128}, None, m=program(0, "A", same_as=1))  # 3: A again, untimed
    s.add(Role.RACE, {FAST: True}, 1.00, trial=1, m=program(1.00, "A"))
    s.add(Role.CONFIRM, {FAST: True}, 1.02, trial=1, m=program(1.02, "A"))
    found = pooled(s.runs)
    assert [p.program for p in found] == ["B", "A"]  # A pools to 1.00: the lucky 0.80 is one of 3
    a = found[1]
    assert a.n == 3 and a.ratio == pytest.approx(1.00)
    assert a.trials == [1, 3]  # the configuration that compiled to A without timing it is listed
    assert a.first.trial_number == 1
    estimate = a.estimate()
    assert estimate is not None and estimate.n_processes == 3
    assert estimate.low <= a.ratio <= estimate.high


def test_the_baseline_program_is_xlas_defaults_not_a_candidate():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.95, m=measurement(0.95, same=True))  # compiled to "base"
    assert pooled(s.runs) == []
    assert [p.program for p in pooled(s.runs, defaults=True)] == ["base"]


def test_the_incumbent_needs_enough_processes_and_must_beat_the_defaults():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.80, m=program(0.80, "A"))
    s.add(Role.SEARCH, {LEVEL: 2}, 0.95, m=program(0.95, "B"))
    for _ in range(BACKED_BY - 1):
        s.add(Role.RACE, {LEVEL: 2}, 0.96, trial=1, m=program(0.96, "B"))
    found = pooled(s.runs)
    assert [p.program for p in found] == ["A", "B"]
    assert incumbent(found).program == "B"  # A leads on one process: not yet believed
    assert race_target(found).program == "A"  # so A is what to measure next
    for _ in range(BACKED_BY - 1):
        s.add(Role.RACE, {FAST: True}, 1.01, trial=0, m=program(1.01, "A"))
    found = pooled(s.runs)
    assert [p.program for p in found] == ["B", "A"]  # A regressed to 1.01
    assert incumbent(found).program == "B" and race_target(found) is None


def test_no_incumbent_when_the_best_backed_program_is_not_faster_than_the_defaults():
    s = Runs()
    for trial_ratio in (1.0, 1.02, 0.99):
        s.add(Role.SEARCH if trial_ratio == 1.0 else Role.RACE, {FAST: True}, trial_ratio,
              trial=0, m=program(trial_ratio, "A"))
    assert incumbent(pooled(s.runs)) is None
    assert race_target(pooled(s.runs)) is None  # backed already


def _two_leaders(a: tuple[float, ...], b: tuple[float, ...]) -> Runs:
    """Program A searched at a[0] and raced at a[1:], then B searched at b[0] and raced at
    b[1:], beside four more searched programs at 0.99-1.02."""
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, a[0], m=program(a[0], "A"))
    s.add(Role.SEARCH, {LEVEL: 2}, b[0], m=program(b[0], "B"))
    for i, ratio in enumerate((0.99, 1.0, 1.01, 1.02)):
        s.add(Role.SEARCH, {WIDTH: 2 ** i}, ratio, m=program(ratio, f"other{i}"))
    for ratio in a[1:]:
        s.add(Role.RACE, {FAST: True}, ratio, trial=0, m=program(ratio, "A"))
    for ratio in b[1:]:
        s.add(Role.RACE, {LEVEL: 2}, ratio, trial=1, m=program(ratio, "B"))
    return s


def test_the_lucb_rule_races_the_leaders_challenger_while_their_bounds_overlap(monkeypatch):
    """A is backed at 0.90 (+-4%) and B, one process at 0.92, may still be as fast: under
    lucb the one with fewer observations (B) is measured next; "backed" stops at backed."""
    from autotune.results import evidence

    s = _two_leaders((0.90, 0.86, 0.94), (0.92,))
    found = pooled(s.runs)
    assert [p.program for p in found[:2]] == ["A", "B"] and found[0].backed
    assert race_target(found) is None
    monkeypatch.setattr(evidence, "RACE_RULE", "lucb")
    assert race_target(found).program == "B"
    for ratio in (0.95, 0.89, 0.92):
        s.add(Role.RACE, {LEVEL: 2}, ratio, trial=1, m=program(ratio, "B"))
    found = pooled(s.runs)
    assert found[1].program == "B" and found[1].n == 4
    assert race_target(found).program == "A"  # now the leader has fewer observations


def test_the_lucb_rule_stops_once_the_leader_is_told_apart(monkeypatch):
    from autotune.results import evidence

    monkeypatch.setattr(evidence, "RACE_RULE", "lucb")
    apart = _two_leaders((0.80, 0.80, 0.801), (0.99, 0.99, 0.991))
    found = pooled(apart.runs)
    assert evidence.process_noise(found) < 0.01
    assert race_target(found) is None  # A's upper bound is far below every lower bound


def test_the_lucb_rule_races_no_more_processes_than_the_search_timed(monkeypatch):
    from autotune.results import evidence

    monkeypatch.setattr(evidence, "RACE_RULE", "lucb")
    s = _two_leaders((0.90, 0.86, 0.94, 0.90), (0.92, 0.96, 0.88))
    assert race_target(pooled(s.runs)) is not None  # 5 races, 6 searched
    s.add(Role.RACE, {LEVEL: 2}, 0.92, trial=1, m=program(0.92, "B"))
    assert race_target(pooled(s.runs)) is None  # 6 races: racing has had its share


def test_the_noise_is_the_programs_pooled_spread_or_the_prior_before_any_repeat():
    from autotune.results import evidence

    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.9, m=program(0.9, "A"))
    assert evidence.process_noise(pooled(s.runs)) == evidence.RACE_PRIOR_NOISE
    s = _two_leaders((0.90, 0.99, 0.90), (0.92, 1.01))
    spread = evidence.process_noise(pooled(s.runs))
    assert 0.03 < spread < 0.1


def test_a_leader_slower_than_the_defaults_is_not_raced():
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 1.05, m=program(1.05, "A"))
    assert race_target(pooled(s.runs)) is None


def test_best_lists_programs_with_their_pooled_figures_and_configurations():
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.90, m=program(0.90, "A"))
    s.add(Role.SEARCH, {WIDTH: 128}, None, m=program(0, "A", same_as=1))
    s.add(Role.RACE, {FAST: True}, 0.92, trial=1, m=program(0.92, "A"))
    rows = best_rows(s.runs, load_catalog())
    assert [r.rank for r in rows] == [None, 1]
    row = rows[1]
    assert row.program is not None and row.program.n == 2 and row.program.trials == [1, 2]


# --- racing, through a real study on a recorded table -----------------------------------------


def _study(tmp_path, seed: int, trials: int, racing: bool = True,
           events: list | None = None) -> tuple[Store, StudyPlan]:
    table = ReplayTable.load(NORM_ACT)
    space = load_space(str(ROOT / table.meta["space"]))
    plan = StudyPlan.of(name=f"race-{seed}", space=space,
                     workload=resolve_benchmark("norm-act"), trials=trials, sampler="random",
                     seed=seed, racing=racing)
    store = Store.open(f"sqlite:///{tmp_path}/s{seed}{racing}.db")
    StudyRunner(plan, store, TableLauncher(table, load_catalog(), seed=seed),
                optuna.storages.InMemoryStorage()).run(
                    on_trial=None if events is None else events.append)
    return store, plan


def test_racing_backs_the_leader_and_counts_in_the_budget(tmp_path):
    events: list = []
    store, plan = _study(tmp_path, seed=3, trials=40, events=events)
    runs = store.runs(plan.name)
    # After every trial the progress line's best is the study's answer then, as the
    # dashboard's chart draws it: the incumbent or the defaults, never one lucky process.
    # (It showed the best single process: `best: ×1.001` for a whole study after that
    # configuration's race measured ×0.888.)
    chart = best_so_far(runs)[:len(events)]
    assert [(e.best_speedup, e.best_trial) for e in events] == [
        (pytest.approx(p["best"]) if p["best"] else None, p["best_trial"]) for p in chart]
    assert [e.number for e in events] == [p["trial"] for p in chart]
    assert {e.best_trial for e in events} - {None}, "the study backed an incumbent"
    races = [r for r in runs if r.role is Role.RACE]
    assert races, "a study that finds something faster than the defaults races it"
    counted = [r for r in runs if r.role in BUDGET_ROLES]
    assert len(counted) == plan.trials  # baseline + search + race runs: --trials counts them
    found = pooled(runs)
    leader = found[0]
    assert leader.n >= BACKED_BY or leader.ratio >= 1.0  # racing left no unbacked leader
    raced = {r.trial_number for r in races}
    assert all(r.outcome.measurement.step_times_s for r in races)  # a race always times
    assert raced <= {p.first.trial_number for p in found}  # a program's first trial is raced


def test_a_sequential_confirmation_run_says_which_process_of_the_cap_it_is(tmp_path):
    """Sequential runs were reported `done/done` ("confirm 7/7", "8/8", ...), as if each
    were the last; their end is not known beforehand: they carry the cap and the trial's
    count of confirmation processes instead."""
    from autotune.cli._progress import lines
    from autotune.study.plan import ConfirmEvent

    table = ReplayTable.load(NORM_ACT)
    plan = StudyPlan.of(name="seq", space=load_space(str(ROOT / table.meta["space"])),
                        workload=resolve_benchmark("norm-act"), trials=20, sampler="random",
                        seed=1)
    store = Store.open(f"sqlite:///{tmp_path}/seq.db")
    runner = StudyRunner(plan, store, TableLauncher(table, load_catalog(), seed=1),
                         optuna.storages.InMemoryStorage())
    runner.run()
    events: list[ConfirmEvent] = []
    runner.confirm(top=3, repeats=2, on_run=events.append, cap=12)
    rounds = [e for e in events if e.cap is None]
    assert rounds and [(e.done, e.total) for e in rounds] == [
        (i, len(rounds)) for i in range(1, len(rounds) + 1)]
    sequential = events[len(rounds):]
    assert sequential and all(e.cap == 12 for e in sequential)
    runs = store.runs("seq")
    confirms = [r for r in runs if r.role is Role.CONFIRM]
    for e, run in zip(sequential, confirms[len(rounds):], strict=True):
        assert run.trial_number == e.trial_number  # as the cap counts: racing included
        assert e.processes == sum(r.role in (Role.CONFIRM, Role.RACE) and r.id <= run.id
                                  and r.trial_number == e.trial_number for r in runs) <= 12
    assert any(r.role is Role.RACE and r.trial_number == e.trial_number
               for e in sequential for r in runs), "a raced trial was confirmed sequentially"
    line = io.StringIO()
    with redirect_stdout(line):
        lines().confirmed(sequential[-1])
    assert f"confirm {sequential[-1].done}: trial #{sequential[-1].trial_number} " in \
        line.getvalue() and f"its process {sequential[-1].processes} of at most 12" in \
        line.getvalue()


def test_without_racing_nothing_is_measured_twice_in_the_search(tmp_path):
    store, plan = _study(tmp_path, seed=3, trials=40, racing=False)
    assert not [r for r in store.runs(plan.name) if r.role is Role.RACE]


def test_confirmation_starts_from_the_racing_runs(tmp_path):
    table = ReplayTable.load(NORM_ACT)
    space = load_space(str(ROOT / table.meta["space"]))
    plan = StudyPlan.of(name="confirm", space=space,
                     workload=resolve_benchmark("norm-act"), trials=40, sampler="random", seed=3)
    store = Store.open(f"sqlite:///{tmp_path}/c.db")
    runner = StudyRunner(plan, store, TableLauncher(table, load_catalog(), seed=3),
                         optuna.storages.InMemoryStorage())
    runner.run()
    runs = store.runs(plan.name)
    leader = pooled(runs)[0]
    raced = sum(r.role is Role.RACE and r.trial_number == leader.first.trial_number for r in runs)
    assert raced >= 1
    runner.confirm(top=1, repeats=raced + 1)
    runs = store.runs(plan.name)
    confirms = [r for r in runs if r.role is Role.CONFIRM]
    assert len(confirms) == 1  # the racing runs counted as rounds: one more was needed
    row = best_rows(runs, load_catalog())[1]
    assert row.confirmation is not None and row.confirmation.runs == raced + 1


# --- the recorded table answers as a real child would -----------------------------------------


def _request(flags, **kw) -> TrialRequest:
    return trial_request(Path("w.py"), "small", steps=5, warmup=1, max_warmup=2,
                         compiler_options={}, env={}, timeout_s=10, flags=flags, **kw)


def test_the_table_launcher_compiles_only_a_known_program_and_fingerprints_the_rest():
    table = ReplayTable.load(NORM_ACT)
    catalog = load_catalog()
    launcher = TableLauncher(table, catalog, seed=0)
    key = next(k for k in table.runs if k and table.programs.get(k))
    flags = table.flags[key]
    timed = launcher.launch(_request(flags))
    assert timed.measurement.fingerprint == table.programs[key]
    assert timed.measurement.baseline_fingerprint == table.programs[""]
    assert timed.measurement.step_times_s
    known = launcher.launch(_request(flags, known_programs={table.programs[key]: 7}))
    assert known.kind is OutcomeKind.OK and known.measurement.same_program_as == 7
    assert not known.measurement.step_times_s and known.duration_s < timed.duration_s
    probe = launcher.launch(_request(flags, timed=False))
    assert probe.measurement.fingerprint == table.programs[key]
    assert not probe.measurement.step_times_s and probe.measurement.same_program_as is None


def test_the_table_launcher_draws_a_programs_repeats_without_replacement():
    table = ReplayTable.load(NORM_ACT)
    catalog = load_catalog()
    key = min((k for k in table.runs if k and table.programs.get(k)),
              key=lambda k: len(table.members(table.programs[k])))
    pool = [run for k in table.members(table.programs[key]) for run in table.runs[k]]
    launcher = TableLauncher(table, catalog, seed=5)
    drawn = [launcher.launch(_request(table.flags[key])).measurement for _ in pool]
    recorded = [tuple(r["step_times_s"]) for r in pool if r.get("step_times_s")]
    assert sorted(m.step_times_s for m in drawn if m) == sorted(recorded)  # each one once


def test_a_recorded_process_drawn_again_is_counted_or_refused():
    """Past a program's recorded processes the replay serves them again, counting each
    such draw and naming the program; without reuse it refuses the draw instead."""
    from autotune.launch.replay import TableExhausted

    table = ReplayTable.load(NORM_ACT)
    catalog = load_catalog()
    key = min((k for k in table.runs if k and table.programs.get(k)),
              key=lambda k: len(table.members(table.programs[k])))
    held = len(table.program_runs(key))
    other = next(k for k in table.runs if k and table.programs.get(k)
                 and table.programs[k] != table.programs[key])
    launcher = TableLauncher(table, catalog, seed=5)
    for _ in range(held):
        launcher.launch(_request(table.flags[key]))
    launcher.launch(_request(table.flags[other]))
    assert launcher.served["reused"] == 0 and launcher.reused == set()  # the first round
    launcher.launch(_request(table.flags[key]))
    launcher.launch(_request(table.flags[key]))
    assert launcher.served["reused"] == 2 and launcher.reused == {table.programs[key]}
    fresh = TableLauncher(table, catalog, seed=5, reuse=False)
    for _ in range(held):
        fresh.launch(_request(table.flags[key]))
    with pytest.raises(TableExhausted, match="no further recorded process"):
        fresh.launch(_request(table.flags[key]))
    assert fresh.launch(_request(table.flags[other])).measurement.step_times_s


def test_a_pooled_ratio_is_the_median_of_log_ratios():
    s = Runs()
    for i, r in enumerate((0.8, 1.25, 1.0)):
        s.add(Role.SEARCH if i == 0 else Role.RACE, {FAST: True}, r, trial=0, m=program(r, "A"))
    only = pooled(s.runs)[0]
    assert only.ratio == pytest.approx(1.0)  # not the mean (1.017), nor the first (0.8)
    assert only.ratios == pytest.approx([0.8, 1.25, 1.0])


def test_best_prints_the_pooled_figure_and_the_programs_other_trials(tmp_path):
    import json

    from cli_runner import invoke

    store, plan = _study(tmp_path, seed=3, trials=40)
    url = store.url
    store.close()
    shown = invoke("best", plan.name, "--storage", url, cwd=tmp_path)
    assert shown.exit_code == 0, shown.output
    doc = json.loads(invoke("best", plan.name, "--storage", url, "--format", "json",
                            cwd=tmp_path).output)
    rows = doc if isinstance(doc, list) else doc["rows"]
    raced = [r for r in rows if r["observations"] and r["observations"] > 1]
    assert raced, "racing left a program with more than one observation"
    lines = shown.output.splitlines()
    for row in raced:  # the table folds "×1.058 n=3" over two lines of its row
        at = next(i for i, line in enumerate(lines) if f"│ {row['rank']:<8} │" in line)
        assert f"×{row['pooled_speedup']:.3f}" in lines[at]
        assert f"n={row['observations']}" in lines[at + 1]
    shared = [r for r in rows if r["program_trials"] and len(r["program_trials"]) > 1]
    for row in shared:
        others = [n for n in row["program_trials"] if n != row["trial"]]
        assert f"same program: trials {', '.join(map(str, others))}" in shown.output
    # the table and the flags under it fit 80 columns (prose is one line when piped)
    assert all(len(line) <= 80 for line in shown.output.splitlines()
               if line[:1] in "┏┃┡│└" or line.startswith("  "))


def test_the_notes_under_best_name_the_incumbent_and_its_interval():
    from autotune.ground.records import StudyRecord
    from autotune.results.notes import incumbent_note

    record = StudyRecord("s", "cpu", "matmul", "tiny", 1, MeasureMode.PAIRED, WHEN)
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.90, m=program(0.90, "A"))
    assert "XLA's defaults" in incumbent_note(record, s.runs).text  # one process: not backed
    for r in (0.92, 0.91):
        s.add(Role.RACE, {FAST: True}, r, trial=0, m=program(r, "A"))
    note = incumbent_note(record, s.runs)
    estimate = pooled(s.runs)[0].estimate()
    low, high = estimate.speedup_interval
    assert note.kind == "incumbent"
    assert note.text == (f"search incumbent: trial 0's program, ×{1 / 0.91:.3f} "
                         f"[{low:.3f}, {high:.3f}] pooled over 3 processes")


def test_the_dashboard_shows_the_pooled_figure_of_a_raced_program(tmp_path):
    import html
    import re

    from starlette.testclient import TestClient

    from autotune.dashboard.app import create_app
    from autotune.results.table import best_row_json

    store, plan = _study(tmp_path, seed=3, trials=40)
    rows = [best_row_json(r) for r in best_rows(store.runs(plan.name), load_catalog())]
    raced = next(r for r in rows if r["observations"] and r["observations"] > 1)
    page = html.unescape(TestClient(create_app(store, refresh_s=0)).get(
        f"/study/{plan.name}").text)
    low, high = raced["pooled_interval"]
    shown = " ".join(re.sub(r"<[^>]+>", " ", page).split())
    assert (f"×{raced['pooled_speedup']:.3f} n={raced['observations']} [{low:.3f}, "
            f"{high:.3f}]; its first process ×{raced['search_speedup']:.3f}") in shown
    assert "search incumbent:" in page  # the note, as under `best`


def test_an_exhausted_space_waits_for_a_trial_another_process_holds(tmp_path, monkeypatch):
    """A space of one configuration, which another process holds (a worker that then
    dies, its claim released): the study does not end on 'the space looks exhausted'
    with nothing measured; it waits, then measures the configuration itself."""
    import yaml

    from autotune.flags.compose import config_key
    from autotune.study import reap as reap_module

    table = ReplayTable.load(NORM_ACT)
    ratios = table.ratios()
    fastest = min(ratios, key=lambda k: ratios[k])
    flags = dict(table.flags[fastest])
    params = {k: {"type": "categorical", "choices": [v], "source": "the table's fastest"}
              for k, v in flags.items()}
    (tmp_path / "one.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "one", "description": "one configuration",
        "backend": "cpu", "sources": [{"document": "norm-act table", "section": "fastest"}],
        "params": params}))
    plan = StudyPlan.of(name="one", space=load_space(str(tmp_path / "one.yaml")),
                        workload=resolve_benchmark("norm-act"), trials=4, sampler="random",
                        seed=0, fit=False)
    store = Store.open(f"sqlite:///{tmp_path}/one.db")
    runner = StudyRunner(plan, store, TableLauncher(table, load_catalog(), seed=0),
                         optuna.storages.InMemoryStorage())
    runner.run(limit=1)  # the baseline
    _, held = store.claim("one", runner.ctx.env_key, config_key(flags), Role.SEARCH, flags,
                          None, ("another-host", 4242))
    assert held is not None
    # that worker dies while the study waits for it (once the sampler has proposed the
    # held configuration MAX_REPEATED_PROPOSALS times): the wait's first reap releases it
    waits, released = [], []
    real_wait, real_reap = reap_module.wait_for_claims, reap_module.reap

    def wait_for_claims(ctx, roles):
        waits.append(roles)
        return real_wait(ctx, roles)

    def holder_dies(ctx):
        if waits and not released:
            released.append(store.release(held.id))
        return real_reap(ctx)

    monkeypatch.setattr(reap_module, "POLL_S", 0.01)
    monkeypatch.setattr(reap_module, "wait_for_claims", wait_for_claims)
    monkeypatch.setattr(reap_module, "reap", holder_dies)
    runner.run()
    searched = [r for r in store.runs("one") if r.role is Role.SEARCH]
    assert released and [r.flags for r in searched] == [flags]  # measured once it was free


# --- the rules one at a time (each kills mutants no study-level test told apart) ----------


def _ratio_run(s: Runs, role: Role, ratio: float, fingerprint: str, *, trial: int | None = None,
               flags: dict | None = None):
    return s.add(role, flags if flags is not None else {FAST: True}, ratio, trial=trial,
                 m=program(ratio, fingerprint))


def test_a_programs_estimate_follows_each_new_observation():
    """`observe` drops the cached ratios and pooled ratio: read between observations (the
    incremental `Pool`), they are those of every process so far."""
    from autotune.results.evidence import ProgramEvidence

    s = Runs()
    evidence = ProgramEvidence("A")
    evidence.observe(_ratio_run(s, Role.SEARCH, 0.8, "A"))
    assert (evidence.ratios, evidence.ratio) == (pytest.approx([0.8]), pytest.approx(0.8))
    evidence.observe(_ratio_run(s, Role.RACE, 1.0, "A", trial=0))
    assert evidence.ratios == pytest.approx([0.8, 1.0])
    assert evidence.ratio == pytest.approx((0.8 * 1.0) ** 0.5)  # the median of two logs


def test_only_paired_processes_with_baseline_steps_enter_a_programs_interval():
    s = Runs()
    for ratio in (0.9, 0.92):
        _ratio_run(s, Role.SEARCH if ratio == 0.9 else Role.RACE, ratio, "A", trial=0)
    # a third process of A with a stored ratio but no baseline steps of its own
    s.add(Role.CONFIRM, {FAST: True}, 0.95, trial=0,
          m=Measurement((0.95,) * 6, 1.0, mode=MeasureMode.PAIRED, fingerprint="A",
                        baseline_fingerprint="base"))
    only = pooled(s.runs)[0]
    assert only.n == 3  # its stored ratio is an observation
    estimate = only.estimate()
    assert estimate is not None and estimate.n_processes == 2  # but not a pair to resample


def test_a_run_without_its_own_pair_of_step_times_has_no_ratio():
    from autotune.ground.records import RunRecord, TrialOutcome
    from autotune.results.evidence import run_ratio

    def run(m: Measurement | None) -> RunRecord:
        return RunRecord(1, "s", 1, Role.SEARCH, {}, {}, TrialOutcome(OutcomeKind.OK, "", m),
                         WHEN, None, None)

    assert run_ratio(run(None)) is None
    direct = Measurement((1.0,) * 6, 1.0, mode=MeasureMode.DIRECT)
    assert run_ratio(run(direct)) is None  # steps, but no baseline steps beside them
    no_steps = Measurement((), 1.0, mode=MeasureMode.PAIRED, baseline_step_times_s=(1.0,) * 6)
    assert run_ratio(run(no_steps)) is None
    assert run_ratio(run(measurement(0.9))) == pytest.approx(0.9)  # from its steps


def test_a_pool_leaves_the_defaults_program_out_unless_asked():
    from autotune.results.evidence import Pool

    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    _ratio_run(s, Role.SEARCH, 0.9, "A")
    s.add(Role.SEARCH, {LEVEL: 2}, 0.95, m=measurement(0.95, same=True))
    pool = Pool(s.runs)  # the dashboard's view builds one so
    for run in s.runs:
        pool.add(run)
    assert [p.program for p in pool.ranked()] == ["A"]


def test_a_run_that_compiled_the_defaults_program_is_left_out_by_either_sign():
    """By its fingerprint matching its own baseline's (no baseline run among the runs), or
    by its fingerprint being the baseline run's (a DIRECT process names no baseline's)."""
    s = Runs()
    s.add(Role.SEARCH, {FAST: True}, 0.95, m=Measurement(
        (0.95,) * 6, 1.0, mode=MeasureMode.PAIRED, baseline_step_times_s=(1.0,) * 6,
        fingerprint="same", baseline_fingerprint="same"))
    assert pooled(s.runs) == []
    s = Runs()
    s.add(Role.BASELINE, {}, 1.0, m=measurement(1.0, same=True))
    s.add(Role.SEARCH, {FAST: True}, 0.95,
          m=Measurement((0.95,) * 6, 1.0, mode=MeasureMode.DIRECT, fingerprint="base"))
    assert pooled(s.runs) == []


def test_a_remeasurement_counts_toward_its_trials_program_and_is_no_member_of_it():
    """A race or confirmation process of trial N is an observation of trial N's program
    (even where its process compiled another fingerprint under other spellings of the
    flags), never one of the configurations behind it."""
    s = Runs()
    _ratio_run(s, Role.SEARCH, 0.9, "A")  # trial 0
    _ratio_run(s, Role.RACE, 0.92, "A-again", trial=0, flags={FAST: True, LEVEL: 3})
    _ratio_run(s, Role.CONFIRM, 0.94, "A-again", trial=0, flags={FAST: True, LEVEL: 3})
    found = pooled(s.runs)
    assert [(p.program, p.n) for p in found] == [("A", 3)]
    assert [r.role for r in found[0].members] == [Role.SEARCH]


def test_a_leader_at_exactly_the_defaults_time_is_not_raced():
    s = Runs()
    _ratio_run(s, Role.SEARCH, 1.0, "A")
    assert race_target(pooled(s.runs)) is None


def _lucb_runs(leader: tuple[float, ...], rivals: dict[str, tuple[float, ...]],
               others: int = 12) -> list:
    """The leader's processes (one searched, the rest raced), each rival's (all searched,
    as configurations compiled to one program), and `others` searched programs at 1.05."""
    s = Runs()
    _ratio_run(s, Role.SEARCH, leader[0], "L", flags={FAST: True})
    for i, ratio in enumerate(others * (1.05,)):
        _ratio_run(s, Role.SEARCH, ratio, f"other{i}", flags={WIDTH: i})
    for name, ratios in rivals.items():
        for i, ratio in enumerate(ratios):
            _ratio_run(s, Role.SEARCH, ratio, name, flags={LEVEL: f"{name}{i}"})
    for ratio in leader[1:]:
        _ratio_run(s, Role.RACE, ratio, "L", trial=0, flags={FAST: True})
    return pooled(s.runs)


@pytest.fixture
def lucb(monkeypatch: pytest.MonkeyPatch):
    """The lucb rule with a per-process noise of 0.05 (log ratio), whatever the runs say."""
    from autotune.results import evidence

    monkeypatch.setattr(evidence, "RACE_RULE", "lucb")
    monkeypatch.setattr(evidence, "process_noise", lambda programs: 0.05)
    return evidence


def test_the_lucb_challenger_is_the_rival_with_the_lowest_lower_bound(lucb):
    """Leader 0.90 over 3; X one process at 0.95 (lower bound 0.95 e^-0.082, upper
    0.95 e^0.082) and Y nine at 0.93 (0.93 e^-+0.027). X has the lower lower bound, Y the
    lower upper bound: the challenger is X, and with fewer processes than the leader it is
    the one measured. At 0.99, X's lower bound is above Y's: Y is the challenger, and the
    leader has fewer processes than Y, so the leader is measured."""
    found = _lucb_runs((0.90, 0.90, 0.90), {"X": (0.95,), "Y": (0.93,) * 9})
    assert [p.program for p in found[:3]] == ["L", "Y", "X"]
    assert lucb.race_target(found).program == "X"
    found = _lucb_runs((0.90, 0.90, 0.90), {"X": (0.99,), "Y": (0.93,) * 9})
    assert lucb.race_target(found).program == "L"


def test_the_lucb_bounds_narrow_with_the_root_of_the_processes(lucb):
    """Each bound is 1.64 x 0.05 / sqrt(9) = 0.027 (log) from its estimate over 9
    processes. Leader 0.90 (upper -0.078) and a rival at 0.91 (lower -0.122) overlap by
    0.044, over the 0.0198 of 2%: raced, and with as many processes each, the leader is
    measured. A rival at 0.95 (lower -0.079) is told apart. Bounds that widened with the
    processes (x sqrt(n), 0.246) would overlap there too."""
    found = _lucb_runs((0.90,) * 9, {"R": (0.91,) * 9})
    assert lucb.race_target(found).program == "L"  # a tie in processes: the leader
    assert lucb.race_target(_lucb_runs((0.90,) * 9, {"R": (0.95,) * 9})) is None


def test_the_lucb_rule_stops_at_exactly_the_least_gap(lucb, monkeypatch):
    """Told apart when the leader's upper bound lies at most `RACE_EPSILON` above the
    challenger's lower bound, that bound included; each bound is one `RACE_Z` wide."""
    import math

    found = _lucb_runs((0.90,) * 4, {"R": (0.95,) * 4})
    width = lucb.RACE_Z * 0.05 / 2  # over 4 processes
    gap = (math.log(0.90) + width) - (math.log(0.95) - width)
    monkeypatch.setattr(lucb, "RACE_EPSILON", gap)
    assert lucb.race_target(found) is None
    monkeypatch.setattr(lucb, "RACE_EPSILON", gap - 1e-9)
    assert lucb.race_target(found) is not None
    # bounds twice as wide on either side would still overlap at the least gap
    monkeypatch.setattr(lucb, "RACE_EPSILON", gap + width * 0.5)
    assert lucb.race_target(found) is None


def test_the_process_noise_pools_every_repeated_programs_spread():
    """The pooled standard deviation of log ratios over programs timed at least twice:
    C (once, listed first), A (logs +-0.1: 0.02 over 1 degree of freedom) and B (logs 0.2,
    0, -0.2: 0.08 over 2): sqrt(0.10 / 3). Exactly 2 degrees of freedom are enough."""
    import math

    from autotune.results import evidence

    s = Runs()
    _ratio_run(s, Role.SEARCH, 0.5, "C", flags={WIDTH: 1})
    for i, log in enumerate((0.1, -0.1)):
        _ratio_run(s, Role.SEARCH, math.exp(log), "A", flags={LEVEL: i})
    for i, log in enumerate((0.2, 0.0, -0.2)):
        _ratio_run(s, Role.SEARCH, math.exp(log), "B", flags={FAST: i})
    found = pooled(s.runs)
    assert found[0].program == "C"
    assert evidence.process_noise(found) == pytest.approx(math.sqrt(0.10 / 3))
    only_b = [p for p in found if p.program == "B"]
    assert evidence.process_noise(only_b) == pytest.approx(math.sqrt(0.08 / 2))
