"""The search phase: Optuna proposes, the study measures each new configuration once.

One step asks Optuna for a configuration (the baseline and the recommended
configuration are queued first, then grid points or the sampler's
proposals), answers a proposal whose effective flags were measured already
with the recorded result (`autotune.study.measured`), and otherwise measures
it as one claimed run (`StudyContext.claimed_run`) that counts toward
`--trials`. A search trial carries the prune limits of what was measured so
far (`autotune.rules.stopping`) and, in PAIRED mode, the programs already timed on
this host (compile before timing). With a memory budget, a configuration
above it is infeasible through Optuna's constraints (`trial.set_constraint`),
and the `feasible` user attribute says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from random import Random
from typing import Any

import optuna
from optuna.trial import FixedTrial, TrialState

from autotune.flags.compose import config_key, effective_config
from autotune.ground.proc import deferred_interrupt
from autotune.ground.records import (
    ClaimState,
    ClaimVerdict,
    FlagValue,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.launch.launcher import TrialRequest
from autotune.results.evidence import answer_speedup, incumbent, pooled
from autotune.results.ranking import peak_memory, within_budget
from autotune.rules.stopping import prune_curve, prune_limit, running_ratios
from autotune.spaces import Space
from autotune.storage._optuna import (
    beating,
    fail_open_trial,
    has_role,
    quiet_experimental,
    set_aside,
    trials_in,
)
from autotune.study import warm as warm_module
from autotune.study.context import Settle, StudyContext
from autotune.study.measured import MeasuredIndex, objective_values
from autotune.study.plan import BASELINE_KEY, TrialEvent
from autotune.study.reap import owner_text, reap
from autotune.study.samplers import Objective, SamplerChoice, grid_order
from autotune.study.warm import WarmConfig, mapped_params, xla_default

#: "on": before the sampler proposes, queue the configurations one decision away from
#: the incumbent (`Space.neighbours`; XLA's defaults while there is none) that are
#: neither measured nor in flight, in a seeded order; "off": every proposal is the
#: sampler's. A rule of `auto` for one objective, so it is chosen leave-one-workload-out
#: (`benchmarks/scripts/leave_one_out.py`; the README's Search section). Read when used.
LOCAL_SEARCH = "off"


@dataclass
class StudyView:
    """One look at the database: this environment's measured configurations (with the
    keys other processes measure now in `index.in_flight`), what `--trials` counts, and
    every run of this environment (the evidence racing reads)."""

    index: MeasuredIndex
    held: int
    runs: list[RunRecord] = field(default_factory=list)

    @classmethod
    def of(cls, ctx: StudyContext) -> StudyView:
        """What the database says now: this environment's runs and running claims."""
        runs = ctx.runs()
        running = ctx.store.claims(ctx.name, [ClaimState.RUNNING], env_key=ctx.env_key)
        index = MeasuredIndex.of(runs, ctx.judge.catalog)
        index.in_flight = {c.key for c in running}
        return cls(index, ctx.budget_held(), runs)

    def baseline_elsewhere(self) -> bool:
        """Whether another process is measuring this environment's baseline right now."""
        return not self.index.baseline_ok() and BASELINE_KEY in self.index.in_flight


class Search:
    """The ask/tell search of one study in one process (see the module docstring).

    Args:
        ctx: the study in this process.
        choice: the sampler in use (a grid is walked in its seeded order).
        space: the space sampled from (`adopt` replaces it once the fit is known).
    """

    def __init__(self, ctx: StudyContext, choice: SamplerChoice, space: Space) -> None:
        self.ctx = ctx
        self.choice = choice
        self.space = space
        self._grid: list[tuple[dict[str, Any], str]] | None = None
        #: a warm start's configurations (`autotune.study.warm`), queued before sampling
        self.warm: list[WarmConfig] = []
        #: every one of `warm` is queued or measured (`next_warm`: for good)
        self._warm_queued = False
        #: run id -> its `stopping.running_ratios`, for the median prune curve
        self._running: dict[int, list[float]] = {}
        #: a local search's centre (its key) -> its neighbours with their keys, in order
        self._around: dict[str, list[tuple[dict[str, Any], str]]] = {}

    def adopt(self, space: Space) -> None:
        """Sample from `space` from now on (the space fitted to the workload)."""
        self.space, self._grid, self._around = space, None, {}

    def step(self, study: optuna.Study, view: StudyView) -> tuple[str, RunRecord | None]:
        """Ask for one configuration and measure it unless it is measured or claimed already.

        Returns ("launched", run), ("reused", None), ("exhausted", None) when a
        grid has nothing left, ("wait", None) when a proposal came before the
        baseline or the fit (`_too_early`), or (verdict, None) when the claim was
        refused. A stop signal anywhere fails the Optuna trial and re-raises.
        """
        trial: optuna.Trial | None = None
        try:
            with deferred_interrupt():  # a trial is created whole, or not at all
                if not self._enqueue_next(study, view):
                    return "exhausted", None
                with quiet_experimental():
                    trial = study.ask()
                trial.set_user_attr("owner", owner_text(self.ctx.owner))
                if self._too_early(trial, view):
                    set_aside(study, trial, "not_needed")
                    return "wait", None
            return self._measure(study, trial, view)
        except BaseException:  # never leave the trial RUNNING
            with deferred_interrupt():
                if trial is not None:
                    fail_open_trial(study, trial)
            raise

    def _measure(self, study: optuna.Study, trial: optuna.Trial,
                 view: StudyView) -> tuple[str, RunRecord | None]:
        """Answer `trial` from the records, or measure it as one claimed run and tell it."""
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        config = {} if role is Role.BASELINE else self.space.sample(trial)
        prior = view.index.get(config) if role is not Role.BASELINE else None
        if prior is not None:
            with deferred_interrupt():
                self.tell(study, trial, prior, role, reused=True)
            return "reused", None
        verdict, run = self.ctx.claimed_run(
            view.index.key(config), role, config, trial.number,
            self.request(role, config, view.index,
                         lent="warm_start" in trial.user_attrs), budget=True,
            settle=self._settle(view.index), around=beating(study, trial),
            after_record=lambda run: self.tell(study, trial, run, role, reused=False),
            retry=role is Role.BASELINE)  # a failed baseline leaves its claim open to a retry
        if run is None:
            with deferred_interrupt():
                set_aside(study, trial, "not_needed" if verdict is ClaimVerdict.FULL
                          else "duplicate")
            return verdict, None
        return "launched", run

    def request(self, role: Role, config: dict[str, FlagValue],
                index: MeasuredIndex, lent: bool = False) -> TrialRequest:
        """The request of a search-phase trial: the baseline is always timed (it is the
        reference); a search trial carries the prune limits (not one a warm start lent,
        under `warm.PRUNE_LENT` False), every other the memory budget and, in PAIRED mode,
        the programs already timed here."""
        request = self.ctx.judge.request(config)
        prunable = not lent or warm_module.PRUNE_LENT
        if role is Role.SEARCH and prunable:
            request = request.with_job(prune_ratio=self._prune_ratio(index),
                                       prune_curve=self._prune_curve(index))
        if role is not Role.BASELINE:
            request = request.with_job(memory_budget_bytes=self.ctx.plan.memory_budget_bytes)
        if role is not Role.BASELINE and request.job.compiler_options is not None:
            request = request.with_job(known_programs=index.known_programs())
        return request

    def _settle(self, index: MeasuredIndex) -> Settle:
        """The outcome as stored: judged, with its ratio, or the ratio of the trial that
        timed the same program where this child timed nothing."""
        judge = self.ctx.judge

        def settle(outcome: TrialOutcome) -> tuple[TrialOutcome, float | None]:
            outcome = judge.guard(outcome)
            ratio = judge.ratio(outcome)
            if ratio is None and (prior := _measured_by(outcome, index)) is not None:
                outcome, ratio = _carried(outcome, prior), prior.ratio
            return outcome, ratio
        return settle

    def _too_early(self, trial: optuna.Trial, view: StudyView) -> bool:
        """Whether `trial` is a new proposal (no queued role) asked before this environment's
        baseline is measured: another process took the queued baseline between this one's
        `_enqueue_next` and its `ask`. Nothing may be sampled before the baseline, and so
        before the fit that follows it (Optuna keeps the first distributions of a param)."""
        return "role" not in trial.user_attrs and not view.index.baseline_ok()

    def _enqueue_next(self, study: optuna.Study, view: StudyView) -> bool:
        """Queue the baseline, the recommended configuration, a warm start's next
        configuration, the next grid point, or a local search's next neighbour.

        Returns False when a grid study has no configuration left to measure
        (all measured, or claimed by other processes).
        """
        index = view.index
        # A killed process's trial: failed and queued again, and its claim released in the
        # same breath (`reap`), so the queued configuration is claimable when it is asked;
        # Optuna's `fail_stale_trials` alone queued it with its claim still running, and
        # it was set aside as a duplicate, never measured again.
        reap(self.ctx)
        if trials_in(study, "WAITING"):
            return True
        if not index.baseline_ok():
            study.enqueue_trial({}, user_attrs={"role": Role.BASELINE.value})
            return True
        rec = self.space.recommended_params()
        if rec is not None and not has_role(study, Role.RECOMMENDED):
            study.enqueue_trial(rec, user_attrs={"role": Role.RECOMMENDED.value})
            return True
        if self._enqueue_warm(study, index):
            return True
        if not self.choice.is_grid:
            self._enqueue_local(study, view)
            return True
        point = next((params for params, key in self._grid_points()
                      if key not in index.runs and key not in index.in_flight), None)
        if point is not None:
            study.enqueue_trial(point, user_attrs={"role": Role.SEARCH.value})
        return point is not None

    def _enqueue_warm(self, study: optuna.Study, index: MeasuredIndex) -> bool:
        """Queue the next warm-start configuration (`next_warm`); False when none is left."""
        warm = self.next_warm(study, index)
        if warm is None:
            return False
        study.enqueue_trial(warm.params, user_attrs={"role": Role.SEARCH.value,
                                                     "warm_start": warm.label})
        return True

    def next_warm(self, study: optuna.Study, index: MeasuredIndex) -> WarmConfig | None:
        """The first warm-start configuration not queued, measured or in flight yet, or
        None. Reads Optuna's trials only until every one is queued (it runs before every
        search step and race); from then on answers None at once."""
        if not self.warm or self._warm_queued:
            return None
        queued = {t.user_attrs.get("warm_start") for t in study.get_trials(deepcopy=False)}
        for warm in self.warm:
            if warm.label in queued or warm.key in index.runs or warm.key in index.in_flight:
                continue
            return warm
        self._warm_queued = all(w.label in queued or w.key in index.runs
                                for w in self.warm)  # both for good; in flight is not
        return None

    def _enqueue_local(self, study: optuna.Study, view: StudyView) -> bool:
        """Under `LOCAL_SEARCH` "on" and one objective, time: queue the incumbent's next
        neighbour not measured or in flight; False when none is left (the sampler
        proposes) or the rule is off."""
        if LOCAL_SEARCH != "on" or self.ctx.plan.objectives != (Objective.TIME,):
            return False
        index = view.index
        point = next((params for params, key in self._neighbours(view)
                      if key not in index.runs and key not in index.in_flight), None)
        if point is not None:
            study.enqueue_trial(point, user_attrs={"role": Role.SEARCH.value, "local": True})
        return point is not None

    def _neighbours(self, view: StudyView) -> list[tuple[dict[str, Any], str]]:
        """The neighbours of the incumbent (XLA's defaults while there is none, or where
        the space cannot give its flags), with their keys, in an order seeded per centre."""
        catalog, budget = self.ctx.judge.catalog, self.ctx.plan.memory_budget_bytes
        best = incumbent(pooled(view.runs, lambda r: within_budget(r, budget)))
        mapped = mapped_params(best.first.flags, self.space, catalog) if best else None
        centre, key = mapped if mapped is not None else (self._defaults(), BASELINE_KEY)
        if key not in self._around:
            points = self.space.neighbours(centre)
            Random(f"{self.ctx.plan.options.seed}:{key}").shuffle(points)
            self._around[key] = [(p, self._key(p)) for p in points]
        return self._around[key]

    def _defaults(self) -> dict[str, Any]:
        """The params that give XLA's defaults (unset, else the flag's default value)."""
        params = self.space.params_for({}, xla_default(self.ctx.judge.catalog))
        return params if params is not None else {}

    def _key(self, params: dict[str, Any]) -> str:
        """The effective-configuration key of Optuna `params` (as `MeasuredIndex` keys)."""
        return config_key(effective_config(self.space.sample(FixedTrial(params)),
                                           self.ctx.judge.catalog))

    def _grid_points(self) -> list[tuple[dict[str, Any], str]]:
        """The grid in its seeded order, each point with its effective-configuration key."""
        if self._grid is None:
            self._grid = [(p, self._key(p))
                          for p in grid_order(self.space, self.ctx.plan.options.seed)]
        return self._grid

    def _prune_ratio(self, index: MeasuredIndex) -> float | None:
        """Stop a search trial once it is `prune_margin` times slower than the best so far.

        See `autotune.rules.stopping.prune_limit` for when no limit is set.
        """
        plan = self.ctx.plan
        return prune_limit(plan.options.prune_margin, index.best_ratio(plan.memory_budget_bytes),
                           paired=plan.paired, time_only=plan.time_only)

    def _prune_curve(self, index: MeasuredIndex) -> tuple[float | None, ...] | None:
        """Also stop a search trial once it is slower than the other trials' median so far.

        The curve (`autotune.rules.stopping.prune_curve`) is built from this
        environment's search and recommended runs (the index holds one
        environment's) that timed PAIRED steps, ok or pruned: a pruned run's
        steps count for the pairs it reached. None (no median rule) under the
        conditions of `_prune_ratio`, or while too few trials were timed.
        """
        for run in index.runs.values():  # a stored run never changes: its ratios are kept
            m = run.outcome.measurement
            if (run.id not in self._running and run.role in (Role.SEARCH, Role.RECOMMENDED)
                    and run.outcome.kind in (OutcomeKind.OK, OutcomeKind.PRUNED)
                    and m is not None and m.mode is MeasureMode.PAIRED
                    and m.baseline_step_times_s):
                self._running[run.id] = running_ratios(m.step_times_s, m.baseline_step_times_s)
        ratios = (self._running[r.id] for r in index.runs.values() if r.id in self._running)
        plan = self.ctx.plan
        curve = prune_curve(plan.options.prune_margin, ratios, paired=plan.paired,
                            time_only=plan.time_only)
        return None if curve is None else tuple(curve)

    def tell(self, study: optuna.Study, trial: optuna.Trial, run: RunRecord, role: Role,
             reused: bool) -> None:
        """Tell Optuna the run's objective values (and feasibility), or its failure."""
        trial.set_user_attr("role", role.value)
        trial.set_user_attr("outcome", run.outcome.kind.value)
        trial.set_user_attr("reused_run_id" if reused else "run_id", run.id)
        if run.outcome.message:
            trial.set_user_attr("message", run.outcome.message[:500])
        plan = self.ctx.plan
        values = objective_values(run, [o.value for o in plan.objectives])
        if values is None:
            pruned = run.outcome.kind is OutcomeKind.PRUNED
            study.tell(trial, state=TrialState.PRUNED if pruned else TrialState.FAIL)
            return
        budget, peak = plan.memory_budget_bytes, peak_memory(run)
        if budget is not None and peak is not None:
            trial.set_constraint("memory_budget", float(peak - budget))
            trial.set_user_attr("feasible", peak <= budget)
        study.tell(trial, values)

    def event(self, run: RunRecord, view: StudyView) -> TrialEvent:
        """The progress event of a run this process launched (`view` from before it)."""
        view.index.add(run)
        plan = self.ctx.plan
        budget = plan.memory_budget_bytes
        runs = [*view.runs, run]
        leader = incumbent(pooled(runs, lambda r: within_budget(r, budget)))
        baseline = any(r.role is Role.BASELINE and r.outcome.ok for r in runs)
        assert run.trial_number is not None
        return TrialEvent(run.trial_number, run.role, run.outcome, run.speedup,
                          answer_speedup(leader, baseline),
                          min(view.held + 1, plan.trials), plan.trials,
                          best_trial=leader.first.trial_number if leader else None)


def _measured_by(outcome: TrialOutcome, index: MeasuredIndex) -> RunRecord | None:
    """The run that timed this outcome's program, when the child timed nothing itself."""
    m = outcome.measurement
    if not outcome.ok or m is None or m.same_program_as is None:
        return None
    return index.run_of_trial(m.same_program_as)


def _carried(outcome: TrialOutcome, prior: RunRecord) -> TrialOutcome:
    """`outcome` with the baseline program of `prior`, so "same program as baseline" holds."""
    assert outcome.measurement is not None and prior.outcome.measurement is not None
    base = prior.outcome.measurement.baseline_fingerprint
    return replace(outcome, measurement=replace(outcome.measurement, baseline_fingerprint=base))
