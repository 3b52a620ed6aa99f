"""`autotune worker` and `autotune confirm`: work on a study made elsewhere, and the local
workers of `autotune study --workers K`.

A worker reads the study's plan from the database (`autotune.api.join_study`), so it
needs no other argument than the study's name and URL; every worker is an ordinary
process that can be killed alone (its trial is failed and queued again once its
heartbeat stops: `StudyRunner.reap`).
"""

# Imports inside the commands are lazy on purpose: `autotune --help` and every command's
# start load only what that command needs (no Optuna, SQLAlchemy, numpy or jinja2).

from __future__ import annotations

import os
import platform
from dataclasses import replace
from typing import Annotated

import typer

from autotune.cli._common import DEFAULT_STORAGE, StorageOpt, literal, out, say

#: Seconds a worker may take to stop once its leader died (the trial in flight killed and
#: released as interrupted) before it is ended hard (`guard.end_after_parent`).
LEADER_GRACE_S = 10.0


def follow_leader(leader: int) -> None:
    """Stop as on SIGTERM when process `leader` (this worker's parent) dies, however it dies:
    the kernel sends the signal (Linux `PR_SET_PDEATHSIG`); a leader gone already ends
    this worker at once (exit 1, nothing claimed yet). A worker still running
    `LEADER_GRACE_S` after its leader died is ended hard: its claims then stop beating and
    are reaped like a SIGKILLed worker's, so nothing is lost."""
    import signal

    from autotune.ground.guard import die_with_parent, end_after_parent

    die_with_parent(signal.SIGTERM)
    if os.getppid() != leader:
        raise typer.Exit(1)
    end_after_parent(leader, LEADER_GRACE_S)


#: Seconds a standing worker first waits when no study has work, and at most (it doubles).
POLL_FIRST_S, POLL_MOST_S = 1.0, 30.0


def worker(
    study: Annotated[str | None, typer.Option(
        help="The study to work on (made by `autotune study`). Without it the worker is "
             "one of a standing pool: it serves every open study of the database that "
             "this machine can measure, one trial at a time.")] = None,
    storage: StorageOpt = DEFAULT_STORAGE,
    trials: Annotated[int | None, typer.Option(
        min=1, help="Launch at most N trials from this worker (default: until the study "
                    "holds its trials).")] = None,
    until_done: Annotated[bool, typer.Option(
        help="Stay until the whole study is done: wait for the other workers' trials, take "
             "over those of workers that died, and share the confirmation.")] = False,
    leader: Annotated[int | None, typer.Option(
        hidden=True, help="The pid of the `study --workers` that started this worker: it "
                          "stops (as on SIGTERM) when that process dies.")] = None,
    studies: Annotated[str, typer.Option(
        metavar="GLOB", help="Without --study: serve only the studies whose name matches "
                             "this shell pattern.")] = "*",
    until_idle: Annotated[bool, typer.Option(
        help="Without --study: exit once no open study is left (default: wait for more, "
             "polling with backoff).")] = False,
) -> None:
    """Join STUDY from any machine and measure its trials; the last worker to finish
    confirms and shrinks the winner. Without --study, serve every open study (those
    `autotune study --submit` queued too), the highest --priority first."""
    if leader is not None:
        follow_leader(leader)
    if study is None:
        serve(storage, studies, until_idle)
        return
    # Imported when the command runs, so that `autotune --help` loads no Optuna or SQLAlchemy.
    from autotune.api import join_study
    from autotune.cli import _progress
    from autotune.study.service import open_runner

    with out.status(f"joining study '{literal(study)}'..."):
        joined = join_study(study, storage)
    _progress.print_preflight(joined.planned)
    plan = joined.planned.plan
    runner = open_runner(plan, joined.store, joined.planned.report.environment)
    who = f"worker {literal(platform.node())}:{os.getpid()}: "
    _progress.run_with_progress(runner, plan, until_done=until_done, limit=trials, who=who)
    if trials is not None and runner.remaining() > 0 and not until_done:
        say(f"{who}launched its {trials} trials; the study wants "
            f"{runner.remaining()} more")
        return
    if not until_done and runner.others_searching():
        say(f"{who}done; other workers are still measuring, and the last to finish "
            "confirms")
        return
    _progress.finish(runner, joined.after)


def serve(storage: str, pattern: str, until_idle: bool) -> None:
    """The standing pool's loop (`autotune.api.pool.Pool`): one piece of work at a time on
    the first open study, one line per trial; when none has work for it now, wait,
    doubling the wait from `POLL_FIRST_S` to `POLL_MOST_S` (a study whose trials other
    workers hold is waited for: one may die, and its trial is taken over), or exit
    (`until_idle`) once no open study is left. SIGTERM or Ctrl-C stop it between or
    within trials, the trial in flight released as interrupted."""
    import time

    from autotune.api.pool import Pool
    from autotune.cli import _progress

    who = f"worker {literal(platform.node())}:{os.getpid()}"
    pool = Pool(storage, pattern)
    told: set[str] = set()
    say(f"{who}: serving the open studies"
        + ("" if pattern == "*" else f" matching '{literal(pattern)}'"))
    wait = POLL_FIRST_S
    try:
        while True:
            served = pool.serve_one(
                on_trial=lambda name, ev: say(
                    f"{who}: {literal(name)}: trial {ev.done}/{ev.total}: "
                    f"{_progress.trial_text(ev)}"),
                watcher=_progress.lines())
            for name in sorted(set(pool.refused) - told):
                say(f"{who}: not serving study '{literal(name)}': "
                    f"{literal(pool.refused[name])}")
            told |= set(pool.refused)
            if served is not None:
                wait = POLL_FIRST_S
                continue
            if until_idle and not pool.candidates():  # open studies wait on other workers
                say(f"{who}: no open study is left for this worker; exiting "
                    "(--until-idle)")
                return
            time.sleep(wait)
            wait = min(2 * wait, POLL_MOST_S)
    finally:
        pool.close()


def confirm(
    name: Annotated[str, typer.Argument(help="The study.")],
    storage: StorageOpt = DEFAULT_STORAGE,
    top: Annotated[int | None, typer.Option(
        "--confirm", min=1, help="Re-measure the best K configurations (default: the "
                                  "study's own setting).")] = None,
    repeats: Annotated[int | None, typer.Option(
        "--confirm-repeats", min=2, help="Fresh processes per configuration (default: the "
                                         "study's).")] = None,
    shrink: Annotated[bool | None, typer.Option(
        "--shrink/--no-shrink", help="Shrink the recommendation afterwards (default: the "
                                     "study's).")] = None,
    pgle: Annotated[int | None, typer.Option(
        min=0, help="Then measure the best K again with a PGLE profile each (default: the "
                    "study's).")] = None,
) -> None:
    """Confirm the best configurations of NAME and shrink the recommendation (what the
    last worker does when the search is done), waiting for running search trials."""
    # Imported when the command runs, so that `autotune --help` loads no Optuna or SQLAlchemy.
    from autotune.api import join_study
    from autotune.cli import _progress
    from autotune.study.service import open_runner

    with out.status(f"joining study '{literal(name)}'..."):
        joined = join_study(name, storage)
    runner = open_runner(joined.planned.plan, joined.store, joined.planned.report.environment)
    runner.prepare()
    after = joined.after
    _progress.finish(runner, replace(
        after, confirm=top or after.confirm or 3, confirm_repeats=repeats or after.confirm_repeats,
        shrink=after.shrink if shrink is None else shrink,
        pgle=after.pgle if pgle is None else pgle), again=True)
