"""Rank a study's measured configurations against its baseline.

Works on plain `RunRecord`s from the store; never touches the database itself.

A study measured in several environments (`RunRecord.env_key`: see
`records.Environment.key`) is ranked per environment, each on its own runs
against its own baseline (`environments`; the rows: `results.table.best_rows`). The study's order,
recommendation and everything derived from them (`ranked`, `ordered`,
`recommend`, `pareto_front`, the export) are its main environment's: the one
with the most timed runs (`main_runs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import groupby

from autotune.flags.compose import config_key
from autotune.ground.records import (
    Environment,
    OutcomeKind,
    Role,
    RunRecord,
)
from autotune.results import confirmation as _confirmation
from autotune.results import evidence as _evidence
from autotune.results.confirmation import Confirmation, Confirmations
from autotune.results.evidence import ProgramEvidence, pooled

#: A study's configurations best first, each with its confirmation (see `ordered`).
Order = list[tuple[RunRecord, Confirmation | None]]

#: Runs whose ratio is against XLA's defaults for a configuration the search chose (the
#: shrinking's runs are against the winner, or of a configuration it made).
RANKED_ROLES = frozenset({Role.SEARCH, Role.RECOMMENDED, Role.CONFIRM})


def peak_memory(run: RunRecord) -> int | None:
    """The run's peak memory in bytes, if measured."""
    m = run.outcome.measurement
    return m.peak_memory_bytes if m is not None else None


def within_budget(run: RunRecord, budget: int | None) -> bool:
    """False only when a budget is set and the run's measured peak memory exceeds it."""
    peak = peak_memory(run)
    return budget is None or peak is None or peak <= budget


@dataclass(frozen=True)
class EnvironmentGroup:
    """One environment a study was measured in.

    `key` is the runs' `env_key` (None: runs stored before environments were
    told apart, and nothing else); `runs` are its runs with those that belong
    to none (as `Store.runs(env_key=...)` reads them); `facts` the environment
    of its first run that has one; `hosts` every host its runs name; `timed`
    how many of its runs timed steps.
    """

    key: str | None
    runs: list[RunRecord]
    facts: Environment | None
    hosts: tuple[str, ...]
    timed: int


def environments(runs: Sequence[RunRecord]) -> list[EnvironmentGroup]:
    """The environments of a study's runs, the main one first.

    The main environment has the most timed runs; ties go to the first to
    have an OK baseline, then to the first measured. Runs without a key
    belong to every environment. A study of one environment (or none told
    apart) is one group holding every run.
    """
    keys = list(dict.fromkeys(r.env_key for r in runs if r.env_key is not None))
    if len(keys) <= 1:
        return [_group(keys[0] if keys else None, _as_list(runs))]
    groups = [_group(key, [r for r in runs if r.env_key in (key, None)]) for key in keys]
    first_baseline = {key: next((i for i, r in enumerate(runs) if r.env_key == key
                                 and r.role is Role.BASELINE and r.outcome.ok), len(runs))
                      for key in keys}
    return sorted(groups, key=lambda g: (-g.timed, first_baseline[g.key or ""]))


def _group(key: str | None, runs: list[RunRecord]) -> EnvironmentGroup:
    known = [r.environment for r in runs if r.environment is not None]
    timed = sum(1 for r in runs if r.outcome.measurement is not None
                and r.outcome.measurement.step_times_s)
    return EnvironmentGroup(key, runs, known[0] if known else None,
                            tuple(dict.fromkeys(e.host for e in known)), timed)


def _as_list(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """`runs` itself when it is a list (one reading's readers share it: `programs` keeps
    its last answer per list), else a list of it."""
    return runs if isinstance(runs, list) else list(runs)


def main_runs(runs: Sequence[RunRecord]) -> list[RunRecord]:
    """The runs of the study's main environment (`environments`): all of them when the
    study was measured in one."""
    if len({r.env_key for r in runs} - {None}) <= 1:
        return _as_list(runs)
    return environments(runs)[0].runs


def find_environment(runs: Sequence[RunRecord], key: str) -> EnvironmentGroup | None:
    """The environment whose key is `key` or starts with it (a prefix naming one only);
    None when no environment, or several, match."""
    groups = [g for g in environments(runs) if g.key is not None]
    exact = [g for g in groups if g.key == key]
    found = exact or [g for g in groups if key and (g.key or "").startswith(key)]
    return found[0] if len(found) == 1 else None


def ranked(runs: list[RunRecord], memory_budget: int | None = None) -> list[RunRecord]:
    """One run per compiled program, best pooled estimate first (`results.evidence`).

    Every timed observation of a program (search, racing, confirmation, any
    configuration compiled to it) counts toward its estimate; its row is the
    run that first timed it. A run that compiled to a program another trial
    timed (`same_program_as`) is that program's configuration, not a row. With
    a memory budget, runs whose peak memory exceeds it are left out: they are
    infeasible, never a winner. Only the main environment's runs count (`main_runs`).
    """
    return [p.first for p in programs(runs, memory_budget)]


#: Which programs the confirmation phase re-measures, its `--confirm` best first:
#: "pooled" (`ranked`'s order, the best pooled estimate), "backed" (the programs backed
#: by `evidence.BACKED_BY` processes first, each part in `ranked`'s order: a single lucky
#: process does not take a place from the search's incumbent) or "bound" (the best
#: pessimistic estimate first, the pooled log ratio plus `evidence.RACE_Z` times the
#: study's process noise over the root of the observations). A rule of `auto`, chosen
#: leave-one-workload-out (`benchmarks/scripts/leave_one_out.py`; the README's Search
#: section). Read when used.
CONFIRM_ORDER = "pooled"


def to_confirm(runs: list[RunRecord], memory_budget: int | None = None) -> list[RunRecord]:
    """`ranked(runs, memory_budget)` in the order the confirmation phase takes them
    (`CONFIRM_ORDER`), one run per program (the run that first timed it)."""
    found = programs(runs, memory_budget)
    if CONFIRM_ORDER == "backed":
        found = sorted(found, key=lambda p: not p.backed)  # stable: pooled order within
    elif CONFIRM_ORDER == "bound":
        noise = _evidence.process_noise(found)
        found = sorted(found, key=lambda p: math.log(p.ratio)
                       + _evidence.RACE_Z * noise / math.sqrt(max(p.n, 1)))
    return [p.first for p in found]


#: How many more configurations sequential confirmation takes on, one at a time, once
#: every target it has is closed (confirmed not worth more, given up, at the cap, or
#: confirmed with an estimate short of `confirmation.POINT_GAIN`) and none is
#: recommendable (`admit_next`; each is measured its rounds' count first). Chosen leave one
#: workload out with `POINT_GAIN` from 0 and 6 (README, Search, 2026-12-07): sixteen
#: tables of nineteen get 6 with `POINT_GAIN` 0.03, lj-md's three 0 and 0 (a tie with 0
#: and 0.03). Without `POINT_GAIN`, 6 confirmed conv's real 2.2% and was not picked.
#: Read when used, so the benchmarks can set it.
CONFIRM_MORE = 6


def admit_next(runs: list[RunRecord], targets: Sequence[RunRecord], admitted: int,
               memory_budget: int | None = None) -> RunRecord | None:
    """The next configuration sequential confirmation takes on once `targets` are closed,
    or None: none while a target is recommendable or `admitted` (taken on so far) has
    reached `CONFIRM_MORE`; else the first run of `to_confirm(runs, memory_budget)` whose
    trial is no target and that needs confirming."""
    if admitted >= CONFIRM_MORE:
        return None
    confs = Confirmations.of(runs)
    if any((c := confs.of_run(t)) is not None and c.recommendable for t in targets):
        return None
    taken = {t.trial_number for t in targets}
    return next((r for r in to_confirm(runs, memory_budget)
                 if r.trial_number not in taken and _confirmation.needs_confirmation(r)),
                None)


def programs(runs: list[RunRecord], memory_budget: int | None = None) -> list[ProgramEvidence]:
    """`evidence.pooled` of the main environment's runs within `memory_budget`, XLA's
    default program included (a configuration that compiled to it and was timed is a
    row too).

    One reading (`best`, a page) asks this several times of the same list: the last
    answer is kept for the same list object, length and budget (the list is held, so
    its id is not reused; the read model never changes a list it was given). Treat
    the result as read-only.
    """
    global _LAST_PROGRAMS
    last = _LAST_PROGRAMS
    if last is not None and last[0] is runs and last[1] == (len(runs), memory_budget):
        return last[2]
    found = pooled(main_runs(runs), lambda r: within_budget(r, memory_budget), defaults=True)
    _LAST_PROGRAMS = (runs, (len(runs), memory_budget), found)
    return found


_LAST_PROGRAMS: tuple[list[RunRecord], tuple[int, int | None], list[ProgramEvidence]] | None = None


def _measured_elsewhere(run: RunRecord) -> bool:
    m = run.outcome.measurement
    return m is not None and m.same_program_as is not None


def confirmed_order(runs: list[RunRecord], memory_budget: int | None = None) -> Order:
    """`ranked(runs)` reordered by what the confirmation phase found, in tiers.

    1. confirmed faster with the numerics guard passed, by the lower end of the
       speedup interval (the gain the evidence guarantees), largest first (under
       `CONFIRM_CONTEST` "separate", which measures them until they are told apart: by
       the estimate, fastest first);
    2. no measurable gain (an interval holding 1.0, or the baseline's program),
       by the confirmed ratio;
    3. not confirmed, in the search's order;
    4. confirmed slower, by the confirmed ratio;
    5. failed confirmation or broke the numerics guard, in the search's order.

    A search winner that was luck therefore drops below one the
    re-measurement upholds, and nothing unconfirmed outranks a confirmed gain.
    """
    confirmations = Confirmations.of(main_runs(runs))  # another environment's confirm nothing
    pairs = [(run, confirmations.of_run(run)) for run in ranked(runs, memory_budget)]
    return sorted(pairs, key=lambda p: _tier_key(*p))


def _tier_key(run: RunRecord, conf: Confirmation | None) -> tuple[int, float]:
    """(tier, order within it) of `confirmed_order`; Python's sort keeps the search's
    order among equal keys."""
    if conf is None:
        return (2, 0.0)
    estimate = conf.estimate
    if conf.numerics_failures or (estimate is None and not conf.same_program):
        return (4, 0.0)
    if conf.recommendable and estimate is not None:
        if _confirmation.CONFIRM_CONTEST == "separate":  # told apart: the best estimate
            return (0, estimate.ratio)
        return (0, -estimate.speedup_interval[0])
    ratio = estimate.ratio if estimate is not None else 1.0
    return (3, ratio) if conf.measured_slower else (1, ratio)


@dataclass(frozen=True)
class Recommendation:
    """What autotune recommends: a configuration, or XLA's defaults (`run` None).

    `reason` says why, in one sentence a user can act on.
    """

    run: RunRecord | None
    confirmation: Confirmation | None
    reason: str

    @property
    def recommended(self) -> bool:
        """True when a configuration beats XLA's defaults by the rule (else: keep them)."""
        return self.run is not None


def recommend(runs: list[RunRecord], objectives: Sequence[str] = ("time",),
              memory_budget: int | None = None, *, order: Order | None = None
              ) -> Recommendation:
    """The configuration to apply, or XLA's defaults when none is proven better.

    Time objective: the first of `confirmed_order` when it is `recommendable` (its
    confirmed interval and estimate clear `confirmation.MIN_GAIN` and `POINT_GAIN`) and
    no confirmation run broke the numerics guard. Memory alone: the lowest-memory
    configuration when its measured peak is below the baseline's (the search run passed
    the numerics guard or it would not be ranked) and no confirmation run broke the guard.

    `order` is `ordered(runs, objectives, memory_budget)` when the caller has
    it already (it is computed once per reading of a study, not once per figure).
    A study measured in several environments is recommended from its main one
    (`main_runs`).
    """
    runs = main_runs(runs)
    if order is None:
        order = ordered(runs, objectives, memory_budget)
    if tuple(objectives) == ("memory",):
        return _recommend_memory(runs, order)
    if order and order[0][1] is not None and order[0][1].recommendable:
        run, conf = order[0]
        return Recommendation(run, conf, _faster_text(conf))
    return Recommendation(None, None, _no_gain_reason(order, runs))


def _faster_text(conf: Confirmation | None) -> str:
    assert conf is not None and conf.estimate is not None
    low, high = conf.estimate.speedup_interval
    return (f"confirmed ×{conf.estimate.speedup:.3f} [{low:.3f}, {high:.3f}] faster than "
            f"XLA's defaults in {conf.good_runs} fresh processes; the numerics "
            "guard passed")


def _no_gain_reason(order: Order, runs: list[RunRecord]) -> str:
    confirmed = [(run, c) for run, c in order if c is not None]
    if not order:
        compiled = [r for r in runs if r.role in RANKED_ROLES and r.outcome.ok]
        base = next((r.trial_number for r in runs if r.role is Role.BASELINE), None)
        if compiled and all(r.outcome.measurement is not None
                            and r.outcome.measurement.same_program_as == base for r in compiled):
            return ("every configuration tried compiled to XLA's default program: the flags "
                    "change nothing the compiler does for this workload; keep XLA's defaults")
        if compiled:
            return "no configuration within the memory budget ran: keep XLA's defaults"
        if not any(r.role in RANKED_ROLES for r in runs):
            return "no configuration beside XLA's defaults was measured: keep XLA's defaults"
        return "no configuration ran successfully: keep XLA's defaults"
    if not confirmed:
        return ("no configuration was confirmed (the search's figures are one process each, "
                "and the best of many is usually lucky): keep XLA's defaults, or run the "
                "study again with --confirm K")
    # The defaults' own program is a row once timed (DIRECT confirmation times it): the
    # reason cites the best confirmed configuration that is another program.
    others = [(run, c) for run, c in confirmed if c is not None and not c.same_program]
    if not others:
        return ("every confirmed configuration compiled to XLA's default program: keep "
                "XLA's defaults")
    run, c = others[0]
    faster = _confirmation.floor_text()
    said = verdict_text(c)  # its processes once: a verdict of too few names them already
    if not _confirmation.names_its_processes(c.verdict(), c.good_runs):
        said += f" over {c.good_runs} fresh processes"
    return (f"no configuration was confirmed {faster} than XLA's defaults (the best confirmed, "
            f"trial {run.trial_number}: {said}): keep XLA's defaults")


def verdict_text(c: Confirmation | None) -> str:
    """A confirmation in words with its figure and interval, e.g. `×1.020 [0.980, 1.060]
    no measurable gain`."""
    if c is None:
        return "not confirmed"
    if c.same_program:
        return "no measurable gain (the baseline's program)"
    if c.estimate is None:
        return f"failed ({c.failures} of {c.runs} runs)"
    low, high = c.estimate.speedup_interval
    text = f"×{c.estimate.speedup:.3f} [{low:.3f}, {high:.3f}] {c.verdict()}"
    if c.numerics_failures:
        text += f", {c.numerics_failures} runs broke the numerics guard"
    return text


def _recommend_memory(runs: list[RunRecord], order: Order) -> Recommendation:
    base = next((peak_memory(r) for r in runs if r.role is Role.BASELINE and r.outcome.ok), None)
    if order and base is not None:
        run, conf = order[0]
        peak = peak_memory(run)
        clean = conf is None or conf.numerics_failures == 0
        if peak is not None and peak < base and clean:
            return Recommendation(run, conf, f"peak memory {peak} bytes, below the baseline's "
                                  f"{base} bytes; the numerics guard passed")
    return Recommendation(None, None, "no configuration needed less peak memory than XLA's "
                          "defaults: keep them")


def pick_reason(run: RunRecord, conf: Confirmation | None, rec: Recommendation) -> str:
    """Why an explicitly picked configuration (`export --rank/--trial`) is not the
    recommendation; its own verdict first."""
    if rec.run is not None and rec.run.id == run.id:
        return rec.reason
    if conf is None or not conf.recommendable:
        return f"explicit pick: {verdict_text(conf)}; not recommended over XLA's defaults"
    assert rec.run is not None
    return (f"explicit pick: {verdict_text(conf)}, but trial {rec.run.trial_number} ranks above "
            "it and is the recommendation")


def ordered(runs: list[RunRecord], objectives: Sequence[str] = ("time",),
            memory_budget: int | None = None) -> Order:
    """The study's configurations best first, by what it minimises.

    Time (alone or with memory): `confirmed_order`. Memory alone: lowest peak
    memory first, time breaking ties. Configurations over `memory_budget` are
    left out either way, and so are environments but the main one (`main_runs`).
    """
    if tuple(objectives) != ("memory",):
        return confirmed_order(runs, memory_budget)
    order = sorted(ranked(runs, memory_budget),
                   key=lambda r: (peak_memory(r) or math.inf, r.ratio or math.inf))
    confirmations = Confirmations.of(main_runs(runs))
    return [(run, confirmations.of_run(run)) for run in order]


def pareto_front(runs: list[RunRecord], memory_budget: int | None = None) -> list[RunRecord]:
    """The configurations no other one beats on both time and peak memory, fastest first.

    Candidates are the ranked configurations (within the budget) and the
    baseline (XLA's defaults are a valid answer too), of the main environment.
    """
    runs = main_runs(runs)
    base = [r for r in runs if r.role is Role.BASELINE and r.outcome.ok and r.ratio
            and within_budget(r, memory_budget)][:1]
    points = sorted((r for r in ranked(runs, memory_budget) + base
                     if peak_memory(r) is not None), key=_time_memory)
    front: list[RunRecord] = []
    least = math.inf  # the least memory of every faster point
    for _, same_time in groupby(points, key=lambda r: _time_memory(r)[0]):
        tied = list(same_time)
        memory = _time_memory(tied[0])[1]  # the group's least: it is sorted by memory
        if memory < least:  # nothing faster needs as little; within the time, the least
            front += [r for r in tied if _time_memory(r)[1] == memory]
        least = min(least, memory)
    return front


def _time_memory(run: RunRecord) -> tuple[float, int]:
    """(ratio, peak memory): what the Pareto front minimises, in sort order."""
    return run.ratio or math.inf, peak_memory(run) or 0


def over_budget(runs: list[RunRecord], memory_budget: int | None) -> int:
    """How many distinct configurations exceeded the memory budget: measured above it, or
    not timed at all because their compiled program needed more (`over_budget`)."""
    if memory_budget is None:
        return 0
    runs = main_runs(runs)
    untimed = {config_key(r.flags) for r in runs
               if r.outcome.kind is OutcomeKind.OVER_BUDGET and r.role is not Role.CONFIRM}
    return len(ranked(runs)) - len(ranked(runs, memory_budget)) + len(untimed)


def measured_elsewhere(runs: list[RunRecord]) -> int:
    """How many runs compiled to a program another trial had timed (and timed nothing)."""
    return sum(_measured_elsewhere(r) for r in runs)


