"""What dead processes left behind, and who else still works on a study.

Any process of a study runs `reap` when it starts and while it waits for
others, so a worker killed with SIGKILL, a crash or a machine gone loses
nothing: its Optuna trial is failed and its configuration queued again, and
its claims are released so that another process may take them.
"""

from __future__ import annotations

import platform
import time
from collections.abc import Collection

from optuna.storages import fail_stale_trials

from autotune.ground.proc import process_alive, raise_if_interrupted
from autotune.ground.records import ClaimState, Role
from autotune.storage._optuna import fail_trial_id, quiet_experimental, requeue, trials_in
from autotune.study.context import StudyContext
from autotune.study.measured import BUDGET_ROLES, MEASURED_ROLES
from autotune.study.plan import POLL_S


def reap(ctx: StudyContext) -> int:
    """Mark interrupted the trials and claims of processes that died (SIGKILL, a crash,
    a machine gone), and queue their configurations again.

    A trial is dead when Optuna's heartbeat of it is older than `ctx.grace_s`
    (`fail_stale_trials`, any host) or its owner is a process of this host
    that is gone; it is failed (a stale one carries no outcome, which
    `_optuna.outcome_of` reads as `interrupted`; a local one is told
    `interrupted`) and its configuration queued again as a WAITING trial
    for any worker (`_optuna.requeue`). A running claim is released
    (state `interrupted`: it may be claimed again) when its trial has
    finished, its owner is a dead process of this host, or its own
    heartbeat is older than `grace_s` (confirmation, race, fit and shrink
    claims have no trial). Returns how many trials were marked.
    """
    study = ctx.optuna
    assert study is not None, "prepare() opens Optuna's study before anything is reaped"
    with quiet_experimental():
        fail_stale_trials(study)  # other hosts' dead workers: failed, queued again
    marked = 0
    for trial in trials_in(study, "RUNNING"):
        owner = owner_of(trial.user_attrs.get("owner"))
        if owner is not None and not owner_alive(owner) and fail_trial_id(
                study, trial._trial_id):
            marked += 1
            requeue(study, study._storage.get_trial(trial._trial_id))
    finished = {t.number for t in study.get_trials(deepcopy=False) if t.state.is_finished()}
    running = ctx.store.claims(ctx.name, [ClaimState.RUNNING])
    live = {c.id for c in ctx.store.live_claims(ctx.name, ctx.grace_s)} if running else set()
    for claim in running:
        owner = (claim.owner_host, claim.owner_pid)
        failed = claim.role in MEASURED_ROLES and claim.trial_number in finished
        if not owner_alive(owner) or failed or claim.id not in live:
            ctx.store.release(claim.id)  # (a confirmation names a finished trial)
    return marked


def others_searching(ctx: StudyContext) -> bool:
    """Whether another live process still measures search trials (or races) in this
    environment: the process that finds none when its search is done is the last,
    and confirms (`autotune worker`). Reap first, so dead processes' claims are gone."""
    return any(c.role in BUDGET_ROLES and (c.owner_host, c.owner_pid) != ctx.owner
               for c in ctx.store.live_claims(ctx.name, ctx.grace_s)
               if c.env_key == ctx.env_key)


def wait_for_claims(ctx: StudyContext, roles: Collection[Role]) -> bool:
    """Block while another process holds a running claim of `roles` in this environment,
    reaping at every poll (a holder that died has its claim released). Returns whether
    it waited at all (then what the claims covered may need doing again)."""
    waited = False
    while any(c.role in roles and (c.owner_host, c.owner_pid) != ctx.owner
              for c in ctx.store.claims(ctx.name, [ClaimState.RUNNING], env_key=ctx.env_key)):
        raise_if_interrupted()
        waited = True
        time.sleep(POLL_S)
        reap(ctx)
    return waited


def wait_for_search(ctx: StudyContext) -> None:
    """Block while other processes still measure search trials in this environment, so
    every process confirms the same leaders (this process holds none when it asks)."""
    wait_for_claims(ctx, BUDGET_ROLES)


def owner_text(owner: tuple[str, int]) -> str:
    """`host:pid`, as the `owner` user attribute of a trial holds it."""
    return f"{owner[0]}:{owner[1]}"


def owner_of(text: object) -> tuple[str, int] | None:
    """(host, pid) from an `owner` user attribute, None when absent or malformed."""
    if not isinstance(text, str) or ":" not in text:
        return None
    host, _, pid = text.rpartition(":")
    return (host, int(pid)) if pid.isdigit() else None


def owner_alive(owner: tuple[str, int]) -> bool:
    """Whether the process `owner` may still run: a process of another host is assumed
    alive (Optuna's heartbeat judges those); one of this host is looked up."""
    host, pid = owner
    return host != platform.node() or process_alive(pid)
