"""Warm start (issue 34): a new study measures first what earlier studies confirmed.

Real `StudyRunner` studies on recorded tables (`TableLauncher` answers the trials from
processes measured on a real machine), two studies in one database: the sibling is
searched and confirmed, then the new study begins with the sibling's recommendation
mapped onto its space, records where it came from, and says so in `best`'s notes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import optuna
import pytest
from optuna.trial import FixedTrial

from autotune.flags.catalog import load_catalog
from autotune.flags.compose import config_key, effective_config
from autotune.ground.records import (
    PLAN_WARM,
    Environment,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
)
from autotune.launch.launcher import TrialRequest
from autotune.launch.replay import ReplayTable, TableLauncher
from autotune.results.notes import study_notes
from autotune.results.ranking import confirmed_order, recommend
from autotune.spaces import load_space
from autotune.storage import Store
from autotune.study.plan import StudyPlan
from autotune.study.runner import StudyRunner
from autotune.study.warm import likeness

ROOT = Path(__file__).resolve().parents[1]
TABLE = ReplayTable.load(ROOT / "benchmarks/tables/norm-act-small.json")
SPACE = load_space(str(ROOT / TABLE.meta["space"]))
CATALOG = load_catalog()
CPU = Environment("replay", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 1)
GPU = replace(CPU, backend="gpu", device_kind="NVIDIA H100")
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


def _runner(store: Store, name: str, trials: int, seed: int, facts: Environment = CPU,
            **options: object) -> StudyRunner:
    plan = StudyPlan.of(name=name, space=SPACE, workload=TABLE.workload(ROOT), trials=trials,
                        sampler="random", seed=seed, preset="small", devices=1, **options)
    return StudyRunner(plan, store, TableLauncher(TABLE, CATALOG, seed=seed),
                       optuna.storages.InMemoryStorage(), facts=facts)


def _sibling(store: Store, facts: Environment = CPU) -> RunRecord:
    """A searched and confirmed sibling study whose recommendation is a configuration."""
    for seed in range(20):
        runner = _runner(store, f"sibling-{seed}", 30, seed, facts)
        runner.run()
        runner.confirm(3, 2, cap=16)
        rec = recommend(store.runs(f"sibling-{seed}"))
        if rec.recommended and rec.run is not None:
            return rec.run
        store.delete_study(f"sibling-{seed}")
    raise AssertionError("no seed of 20 confirmed a configuration on norm-act")


@dataclass(frozen=True)
class SiblingCopy:
    """A database holding one searched and confirmed sibling (`_sibling`), as a closed
    SQLite file's bytes, and where its recommendation is."""

    data: bytes
    study: str
    run_id: int

    def at(self, path: Path) -> str:
        """Write a copy of the database at `path`; returns its URL."""
        path.write_bytes(self.data)
        return f"sqlite:///{path}"

    def donor(self, store: Store) -> RunRecord:
        """The sibling's recommended run, read from a copy of the database."""
        return next(r for r in store.runs(self.study) if r.id == self.run_id)


@pytest.fixture(scope="session")
def sibling() -> SiblingCopy:
    """`_sibling` searched and confirmed once per test process, before any test patches a
    constant: the tests that begin with a confirmed sibling start from copies of it.
    Coverage (mutmut's map of tests to code) credits the search to the first test that
    asks for the fixture, so `test_a_copy_of_the_sibling_holds_its_confirmed_recommendation`
    comes first and checks what the search left."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "sibling.db"
        with Store.open(f"sqlite:///{path}") as store:  # closed: its log written back
            donor = _sibling(store)
        return SiblingCopy(path.read_bytes(), donor.study_name, donor.id)


def _key(flags: dict) -> str:
    return config_key(effective_config(flags, CATALOG))


def test_a_copy_of_the_sibling_holds_its_confirmed_recommendation(
        sibling: SiblingCopy, tmp_path: Path):
    with Store.open(sibling.at(tmp_path / "copy.db")) as store:
        donor = sibling.donor(store)
        rec = recommend(store.runs(sibling.study))
        assert rec.recommended and rec.run is not None and rec.run.id == donor.id
        assert donor.flags  # a configuration, not the defaults


def test_a_new_study_begins_with_its_siblings_confirmed_configuration(
        sibling: SiblingCopy, tmp_path: Path):
    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        donor = sibling.donor(store)
        runner = _runner(store, "new", 4, 99)
        runner.run()
        runs = [r for r in store.runs("new") if r.role is Role.SEARCH]
        assert _key(dict(runs[0].flags)) == _key(dict(donor.flags))  # first, before sampling
        record = store.get_study("new")
        assert record.plan is not None
        drawn = [(d["study"], d["trial"]) for d in record.plan[PLAN_WARM]]
        assert drawn[0] == (donor.study_name, donor.trial_number)
        assert drawn[1:] == _runners_up(store, donor)[:len(drawn) - 1] and len(drawn) > 1
        assert [_key(dict(r.flags)) for r in runs[:len(drawn)]] == [  # all before sampling
            d["key"] for d in record.plan[PLAN_WARM]]
        notes = [n.text for n in study_notes(record, store.runs("new"), []) if
                 n.kind == "warm_start"]
        assert notes and f"'{donor.study_name}' trial {donor.trial_number}" in notes[0]
        cold = _runner(store, "cold", 4, 99, warm_start=False)
        cold.run()
        assert cold.warm_start() == [] and PLAN_WARM not in (store.get_study("cold").plan or {})


def test_every_lent_configuration_is_measured_before_the_leader_is_raced(
        sibling: SiblingCopy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`LENT_BEFORE_RACE`: with a budget of the baseline and the lent configurations, each
    lent one is measured; without it, the first (measured faster than the defaults) was
    raced and the budget ran out before the last was measured."""
    import autotune.study.warm as warm

    def roles_and_keys(name: str) -> tuple[list[Role], set[str], list[str]]:
        record = store.get_study(name)
        lent = [d["key"] for d in (record.plan or {})[PLAN_WARM]]
        runs = [r for r in store.runs(name)  # what `--trials` counts, not the fit's compiles
                if r.role in (Role.BASELINE, Role.SEARCH, Role.RACE)]
        return [r.role for r in runs], {_key(dict(r.flags)) for r in runs}, lent

    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        probe = _runner(store, "probe", 1, 5)
        probe.run()
        lent = len(probe.warm_start())
        assert lent > 1
        store.delete_study("probe")  # every new study draws from the sibling alone
        monkeypatch.setattr(warm, "LENT_BEFORE_RACE", False)
        for seed in range(10):  # a seed whose first lent configuration measured faster
            _runner(store, f"raced-{seed}", 1 + lent, seed).run()
            roles, keys, drawn = roles_and_keys(f"raced-{seed}")
            store.delete_study(f"raced-{seed}")
            if Role.RACE in roles:
                break
        assert Role.RACE in roles and not set(drawn) <= keys
        monkeypatch.setattr(warm, "LENT_BEFORE_RACE", True)
        _runner(store, "lent-first", 1 + lent, seed).run()
        roles, keys, drawn = roles_and_keys("lent-first")
        assert roles == [Role.BASELINE] + [Role.SEARCH] * lent and set(drawn) <= keys


def test_a_lent_configuration_is_timed_whole_and_a_sampled_one_may_be_pruned(
        sibling: SiblingCopy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`PRUNE_LENT` False: one noisy process must not overturn a sibling's evidence, so the
    search process of a lent configuration carries no prune limit; a sampled one does
    once there is a best to prune against. True: the lent ones after the first do too."""
    import autotune.study.warm as warm
    from autotune.study.search import Search

    noted: dict[str, tuple[object, object]] = {}
    request = Search.request

    def noting(self: Search, role: Role, config: dict, *rest: object, **named: object
               ) -> TrialRequest:
        made = request(self, role, config, *rest, **named)
        if role is Role.SEARCH:
            noted.setdefault(_key(config), (made.job.prune_ratio, made.job.prune_curve))
        return made

    monkeypatch.setattr(Search, "request", noting)

    def limits(name: str) -> tuple[list[tuple[object, object]], list[tuple[object, object]]]:
        noted.clear()
        _runner(store, name, 8, 3).run()
        drawn = {d["key"] for d in (store.get_study(name).plan or {})[PLAN_WARM]}
        store.delete_study(name)
        lent = [v for k, v in noted.items() if k in drawn]
        sampled = [v for k, v in noted.items() if k not in drawn]
        assert len(lent) == len(drawn) > 1 and sampled
        return lent, sampled

    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        lent, sampled = limits("whole")
        assert lent == [(None, None)] * len(lent)
        assert any(v != (None, None) for v in sampled)
        monkeypatch.setattr(warm, "PRUNE_LENT", True)
        lent, _ = limits("pruned")
        assert any(v != (None, None) for v in lent[1:])


def _measured_faster(store: Store, study: str) -> list[RunRecord]:
    """The runs of `study` whose confirmation measured them faster than the defaults (own
    program, numerics sound), in its confirmed order: what a warm start may lend."""
    found = []
    for run, conf in confirmed_order(store.runs(study)):
        if conf is None:
            break
        if conf.estimate is not None and conf.estimate.ratio < 1.0 and not conf.same_program \
                and not conf.numerics_failures:
            found.append(run)
    return found


def _runners_up(store: Store, donor: RunRecord) -> list[tuple[str, int | None]]:
    """(study, trial) of the configurations other than `donor` that its study's
    confirmation measured faster than the defaults, in its confirmed order."""
    return [(run.study_name, run.trial_number)
            for run in _measured_faster(store, donor.study_name)
            if run.trial_number != donor.trial_number]


def test_a_sibling_lends_only_its_recommendation_when_it_lends_one(
        sibling: SiblingCopy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import autotune.study.warm as warm

    monkeypatch.setattr(warm, "LEND_EACH", 1)
    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        donor = sibling.donor(store)
        runner = _runner(store, "new", 4, 99)
        runner.run()
        assert [(w.study, w.trial, w.confirmed) for w in runner.warm_start()] == [
            (donor.study_name, donor.trial_number, True)]


def test_a_sibling_that_weighs_memory_too_lends_no_runners_up(sibling: SiblingCopy,
                                                             tmp_path: Path):
    """Runners-up are lent for being faster: a study that also minimises memory ranks
    otherwise, so it lends at most what it recommends."""
    from autotune.study.warm import Donor, _lent

    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        donor = sibling.donor(store)
        record = store.get_study(donor.study_name)
        runs = store.runs(donor.study_name)
        assert len(_lent(Donor(record, runs, 3.0), CATALOG)) > 1
        both = replace(record, objectives=("time", "memory"))
        assert len(_lent(Donor(both, runs, 3.0), CATALOG)) <= 1


def _unconfirmed_sibling(store: Store) -> RunRecord:
    """A searched sibling whose confirmation confirmed nothing (a cap of 4 processes) but
    measured a configuration faster than the defaults: its leader."""
    for seed in range(40):
        name = f"unsure-{seed}"
        runner = _runner(store, name, 30, seed)
        runner.run()
        runner.confirm(3, 2, cap=4)
        if not recommend(store.runs(name)).recommended and (
                faster := _measured_faster(store, name)):
            return faster[0]
        store.delete_study(name)
    raise AssertionError("no seed of 40 left norm-act's leader unconfirmed")


def test_a_sibling_that_confirmed_nothing_lends_its_leader_after_confirmed_ones(
        tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'warm.db'}") as store:
        leader = _unconfirmed_sibling(store)
        runner = _runner(store, "new", 4, 99)
        runner.run()
        lent = [(w.study, w.trial) for w in runner.warm_start()]
        assert lent[0] == (leader.study_name, leader.trial_number)
        assert lent[1:] == _runners_up(store, leader)[:len(lent) - 1]
        assert not any(w.confirmed for w in runner.warm_start())
        runs = [r for r in store.runs("new") if r.role is Role.SEARCH]
        assert _key(dict(runs[0].flags)) == _key(dict(leader.flags))  # first, before sampling
        record = store.get_study("new")
        notes = [n.text for n in study_notes(record, store.runs("new"), []) if
                 n.kind == "warm_start"]
        assert any(f"the leaders of '{leader.study_name}' trial {leader.trial_number}" in n
                   and "not confirmed" in n for n in notes), notes
        _sibling(store)  # a confirmed configuration goes before any leader
        later = _runner(store, "later", 4, 98)
        later.run()
        confirmed = [w.confirmed for w in later.warm_start()]
        assert confirmed[0] and confirmed == sorted(confirmed, reverse=True), confirmed


def test_a_sibling_measured_on_another_device_kind_is_not_drawn_from(tmp_path: Path):
    with Store.open(f"sqlite:///{tmp_path / 'warm.db'}") as store:
        _sibling(store, facts=GPU)
        runner = _runner(store, "new", 3, 99)
        runner.run()
        assert runner.warm_start() == []
        assert PLAN_WARM not in (store.get_study("new").plan or {})


def test_every_configuration_of_the_space_maps_back_onto_it():
    """`Space.params_for` is the inverse of `sample` on the table's space: each of the
    table's configurations (effective flags) comes back as itself."""
    def default_of(flag: str) -> object:
        return CATALOG.get(flag).default if flag in CATALOG else None

    for flags in TABLE.flags.values():
        params = SPACE.params_for(flags, default_of)  # type: ignore[arg-type]
        assert params is not None, flags
        got = effective_config(SPACE.sample(FixedTrial(params)), CATALOG)
        assert config_key(got) == config_key(effective_config(dict(flags), CATALOG)), flags
    assert SPACE.params_for({"xla_backend_optimization_level": 7}) is None  # not in the space


def _baseline(ops: dict[str, int], devices: int = 1) -> RunRecord:
    m = Measurement(step_times_s=(1.0,), compile_time_s=1.0, mode=MeasureMode.PAIRED,
                    baseline_step_times_s=(1.0,), hlo_stats=ops)
    return RunRecord(1, "s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, "", m),
                     WHEN, replace(CPU, device_count=devices))


def _study(benchmark: str, preset: str) -> StudyRecord:
    return StudyRecord("s", "cpu", benchmark, preset, 1, MeasureMode.PAIRED, WHEN)


def test_likeness_ranks_the_same_workload_and_program_first():
    ops = {"fusion": 12, "dot": 4, "reduce": 2}
    same = likeness((_study("lj-md", "tiny"), _baseline(ops)),
                    (_study("lj-md", "small"), _baseline(ops)))
    family = likeness((_study("norm-act", "small"), _baseline(ops)),
                      (_study("norm-residual", "small"), _baseline({**ops, "add": 3})))
    other = likeness((_study("conv", "tiny"), _baseline({"convolution": 9})),
                     (_study("lj-md", "small"), _baseline(ops, devices=8)))
    assert same == pytest.approx(2.5)  # programs alike (1), workload (1), devices (0.5)
    assert 1.9 < family < 2.0 and other == 0.0


def test_recommend_names_what_the_databases_confirmed_studies_agree_on(
        sibling: SiblingCopy, tmp_path: Path):
    """`autotune recommend`: the flags the confirmed studies of a device kind recommend, as
    an export document `load_config` reads, with the evidence; XLA's defaults for a shape
    no study confirmed anything on."""
    import json

    from cli_runner import invoke

    from autotune.api.config import load_config
    from autotune.results.export import export_document

    url = sibling.at(tmp_path / "learned.db")
    with Store.open(url) as store:
        donor = sibling.donor(store)
        exported = export_document(store.get_study(donor.study_name),
                                   store.runs(donor.study_name), CATALOG)
    done = invoke("recommend", "--device-kind", "cpu", "--mesh", "1", "--storage", url,
                  "--format", "json", "-o", str(tmp_path / "learned.yaml"), cwd=tmp_path)
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert document["recommended"] is True and document["flags"] == exported["flags"]
    assert document["learned"]["agreeing"] == [donor.study_name]
    [evidence] = document["learned"]["evidence"]
    assert (evidence["study"], evidence["devices"]) == (donor.study_name, 1)
    assert evidence["interval"] == exported["measured"]["speedup_interval"]
    assert load_config(tmp_path / "learned.yaml").flags == exported["flags"]
    for shape in (["--device-kind", "NVIDIA H100"], ["--device-kind", "cpu", "--mesh", "8"],
                  ["--device-kind", "cpu", "--collectives", "all-gather"]):
        other = json.loads(invoke("recommend", *shape, "--storage", url, "--format", "json",
                                  cwd=tmp_path).output)
        assert (other["recommended"], other["flags"], other["learned"]["evidence"]) == (
            False, {}, []), shape
    table = invoke("recommend", "--device-kind", "cpu", "--storage", url, cwd=tmp_path)
    assert table.exit_code == 0 and "recommended: " in table.output
    assert donor.study_name in table.output


# --- (b) the sibling's runs as prior evidence for the sampler --------------------------------

def _tpe_runner(store: Store, name: str, trials: int, seed: int, **options: object
                ) -> StudyRunner:
    plan = StudyPlan.of(name=name, space=SPACE, workload=TABLE.workload(ROOT), trials=trials,
                        sampler="tpe", seed=seed, preset="small", devices=1, **options)
    return StudyRunner(plan, store, TableLauncher(TABLE, CATALOG, seed=seed),
                       store.url, facts=CPU)


def test_the_siblings_programs_are_given_to_the_sampler_once_as_prior_trials(
        sibling: SiblingCopy, tmp_path: Path):
    from autotune.ground.records import PLAN_PRIOR
    from autotune.results.evidence import pooled
    from autotune.study.warm import prior_copies

    with Store.open(sibling.at(tmp_path / "prior.db")) as store:
        (donor_study,) = [s for s in store.list_studies()]
        runner = _tpe_runner(store, "new", 5, 3)
        runner.run()
        trials = optuna.load_study(study_name="new", storage=store.url).trials
        prior = [t for t in trials if "prior" in t.user_attrs]
        programs = pooled([r for r in store.runs(donor_study.name)])
        copies = prior_copies(prior[0].user_attrs["likeness"])
        assert len(prior) == copies * len(programs) > 0  # every program maps onto this space
        assert {round(t.value, 9) for t in prior} == {round(p.ratio, 9) for p in programs}
        assert all(t.user_attrs["prior"] == donor_study.name and "role" not in t.user_attrs
                   for t in prior)
        from autotune.results.importance import compared_trials
        assert not [t for t in compared_trials(trials) if "prior" in t.user_attrs]
        # none is a run of this study, none counts toward --trials
        assert len([r for r in store.runs("new") if r.role in (Role.SEARCH, Role.RACE)]) == 4
        record = store.get_study("new")
        assert record.plan[PLAN_PRIOR] == [{"study": donor_study.name, "programs": len(programs),
                                            "likeness": prior[0].user_attrs["likeness"],
                                            "copies": copies}]
        notes = [n.text for n in study_notes(record, store.runs("new"), [])
                 if n.kind == "warm_start"]
        assert any(f"{len(programs)} of '{donor_study.name}'" in text for text in notes)
        # another process of the study (or a resumed one) adds none again
        again = _tpe_runner(store, "new", 6, 4)
        again.run()
        trials = optuna.load_study(study_name="new", storage=store.url).trials
        assert len([t for t in trials if "prior" in t.user_attrs]) == len(prior)


def test_no_warm_start_gives_the_sampler_nothing(sibling: SiblingCopy, tmp_path: Path):
    with Store.open(sibling.at(tmp_path / "cold.db")) as store:
        runner = _tpe_runner(store, "new", 4, 3, warm_start=False)
        runner.run()
        trials = optuna.load_study(study_name="new", storage=store.url).trials
        assert not [t for t in trials if "prior" in t.user_attrs]


# --- the rules one at a time (each kills mutants no study-level test told apart) ----------


def test_the_plan_records_each_lent_configuration_with_its_likeness_to_three_places():
    from autotune.study.warm import WarmConfig

    lent = WarmConfig("sib", 3, 2.123456, {"a": 1}, "--a=1", confirmed=False)
    assert lent.to_json() == {"study": "sib", "trial": 3, "likeness": 2.123, "key": "--a=1",
                              "confirmed": False}


def test_the_plan_records_the_priors_once_per_study_they_came_from():
    from autotune.study.warm import PriorTrial, prior_json

    priors = [PriorTrial("a", 1, 2.34567, {}, 0.9, 2), PriorTrial("b", 4, 1.0, {}, 0.95, 1),
              PriorTrial("a", 2, 2.34567, {}, 0.97, 2)]
    assert prior_json(priors) == [
        {"study": "a", "programs": 2, "likeness": 2.346, "copies": 2},
        {"study": "b", "programs": 1, "likeness": 1.0, "copies": 1}]


def test_a_prior_counts_as_often_as_its_likeness_rounds_to_and_at_least_once():
    from autotune.study.warm import prior_copies

    assert [prior_copies(x) for x in (0.0, 0.4, 1.6, 2.5, 3.0)] == [1, 1, 2, 2, 3]


def test_a_flag_the_catalog_lacks_has_no_xla_default():
    from autotune.study.warm import xla_default

    default_of = xla_default(CATALOG)
    assert default_of("xla_cpu_enable_fast_math") is False
    assert default_of("xla_no_such_flag") is None
    assert default_of("not_spelled_as_a_flag") is None  # the catalog's get would refuse it


def test_likeness_reads_the_collectives_and_shares_nothing_with_an_empty_program():
    import math

    from autotune.ground.records import CollectiveStats
    from autotune.study.warm import _cosine, _profile

    m = Measurement(step_times_s=(1.0,), compile_time_s=1.0, hlo_stats={"dot": 3},
                    collectives={"all-reduce": CollectiveStats(count=7, bytes=64)})
    run = RunRecord(1, "s", 0, Role.BASELINE, {}, {}, TrialOutcome(OutcomeKind.OK, "", m),
                    WHEN, CPU)
    assert _profile(run) == {"op:dot": pytest.approx(math.log1p(3)),
                             "collective:all-reduce": pytest.approx(math.log1p(7))}
    assert _cosine({}, {"op:dot": 1.0}) == 0.0 and _cosine({}, {}) == 0.0


def test_a_confirmation_at_exactly_the_defaults_time_is_lent_by_no_study():
    from autotune.results.confirmation import Confirmation
    from autotune.rules.stats import RatioEstimate
    from autotune.study.warm import _faster_confirmed

    def confirmed(ratio: float) -> tuple[RunRecord, Confirmation]:
        run = RunRecord(1, "s", 1, Role.SEARCH, {"a": 1}, {},
                        TrialOutcome(OutcomeKind.OK, "", None), WHEN, CPU)
        return run, Confirmation(1, {"a": 1}, RatioEstimate(ratio, ratio - 0.05, ratio + 0.05,
                                                             0.95, 4, 80),
                                 runs=4, failures=0, same_program=False)

    assert _faster_confirmed([confirmed(1.0)]) == []
    assert len(_faster_confirmed([confirmed(0.99)])) == 1


def test_a_study_under_a_memory_budget_lends_and_shows_only_what_fits_it(
        sibling: SiblingCopy, tmp_path: Path):
    """A sibling whose every configuration ran over its memory budget recommends none, so
    it lends nothing and gives the sampler no prior; the same runs without the budget do."""
    from autotune.results.evidence import pooled
    from autotune.study.warm import Donor, _lent, prior_trials

    with Store.open(sibling.at(tmp_path / "warm.db")) as store:
        donor = sibling.donor(store)
        record = store.get_study(donor.study_name)
        runs = store.runs(donor.study_name)
        assert _lent(Donor(record, runs, 3.0), CATALOG)
        found = prior_trials([Donor(record, runs, 3.0)], record, SPACE, CATALOG)
        firsts = {p.first.trial_number for p in pooled(runs)}
        assert found and {p.trial for p in found} == firsts  # each names the trial it was
        tight = replace(record, memory_budget_bytes=1)  # every run measured more
        assert _lent(Donor(tight, runs, 3.0), CATALOG) == []
        assert prior_trials([Donor(tight, runs, 3.0)], record, SPACE, CATALOG) == []


def test_a_configuration_maps_onto_a_space_that_fixes_a_flag_it_leaves_out(tmp_path: Path):
    """What a space fixes is part of every configuration it gives, not a mismatch with the
    lent flags; XLA's defaults map onto nothing (there is nothing to lend)."""
    from autotune.study.warm import mapped_params

    path = tmp_path / "fixing.yaml"
    path.write_text(
        "schema_version: 1\nname: fixing\ndescription: one param, one fixed flag\n"
        "backend: cpu\nsources:\n  - document: tests\n    section: warm start\n"
        "params:\n  xla_cpu_prefer_vector_width:\n    type: categorical\n"
        "    choices: [128, 256, 512]\n    source: tests\n"
        "fixed: {xla_cpu_use_xnnpack: false}\nrecommended: {}\n")
    fixing = load_space(str(path))
    mapped = mapped_params({"xla_cpu_prefer_vector_width": 512}, fixing, CATALOG)
    assert mapped is not None
    assert "xla_cpu_prefer_vector_width=512" in mapped[1]
    assert "xla_cpu_use_xnnpack=false" in mapped[1]
    assert mapped_params({}, SPACE, CATALOG) is None


def test_each_prior_trial_names_its_study_trial_and_likeness():
    from autotune.study.warm import PriorTrial, add_priors, mapped_params

    mapped = mapped_params({"xla_cpu_prefer_vector_width": 512}, SPACE, CATALOG)
    assert mapped is not None
    study = optuna.create_study()
    add_priors(study, SPACE, [PriorTrial("sib", 4, 2.34567, mapped[0], 0.9, 2)])
    assert [t.user_attrs for t in study.trials] == 2 * [
        {"prior": "sib", "prior_trial": 4, "likeness": 2.346}]
    assert [t.value for t in study.trials] == [0.9, 0.9]


def test_a_studys_baseline_is_its_first_successful_baseline_run():
    from autotune.study.warm import _baseline

    def run(number: int, role: Role, kind: OutcomeKind) -> RunRecord:
        m = Measurement(step_times_s=(1.0,), compile_time_s=1.0)
        return RunRecord(number, "s", number, role, {}, {}, TrialOutcome(kind, "", m), WHEN,
                         CPU)

    searched = run(1, Role.SEARCH, OutcomeKind.OK)
    failed = run(2, Role.BASELINE, OutcomeKind.CRASHED)
    baseline = run(3, Role.BASELINE, OutcomeKind.OK)
    assert _baseline([searched, failed, baseline]) is baseline
    assert _baseline([searched, failed]) is None


def test_donors_are_every_other_study_the_most_alike_first(tmp_path: Path):
    """Found whatever the order the studies were made in (the new one first here), none
    before the new study's baseline ran, and ranked by likeness: the same preset counts."""
    from autotune.study.warm import donors

    with Store.open(f"sqlite:///{tmp_path / 'warm.db'}") as store:
        new = _runner(store, "new", 1, 5)
        new.run()  # its baseline alone, before any other study exists
        record = store.get_study("new")
        assert donors(store, record, []) == []  # no baseline of its own yet
        no_env = [replace(r, environment=None) for r in store.runs("new")]
        assert donors(store, record, no_env) == []
        _sibling(store)
        plan = StudyPlan.of(name="other-size", space=SPACE, workload=TABLE.workload(ROOT),
                            trials=3, sampler="random", seed=1, preset="tiny", devices=1)
        StudyRunner(plan, store, TableLauncher(TABLE, CATALOG, seed=1),
                    optuna.storages.InMemoryStorage(), facts=CPU).run()
        found = donors(store, record, store.runs("new"))
        assert [d.record.name for d in found][-1] == "other-size"
        assert found[0].likeness > found[-1].likeness
        assert {d.record.name for d in found} >= {"other-size"} and len(found) == 2


def test_a_shrunk_recommendation_is_lent_as_its_minimal_set():
    """A sibling whose recommendation shrinking took down to the flags that matter lends
    that set, not the configuration as it was measured (the shrink rules' modelled
    compiler, `tests/test_shrink_rules.py`, makes the runs)."""
    from test_shrink_rules import WINNER, drive, timed

    from autotune.study.warm import Donor, _lent

    state, shrunk = drive(WINNER)
    assert state.done and state.minimal != WINNER  # type: ignore[attr-defined]
    record = StudyRecord("s", "cpu", "norm-act", "small", 1, MeasureMode.PAIRED, WHEN)

    def confirmed(runs: list[RunRecord]) -> list[RunRecord]:
        """The runs, then the baseline and 4 confirmation processes of trial 1 at 0.7."""
        runs = list(runs)
        for role in (Role.BASELINE, *4 * [Role.CONFIRM]):
            trial = 0 if role is Role.BASELINE else 1
            runs.append(RunRecord(len(runs) + 1, "s", trial, role,
                                  dict(WINNER) if trial else {}, {},
                                  TrialOutcome(OutcomeKind.OK, "", timed(0.7 if trial else 1.0)),
                                  WHEN, CPU))
        assert recommend(runs).recommended  # the premise: trial 1 confirmed
        return runs

    [lent] = _lent(Donor(record, confirmed(shrunk), 3.0), CATALOG)
    assert lent == (1, state.minimal, True)  # type: ignore[attr-defined]
    # shrinking cut short (its compile-only runs, not its timed removals): lent whole
    partial = [r for r in shrunk if r.role in (Role.SEARCH, Role.FINGERPRINT)]
    [lent] = _lent(Donor(record, confirmed(partial), 3.0), CATALOG)
    assert lent == (1, WINNER, True)
