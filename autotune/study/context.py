"""What every phase of one study shares in one process, and the one claimed measurement.

A study's phases (search, race, fit, confirm, shrink, PGLE) all measure the
same way: claim a piece of work in the database (`Store.claim`, one row per
configuration per environment), launch the trial child while the claim's
heartbeat beats (`autotune.study.heartbeat`), record the run with the end of
its claim, and release the claim if anything stops the launch. That sequence
is `StudyContext.claimed_run`, written once; `held` keeps one claim over a
series of runs (fitting the space, shrinking), each stored by `measure`.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.ground.proc import deferred_interrupt
from autotune.ground.records import (
    CLAIM_BEAT_S,
    ClaimRecord,
    ClaimState,
    ClaimVerdict,
    Environment,
    FlagValue,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.launch.launcher import Launcher, TrialRequest
from autotune.rules.stopping import free_compiles
from autotune.storage.store import Store
from autotune.study.heartbeat import claim_heartbeat
from autotune.study.measured import BUDGET_ROLES
from autotune.study.plan import StudyPlan
from autotune.study.trials import TrialJudge, environment_key, environment_of

if TYPE_CHECKING:
    import optuna

_T = TypeVar("_T")

#: Turns a launched outcome into what is stored: the outcome (judged) and its ratio.
Settle = Callable[[TrialOutcome], tuple[TrialOutcome, float | None]]


@dataclass
class StudyContext:
    """One study as one process works on it.

    Attributes:
        plan: the validated request.
        store: autotune's tables.
        launcher: how each trial is measured.
        judge: builds requests and judges outcomes.
        facts: the environment this process measures in (None: keyed by host).
        env_key: that environment's key; claims, baselines and known programs
            are kept per key.
        owner: (host, pid) of this process, written on claims and trials.
        optuna: Optuna's study, once `StudyRunner.prepare` opened it.
    """

    plan: StudyPlan
    store: Store
    launcher: Launcher
    judge: TrialJudge
    facts: Environment | None = None
    env_key: str = ""
    owner: tuple[str, int] = field(default_factory=lambda: (platform.node(), os.getpid()))
    optuna: optuna.Study | None = None

    @classmethod
    def of(cls, plan: StudyPlan, store: Store, launcher: Launcher, catalog: Any,
           facts: Environment | None) -> StudyContext:
        """The context of `plan` in this process (its environment keyed by `facts`)."""
        env_key = environment_key(facts, plan.mode)
        judge = TrialJudge(plan.settings(), catalog, lambda: store.runs(
            plan.name, roles=[Role.BASELINE], env_key=env_key))
        return cls(plan, store, launcher, judge, facts, env_key)

    @property
    def name(self) -> str:
        """The study's name."""
        return self.plan.name

    @property
    def grace_s(self) -> float:
        """Seconds of silence after which a worker counts as dead: two heartbeats."""
        return 2.0 * self.plan.options.heartbeat_s

    def runs(self, roles: Sequence[Role] | None = None) -> list[RunRecord]:
        """This environment's stored runs of the study (of `roles`, or all)."""
        return self.store.runs(self.name, roles=roles, env_key=self.env_key)

    # --- the claimed measurement ---------------------------------------------------------

    def claim(self, key: str, role: Role, flags: Mapping[str, FlagValue], number: int | None,
              budget: bool = False) -> tuple[ClaimVerdict, ClaimRecord | None]:
        """Claim `key` in this environment (`Store.claim`); with `budget`, the claim counts
        toward `--trials` and is refused (FULL) once the study holds them."""
        return self.store.claim(self.name, self.env_key, key, role, flags, number, self.owner,
                                budget=(self.plan.trials, BUDGET_ROLES) if budget else None,
                                free_compiles=free_compiles(self.plan.trials))

    def budget_held(self) -> int:
        """What `--trials` counts now: the budget's runs and running claims, less the
        compile-only runs it does not count (`autotune.rules.stopping.FREE_COMPILES`)."""
        return self.store.held(self.name, BUDGET_ROLES, free_compiles(self.plan.trials))

    def launch(self, request: TrialRequest, claim_id: int | None) -> TrialOutcome:
        """Launch one measurement; under a claim, beat its heartbeat every `CLAIM_BEAT_S`
        seconds (a third of `plan.options.heartbeat_s` where that is shorter) meanwhile, so
        readers see a live worker (`Store.live_claims`)."""
        return self._beating(claim_id, lambda: self.launcher.launch(request))

    def _beating(self, claim_id: int | None, launch: Callable[[], _T]) -> _T:
        """`launch()`, beating claim `claim_id`'s heartbeat meanwhile (see `launch`)."""
        if claim_id is None:
            return launch()
        every = min(CLAIM_BEAT_S, self.plan.options.heartbeat_s / 3)
        with claim_heartbeat(self.store, claim_id, every):
            return launch()

    def record(self, number: int | None, role: Role, flags: Mapping[str, FlagValue],
               outcome: TrialOutcome, *, ratio: float | None = None,
               claim_id: int | None = None,
               claim_state: ClaimState = ClaimState.DONE) -> RunRecord:
        """Store one run (ending the claim `claim_id` as `claim_state`, if given)."""
        user_env = self.judge.user_env(flags)
        environment = environment_of(outcome.measurement, self.facts)
        run_id = self.store.record_run(self.name, number, role, flags, user_env, outcome,
                                       environment, ratio=ratio, env_key=self.env_key,
                                       claim_id=claim_id, claim_state=claim_state)
        return RunRecord(run_id, self.name, number, role, dict(flags), user_env, outcome,
                         datetime.now(UTC), environment, ratio, self.env_key)

    def claimed_run(self, key: str, role: Role, flags: Mapping[str, FlagValue],
                    number: int | None, request: TrialRequest, *, budget: bool = False,
                    settle: Settle | None = None,
                    around: AbstractContextManager[Any] | None = None,
                    before_record: Callable[[TrialOutcome], None] | None = None,
                    after_record: Callable[[RunRecord], None] | None = None,
                    retry: bool = False) -> tuple[ClaimVerdict, RunRecord | None]:
        """Claim `key`, launch `request` under it, record the run with the end of the claim.

        Returns the claim's verdict and the stored run (None unless CLAIMED).
        `settle` turns the outcome into what is stored with its ratio (default:
        as it is, no ratio); `around` is entered while the child runs (Optuna's
        heartbeat of a trial); `before_record` sees the settled outcome first
        (an artifact stored in the same breath as its run) and `after_record`
        the stored run (told to Optuna: recorded and told together, or
        neither); with `retry` a
        failed run leaves its claim open to another try (the baseline). A stop
        while claiming or launching releases the claim and re-raises; once
        launched, the run is recorded whole or not at all.
        """
        claim: ClaimRecord | None = None
        try:
            with deferred_interrupt():  # claimed and remembered together
                verdict, claim = self.claim(key, role, flags, number, budget)
            if claim is None or verdict is not ClaimVerdict.CLAIMED:
                claim = None
                return verdict, None
            with around or nullcontext():
                outcome = self.launch(request, claim.id)  # Ctrl-C here kills the child
        except BaseException:
            if claim is not None:
                with deferred_interrupt():
                    self.store.release(claim.id)
            raise
        with deferred_interrupt():
            outcome, ratio = settle(outcome) if settle is not None else (outcome, None)
            if before_record is not None:
                before_record(outcome)
            state = ClaimState.RETRY if retry and not outcome.ok else ClaimState.DONE
            run = self.record(number, role, flags, outcome, ratio=ratio, claim_id=claim.id,
                              claim_state=state)
            if after_record is not None:
                after_record(run)
        return verdict, run

    @contextmanager
    def held(self, claim: ClaimRecord,
             done: ClaimState = ClaimState.INTERRUPTED) -> Iterator[ClaimRecord]:
        """Hold `claim` (CLAIMED by this process) over a series of runs (`measure` each).

        At the end it is released as `done`; a stop releases it as interrupted (it
        may be claimed again) and re-raises.
        """
        try:
            yield claim
        except BaseException:
            with deferred_interrupt():
                self.store.release(claim.id)
            raise
        with deferred_interrupt():
            self.store.release(claim.id, done)

    def measure(self, number: int | None, role: Role, flags: Mapping[str, FlagValue],
                request: TrialRequest, claim: ClaimRecord | None) -> TrialOutcome:
        """One run of a series under a held claim (None: unclaimed), stored as trial
        `number`'s; the claim stays held."""
        outcome = self.launch(request, None if claim is None else claim.id)
        with deferred_interrupt():
            self.record(number, role, flags, outcome)
        return outcome

    def measure_all(self, role: Role, configs: Sequence[Mapping[str, FlagValue]],
                    requests: Sequence[TrialRequest],
                    claim: ClaimRecord | None) -> list[TrialOutcome]:
        """Runs of a series under a held claim (None: unclaimed), launched together
        (`Launcher.launch_all`: one child compiles a fit's series) and each stored as a
        run of no trial, in order, once all are back; the claim stays held."""
        outcomes = self._beating(None if claim is None else claim.id,
                                 lambda: self.launcher.launch_all(requests))
        with deferred_interrupt():
            for flags, outcome in zip(configs, outcomes, strict=True):
                self.record(None, role, flags, outcome)
        return outcomes
