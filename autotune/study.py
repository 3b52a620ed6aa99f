"""Orchestrate a study: baseline, recommended configuration, then sampled trials.

One process, one trial at a time (ask/tell). Every trial is launched through a
`Launcher`, recorded in autotune's own tables through the `Store`, and told to
Optuna. The time objective is the step time relative to the baseline (below 1
is faster): measured in-process against the baseline (PAIRED) where every flag
of the configuration can be given per compilation, else against the study's
baseline run (DIRECT). The memory objective is the peak memory in bytes.

No wasted trials: the baseline, then the recommended configuration, run first;
a proposal whose effective flags were measured already is told the recorded
result without a launch (`autotune.measured`), and `--trials` counts launches.
With a memory budget, a configuration above it is infeasible through Optuna's
constraints (`trial.set_constraint`), and the `feasible` user attribute says so.

Many processes may run one study: each configuration is claimed in the database
before it is measured (`Store.claim`), per environment (`trials.environment_key`),
and the claim also enforces `--trials`. A trial left running by a process that
died is marked `interrupted` at the next start (`StudyRunner.reap`: its owner,
host and pid, is gone) or by Optuna's heartbeat (another host), and its
configuration may be claimed again. While a claimed measurement runs, the
claim's own heartbeat is beaten every `CLAIM_BEAT_S` seconds
(`autotune.heartbeat`), so a reader tells a live worker from a dead one
(`Store.live_claims`).
"""

from __future__ import annotations

import hashlib
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._optuna import (
    beating,
    fail_open_trial,
    fail_trial_id,
    has_role,
    quiet_experimental,
    rdb_storage,
    requeue,
    set_aside,
    trials_in,
)
from autotune._proc import deferred_interrupt, process_alive, raise_if_interrupted
from autotune.errors import BaselineFailedError
from autotune.flags.compose import compiler_options, config_key, effective_config
from autotune.heartbeat import claim_heartbeat
from autotune.launcher import Launcher, TrialRequest
from autotune.measured import BUDGET_ROLES, MEASURED_ROLES, MeasuredIndex, objective_values
from autotune.records import (
    CLAIM_BEAT_S,
    ClaimRecord,
    ClaimState,
    ClaimVerdict,
    Environment,
    FlagValue,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.results.confirmation import baseline_trial, confirm_runs, needs_confirmation
from autotune.results.evidence import ProgramEvidence, incumbent, pooled, race_target
from autotune.results.ranking import peak_memory, ranked, recommend, within_budget
from autotune.results.shrink import Shrink, Step, shrink
from autotune.search import Objective, SamplerChoice, choose_sampler, grid_order, make_sampler
from autotune.spaces.fit import (
    SpaceFit,
    apply_fit,
    collective_changes,
    probe_cases,
    run_probe,
    settle,
)
from autotune.stopping import prune_limit
from autotune.storage.store import Store
from autotune.trials import (
    RequestSettings,
    TrialJudge,
    environment_key,
    environment_of,
    with_device_count,
)
from autotune.workloads import WorkloadInfo

if TYPE_CHECKING:
    import optuna

    from autotune.guided import PgleEvent
    from autotune.spaces import Space

#: Proposals in a row that repeat measured configurations before a study stops.
MAX_REPEATED_PROPOSALS = 100

#: Seconds between looks at the database while another process measures what this one needs.
POLL_S = 1.0

#: Why a study stops at once when fitting left nothing to search.
EMPTY_FIT_NOTE = ("fitted to the workload, the space has nothing left to search: none of its "
                  "flags changes this program (`autotune best` says why for each); keep "
                  "XLA's defaults, or try another space")

#: The claim key of the baseline: the empty configuration.
BASELINE_KEY = ""

#: The claim key of fitting the space to the workload (`StudyRunner.fit_space`).
FIT_KEY = "fit:space"


@dataclass(frozen=True)
class StudyPlan:
    """What the user asked for; validated before anything touches the database."""

    name: str
    space_name: str
    space: Space
    workload: WorkloadInfo
    preset: str = "small"
    devices: int = 8
    trials: int = 12
    sampler: str = "auto"
    seed: int | None = None
    timeout_per_trial: float = 300.0
    steps: int = 20
    warmup: int = 2
    max_warmup: int = 30
    mode: MeasureMode = MeasureMode.PAIRED
    base_env: Mapping[str, str] = field(default_factory=dict)
    command: tuple[str, ...] | None = None
    memory_limit_bytes: int | None = None
    prune_margin: float | None = 1.3
    objectives: tuple[Objective, ...] = (Objective.TIME,)
    memory_budget_bytes: int | None = None
    #: Seconds between heartbeats (Optuna's of a trial, ours of a claim every third of it);
    #: a worker silent for twice this long is dead: its trial failed and queued again.
    heartbeat_s: int = 30
    racing: bool = True
    fit: bool = True
    #: A cluster launcher template each trial runs through (`{cmd}` is the child), or None.
    launcher: str | None = None
    #: How a worker rebuilds this plan (`autotune.api.join_study`): stored by `prepare`
    #: with the study; None (a worker's own plan, or the Python API's) stores nothing.
    recipe: Mapping[str, Any] | None = field(default=None, compare=False)

    def recorded(self) -> dict[str, Any]:
        """The plan fields stored with the study, beyond its columns (JSON-ready).

        A re-run must ask for the same: the space file's and workload file's
        content (hashed), the command, steps, warm-up, sampler, prune margin
        and the time and memory limits of a trial, whether the space is
        fitted to the workload (`fit`), and the cluster launcher (`launcher`).
        `trials` and `seed` may change (running more trials continues the study).
        """
        return {
            "space_sha256": _sha256(self.space.path),
            "workload_sha256": None if self.command else _sha256(self.workload.path),
            "command": list(self.command) if self.command else None,
            "steps": self.steps, "warmup": self.warmup, "max_warmup": self.max_warmup,
            "sampler": self.sampler, "prune_margin": self.prune_margin,
            "timeout_per_trial": self.timeout_per_trial,
            "memory_limit_bytes": self.memory_limit_bytes,
            "fit": self.fit,
            "launcher": self.launcher,
        }

    def sampler_choice(self) -> SamplerChoice:
        """The sampler to run (`auto` resolved). Raises UsageError for a bad choice."""
        return choose_sampler(self.sampler, self.objectives, self.space, self.trials)


@dataclass(frozen=True)
class TrialEvent:
    """Reported after each launched trial, for progress displays."""

    number: int
    role: Role
    outcome: TrialOutcome
    speedup: float | None
    best_speedup: float | None
    done: int
    total: int


@dataclass(frozen=True)
class RunSummary:
    """What `StudyRunner.run` did: trials launched, proposals answered from records, why it
    stopped before `--trials` launches (None when it did not)."""

    launched: int
    reused: int
    stopped: str | None = None


class StudyRunner:
    """Runs the trials of one study; see the module docstring.

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
        self.plan = plan
        self.store = store
        self.launcher = launcher
        self.storage = storage
        self.choice = plan.sampler_choice()
        #: Where this process measures (the probe's facts), and the key of that
        #: environment: claims, baselines and known programs are kept per key.
        self.facts = facts
        self.env_key = environment_key(facts, plan.mode)
        self.owner = (platform.node(), os.getpid())
        self.judge = TrialJudge(_settings(plan), _catalog(), lambda: store.runs(
            plan.name, roles=[Role.BASELINE], env_key=self.env_key))
        self._grid: list[tuple[dict[str, Any], str]] | None = None
        self._study: optuna.Study | None = None
        self._rdb: Any = None  # Optuna's RDB storage, once opened here
        #: The space trials are sampled from: the plan's, or the one fitted to the
        #: workload once `fit_space` has adopted the study's fit.
        self.space: Space = plan.space
        self._fit: SpaceFit | None = None
        #: run id -> its `stopping.running_ratios`, for the median prune curve
        self._running: dict[int, list[float]] = {}
        #: Told the fit once this process adopts it (progress displays).
        self.on_fit: Callable[[SpaceFit], None] | None = None

    def prepare(self) -> optuna.Study:
        """Create the study (or check that a resumed one has the same settings), open
        Optuna's side, and mark interrupted what dead processes left running.

        Raises:
            StudyMismatchError: the stored study was made with other settings.
        """
        p = self.plan
        self.store.ensure_study(p.name, p.space_name, p.workload.name, p.preset, p.devices, p.mode,
                                space_backend=p.space.backend,
                                objectives=[o.value for o in p.objectives],
                                memory_budget_bytes=p.memory_budget_bytes, plan=p.recorded())
        if self._study is None:  # once: waiting loops call this every second
            if p.recipe is not None:
                self.store.set_recipe(p.name, p.recipe)
            self._study = self._open_optuna()
        self.reap(self._study)
        return self._study

    @property
    def grace_s(self) -> float:
        """Seconds of silence after which a worker counts as dead: two heartbeats."""
        return 2.0 * self.plan.heartbeat_s

    def reap(self, study: optuna.Study) -> int:
        """Mark interrupted the trials and claims of processes that died (SIGKILL, a crash,
        a machine gone), and queue their configurations again.

        A trial is dead when Optuna's heartbeat of it is older than `grace_s`
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
        from optuna.storages import fail_stale_trials

        with quiet_experimental():
            fail_stale_trials(study)  # other hosts' dead workers: failed, queued again
        marked = 0
        for trial in trials_in(study, "RUNNING"):
            owner = _owner_of(trial.user_attrs.get("owner"))
            if owner is not None and not _owner_alive(owner) and fail_trial_id(
                    study, trial._trial_id):
                marked += 1
                requeue(study, study._storage.get_trial(trial._trial_id))
        finished = {t.number for t in study.get_trials(deepcopy=False)
                    if t.state.is_finished()}
        running = self.store.claims(self.plan.name, [ClaimState.RUNNING])
        live = {c.id for c in self.store.live_claims(self.plan.name, self.grace_s)} \
            if running else set()
        for claim in running:
            owner = (claim.owner_host, claim.owner_pid)
            failed = claim.role in MEASURED_ROLES and claim.trial_number in finished
            if not _owner_alive(owner) or failed or claim.id not in live:
                self.store.release(claim.id)  # (a confirmation names a finished trial)
        return marked

    def others_searching(self) -> bool:
        """Whether another live process still measures search trials (or races) in this
        environment: the process that finds none when its search is done is the last,
        and confirms (`autotune worker`)."""
        self.prepare()  # dead processes' claims released first
        return any(c.role in BUDGET_ROLES and (c.owner_host, c.owner_pid) != self.owner
                   for c in self.store.live_claims(self.plan.name, self.grace_s)
                   if c.env_key == self.env_key)

    def run(self, on_trial: Callable[[TrialEvent], None] | None = None,
            limit: int | None = None) -> RunSummary:
        """Launch trials until the study holds `plan.trials` measured ones, in all processes
        (or until this process has launched `limit`).

        Each configuration is claimed in the database before it is measured
        (`Store.claim`), so several processes on one study never overshoot
        `--trials` nor measure a configuration twice in one environment.
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
            view = self._view()
            if view.held >= self.plan.trials or (limit is not None and launched >= limit):
                return RunSummary(launched, reused)
            if streak >= MAX_REPEATED_PROPOSALS:
                return RunSummary(launched, reused, _exhausted_note(streak))
            if view.baseline_elsewhere():
                time.sleep(POLL_S)  # another process measures this environment's baseline
                continue
            if view.index.baseline_ok():
                self.fit_space(study)  # once: before anything is sampled
                if not self.space.params and not self.space.groups:
                    return RunSummary(launched, reused, EMPTY_FIT_NOTE)
            step, run = self._race(view)
            if step == "skip":
                step, run = self._step(study, view)
            if step == "exhausted":
                return RunSummary(launched, reused, "every configuration of the space has been "
                                  "measured or is being measured")
            if step == ClaimVerdict.FULL:
                return RunSummary(launched, reused)
            if step == "wait":  # the baseline or the fit is under way in another process
                time.sleep(POLL_S)
                continue
            if run is None:  # reused, or claimed by another process meanwhile
                reused, streak = reused + (step == "reused"), streak + 1
                continue
            launched, streak = launched + 1, 0
            if on_trial:
                on_trial(self._event(run, view))
            if run.role is Role.BASELINE and not run.outcome.ok:
                raise _baseline_failed(run.outcome)

    def _step(self, study: optuna.Study,
              view: StudyView) -> tuple[str, RunRecord | None]:
        """Ask for one configuration and measure it unless it is measured or claimed already.

        Returns ("launched", run), ("reused", None), ("exhausted", None) when a
        grid has nothing left, ("wait", None) when a proposal came before the
        baseline or the fit (`_too_early`), or (verdict, None) when the claim was
        refused.
        """
        trial: optuna.Trial | None = None
        claim: ClaimRecord | None = None
        try:
            with deferred_interrupt():  # a trial is created whole, or not at all
                if not self._enqueue_next(study, view):
                    return "exhausted", None
                with quiet_experimental():
                    trial = study.ask()
                trial.set_user_attr("owner", _owner_text(self.owner))
                if self._too_early(trial, view):
                    set_aside(study, trial, "not_needed")
                    return "wait", None
            role, config = self._proposal(trial)
            prior = view.index.get(config) if role is not Role.BASELINE else None
            if prior is not None:
                with deferred_interrupt():
                    self._tell(study, trial, prior, role, reused=True)
                return "reused", None
            with deferred_interrupt():  # claimed and remembered together
                verdict, claim = self.store.claim(
                    self.plan.name, self.env_key, view.index.key(config), role, config,
                    trial.number, self.owner, budget=(self.plan.trials, BUDGET_ROLES))
                if verdict is not ClaimVerdict.CLAIMED:
                    set_aside(study, trial, "not_needed" if verdict is ClaimVerdict.FULL
                              else "duplicate")
                    return verdict, None
            assert claim is not None
            return "launched", self._launch(study, trial, role, config, view.index, claim)
        except BaseException:  # a stop signal anywhere in the trial: never leave it RUNNING
            with deferred_interrupt():
                if trial is not None:
                    fail_open_trial(study, trial)
                if claim is not None:
                    self.store.release(claim.id)
            raise

    def _too_early(self, trial: optuna.Trial, view: StudyView) -> bool:
        """Whether `trial` is a new proposal (no queued role) asked before this environment's
        baseline is measured: another process took the queued baseline between this one's
        `_enqueue_next` and its `ask`. Nothing may be sampled before the baseline, and so
        before the fit that follows it in `run` (Optuna keeps the first distributions of a
        param)."""
        return "role" not in trial.user_attrs and not view.index.baseline_ok()

    def _race(self, view: StudyView) -> tuple[str, RunRecord | None]:
        """Measure the search's leader again when it is not yet backed by enough processes
        (`results.evidence.race_target`), before anything new is sampled.

        Returns ("skip", None) when there is nothing to race (or racing is off: DIRECT
        mode, an objective other than time alone, `plan.racing` False, or the leader is
        being raced by another process), ("launched", run), or (FULL, None).
        """
        target = self._race_target(view)
        if target is None:
            return "skip", None
        first = target.first
        number = first.trial_number
        assert number is not None
        verdict, claim = self.store.claim(
            self.plan.name, self.env_key, f"race:{number}:{target.n}", Role.RACE, first.flags,
            number, self.owner, budget=(self.plan.trials, BUDGET_ROLES))
        if verdict is ClaimVerdict.FULL:
            return verdict, None
        if claim is None or verdict is not ClaimVerdict.CLAIMED:
            return "skip", None
        try:
            outcome = self.judge.guard(
                self.measure_claimed(self.judge.request(first.flags), claim.id))
        except BaseException:
            with deferred_interrupt():
                self.store.release(claim.id)
            raise
        with deferred_interrupt():
            ratio = self.judge.ratio(outcome)
            environment = environment_of(outcome.measurement, self.facts)
            user_env = self.judge.user_env(first.flags)
            run_id = self.store.record_run(
                self.plan.name, number, Role.RACE, first.flags, user_env, outcome, environment,
                ratio=ratio, env_key=self.env_key, claim_id=claim.id)
        return "launched", RunRecord(run_id, self.plan.name, number, Role.RACE, first.flags,
                                     user_env, outcome, datetime.now(UTC), environment, ratio,
                                     self.env_key)

    def _race_target(self, view: StudyView) -> ProgramEvidence | None:
        """The program to measure again now, or None (see `_race`)."""
        p = self.plan
        if (not p.racing or p.mode is not MeasureMode.PAIRED
                or p.objectives != (Objective.TIME,) or not view.index.baseline_ok()):
            return None
        return race_target(pooled(view.runs, lambda r: within_budget(r, p.memory_budget_bytes)))

    # --- fitting the space to the workload -----------------------------------------------

    def fit_space(self, study: optuna.Study) -> SpaceFit | None:
        """Fit the space to the baseline's program once per study; sample from it after.

        Call it once this environment's baseline is measured OK and before
        anything is sampled (`run` does, every round: after the first call it
        returns at once). The first process to claim the fit (`FIT_KEY`, role
        FINGERPRINT, outside `--trials`) computes it (`autotune.spaces.fit`: the
        baseline's collectives, then compile-only runs stored as FINGERPRINT
        runs) and stores it with the study (`Store.save_fit`); the others wait
        for it and a resume reads it back, so every process samples the same
        space (`self.space`). A study that sampled configurations before it was
        fitted stores a fit that changes nothing (`skipped`), since Optuna
        refuses other candidates for a param it has sampled.

        Returns:
            The fit in use, or None when the plan says `fit=False`.
        """
        if self._fit is not None or not self.plan.fit:
            return self._fit
        while (stored := self.store.get_study(self.plan.name).space_fit) is None:
            verdict, claim = self.store.claim(self.plan.name, self.env_key, FIT_KEY,
                                              Role.FINGERPRINT, {}, None, self.owner)
            if verdict is ClaimVerdict.CLAIMED or (
                    claim is not None and claim.state is ClaimState.DONE):  # stored elsewhere
                self._store_fit(study, claim if verdict is ClaimVerdict.CLAIMED else None)
                continue
            raise_if_interrupted()
            time.sleep(POLL_S)  # another process fits it now
            self.prepare()  # releases the claim of a process of this host that died
            if claim is not None and claim.id not in {
                    c.id for c in self.store.live_claims(self.plan.name)}:
                self.store.release(claim.id)  # its owner (another host) stopped beating
        self._fit = SpaceFit.from_json(stored)
        if self._fit.skipped is None:
            self.space, self._grid = apply_fit(self.plan.space, self._fit), None
        if self.on_fit is not None:
            self.on_fit(self._fit)
        return self._fit

    def _store_fit(self, study: optuna.Study, claim: ClaimRecord | None) -> None:
        """Compute the fit under `claim` (None: without one) and store it, unless another
        process stored one first; the claim ends done (interrupted on a stop)."""
        try:
            fit = self._compute_fit(study, None if claim is None else claim.id)
            self.store.save_fit(self.plan.name, fit.to_json())
        except BaseException:
            if claim is not None:
                with deferred_interrupt():
                    self.store.release(claim.id)
            raise
        if claim is not None:
            self.store.release(claim.id, ClaimState.DONE)

    def _compute_fit(self, study: optuna.Study, claim_id: int | None) -> SpaceFit:
        """The fit of the plan's space to this environment's baseline (see `fit_space`)."""
        if any(t.params for t in study.get_trials(deepcopy=False)):
            return SpaceFit(skipped="the study sampled configurations before its space was "
                            "fitted: it keeps the space as documented")
        runs = self.store.runs(self.plan.name, env_key=self.env_key)
        base = next((r.outcome.measurement for r in runs if r.role is Role.BASELINE
                     and r.outcome.ok and r.outcome.measurement is not None), None)
        if base is None:
            return SpaceFit(skipped="the baseline measured nothing to fit the space to")
        space, collectives = self.plan.space, base.collectives
        changes = collective_changes(space, collectives) if collectives is not None else []
        compiled = self._compiled_before(runs)  # an interrupted fit's compiles count
        if self.plan.mode is MeasureMode.PAIRED and base.fingerprint:
            compiled[""] = base.fingerprint  # compiled the way the probe compiles
        made = len(compiled)

        def compile_(config: Mapping[str, FlagValue]) -> str | None:
            key = config_key(effective_config(config, self.judge.catalog))
            if key not in compiled:
                compiled[key] = self._compile_only(config, claim_id)
            return compiled[key]

        cases = probe_cases(apply_fit(space, settle(space, changes)), self.judge.catalog) \
            if base.fingerprint else []  # a launcher that fingerprints nothing: no probe
        changes += run_probe(cases, compile_({}) if cases else None, compile_)
        return settle(space, changes, probes=len(compiled) - made, collectives=collectives)

    def _compiled_before(self, runs: list[RunRecord]) -> dict[str, str | None]:
        """Effective key -> fingerprint of the compile-only runs an interrupted fit stored."""
        return {config_key(effective_config(r.flags, self.judge.catalog)):
                r.outcome.measurement.fingerprint if r.outcome.ok else None
                for r in runs if r.role is Role.FINGERPRINT and r.trial_number is None
                and r.outcome.measurement is not None}

    def _compile_only(self, config: Mapping[str, FlagValue], claim_id: int | None) -> str | None:
        """Compile `config` per compilation (nothing timed), store the run as FINGERPRINT
        (no trial) and return its program's fingerprint (None: it did not compile)."""
        request = replace(self.judge.request({}), flags=dict(config), timed=False,
                          compiler_options=compiler_options(config, self.judge.catalog))
        outcome = self.measure_claimed(request, claim_id) if claim_id is not None \
            else self.launcher.launch(request)
        with deferred_interrupt():
            self.store.record_run(self.plan.name, None, Role.FINGERPRINT, dict(config),
                                  self.judge.user_env(config), outcome,
                                  environment_of(outcome.measurement, self.facts),
                                  env_key=self.env_key)
        m = outcome.measurement
        return m.fingerprint if outcome.ok and m is not None else None

    def _view(self) -> StudyView:
        """What the database says now: this environment's runs and running claims."""
        runs = self.store.runs(self.plan.name, env_key=self.env_key)
        running = self.store.claims(self.plan.name, [ClaimState.RUNNING], env_key=self.env_key)
        index = MeasuredIndex.of(runs, self.judge.catalog)
        index.in_flight = {c.key for c in running}
        return StudyView(index, self.store.held(self.plan.name, BUDGET_ROLES), runs)

    def remaining(self) -> int:
        """Trials still to launch before the study holds `plan.trials` measured ones."""
        return max(0, self.plan.trials - self.store.held(self.plan.name, BUDGET_ROLES))

    def pgle(self, top: int, repeats: int,
             on_run: Callable[[PgleEvent], None] | None = None
             ) -> list[tuple[int, dict[str, FlagValue]]]:
        """The PGLE phase (`autotune.guided.study_pgle`): the best `top` configurations
        measured again with a profile collected for each."""
        from autotune.guided import study_pgle

        return study_pgle(self, top, repeats, on_run)

    def confirm(self, top: int, repeats: int,
                on_run: Callable[[ConfirmEvent], None] | None = None) -> list[RunRecord]:
        """Re-measure the `top` best configurations `repeats` times each, interleaved.

        Round r measures every target once (in DIRECT mode after one baseline
        process), so drift hits all of them alike. Configurations over the
        memory budget are not candidates. Runs already made (an interrupted
        confirmation) count: re-running continues. Returns the configurations
        confirmed (their search runs).
        """
        self._wait_for_search()
        runs = self.store.runs(self.plan.name, env_key=self.env_key)
        targets = [r for r in ranked(runs, self.plan.memory_budget_bytes)
                   if needs_confirmation(r)][:top]
        pending = self._confirm_plan(runs, targets, repeats)
        for done, (number, flags, round_) in enumerate(pending, start=1):
            raise_if_interrupted()
            outcome = self._confirm_one(number, flags, round_)
            if on_run and outcome is not None:
                on_run(ConfirmEvent(number, outcome, done, len(pending)))
        return targets

    def shrink(self, repeats: int,
               on_run: Callable[[ShrinkEvent], None] | None = None) -> Shrink | None:
        """Shrink the recommended configuration to the flags that matter
        (`autotune.results.shrink`), measuring what it asks for until it is done.

        Returns the final state, or None when nothing is recommended, the study
        is DIRECT, or another process shrinks it now (claim `shrink:TRIAL`).
        Runs already stored count: re-running continues. The claim is released
        at the end (as interrupted, so a later run with more repeats may take it).
        """
        runs = self.store.runs(self.plan.name, env_key=self.env_key)
        rec = recommend(runs, self.plan.objectives, self.plan.memory_budget_bytes)
        if rec.run is None or self.plan.mode is not MeasureMode.PAIRED:
            return None
        state = shrink(runs, rec.run, self.judge.catalog, repeats)
        if state.done:
            return state
        verdict, claim = self.store.claim(self.plan.name, self.env_key,
                                          f"shrink:{state.trial_number}", Role.ABLATION,
                                          rec.run.flags, state.trial_number, self.owner)
        if claim is None or verdict is not ClaimVerdict.CLAIMED:
            return None
        try:
            while state.next is not None:
                for _ in range(state.next.runs):
                    raise_if_interrupted()
                    outcome = self._shrink_run(state.trial_number, state.next, claim.id)
                    if on_run:
                        on_run(ShrinkEvent(state.trial_number, state.next, outcome))
                runs = self.store.runs(self.plan.name, env_key=self.env_key)
                state = shrink(runs, rec.run, self.judge.catalog, repeats)
        finally:
            with deferred_interrupt():
                self.store.release(claim.id)
        return state

    def _shrink_run(self, number: int, step: Step, claim_id: int) -> TrialOutcome:
        """Measure one step of shrinking (under the claim `claim_id`) and store it under
        trial `number`."""
        reference = step.reference
        request = replace(
            self.judge.request(step.flags), timed=step.timed, reference=reference,
            reference_options=compiler_options(reference, self.judge.catalog)
            if reference is not None else None)
        outcome = self.measure_claimed(request, claim_id)
        with deferred_interrupt():
            self.store.record_run(self.plan.name, number, step.role, step.flags,
                                  self.judge.user_env(step.flags), outcome,
                                  environment_of(outcome.measurement, self.facts),
                                  env_key=self.env_key)
        return outcome

    def measure_claimed(self, request: TrialRequest, claim_id: int) -> TrialOutcome:
        """Launch one measurement under the claim `claim_id`, beating its heartbeat every
        `CLAIM_BEAT_S` seconds (a third of `plan.heartbeat_s` where that is shorter)
        meanwhile, so readers see a live worker (`Store.live_claims`)."""
        with claim_heartbeat(self.store, claim_id, min(CLAIM_BEAT_S, self.plan.heartbeat_s / 3)):
            return self.launcher.launch(request)

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
            self._wait_for_search()
            if self.remaining() == 0:
                return RunSummary(launched, reused)

    def _wait_for_search(self) -> None:
        """Block while other processes still measure search trials in this environment, so
        every process confirms the same leaders."""
        while any(c.role in BUDGET_ROLES for c in self.store.claims(
                self.plan.name, [ClaimState.RUNNING], env_key=self.env_key)):
            raise_if_interrupted()
            time.sleep(POLL_S)
            self.prepare()  # marks the trials of processes that died meanwhile

    def _confirm_one(self, number: int, flags: Mapping[str, FlagValue],
                     round_: int) -> TrialOutcome | None:
        """Claim and run one confirmation round of trial `number` (None: another process has)."""
        return self.claimed_run(f"confirm:{number}:{round_}", Role.CONFIRM, flags, number,
                                self.judge.request(flags))

    def claimed_run(self, key: str, role: Role, flags: Mapping[str, FlagValue], number: int,
                    request: TrialRequest,
                    before_record: Callable[[TrialOutcome], None] | None = None
                    ) -> TrialOutcome | None:
        """Claim `key`, measure `request` under it and store the run as trial `number`'s
        (`role`, `flags`); None when another process has the claim. A stop while measuring
        releases the claim; `before_record` sees the outcome first (an artifact stored in
        the same breath as its run)."""
        verdict, claim = self.store.claim(self.plan.name, self.env_key, key, role, flags,
                                          number, self.owner)
        if claim is None or verdict is not ClaimVerdict.CLAIMED:
            return None
        try:
            outcome = self.measure_claimed(request, claim.id)
        except BaseException:
            with deferred_interrupt():
                self.store.release(claim.id)
            raise
        with deferred_interrupt():
            if before_record is not None:
                before_record(outcome)
            self.store.record_run(self.plan.name, number, role, flags,
                                  self.judge.user_env(flags), outcome,
                                  environment_of(outcome.measurement, self.facts),
                                  env_key=self.env_key, claim_id=claim.id)
        return outcome

    def _confirm_plan(self, runs: list[RunRecord], targets: list[RunRecord],
                      repeats: int) -> list[tuple[int, Mapping[str, FlagValue], int]]:
        """(trial number, flags, round) of each run still to make, round by round."""
        base = baseline_trial(runs)
        direct = any(self.judge.request(t.flags).compiler_options is None for t in targets)
        plan: list[tuple[int, Mapping[str, FlagValue], int]] = []
        for round_ in range(repeats):
            if direct and base is not None and len(confirm_runs(runs, base)) <= round_:
                plan.append((base, {}, round_))
            for target in targets:
                assert target.trial_number is not None
                if len(confirm_runs(runs, target.trial_number)) <= round_:
                    plan.append((target.trial_number, target.flags, round_))
        return plan

    # --- Optuna ------------------------------------------------------------------------------

    def _open_optuna(self) -> optuna.Study:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.create_study(
            study_name=self.plan.name, storage=self._optuna_storage(),
            directions=["minimize"] * len(self.plan.objectives),
            sampler=make_sampler(self.choice, self.plan.seed, len(self.plan.objectives)),
            load_if_exists=True,
        )

    def _optuna_storage(self) -> Any:
        """Optuna's storage with heartbeats (stale trials failed, retried once)."""
        if not isinstance(self.storage, str):
            return self.storage
        self._rdb = rdb_storage(self.storage, create=True, heartbeat_s=self.plan.heartbeat_s)
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

    def _enqueue_next(self, study: optuna.Study, view: StudyView) -> bool:
        """Queue the baseline, the recommended configuration, or the next grid point.

        Returns False when a grid study has no configuration left to measure
        (all measured, or claimed by other processes).
        """
        index = view.index
        from optuna.storages import fail_stale_trials

        with quiet_experimental():
            fail_stale_trials(study)  # trials of a killed process: failed, queued again
        if trials_in(study, "WAITING"):
            return True
        if not index.baseline_ok():
            study.enqueue_trial({}, user_attrs={"role": Role.BASELINE.value})
            return True
        rec = self.space.recommended_params()
        if rec is not None and not has_role(study, Role.RECOMMENDED):
            study.enqueue_trial(rec, user_attrs={"role": Role.RECOMMENDED.value})
            return True
        if not self.choice.is_grid:
            return True
        point = next((params for params, key in self._grid_points()
                      if key not in index.runs and key not in index.in_flight), None)
        if point is not None:
            study.enqueue_trial(point, user_attrs={"role": Role.SEARCH.value})
        return point is not None

    def _grid_points(self) -> list[tuple[dict[str, Any], str]]:
        """The grid in its seeded order, each point with its effective-configuration key."""
        import optuna

        if self._grid is None:
            space, catalog = self.space, self.judge.catalog
            self._grid = [(p, config_key(effective_config(
                space.sample(optuna.trial.FixedTrial(p)), catalog)))
                for p in grid_order(space, self.plan.seed)]
        return self._grid

    def _proposal(self, trial: optuna.Trial) -> tuple[Role, dict[str, FlagValue]]:
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        return role, ({} if role is Role.BASELINE else self.space.sample(trial))

    def _launch(self, study: optuna.Study, trial: optuna.Trial, role: Role,
                config: dict[str, FlagValue], index: MeasuredIndex,
                claim: ClaimRecord) -> RunRecord:
        """Measure `config` (the heartbeat beating meanwhile), record it with the end of
        its claim, tell Optuna. A failed baseline leaves its claim open to a retry."""
        request = self.judge.request(config)
        if role is Role.SEARCH:
            request = replace(request, prune_ratio=self._prune_ratio(index),
                              prune_curve=self._prune_curve(index))
        if role is not Role.BASELINE:  # the baseline is always timed: it is the reference
            request = replace(request, memory_budget_bytes=self.plan.memory_budget_bytes)
        if role is not Role.BASELINE and request.compiler_options is not None:
            request = replace(request, known_programs=index.known_programs())
        with beating(study, trial):
            outcome = self.measure_claimed(request, claim.id)  # Ctrl-C here kills the child
        with deferred_interrupt():  # recorded and told together, or neither
            outcome = self.judge.guard(outcome)
            ratio = self.judge.ratio(outcome)
            if ratio is None and (prior := _measured_by(outcome, index)) is not None:
                outcome, ratio = _carried(outcome, prior), prior.ratio
            user_env = self.judge.user_env(config)
            environment = environment_of(outcome.measurement, self.facts)
            retry = role is Role.BASELINE and not outcome.ok
            run_id = self.store.record_run(
                self.plan.name, trial.number, role, config, user_env, outcome, environment,
                ratio=ratio, env_key=self.env_key, claim_id=claim.id,
                claim_state=ClaimState.RETRY if retry else ClaimState.DONE)
            run = RunRecord(run_id, self.plan.name, trial.number, role, config, user_env,
                            outcome, datetime.now(UTC), environment, ratio, self.env_key)
            self._tell(study, trial, run, role, reused=False)
        return run

    def _prune_ratio(self, index: MeasuredIndex) -> float | None:
        """Stop a search trial once it is `prune_margin` times slower than the best so far.

        See `autotune.stopping.prune_limit` for when no limit is set.
        """
        return prune_limit(self.plan.prune_margin, index.best_ratio(self.plan.memory_budget_bytes),
                           paired=self.plan.mode is MeasureMode.PAIRED,
                           time_only=self.plan.objectives == (Objective.TIME,))

    def _prune_curve(self, index: MeasuredIndex) -> tuple[float | None, ...] | None:
        """Also stop a search trial once it is slower than the other trials' median so far.

        The curve (`autotune.stopping.prune_curve`) is built from this
        environment's search and recommended runs (the index holds one
        environment's) that timed PAIRED steps, ok or pruned: a pruned run's
        steps count for the pairs it reached. None (no median rule) under the
        conditions of `_prune_ratio`, or while too few trials were timed.
        """
        from autotune.stopping import prune_curve, running_ratios

        for run in index.runs.values():  # a stored run never changes: its ratios are kept
            m = run.outcome.measurement
            if (run.id not in self._running and run.role in (Role.SEARCH, Role.RECOMMENDED)
                    and run.outcome.kind in (OutcomeKind.OK, OutcomeKind.PRUNED)
                    and m is not None and m.mode is MeasureMode.PAIRED
                    and m.baseline_step_times_s):
                self._running[run.id] = running_ratios(m.step_times_s, m.baseline_step_times_s)
        ratios = (self._running[r.id] for r in index.runs.values() if r.id in self._running)
        curve = prune_curve(self.plan.prune_margin, ratios,
                            paired=self.plan.mode is MeasureMode.PAIRED,
                            time_only=self.plan.objectives == (Objective.TIME,))
        return None if curve is None else tuple(curve)

    def _tell(self, study: optuna.Study, trial: optuna.Trial, run: RunRecord, role: Role,
              reused: bool) -> None:
        """Tell Optuna the run's objective values (and feasibility), or its failure."""
        from optuna.trial import TrialState

        trial.set_user_attr("role", role.value)
        trial.set_user_attr("outcome", run.outcome.kind.value)
        trial.set_user_attr("reused_run_id" if reused else "run_id", run.id)
        if run.outcome.message:
            trial.set_user_attr("message", run.outcome.message[:500])
        values = objective_values(run, [o.value for o in self.plan.objectives])
        if values is None:
            pruned = run.outcome.kind is OutcomeKind.PRUNED
            study.tell(trial, state=TrialState.PRUNED if pruned else TrialState.FAIL)
            return
        budget, peak = self.plan.memory_budget_bytes, peak_memory(run)
        if budget is not None and peak is not None:
            trial.set_constraint("memory_budget", float(peak - budget))
            trial.set_user_attr("feasible", peak <= budget)
        study.tell(trial, values)

    def _event(self, run: RunRecord, view: StudyView) -> TrialEvent:
        view.index.add(run)
        budget = self.plan.memory_budget_bytes
        backed = incumbent(pooled([*view.runs, run], lambda r: within_budget(r, budget)))
        best = backed.ratio if backed is not None else view.index.best_ratio(budget)
        assert run.trial_number is not None
        return TrialEvent(run.trial_number, run.role, run.outcome, run.speedup,
                          1 / best if best else None, min(view.held + 1, self.plan.trials),
                          self.plan.trials)


@dataclass
class StudyView:
    """One look at the database: this environment's measured configurations (with the
    keys other processes measure now in `index.in_flight`), what `--trials` counts, and
    every run of this environment (the evidence racing reads)."""

    index: MeasuredIndex
    held: int
    runs: list[RunRecord] = field(default_factory=list)

    def baseline_elsewhere(self) -> bool:
        """Whether another process is measuring this environment's baseline right now."""
        return not self.index.baseline_ok() and BASELINE_KEY in self.index.in_flight


@dataclass(frozen=True)
class ShrinkEvent:
    """Reported after each run of shrinking."""

    trial_number: int
    step: Step
    outcome: TrialOutcome


@dataclass(frozen=True)
class ConfirmEvent:
    """Reported after each confirmation run."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int


def _settings(plan: StudyPlan) -> RequestSettings:
    return RequestSettings(
        workload=plan.workload.path, preset=plan.preset, mode=plan.mode,
        base_env=with_device_count(plan.base_env, plan.devices), steps=plan.steps,
        warmup=plan.warmup, max_warmup=plan.max_warmup, timeout_s=plan.timeout_per_trial,
        memory_limit_bytes=plan.memory_limit_bytes, command=plan.command,
        launcher=plan.launcher,
    )


def _exhausted_note(streak: int) -> str:
    return (f"the sampler proposed {streak} measured configurations in a row: the space "
            "looks exhausted (their results were reused, nothing was re-measured)")


def _baseline_failed(outcome: TrialOutcome) -> BaselineFailedError:
    detail = outcome.message or outcome.stderr_tail.strip()[-300:]
    return BaselineFailedError(
        f"the baseline (XLA's defaults, no flags) ended as {outcome.kind.value}: {detail}. "
        "Nothing can be compared against it: make the workload run on its own first "
        "(python -m autotune.bench FILE --preset P), then run the same command again"
    )


def _catalog() -> Any:
    from autotune.flags.catalog import load_catalog

    return load_catalog()


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


def _owner_text(owner: tuple[str, int]) -> str:
    return f"{owner[0]}:{owner[1]}"


def _owner_of(text: object) -> tuple[str, int] | None:
    """(host, pid) from an `owner` user attribute, None when absent or malformed."""
    if not isinstance(text, str) or ":" not in text:
        return None
    host, _, pid = text.rpartition(":")
    return (host, int(pid)) if pid.isdigit() else None


def _owner_alive(owner: tuple[str, int]) -> bool:
    """Whether the process `owner` may still run: a process of another host is assumed
    alive (Optuna's heartbeat judges those); one of this host is looked up."""
    host, pid = owner
    return host != platform.node() or process_alive(pid)


def _sha256(path: Path | None) -> str | None:
    """The first 16 hex digits of the file's SHA-256 (None without a file)."""
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
