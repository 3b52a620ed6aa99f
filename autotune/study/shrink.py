"""The shrink phase: the recommendation cut down to the flags that matter.

`autotune.results.shrink` decides, from the stored runs, what to measure
next (compile without a flag, time without it); this phase measures it
under one claim (`shrink:TRIAL`, role ABLATION) until the read model says
the shrinking is done. Runs already stored count: re-running continues.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from autotune.flags.compose import after_hlo_text, compiler_options
from autotune.ground.proc import raise_if_interrupted
from autotune.ground.records import ClaimRecord, ClaimVerdict, Role, RunRecord, TrialOutcome
from autotune.results.ranking import recommend
from autotune.results.shrink import Shrink, Step, shrink
from autotune.study.context import StudyContext
from autotune.study.plan import ShrinkEvent


def shrink_recommendation(ctx: StudyContext, repeats: int,
                          on_run: Callable[[ShrinkEvent], None] | None = None
                          ) -> Shrink | None:
    """Shrink the recommended configuration to the flags that matter, measuring what the
    read model asks for until it is done.

    Returns the final state, or None when nothing is recommended, the study
    is DIRECT, or another process shrinks it now (claim `shrink:TRIAL`). The
    claim is released at the end (as interrupted, so a later run with more
    repeats may take it).
    """
    plan, runs = ctx.plan, ctx.runs()
    rec = recommend(runs, plan.objectives, plan.memory_budget_bytes)
    if rec.run is None or not plan.paired:
        return None
    return shrink_trial(ctx, rec.run, repeats, on_run)


def shrink_trial(ctx: StudyContext, source: RunRecord, repeats: int,
                 on_run: Callable[[ShrinkEvent], None] | None = None) -> Shrink | None:
    """Shrink the configuration of `source` (a trial's search run), recommended or not
    (`autotune audit` ablates a flag set whatever it measured), as
    `shrink_recommendation` does: None when another process shrinks it now."""
    state = shrink(ctx.runs(), source, ctx.judge.catalog, repeats)
    if state.done:
        return state
    verdict, claim = ctx.claim(f"shrink:{state.trial_number}", Role.ABLATION, source.flags,
                               state.trial_number)
    if claim is None or verdict is not ClaimVerdict.CLAIMED:
        return None
    with ctx.held(claim):
        while state.next is not None:
            for _ in range(state.next.runs):
                raise_if_interrupted()
                outcome = _measure(ctx, state.trial_number, state.next, claim)
                if on_run:
                    on_run(ShrinkEvent(state.trial_number, state.next, outcome))
            state = shrink(ctx.runs(), source, ctx.judge.catalog, repeats)
    return state


def _measure(ctx: StudyContext, number: int, step: Step, claim: ClaimRecord) -> TrialOutcome:
    """Measure one step of shrinking under the held claim, stored under trial `number`."""
    reference = step.reference
    request = replace(ctx.judge.request(step.flags), reference=reference).with_job(
        reference_options=compiler_options(reference, ctx.judge.catalog)
        if reference is not None else None,
        reference_program_flags=after_hlo_text(reference or {}, ctx.judge.catalog))
    if not step.timed:
        request = request.compile_only()
    return ctx.measure(number, step.role, step.flags, request, claim)
