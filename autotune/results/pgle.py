"""What PGLE runs say: the performance run against the same configuration without a profile.

Each run is one fresh process that timed, in alternation, the configuration
(the reference) and its PGLE candidate (`autotune.child.pgle_phase`); the
runs are combined like any confirmation (`autotune.rules.stats.paired_ratio`: the
median of the per-process log ratios, a bootstrap interval over processes) and
judged by the same rule (`autotune.results.confirmation.Confirmation`): the
profile is worth keeping only when the whole interval lies on the faster side
and every run passed the numerics guard. A candidate that compiled to the
reference's very program (a backend whose compiler ignores the profile) can
gain nothing, and says so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.ground.records import FlagValue, MeasureMode, Role, RunRecord, TrialOutcome
from autotune.results.confirmation import (
    NUMERICS_KINDS,
    Confirmation,
    baseline_trial,
    needs_confirmation,
)
from autotune.results.ranking import ranked, recommend
from autotune.results.shrink import shrink
from autotune.rules.stats import paired_ratio


@dataclass(frozen=True)
class PgleVerdict:
    """PGLE runs of one configuration, judged.

    Attributes:
        confirmation: the runs as a confirmation of the candidate against the
            configuration without the profile (estimate, verdict, whether the
            profile is `recommendable`).
        facts: the `pgle` object of the first run that reported one (mode,
            profile path, costs, source, names found in the program, note).
        candidate_median_s, reference_median_s: the median over runs of each
            run's median step time with and without the profile.
        failure: the first failed run's kind and message, e.g. a stale profile.
    """

    confirmation: Confirmation
    facts: Mapping[str, Any]
    candidate_median_s: float | None
    reference_median_s: float | None
    failure: str | None

    @property
    def keep(self) -> bool:
        """Keep the profile: confirmed faster by the rule of every recommendation
        (`confirmation.worth_applying`) and every run passed the numerics guard."""
        return self.confirmation.recommendable


def pgle_verdict(outcomes: Sequence[TrialOutcome],
                 flags: Mapping[str, FlagValue] | None = None) -> PgleVerdict:
    """Judge the PGLE runs of one configuration (`flags`, for the record)."""
    good = [o.measurement for o in outcomes if o.ok and o.measurement is not None
            and o.measurement.mode is MeasureMode.PAIRED and o.measurement.step_times_s
            and o.measurement.baseline_step_times_s]
    estimate = paired_ratio([list(m.step_times_s) for m in good],
                            [list(m.baseline_step_times_s) for m in good]) if good else None
    same = bool(good) and all(m.same_program_as_baseline for m in good)
    confirmation = Confirmation(
        trial_number=0, flags=dict(flags or {}), estimate=estimate, runs=len(outcomes),
        failures=sum(1 for o in outcomes if not o.ok), same_program=same,
        numerics_failures=sum(1 for o in outcomes if o.kind in NUMERICS_KINDS))
    facts = next((dict(o.measurement.pgle) for o in outcomes
                  if o.measurement is not None and o.measurement.pgle), {})
    failed = next((o for o in outcomes if not o.ok), None)
    return PgleVerdict(
        confirmation, facts, _median([m.median_s for m in good]),
        _median([m.baseline_median_s for m in good]),
        None if failed is None else f"{failed.kind.value}: {failed.message}")


def _median(values: Sequence[float | None]) -> float | None:
    import statistics

    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def pgle_json(verdict: PgleVerdict) -> dict[str, Any]:
    """The verdict with stable keys (`autotune pgle --format json`).

    `speedup` is reference time over PGLE time (above 1.0: the profile helps),
    `speedup_interval` its interval; `keep` whether the profile is worth
    applying; `same_program` that the performance run compiled to the
    configuration's own program.
    """
    c = verdict.confirmation
    e = c.estimate
    facts = verdict.facts
    return {
        "mode": facts.get("mode"),
        "profile": facts.get("profile"),
        "profile_collected": facts.get("collected"),
        "profile_costs": facts.get("costs"),
        "profile_source": facts.get("source"),
        "names_in_program": facts.get("names_in_program"),
        "profile_fingerprint": facts.get("profile_fingerprint"),
        "runs": c.runs,
        "failed_runs": c.failures,
        "numerics_failures": c.numerics_failures,
        "same_program": c.same_program,
        "step_time_s": {"with_profile": verdict.candidate_median_s,
                        "without_profile": verdict.reference_median_s},
        "speedup": None if e is None else e.speedup,
        "speedup_interval": None if e is None else list(e.speedup_interval),
        "verdict": c.verdict(),
        "keep": verdict.keep,
        "note": facts.get("note") or "",
        "failure": verdict.failure,
    }


def failed_everywhere(verdict: PgleVerdict) -> bool:
    """No run timed anything: the profile was refused, or every run failed."""
    return verdict.confirmation.estimate is None


# --- PGLE in a study ------------------------------------------------------------------------

#: The artifact kind of a stored PGLE profile (`autotune.ground.records.ArtifactRecord`), before
#: the configuration's hash (`profile_kind`).
PROFILE_ARTIFACT = "pgle-profile"


def profile_kind(flags: Mapping[str, FlagValue]) -> str:
    """`pgle-profile:HASH`: the artifact kind of the profile of one configuration of a
    trial (a trial's full and shrunk flags each have their own)."""
    import hashlib

    text = json.dumps(dict(flags), sort_keys=True)
    return f"{PROFILE_ARTIFACT}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def exported_configuration(runs: list[RunRecord], objectives: Sequence[str],
                           memory_budget: int | None,
                           catalog: object) -> tuple[int | None, dict[str, FlagValue]]:
    """(trial, flags) of what `export` writes: the recommendation, shrunk to its minimal
    flags once shrinking is done, or XLA's defaults (the baseline's trial, no flags)."""
    rec = recommend(runs, objectives, memory_budget)
    if rec.run is None:
        return baseline_trial(runs), {}
    state = shrink(runs, rec.run, catalog)
    return rec.run.trial_number, dict(state.minimal if state.done else rec.run.flags)


def pgle_targets(runs: list[RunRecord], objectives: Sequence[str],
                 memory_budget: int | None, catalog: object,
                 top: int) -> list[tuple[int, dict[str, FlagValue]]]:
    """The configurations a study's PGLE phase measures, at most `top`: what `export`
    writes first (`exported_configuration`), then the best other configurations by the
    search's ranking (`ranked`), each with its full flags."""
    number, flags = exported_configuration(runs, objectives, memory_budget, catalog)
    found = [] if number is None else [(number, flags)]
    for run in ranked(runs, memory_budget):
        if len(found) >= top:
            break
        if run.trial_number is not None and run.trial_number != number \
                and needs_confirmation(run):
            found.append((run.trial_number, dict(run.flags)))
    return found[:top]


def pgle_runs(runs: Sequence[RunRecord], trial_number: int,
              flags: Mapping[str, FlagValue]) -> list[RunRecord]:
    """The PGLE runs of trial `trial_number` with exactly `flags`, in the order they ran."""
    return [r for r in runs if r.role is Role.PGLE and r.trial_number == trial_number
            and dict(r.flags) == dict(flags)]


def study_verdicts(runs: Sequence[RunRecord]) -> list[tuple[int, PgleVerdict]]:
    """Each PGLE-measured configuration of a study (trial number, verdict), by trial."""
    groups: dict[tuple[int, str], list[RunRecord]] = {}
    for run in runs:
        if run.role is Role.PGLE and run.trial_number is not None:
            key = (run.trial_number, json.dumps(dict(run.flags), sort_keys=True))
            groups.setdefault(key, []).append(run)
    return [(number, pgle_verdict([r.outcome for r in group], group[0].flags))
            for (number, _), group in sorted(groups.items())]


def verdict_text(number: int, verdict: PgleVerdict) -> str:
    """One sentence: what PGLE did for trial `number`'s configuration."""
    c = verdict.confirmation
    head = f"PGLE on trial {number}'s flags"
    if c.estimate is None:
        return f"{head}: no run was timed ({verdict.failure})"
    low, high = c.estimate.speedup_interval
    kept = ("kept: `export` carries the profile" if verdict.keep
            else f"not kept ({c.verdict()}"
            + (", the same compiled program" if c.same_program else "") + ")")
    note = f"; {verdict.facts['note']}" if verdict.facts.get("note") else ""
    return (f"{head}: ×{c.estimate.speedup:.3f} [{low:.3f}, {high:.3f}] over the same flags "
            f"without a profile, {c.runs} processes: {kept}{note}")


def kept_profile_key(runs: Sequence[RunRecord], trial_number: int | None,
                     flags: Mapping[str, FlagValue]) -> tuple[int, str] | None:
    """(trial, environment key) of the stored profile behind an export's kept PGLE: that
    of the PGLE runs of exactly `flags` (the configuration's, before the performance run's
    flags are added) under `trial_number`, or under the baseline's trial for XLA's
    defaults. None when there are none."""
    number = trial_number if trial_number is not None else baseline_trial(list(runs))
    if number is None:
        return None
    keyed = next((r for r in pgle_runs(runs, number, flags) if r.env_key is not None), None)
    return None if keyed is None or keyed.env_key is None else (number, keyed.env_key)
