"""The confirmation phase: the best configurations re-measured in fresh processes.

The best of many noisy trials is usually lucky. After the search, the `top`
best configurations (`autotune.results.ranking.to_confirm`, those that
`needs_confirmation`) are measured again, round by round: round r measures
every target once (in DIRECT mode after one baseline process), so drift hits
all of them alike. Each run is a claim (`confirm:TRIAL:ROUND`), so processes
of a study share the rounds and re-running continues.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autotune.ground.proc import raise_if_interrupted
from autotune.ground.records import ClaimState, FlagValue, Role, RunRecord
from autotune.results.confirmation import (
    baseline_trial,
    confirm_runs,
    needs_confirmation,
    sequential_next,
)
from autotune.results.ranking import admit_next, to_confirm
from autotune.study.context import StudyContext
from autotune.study.plan import ConfirmEvent
from autotune.study.reap import wait_for_claims, wait_for_search


def confirm(ctx: StudyContext, top: int, repeats: int,
            on_run: Callable[[ConfirmEvent], None] | None = None, cap: int = 0,
            on_start: Callable[[int], None] | None = None,
            steps: int | None = None) -> list[RunRecord]:
    """Re-measure the `top` best configurations `repeats` times each, interleaved; then,
    up to `cap` processes each, sequentially (`sequential`). Each process times `steps`
    steps (`--confirm-steps`; None: the study's `--steps`).

    `on_start` is told how many configurations are confirmed, once they are known and
    only when there is at least one (a search that measured nothing beside XLA's
    defaults has nothing to confirm).

    Waits first for other processes' search trials, so every process confirms
    the same leaders. Configurations over the memory budget are not
    candidates. Runs already made (an interrupted confirmation) count.
    Returns the configurations confirmed (their search runs), those sequential
    confirmation took on included.
    """
    wait_for_search(ctx)
    runs = ctx.runs()
    targets = [r for r in to_confirm(runs, ctx.plan.memory_budget_bytes)
               if needs_confirmation(r)][:top]
    if targets and on_start:
        on_start(len(targets))
    done = 0
    while pending := _rounds(ctx, runs, targets, repeats):
        total = done + len(pending)
        for number, flags, round_ in pending:
            raise_if_interrupted()
            _, run = ctx.claimed_run(f"confirm:{number}:{round_}", Role.CONFIRM, flags,
                                     number, ctx.judge.request(flags, steps))
            if run is not None:
                done += 1
                if on_run:
                    on_run(ConfirmEvent(number, run.outcome, done, total))
        # Rounds another process held: wait for them; a holder that died has its claim
        # released (reaped), and the round is measured here on the next pass.
        if not wait_for_claims(ctx, frozenset({Role.CONFIRM})):
            break
        runs = ctx.runs()
    if cap > repeats:
        sequential(ctx, targets, cap, on_run, done, repeats, steps)
    return targets


def sequential(ctx: StudyContext, targets: list[RunRecord], cap: int,
               on_run: Callable[[ConfirmEvent], None] | None, done: int, repeats: int,
               steps: int | None = None) -> None:
    """Sequential confirmation: measure the leader once more at a time until it is
    recommendable (`worth_applying`: its interval below 1 - `MIN_GAIN`, its estimate below
    1 - `POINT_GAIN`), is closed unrecommended, shows no gain worth more (the next leader's turn),
    or it has `cap` processes (it is not recommended; `best` shows its interval). Which
    target is next, and when it ends: `autotune.results.confirmation.sequential_next`;
    once every target is closed with none recommendable, the next configuration in the
    confirmation order is taken on, up to `autotune.results.ranking.CONFIRM_MORE` (6 as
    shipped), counted in this process and appended to `targets`; it is measured
    `repeats` times (the rounds' count) before it is judged.
    Each run is a claim `confirm:TRIAL:ROUND` like the rounds before it."""
    admitted = 0
    taken_on: RunRecord | None = None
    while True:
        runs = ctx.runs()
        target: RunRecord | None
        if taken_on is not None and len(confirm_runs(runs, taken_on.trial_number)) < repeats:
            target = taken_on  # its rounds first, as the first targets had theirs
        elif (target := sequential_next(runs, targets, cap)) is None:
            target = admit_next(runs, targets, admitted, ctx.plan.memory_budget_bytes)
            if target is None:
                return
            targets.append(target)
            admitted, taken_on = admitted + 1, target
        raise_if_interrupted()
        number = target.trial_number
        assert number is not None
        claims = ctx.store.claims(ctx.name, [ClaimState.DONE, ClaimState.RUNNING],
                                  env_key=ctx.env_key)
        if any(c.state is ClaimState.RUNNING and c.key.startswith(f"confirm:{number}:")
               for c in claims):
            return  # another process measures the leader now: it goes on from here
        [round_] = _free_rounds({c.key for c in claims}, number, 1)
        _, run = ctx.claimed_run(f"confirm:{number}:{round_}", Role.CONFIRM, target.flags,
                                 number, ctx.judge.request(target.flags, steps))
        if run is None:  # another process holds this round: it goes on from here
            return
        done += 1
        if on_run:
            on_run(ConfirmEvent(number, run.outcome, done, done, cap=cap,  # as the cap counts
                                processes=len(confirm_runs(runs, number)) + 1))


def _rounds(ctx: StudyContext, runs: list[RunRecord], targets: list[RunRecord],
            repeats: int) -> list[tuple[int, Mapping[str, FlagValue], int]]:
    """(trial number, flags, round) of each run still to make, round by round.

    A configuration needs `repeats` re-measurements in all (racing's count), less
    those being made now (a running claim); each run still to make takes the first
    round whose claim is free (`_free_rounds`), so a round a dead process left (its
    claim released by the reap) is made again, never under a key already done."""
    base = baseline_trial(runs)
    direct = any(ctx.judge.request(t.flags).job.compiler_options is None for t in targets)
    claims = ctx.store.claims(ctx.name, [ClaimState.DONE, ClaimState.RUNNING],
                              env_key=ctx.env_key)
    taken = {c.key for c in claims}
    running = [c.key for c in claims if c.state is ClaimState.RUNNING]
    wanted: list[tuple[int, Mapping[str, FlagValue]]] = []
    if direct and base is not None:
        wanted.append((base, {}))
    wanted += [(t.trial_number, t.flags) for t in targets if t.trial_number is not None]
    queues = []
    for number, flags in wanted:
        in_flight = sum(key.startswith(f"confirm:{number}:") for key in running)
        count = repeats - len(confirm_runs(runs, number)) - in_flight
        queues.append([(number, flags, r) for r in _free_rounds(taken, number, count)])
    return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]


def _free_rounds(taken: set[str], number: int, count: int) -> list[int]:
    """The first `count` rounds of trial `number` whose claim `confirm:NUMBER:ROUND` is
    neither done nor running (none when `count` is not positive)."""
    free: list[int] = []
    round_ = 0
    while len(free) < count:
        if f"confirm:{number}:{round_}" not in taken:
            free.append(round_)
        round_ += 1
    return free
