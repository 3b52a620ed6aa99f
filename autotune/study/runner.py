"""The study's coordinator: the phases in order, over one claimed measurement.

`StudyRunner` opens the study (its rows and Optuna's side), then runs the
phases, each a module of this package that measures through
`StudyContext.claimed_run`: the baseline and the search (`search`), racing
the leader (`race`), fitting the space after the baseline (`fit`), and after
the search confirmation (`confirm`), shrinking (`shrink`) and PGLE (`pgle`).
The time objective is the step time relative to the baseline (below 1 is
faster): in-process against the baseline (PAIRED) where every flag of the
configuration can be given per compilation, else against the study's
baseline run (DIRECT). The memory objective is the peak memory in bytes.

Many processes may run one study: each configuration is claimed in the
database before it is measured (`Store.claim`), per environment
(`trials.environment_key`), and the claim also enforces `--trials`. What a
dead process left running is marked interrupted (`reap`) and may be claimed
again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import optuna

from autotune.ground.errors import BaselineFailedError
from autotune.ground.proc import deferred_interrupt, raise_if_interrupted
from autotune.ground.records import (
    PLAN_PRIOR,
    ClaimState,
    ClaimVerdict,
    Environment,
    FlagValue,
    Role,
    RunRecord,
    StudyRecord,
    TrialOutcome,
)
from autotune.launch.launcher import Launcher
from autotune.results.shrink import Shrink
from autotune.spaces import Space
from autotune.spaces.fit import SpaceFit, apply_fit
from autotune.storage._optuna import rdb_storage
from autotune.storage.store import Store
from autotune.study import confirm as confirm_phase
from autotune.study import fit as fit_phase
from autotune.study import pgle as pgle_phase
from autotune.study import reap as reap_phase
from autotune.study import shrink as shrink_phase
from autotune.study import warm as warm_module
from autotune.study.context import StudyContext
from autotune.study.measured import BUDGET_ROLES
from autotune.study.plan import (
    POLL_S,
    PRIOR_KEY,
    ConfirmEvent,
    PgleEvent,
    RunSummary,
    ShrinkEvent,
    StudyPlan,
    TrialEvent,
)
from autotune.study.race import race
from autotune.study.samplers import make_sampler
from autotune.study.search import Search, StudyView
from autotune.study.trials import TrialJudge
from autotune.study.warm import (
    Donor,
    WarmConfig,
    add_priors,
    donors,
    prior_json,
    prior_trials,
    warm_configs,
)

#: Proposals in a row that repeat measured configurations before a study stops.
MAX_REPEATED_PROPOSALS = 100

#: Why a study stops at once when fitting left nothing to search.
EMPTY_FIT_NOTE = ("fitted to the workload, the space has nothing left to search: none of its "
                  "flags changes this program (`autotune best` says why for each); keep "
                  "XLA's defaults, or try another space")


class StudyRunner:
    """Runs the phases of one study in this process; see the module docstring.

    Args:
        plan: the validated request.
        store: autotune's tables (already opened and migrated).
        launcher: how each trial is measured.
        storage: the same database's URL for Optuna's tables (heartbeats on),
            or an Optuna storage object (e.g. in memory, for search benchmarks).
        facts: the environment this process measures in (`ProbeReport.environment`);
            None keys the environment by the host alone (recorded tables, tests).
    """

    def __init__(self, plan: StudyPlan, store: Store, launcher: Launcher, storage: Any,
                 facts: Environment | None = None):
        self.ctx = StudyContext.of(plan, store, launcher, plan.catalog(), facts)
        self.storage = storage
        self.choice = plan.sampler_choice()
        self.search = Search(self.ctx, self.choice, plan.space)
        self._fit: SpaceFit | None = None
        self._warm: list[WarmConfig] | None = None
        self._prior_done = False
        self._donor_list: list[Donor] | None = None
        self._rdb: Any = None  # Optuna's RDB storage, once opened here
        #: Told the fit once this process adopts it (progress displays).
        self.on_fit: Callable[[SpaceFit], None] | None = None

    @property
    def plan(self) -> StudyPlan:
        """The validated request."""
        return self.ctx.plan

    @property
    def store(self) -> Store:
        """autotune's tables."""
        return self.ctx.store

    @property
    def judge(self) -> TrialJudge:
        """Builds this study's requests and judges their outcomes."""
        return self.ctx.judge

    @property
    def env_key(self) -> str:
        """The key of the environment this process measures in."""
        return self.ctx.env_key

    @property
    def owner(self) -> tuple[str, int]:
        """(host, pid) of this process, written on its claims and trials."""
        return self.ctx.owner

    @property
    def space(self) -> Space:
        """The space trials are sampled from: the plan's, or the one fitted to the workload
        once `fit_space` has adopted the study's fit."""
        return self.search.space

    @property
    def grace_s(self) -> float:
        """Seconds of silence after which a worker counts as dead: two heartbeats."""
        return self.ctx.grace_s

    def prepare(self) -> optuna.Study:
        """Create the study (or check that a resumed one has the same settings), open
        Optuna's side, and mark interrupted what dead processes left running.

        Raises:
            StudyMismatchError: the stored study was made with other settings.
        """
        p = self.plan
        self.store.ensure_study(p.name, p.space_name, p.workload.name, p.options.preset,
                                p.options.devices, p.mode,
                                space_backend=p.space.backend,
                                objectives=[o.value for o in p.objectives],
                                memory_budget_bytes=p.memory_budget_bytes, plan=p.recorded())
        if self.ctx.optuna is None:  # once: waiting loops call this every second
            if p.recipe is not None:
                self.store.set_recipe(p.name, p.recipe)
            self.ctx.optuna = self._open_optuna()
        self.reap()
        return self.ctx.optuna

    def reap(self) -> int:
        """Mark interrupted what dead processes left running (`autotune.study.reap`);
        returns how many trials were marked. Call `prepare` first."""
        return reap_phase.reap(self.ctx)

    def others_searching(self) -> bool:
        """Whether another live process still measures search trials in this environment
        (`autotune.study.reap.others_searching`): the last to finish confirms."""
        self.prepare()
        return reap_phase.others_searching(self.ctx)

    def run(self, on_trial: Callable[[TrialEvent], None] | None = None,
            limit: int | None = None) -> RunSummary:
        """Launch trials until the study holds `plan.trials` measured ones, in all processes
        (or until this process has launched `limit`).

        Each round races the leader (`race`) or takes one search step
        (`Search.step`); the space is fitted once the baseline is measured.
        Proposals that repeat a measured configuration are told its recorded
        result and launch nothing. A stop signal fails the trial in flight
        (its child is killed), marks its claim interrupted and re-raises;
        everything finished stays in the database.

        Raises:
            BaselineFailedError: the baseline did not run (nothing to compare to).
        """
        study = self.prepare()
        launched = reused = streak = 0
        while True:
            raise_if_interrupted()  # a Ctrl-C that Python swallowed (see interrupt_latch)
            view = StudyView.of(self.ctx)
            if view.held >= self.plan.trials or (limit is not None and launched >= limit):
                return RunSummary(launched, reused)
            if streak >= MAX_REPEATED_PROPOSALS:
                if self._waited_for_others_budget():
                    streak = 0
                    continue
                return RunSummary(launched, reused, _exhausted_note(streak))
            if view.baseline_elsewhere():  # another process measures this environment's baseline
                self._wait_for_others()
                continue
            if view.index.baseline_ok():
                self.fit_space(study)  # once: before anything is sampled
                if not self.space.params and not self.space.groups:
                    return RunSummary(launched, reused, EMPTY_FIT_NOTE)
                self.warm_start()  # once, on the fitted space
                self.prior(study)  # once per study, before the sampler models
            step, run = self._round(study, view)
            if step == "exhausted":
                if self._waited_for_others_budget():
                    continue
                return RunSummary(launched, reused, "every configuration of the space has been "
                                  "measured or is being measured")
            if step == ClaimVerdict.FULL:
                return RunSummary(launched, reused)
            if step == "wait":  # the baseline or the fit is under way in another process
                self._wait_for_others()
                continue
            if run is None:  # reused, or claimed by another process meanwhile
                reused, streak = reused + (step == "reused"), streak + 1
                continue
            launched, streak = launched + 1, 0
            if on_trial:
                on_trial(self.search.event(run, view))
            if run.role is Role.BASELINE and not run.outcome.ok:
                raise _baseline_failed(run.outcome)

    def _waited_for_others_budget(self) -> bool:
        """Before calling the space exhausted: wait while other processes hold running
        budget claims (reaping as it waits). True when it waited: a race or trial they held
        may be free again (its holder died), so the search goes on."""
        return reap_phase.wait_for_claims(self.ctx, BUDGET_ROLES)

    def _wait_for_others(self) -> None:
        """One poll while another process measures what this one needs (the baseline, the
        fit): then reap, so that a holder that died (SIGKILL, a lost machine) has its claim
        released and its trial queued again, and this process takes the work over instead
        of waiting for it for ever."""
        time.sleep(POLL_S)
        self.reap()

    def _round(self, study: optuna.Study, view: StudyView) -> tuple[str, RunRecord | None]:
        """One round of the search: race the leader, else one search step; while a warm
        start's configuration is not measured yet (`warm.LENT_BEFORE_RACE`), the step."""
        if warm_module.LENT_BEFORE_RACE and self.search.next_warm(study, view.index):
            return self.search.step(study, view)
        step, run = race(self.ctx, view)
        return self.search.step(study, view) if step == "skip" else (step, run)

    def run_until_done(self, on_trial: Callable[[TrialEvent], None] | None = None,
                       limit: int | None = None) -> RunSummary:
        """`run`, then wait for the other processes' search trials, and run again while
        the study holds fewer than `plan.trials` (a dead worker's trial was failed and
        its configuration queued again): returns once the search is complete, or this
        process launched `limit`."""
        launched = reused = 0
        while True:
            summary = self.run(on_trial, None if limit is None else limit - launched)
            launched, reused = launched + summary.launched, reused + summary.reused
            if summary.stopped is not None or (limit is not None and launched >= limit):
                return RunSummary(launched, reused, summary.stopped)
            reap_phase.wait_for_search(self.ctx)
            if self.remaining() == 0:
                return RunSummary(launched, reused)

    def remaining(self) -> int:
        """Trials still to launch before the study holds `plan.trials` measured ones."""
        return max(0, self.plan.trials - self.ctx.budget_held())

    def fit_space(self, study: optuna.Study) -> SpaceFit | None:
        """Fit the space to the baseline's program once per study (`autotune.study.fit`);
        sample from it after. Call it once this environment's baseline is measured OK
        and before anything is sampled (`run` does, every round: after the first call
        it returns at once).

        Returns:
            The fit in use, or None when the plan says `fit=False`.
        """
        if self._fit is not None or not self.plan.options.fit:
            return self._fit
        self._fit = fit_phase.stored_fit(self.ctx, study)
        if self._fit.skipped is None:
            self.search.adopt(apply_fit(self.plan.space, self._fit))
        if self.on_fit is not None:
            self.on_fit(self._fit)
        return self._fit

    def warm_start(self) -> list[WarmConfig]:
        """The earlier studies' configurations this study's search begins with, found once
        the baseline is measured and the space fitted (`autotune.study.warm`), recorded
        with the study (`Store.save_warm_start`); none with the option `warm_start` off.
        Computed once per process."""
        if self._warm is None:
            self._warm = []
            if self.plan.options.warm_start:
                record = self.store.get_study(self.plan.name)
                self._warm = warm_configs(self._donors(record), self.space,
                                          self.ctx.judge.catalog)
            if self._warm:
                self.store.save_warm_start(self.plan.name, [w.to_json() for w in self._warm])
            self.search.warm = self._warm
        return self._warm

    def prior(self, study: optuna.Study) -> int:
        """Give the sampler what the most alike earlier studies measured
        (`autotune.study.warm.prior_trials`) as complete Optuna trials marked `prior`,
        once per study: the process that claims `PRIOR_KEY` adds them (a resumed study,
        or another process, finds the claim done and adds none). None with the option
        `warm_start` off. Returns how many trials this call added."""
        if self._prior_done or not self.plan.options.warm_start:
            return 0
        self._prior_done = True
        verdict, claim = self.ctx.claim(PRIOR_KEY, Role.FINGERPRINT, {}, None)
        if verdict is not ClaimVerdict.CLAIMED or claim is None:
            return 0
        with self.ctx.held(claim, done=ClaimState.DONE):
            record = self.store.get_study(self.plan.name)
            priors = prior_trials(self._donors(record), record, self.space,
                                  self.ctx.judge.catalog)
            with deferred_interrupt():
                add_priors(study, self.space, priors)
                if priors:
                    self.store.save_warm_start(self.plan.name, prior_json(priors), PLAN_PRIOR)
        return sum(p.copies for p in priors)

    def _donors(self, record: StudyRecord) -> list[Donor]:
        """The earlier studies a warm start draws from (`autotune.study.warm.donors`), read
        once per process: the queue and the prior both use them."""
        if self._donor_list is None:
            self._donor_list = donors(self.store, record, self.ctx.runs())
        return self._donor_list

    def confirm(self, top: int, repeats: int,
                on_run: Callable[[ConfirmEvent], None] | None = None, cap: int = 0,
                on_start: Callable[[int], None] | None = None,
                steps: int | None = None) -> list[RunRecord]:
        """The confirmation phase (`autotune.study.confirm`: `repeats` rounds, then
        sequentially up to `cap` processes each, of `steps` timed steps (None: the
        study's); `on_start` is told how many are confirmed); returns the configurations
        confirmed (their search runs)."""
        return confirm_phase.confirm(self.ctx, top, repeats, on_run, cap, on_start, steps)

    def shrink(self, repeats: int,
               on_run: Callable[[ShrinkEvent], None] | None = None) -> Shrink | None:
        """The shrink phase (`autotune.study.shrink`): the final state, or None when there
        is nothing to shrink here."""
        return shrink_phase.shrink_recommendation(self.ctx, repeats, on_run)

    def shrink_trial(self, source: RunRecord, repeats: int,
                     on_run: Callable[[ShrinkEvent], None] | None = None) -> Shrink | None:
        """Shrink `source`'s configuration whether or not it is recommended
        (`autotune.study.shrink.shrink_trial`; `autotune audit`)."""
        return shrink_phase.shrink_trial(self.ctx, source, repeats, on_run)

    def pgle(self, top: int, repeats: int,
             on_run: Callable[[PgleEvent], None] | None = None
             ) -> list[tuple[int, dict[str, FlagValue]]]:
        """The PGLE phase (`autotune.study.pgle.study_pgle`): the best `top` configurations
        measured again with a profile collected for each."""
        return pgle_phase.study_pgle(self.ctx, top, repeats, on_run)

    # --- Optuna ------------------------------------------------------------------------------

    def _open_optuna(self) -> optuna.Study:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.create_study(
            study_name=self.plan.name, storage=self._optuna_storage(),
            directions=["minimize"] * len(self.plan.objectives),
            sampler=make_sampler(self.choice, self.plan.options.seed, len(self.plan.objectives)),
            load_if_exists=True,
        )

    def _optuna_storage(self) -> Any:
        """Optuna's storage with heartbeats (stale trials failed, retried once)."""
        if not isinstance(self.storage, str):
            return self.storage
        self._rdb = rdb_storage(self.storage, create=True,
                                heartbeat_s=self.plan.options.heartbeat_s)
        return self._rdb

    def close(self) -> None:
        """Release this runner's connections (autotune's store and Optuna's engine).

        On SQLite in write-ahead mode the last connection to close folds the log into
        the database file: closing here, when the command ends, keeps that from
        happening later, at an arbitrary moment, when the objects are collected.
        """
        engine = getattr(self._rdb, "engine", None)
        if engine is not None:
            engine.dispose()
        self.store.close()


def _exhausted_note(streak: int) -> str:
    return (f"the sampler proposed {streak} measured configurations in a row: the space "
            "looks exhausted (their results were reused, nothing was re-measured)")


def _baseline_failed(outcome: TrialOutcome) -> BaselineFailedError:
    detail = outcome.message or outcome.stderr_tail.strip()[-300:]
    return BaselineFailedError(
        f"the baseline (XLA's defaults, no flags) ended as {outcome.kind.value}: {detail}. "
        "Nothing can be compared against it: make the workload run on its own first "
        "(python -m autotune.bench FILE --preset P), then run the same command with "
        "--restart (it deletes this study, and its failed baseline, and starts over)"
    )
