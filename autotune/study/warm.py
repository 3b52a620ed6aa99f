"""Warm start: a new study measures first what the team's earlier studies confirmed.

Once a study's baseline is measured (and its space fitted), `warm_configs` looks
in its database for earlier studies measured on the same backend and device kind
and what each lends (`_lent`): the configuration it recommends
(`results.ranking.recommend`; the minimal set that shrinking kept, where it
did), or its unconfirmed leader, and then its runners-up, up to `LEND_EACH`.
They are ranked by how alike their workloads are (`likeness`: the baselines'
compiled programs, op counts and collectives, and the workload, preset and
device count), and at most `WARM_FROM` configurations, each study's first
before any study's second, are mapped onto this study's space
(`Space.params_for`: their flags this space has, at values it takes) and queued
as the first search trials, before anything is sampled (`Search`), each measured
before the search's leader is raced (`LENT_BEFORE_RACE`) and timed whole, never
pruned (`PRUNE_LENT`). A warm start never skips confirmation: the queued trials
are raced and confirmed like any other. The plan records which studies it drew
from (`PLAN_WARM`), and `best` says so in its notes (and names a queued one that
`--trials` ran out before measuring).

The sampler is also given what those studies measured (`prior_trials`): each
program the `WARM_FROM` most alike timed, mapped onto this space, with its
pooled ratio against their defaults, as complete Optuna trials marked `prior`
(`add_priors`), weighted by likeness (`prior_copies`). They are evidence for
the model only: no run, no role, nothing counted toward `--trials`, nothing
recommended that was not measured here (`PLAN_PRIOR`). `--no-warm-start` turns
both off.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from autotune.flags.compose import config_key, effective_config
from autotune.ground.records import FlagValue, Role, RunRecord, StudyRecord
from autotune.results.confirmation import Confirmation
from autotune.results.evidence import pooled
from autotune.results.ranking import Order, main_runs, ordered, recommend, within_budget
from autotune.results.shrink import shrink
from autotune.results.study_results import study_catalog
from autotune.spaces import Space

#: How many earlier studies a warm start draws from, the most alike first, and the most
#: configurations it queues (`warm_configs`).
WARM_FROM = 3

#: How many configurations each earlier study lends a warm start (`_lent`): the one it
#: recommends (or its unconfirmed leader), then the next its confirmation measured faster
#: than XLA's defaults. A sibling's best is often not the new workload's, while one of its
#: runners-up is (docs/SEARCH_EVIDENCE.md, Warm start: 3 against 1, chosen on two pairs of
#: siblings and borne out on the other six). Read when used, so the benchmarks can set it.
LEND_EACH = 3

#: Whether every configuration a warm start queues is measured once before the search's
#: leader is raced (`StudyRunner._round`). Without it, a study of `--trials 3` measured
#: the baseline and the first lent configuration, then raced that one, so the second,
#: often the new workload's best where the first is the sibling's, was never measured
#: and confirmation had nothing else to confirm (README, Warm start). Read when used, so
#: the benchmarks can set it.
LENT_BEFORE_RACE = True

#: Whether a configuration a warm start lends may be pruned in its search process. A
#: sibling's evidence comes with it, and on a noisy workload one process can run a real
#: gain past the prune margin (norm-act tiny: its optimum, lent second, measured at 1.22
#: and pruned, so confirmation never saw it; README, Warm start). False: it is timed
#: whole, as the baseline is. Read when used, so the benchmarks can set it.
PRUNE_LENT = False


@dataclass(frozen=True)
class WarmConfig:
    """One configuration a warm start queues: from trial `trial` of study `study`, whose
    workload is `likeness` alike (higher is more), as Optuna `params` of this space
    (`key`: its effective configuration)."""

    study: str
    trial: int | None
    likeness: float
    params: dict[str, Any]
    key: str
    #: False: measured faster than the defaults there but not confirmed worth applying
    #: (the study's unconfirmed leader, or a runner-up: `_faster_confirmed`)
    confirmed: bool = True

    @property
    def label(self) -> str:
        """`STUDY#TRIAL`: the user attribute `warm_start` its queued Optuna trial carries."""
        return f"{self.study}#{self.trial}"

    def to_json(self) -> dict[str, Any]:
        """What the plan records of it (`PLAN_WARM`)."""
        return {"study": self.study, "trial": self.trial, "likeness": round(self.likeness, 3),
                "key": self.key, "confirmed": self.confirmed}


@dataclass(frozen=True)
class PriorTrial:
    """One program an earlier study timed, given to this study's sampler as evidence: from
    trial `trial` of study `study` (`likeness` alike), as Optuna `params` of this space,
    with its pooled time ratio `value` against that study's defaults, added `copies`
    times (`prior_copies`)."""

    study: str
    trial: int | None
    likeness: float
    params: dict[str, Any]
    value: float
    copies: int


def warm_configs(donors: list[Donor], space: Space, catalog: Any) -> list[WarmConfig]:
    """The configurations a study starts its search with, from its `donors` (`donors`):
    up to `LEND_EACH` per earlier study (`_lent`), every one confirmed worth applying
    there before any other, and within each, every study's first before any study's
    second, the most alike first; each distinct and other than XLA's defaults, at most
    `WARM_FROM`."""
    found: list[tuple[int, WarmConfig]] = []  # (its place in what its study lends, it)
    for donor in donors:
        for place, (trial, flags, confirmed) in enumerate(_lent(donor, catalog)[:LEND_EACH]):
            params = mapped_params(flags, space, catalog)
            if params is not None:
                found.append((place, WarmConfig(donor.record.name, trial, donor.likeness,
                                                *params, confirmed=confirmed)))
    found.sort(key=lambda lent: (not lent[1].confirmed, lent[0]))  # stable: by likeness
    distinct: dict[str, WarmConfig] = {}
    for _, warm in found:
        distinct.setdefault(warm.key, warm)
    return list(distinct.values())[:WARM_FROM]


def prior_trials(donors: list[Donor], study: StudyRecord, space: Space,
                 catalog: Any) -> list[PriorTrial]:
    """What the `WARM_FROM` most alike earlier studies measured, as evidence for this
    study's sampler: each program they timed (`results.evidence.pooled`) whose
    configuration this space can give, with its pooled ratio against their defaults,
    `copies` times by likeness (`prior_copies`). None for a study that does not minimise
    time alone (a prior is a time ratio)."""
    if tuple(study.objectives) != ("time",):
        return []
    found: list[PriorTrial] = []
    for donor in donors[:WARM_FROM]:
        for program in pooled(donor.runs, partial(within_budget,
                                                  budget=donor.record.memory_budget_bytes)):
            params = mapped_params(program.first.flags, space, catalog)
            if params is not None:
                found.append(PriorTrial(donor.record.name, program.first.trial_number,
                                        donor.likeness, params[0], program.ratio,
                                        prior_copies(donor.likeness)))
    return found


def add_priors(study: Any, space: Space, priors: list[PriorTrial]) -> None:
    """Add `priors` to the Optuna `study` as complete trials (each `copies` times), user
    attributes `prior` (the study it came from), `prior_trial` and `likeness`; they have
    no `role`, so nothing that reads the study's own trials (importance, reuse, roles)
    counts them, and they hold no run."""
    from optuna.trial import create_trial

    study.add_trials([
        create_trial(params=prior.params, distributions=space.distributions(prior.params),
                     value=prior.value, user_attrs={"prior": prior.study,
                                                    "prior_trial": prior.trial,
                                                    "likeness": round(prior.likeness, 3)})
        for prior in priors for _ in range(prior.copies)])


def prior_json(priors: list[PriorTrial]) -> list[dict[str, Any]]:
    """What the plan records of a prior (`PLAN_PRIOR`): per study drawn from, the programs
    given, its likeness and how many copies of each."""
    drawn: dict[str, dict[str, Any]] = {}
    for prior in priors:
        entry = drawn.setdefault(prior.study, {"study": prior.study, "programs": 0,
                                               "likeness": round(prior.likeness, 3),
                                               "copies": prior.copies})
        entry["programs"] += 1
    return list(drawn.values())


def prior_copies(alike: float) -> int:
    """How many times a prior observation is given to the sampler: its donor's likeness
    (0 to 3) rounded, at least once. TPE weighs every observation alike, so a more alike
    study's evidence weighs more by counting more often."""
    return max(1, round(alike))


@dataclass(frozen=True)
class Donor:
    """An earlier study that may lend evidence: its runs on this study's backend and
    device kind, and how alike its workload is (`likeness`)."""

    record: StudyRecord
    runs: list[RunRecord]
    likeness: float


def donors(store: Any, study: StudyRecord, runs: list[RunRecord]) -> list[Donor]:
    """The database's other studies measured on this study's backend and device kind, with
    a baseline there, the most alike first (ties: by name); none before this study's
    baseline ran (`runs`: this study's so far). Reads every other study's runs: call it
    once and hand the list to `warm_configs` and `prior_trials`."""
    mine = _baseline(runs)
    if mine is None or mine.environment is None:
        return []
    here = (mine.environment.backend, mine.environment.device_kind)
    found: list[Donor] = []
    for record in store.list_studies():
        if record.name == study.name:
            continue
        kept = [r for r in store.runs(record.name) if r.environment is not None
                and (r.environment.backend, r.environment.device_kind) == here]
        theirs = _baseline(kept)
        if theirs is not None:
            found.append(Donor(record, kept, likeness((study, mine), (record, theirs))))
    return sorted(found, key=lambda d: (-d.likeness, d.record.name))


def _lent(donor: Donor, catalog: Any) -> list[tuple[int | None, dict[str, FlagValue], bool]]:
    """What an earlier study lends a warm start, best first, as (its trial, the flags,
    confirmed worth applying there): the configuration it recommends (the minimal set
    where shrinking kept one), then its other configurations measured faster than XLA's
    defaults in confirmation (`_faster_confirmed`), these only where it minimises time
    alone (faster is then better); from a study that recommends none, its first is its
    unconfirmed leader. Its order is computed once."""
    record, kept = donor.record, donor.runs
    order = ordered(main_runs(kept), record.objectives, record.memory_budget_bytes)
    rec = recommend(kept, record.objectives, record.memory_budget_bytes, order=order)
    timed_only = tuple(record.objectives) == ("time",)
    faster = [(run.trial_number, dict(run.flags), conf.recommendable)
              for run, conf in _faster_confirmed(order) if run is not rec.run] \
        if timed_only else []
    if rec.recommended and rec.run is not None:
        state = shrink(kept, rec.run, study_catalog(catalog, record))
        return [(rec.run.trial_number, dict(state.minimal if state is not None and state.done
                                            else rec.run.flags), True), *faster]
    return faster


def _faster_confirmed(order: Order) -> list[tuple[RunRecord, Confirmation]]:
    """The configurations a study's confirmation measured faster than XLA's defaults, in
    its `confirmed_order`, with their confirmations: each whose point estimate is below
    1.0 (confirmed worth applying or not), compiled to a program of its own, its numerics
    sound. Queued by a warm start each is measured and confirmed like any other: a gain a
    noisy sibling could not confirm, or that was not its best, may be confirmed on the
    new workload."""
    found = []
    for run, conf in order:
        if conf is None:  # the rest were not confirmed
            break
        estimate = conf.estimate
        if (estimate is not None and estimate.ratio < 1.0 and not conf.same_program
                and not conf.numerics_failures):
            found.append((run, conf))
    return found


def _baseline(runs: list[RunRecord]) -> RunRecord | None:
    return next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok
                 and r.outcome.measurement is not None), None)


def mapped_params(flags: Mapping[str, FlagValue], space: Space, catalog: Any
            ) -> tuple[dict[str, Any], str] | None:
    """`flags` as params of `space` and the key of what they give, or None: the space
    cannot give the configuration's flags it has, or gives XLA's defaults."""
    params = space.params_for(flags, xla_default(catalog))
    if params is None:
        return None
    from optuna.trial import FixedTrial

    got = effective_config(space.sample(FixedTrial(params)), catalog)
    wanted = {f: v for f, v in effective_config(dict(flags), catalog).items()
              if f in space.flags()}
    if not got or config_key(got) != config_key({**wanted, **{f: v for f, v in got.items()
                                                               if f in space.fixed}}):
        return None
    return params, config_key(got)


def xla_default(catalog: Any) -> Callable[[str], FlagValue | None]:
    """flag -> XLA's default value of it from `catalog` (None for a flag it does not hold):
    what `Space.params_for` puts where a configuration leaves a flag out."""
    def default_of(flag: str) -> FlagValue | None:
        return catalog.get(flag).default if flag in catalog else None
    return default_of


def likeness(a: tuple[StudyRecord, RunRecord], b: tuple[StudyRecord, RunRecord]) -> float:
    """How alike the workloads of two studies are, each given as (study, its baseline run),
    from 0 (nothing shared) to 3: the cosine of their baselines' compiled programs (op
    counts and collectives, each count as log(1 + n)), plus 1 for the same workload,
    plus 0.5 each for the same preset and the same device count."""
    (study_a, run_a), (study_b, run_b) = a, b
    score = _cosine(_profile(run_a), _profile(run_b))
    score += 1.0 if study_a.benchmark == study_b.benchmark else 0.0
    score += 0.5 if study_a.preset == study_b.preset else 0.0
    ea, eb = run_a.environment, run_b.environment
    return score + (0.5 if ea is not None and eb is not None
                    and ea.device_count == eb.device_count else 0.0)


def _profile(run: RunRecord) -> dict[str, float]:
    """A baseline's compiled program as numbers: log(1 + count) per op and collective."""
    m = run.outcome.measurement
    if m is None:
        return {}
    ops = {f"op:{k}": math.log1p(v) for k, v in (m.hlo_stats or {}).items()}
    ops.update({f"collective:{kind}": math.log1p(stats.count)
                for kind, stats in (m.collectives or {}).items()})
    return ops


def _cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    dot = sum(v * b.get(k, 0.0) for k, v in a.items())
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0
