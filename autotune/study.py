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
A trial left running by a killed process is failed by Optuna's heartbeat and
run again once.
"""

from __future__ import annotations

import hashlib
import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._optuna import (
    beating,
    fail_open_trial,
    has_role,
    quiet_experimental,
    rdb_storage,
    trials_in,
)
from autotune._proc import deferred_interrupt, raise_if_interrupted
from autotune.analysis import ranked
from autotune.confirm import baseline_trial, confirm_runs, needs_confirmation
from autotune.errors import BaselineFailedError
from autotune.flags.compose import config_key, effective_config
from autotune.launcher import Launcher
from autotune.measured import MeasuredIndex, objective_values, peak_memory
from autotune.records import FlagValue, MeasureMode, OutcomeKind, Role, RunRecord, TrialOutcome
from autotune.search import Objective, SamplerChoice, choose_sampler, grid_order, make_sampler
from autotune.stopping import prune_limit
from autotune.storage.store import Store
from autotune.trials import RequestSettings, TrialJudge, environment_of, with_device_count
from autotune.workloads import WorkloadInfo

if TYPE_CHECKING:
    import optuna

    from autotune.spaces import Space

#: Proposals in a row that repeat measured configurations before a study stops.
MAX_REPEATED_PROPOSALS = 100


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
    heartbeat_s: int = 30

    def recorded(self) -> dict[str, Any]:
        """The plan fields stored with the study, beyond its columns (JSON-ready).

        A re-run must ask for the same: the space file's and workload file's
        content (hashed), the command, steps, warm-up, sampler, prune margin
        and the time and memory limits of a trial. `trials` and `seed` may
        change (running more trials continues the study).
        """
        return {
            "space_sha256": _sha256(self.space.path),
            "workload_sha256": None if self.command else _sha256(self.workload.path),
            "command": list(self.command) if self.command else None,
            "steps": self.steps, "warmup": self.warmup, "max_warmup": self.max_warmup,
            "sampler": self.sampler, "prune_margin": self.prune_margin,
            "timeout_per_trial": self.timeout_per_trial,
            "memory_limit_bytes": self.memory_limit_bytes,
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
    """

    def __init__(self, plan: StudyPlan, store: Store, launcher: Launcher, storage: Any):
        self.plan = plan
        self.store = store
        self.launcher = launcher
        self.storage = storage
        self.choice = plan.sampler_choice()
        self.judge = TrialJudge(_settings(plan), _catalog(),
                                lambda: store.runs(plan.name, roles=[Role.BASELINE]))
        self._grid: list[tuple[dict[str, Any], str]] | None = None

    def prepare(self) -> None:
        """Create the study, or check that a resumed one has the same settings.

        Raises:
            StudyMismatchError: the stored study was made with other settings.
        """
        p = self.plan
        self.store.ensure_study(p.name, p.space_name, p.workload.name, p.preset, p.devices, p.mode,
                                space_backend=p.space.backend,
                                objectives=[o.value for o in p.objectives],
                                memory_budget_bytes=p.memory_budget_bytes, plan=p.recorded())

    def run(self, on_trial: Callable[[TrialEvent], None] | None = None) -> RunSummary:
        """Launch trials until the study holds `plan.trials` launched ones.

        Proposals that repeat a measured configuration are told its recorded
        result and launch nothing. Ctrl-C fails the trial in flight (its child
        is killed) and re-raises; everything finished stays in the database.

        Raises:
            BaselineFailedError: the baseline did not run (nothing to compare to).
        """
        self.prepare()
        study = self._open_optuna()
        index = MeasuredIndex.of(self.store.runs(self.plan.name), self.judge.catalog)
        launched = reused = streak = 0
        while index.launched < self.plan.trials:
            raise_if_interrupted()  # a Ctrl-C that Python swallowed (see interrupt_latch)
            if streak >= MAX_REPEATED_PROPOSALS:
                return RunSummary(launched, reused, _exhausted_note(streak))
            trial: optuna.Trial | None = None
            try:
                with deferred_interrupt():  # a trial is created whole, or not at all
                    if not self._enqueue_next(study, index):
                        return RunSummary(launched, reused, "every configuration of the "
                                          "space has been measured")
                    with quiet_experimental():
                        trial = study.ask()
                role, config = self._proposal(trial)
                prior = index.get(config) if role is not Role.BASELINE else None
                if prior is not None:
                    with deferred_interrupt():
                        self._tell(study, trial, prior, role, reused=True)
                    reused, streak = reused + 1, streak + 1
                    continue
                run = self._launch(study, trial, role, config, index)
            except BaseException:  # Ctrl-C anywhere in the trial: never leave it RUNNING
                if trial is not None:
                    with deferred_interrupt():
                        fail_open_trial(study, trial)
                raise
            index.add(run)
            launched, streak = launched + 1, 0
            if on_trial:
                on_trial(self._event(run, index))
            if role is Role.BASELINE and not run.outcome.ok:
                raise _baseline_failed(run.outcome)
        return RunSummary(launched, reused)

    def remaining(self) -> int:
        """Trials still to launch before the study holds `plan.trials` launched ones."""
        index = MeasuredIndex.of(self.store.runs(self.plan.name), self.judge.catalog)
        return max(0, self.plan.trials - index.launched)

    def confirm(self, top: int, repeats: int,
                on_run: Callable[[ConfirmEvent], None] | None = None) -> list[RunRecord]:
        """Re-measure the `top` best configurations `repeats` times each, interleaved.

        Round r measures every target once (in DIRECT mode after one baseline
        process), so drift hits all of them alike. Configurations over the
        memory budget are not candidates. Runs already made (an interrupted
        confirmation) count: re-running continues. Returns the configurations
        confirmed (their search runs).
        """
        runs = self.store.runs(self.plan.name)
        targets = [r for r in ranked(runs, self.plan.memory_budget_bytes)
                   if needs_confirmation(r)][:top]
        pending = self._confirm_plan(runs, targets, repeats)
        for done, (number, flags) in enumerate(pending, start=1):
            raise_if_interrupted()
            outcome = self.launcher.launch(self.judge.request(flags))
            self.store.record_run(self.plan.name, number, Role.CONFIRM, flags,
                                  self.judge.user_env(flags), outcome,
                                  environment_of(outcome.measurement))
            if on_run:
                on_run(ConfirmEvent(number, outcome, done, len(pending)))
        return targets

    def _confirm_plan(self, runs: list[RunRecord], targets: list[RunRecord],
                      repeats: int) -> list[tuple[int, Mapping[str, FlagValue]]]:
        """(trial number, flags) of each run still to make, round by round."""
        base = baseline_trial(runs)
        direct = any(self.judge.request(t.flags).compiler_options is None for t in targets)
        plan: list[tuple[int, Mapping[str, FlagValue]]] = []
        for round_ in range(repeats):
            if direct and base is not None and len(confirm_runs(runs, base)) <= round_:
                plan.append((base, {}))
            for target in targets:
                assert target.trial_number is not None
                if len(confirm_runs(runs, target.trial_number)) <= round_:
                    plan.append((target.trial_number, target.flags))
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
        return rdb_storage(self.storage, create=True, heartbeat_s=self.plan.heartbeat_s)

    def _enqueue_next(self, study: optuna.Study, index: MeasuredIndex) -> bool:
        """Queue the baseline, the recommended configuration, or the next grid point.

        Returns False when a grid study has no configuration left to measure.
        """
        from optuna.storages import fail_stale_trials

        with quiet_experimental():
            fail_stale_trials(study)  # trials of a killed process: failed, queued again
        if trials_in(study, "WAITING"):
            return True
        if not index.baseline_ok():
            study.enqueue_trial({}, user_attrs={"role": Role.BASELINE.value})
            return True
        rec = self.plan.space.recommended_params()
        if rec is not None and not has_role(study, Role.RECOMMENDED):
            study.enqueue_trial(rec, user_attrs={"role": Role.RECOMMENDED.value})
            return True
        if not self.choice.is_grid:
            return True
        point = next((params for params, key in self._grid_points() if key not in index.runs),
                     None)
        if point is not None:
            study.enqueue_trial(point, user_attrs={"role": Role.SEARCH.value})
        return point is not None

    def _grid_points(self) -> list[tuple[dict[str, Any], str]]:
        """The grid in its seeded order, each point with its effective-configuration key."""
        import optuna

        if self._grid is None:
            space, catalog = self.plan.space, self.judge.catalog
            self._grid = [(p, config_key(effective_config(
                space.sample(optuna.trial.FixedTrial(p)), catalog)))
                for p in grid_order(space, self.plan.seed)]
        return self._grid

    def _proposal(self, trial: optuna.Trial) -> tuple[Role, dict[str, FlagValue]]:
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        return role, ({} if role is Role.BASELINE else self.plan.space.sample(trial))

    def _launch(self, study: optuna.Study, trial: optuna.Trial, role: Role,
                config: dict[str, FlagValue], index: MeasuredIndex) -> RunRecord:
        """Measure `config` (the heartbeat beating meanwhile), record it, tell Optuna."""
        request = self.judge.request(config)
        if role is Role.SEARCH:
            request = replace(request, prune_ratio=self._prune_ratio(index))
        if role is not Role.BASELINE and request.compiler_options is not None:
            request = replace(request, known_programs=index.known_programs(platform.node()))
        with beating(study, trial):
            outcome = self.launcher.launch(request)  # Ctrl-C here kills the child
        with deferred_interrupt():  # recorded and told together, or neither
            outcome = self.judge.guard(outcome)
            ratio = self.judge.ratio(outcome)
            if ratio is None and (prior := _measured_by(outcome, index)) is not None:
                outcome, ratio = _carried(outcome, prior), prior.ratio
            user_env = self.judge.user_env(config)
            environment = environment_of(outcome.measurement)
            run_id = self.store.record_run(self.plan.name, trial.number, role, config, user_env,
                                           outcome, environment, ratio=ratio)
            run = RunRecord(run_id, self.plan.name, trial.number, role, config, user_env,
                            outcome, datetime.now(UTC), environment, ratio)
            self._tell(study, trial, run, role, reused=False)
        return run

    def _prune_ratio(self, index: MeasuredIndex) -> float | None:
        """Stop a search trial once it is `prune_margin` times slower than the best so far.

        See `autotune.stopping.prune_limit` for when no limit is set.
        """
        return prune_limit(self.plan.prune_margin, index.best_ratio(self.plan.memory_budget_bytes),
                           paired=self.plan.mode is MeasureMode.PAIRED,
                           time_only=self.plan.objectives == (Objective.TIME,))

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

    def _event(self, run: RunRecord, index: MeasuredIndex) -> TrialEvent:
        best = index.best_ratio(self.plan.memory_budget_bytes)
        assert run.trial_number is not None
        return TrialEvent(run.trial_number, run.role, run.outcome, run.speedup,
                          1 / best if best else None, index.launched, self.plan.trials)


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


def _sha256(path: Path | None) -> str | None:
    """The first 16 hex digits of the file's SHA-256 (None without a file)."""
    if path is None or not Path(path).is_file():
        return None
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
