"""The race phase: measure the search's leading program again before sampling more.

The best single measurement of a noisy search is usually lucky; the unit of
evidence is the compiled program (`autotune.results.evidence`). While the
leader is backed by too few processes, each step of the study measures it
again (role RACE, claim `race:TRIAL:N`, counted in `--trials`) instead of
asking Optuna for something new. Racing is for PAIRED studies of the time
objective alone, and can be switched off (`options.racing`).
"""

from __future__ import annotations

from autotune.ground.records import ClaimVerdict, Role, RunRecord, TrialOutcome
from autotune.results.evidence import ProgramEvidence, pooled, race_target
from autotune.results.ranking import within_budget
from autotune.study.context import StudyContext
from autotune.study.search import StudyView


def race(ctx: StudyContext, view: StudyView) -> tuple[str, RunRecord | None]:
    """Measure the search's leader again when it is not yet backed by enough processes.

    A race run that failed is measured again under a key of its own, up to
    `RACE_RETRIES` times: a fault that killed its child must not leave the leader
    unbacked and, where the space has nothing else to measure, the study short of
    `--trials`.

    Returns ("skip", None) when there is nothing to race (racing off, the leader is
    being raced by another process, or its race failed past the retries),
    ("launched", run), or
    (FULL, None) when the study holds its trials.
    """
    target = leader(ctx, view)
    if target is None:
        return "skip", None
    first = target.first
    number = first.trial_number
    failed = failed_races(view.runs, number)
    if failed > RACE_RETRIES:
        return "skip", None
    judge = ctx.judge

    def settle(outcome: TrialOutcome) -> tuple[TrialOutcome, float | None]:
        outcome = judge.guard(outcome)
        return outcome, judge.ratio(outcome)

    key = f"race:{number}:{target.n}" + (f":{failed}" if failed else "")
    verdict, run = ctx.claimed_run(key, Role.RACE, first.flags, number,
                                   judge.request(first.flags), budget=True, settle=settle)
    if verdict is ClaimVerdict.FULL:
        return verdict, None
    return ("skip", None) if run is None else ("launched", run)


#: How many times a leader's race run that failed (a child killed, a crash, a timeout) is
#: measured again. The claim of a failed run is finished, so its retry needs a key of its
#: own (`race:TRIAL:N:FAILED`); past the retries the leader is left as the search has it.
RACE_RETRIES = 1


def failed_races(runs: list[RunRecord], trial_number: int | None) -> int:
    """The race runs of `trial_number` that did not succeed."""
    return sum(r.role is Role.RACE and r.trial_number == trial_number and not r.outcome.ok
               for r in runs)


def leader(ctx: StudyContext, view: StudyView) -> ProgramEvidence | None:
    """The program to measure again now (`results.evidence.race_target`), or None: racing
    is off (`options.racing` False, DIRECT mode, an objective other than time alone) or the
    baseline is not measured yet."""
    plan = ctx.plan
    if not (plan.options.racing and plan.paired and plan.time_only and view.index.baseline_ok()):
        return None
    return race_target(pooled(view.runs, lambda r: within_budget(r, plan.memory_budget_bytes)))
