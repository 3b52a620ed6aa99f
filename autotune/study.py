"""Orchestrate a study: baseline, recommended configuration, then sampled trials.

One process, one trial at a time (ask/tell). Every trial is launched through a
`Launcher`, recorded in autotune's own tables through the `Store`, and told to
Optuna. The objective is the step time relative to the baseline (below 1 is
faster): measured in-process against the baseline (PAIRED) where every flag of
the configuration can be given per compilation, else against the study's
baseline run (DIRECT).
"""

from __future__ import annotations

import platform
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune._proc import deferred_interrupt
from autotune.analysis import ranked
from autotune.confirm import baseline_trial, confirm_runs, needs_confirmation
from autotune.errors import BaselineFailedError, UsageError
from autotune.flags.compose import compiler_options, compose_env, parse_flag_string
from autotune.launcher import Launcher, TrialRequest
from autotune.numerics import checksums_agree, tolerance
from autotune.records import (
    Environment,
    FlagValue,
    Measurement,
    MeasureMode,
    OutcomeKind,
    Role,
    RunRecord,
    TrialOutcome,
)
from autotune.stats import paired_ratio, step_stats
from autotune.storage.store import Store
from autotune.workloads import WorkloadInfo

if TYPE_CHECKING:
    import optuna

    from autotune.spaces import Space

DEVICE_COUNT_FLAG = "xla_force_host_platform_device_count"


def _tpe(seed: int | None) -> Any:
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=5)


def _random(seed: int | None) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=seed)


SAMPLERS: dict[str, Callable[[int | None], Any]] = {"tpe": _tpe, "random": _random}


def make_sampler(name: str, seed: int | None) -> Any:
    """An Optuna sampler from the registry.

    Raises:
        UsageError: unknown sampler name (the message lists the known ones).
    """
    if name not in SAMPLERS:
        raise UsageError(f"unknown sampler '{name}'. Known samplers: {', '.join(SAMPLERS)}")
    return SAMPLERS[name](seed)


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
    sampler: str = "tpe"
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


@dataclass(frozen=True)
class TrialEvent:
    """Reported after each trial, for progress displays."""

    number: int
    role: Role
    outcome: TrialOutcome
    speedup: float | None
    best_speedup: float | None
    done: int
    total: int


def with_device_count(env: Mapping[str, str], devices: int) -> dict[str, str]:
    """`env` with XLA_FLAGS asking the host platform for `devices` devices.

    Only the CPU (host) platform reads this flag; GPUs and TPUs ignore it.
    """
    tokens = [(n, v) for n, v in parse_flag_string(env.get("XLA_FLAGS", ""))
              if n != DEVICE_COUNT_FLAG]
    tokens.append((DEVICE_COUNT_FLAG, str(devices)))
    out = dict(env)
    out["XLA_FLAGS"] = " ".join(f"--{n}" if v is None else f"--{n}={v}" for n, v in tokens)
    return out


def _environment(m: Any) -> Environment | None:
    if m is None:
        return None
    return Environment(
        host=platform.node(), python_version=platform.python_version(),
        jax_version=m.jax_version, jaxlib_version=m.jaxlib_version, backend=m.backend,
        device_kind=m.device_kind, device_count=m.device_count,
    )


def _open_optuna(plan: StudyPlan, storage_url: str) -> optuna.Study:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.create_study(
        study_name=plan.name, storage=storage_url, direction="minimize",
        sampler=make_sampler(plan.sampler, plan.seed), load_if_exists=True,
    )


class StudyRunner:
    """Runs the trials of one study; see the module docstring.

    Args:
        plan: the validated request.
        store: autotune's tables (already opened and migrated).
        launcher: how each trial is measured.
        storage_url: the same database, for Optuna's tables.
    """

    def __init__(self, plan: StudyPlan, store: Store, launcher: Launcher, storage_url: str):
        self.plan = plan
        self.store = store
        self.launcher = launcher
        self.storage_url = storage_url
        self.base_env = with_device_count(plan.base_env, plan.devices)

    def prepare(self) -> None:
        """Create the study, or check that a resumed one has the same settings.

        Raises:
            StudyMismatchError: the stored study was made with other settings.
        """
        p = self.plan
        self.store.ensure_study(p.name, p.space_name, p.workload.name, p.preset, p.devices, p.mode,
                                space_backend=p.space.backend)

    def run(self, on_trial: Callable[[TrialEvent], None] | None = None) -> int:
        """Run trials until the study holds `plan.trials` finished ones; return how many ran.

        Ctrl-C fails the trial in flight (its child is killed) and re-raises;
        everything finished stays in the database.
        """
        p = self.plan
        self.prepare()
        study = _open_optuna(p, self.storage_url)
        ran = 0
        while (done := _finished(study)) < p.trials:
            trial: optuna.Trial | None = None
            try:
                with deferred_interrupt():  # a trial is created whole, or not at all
                    self._enqueue_reference(study)
                    trial = study.ask()
                event = self._run_trial(study, trial, done + 1)
            except BaseException:  # Ctrl-C anywhere in the trial: never leave it RUNNING
                if trial is not None:
                    with deferred_interrupt():
                        _fail_open_trial(study, trial)
                raise
            ran += 1
            if on_trial:
                on_trial(event)
            if event.role is Role.BASELINE and not event.outcome.ok:
                raise _baseline_failed(event.outcome)
        return ran

    def confirm(self, top: int, repeats: int,
                on_run: Callable[[ConfirmEvent], None] | None = None) -> list[RunRecord]:
        """Re-measure the `top` best configurations `repeats` times each, interleaved.

        Round r measures every target once (in DIRECT mode after one baseline
        process), so drift hits all of them alike. Runs already made (an
        interrupted confirmation) count: re-running continues. Returns the
        configurations confirmed (their search runs).
        """
        runs = self.store.runs(self.plan.name)
        targets = [r for r in ranked(runs) if needs_confirmation(r)][:top]
        pending = self._confirm_plan(runs, targets, repeats)
        for done, (number, flags) in enumerate(pending, start=1):
            outcome = self.launcher.launch(self._request(flags))
            self.store.record_run(self.plan.name, number, Role.CONFIRM, flags,
                                  compose_env(flags, self.plan.base_env, _catalog()), outcome,
                                  _environment(outcome.measurement))
            if on_run:
                on_run(ConfirmEvent(number, outcome, done, len(pending)))
        return targets

    def _confirm_plan(self, runs: list[RunRecord], targets: list[RunRecord],
                      repeats: int) -> list[tuple[int, Mapping[str, FlagValue]]]:
        """(trial number, flags) of each run still to make, round by round."""
        base = baseline_trial(runs)
        direct = any(self._request(t.flags).compiler_options is None for t in targets)
        plan: list[tuple[int, Mapping[str, FlagValue]]] = []
        for round_ in range(repeats):
            if direct and base is not None and len(confirm_runs(runs, base)) <= round_:
                plan.append((base, {}))
            for target in targets:
                assert target.trial_number is not None
                if len(confirm_runs(runs, target.trial_number)) <= round_:
                    plan.append((target.trial_number, target.flags))
        return plan

    def remaining(self) -> int:
        """Trials still to run before the study holds `plan.trials` finished ones."""
        import optuna

        try:
            study = optuna.load_study(study_name=self.plan.name, storage=self.storage_url)
        except KeyError:
            return self.plan.trials
        return max(0, self.plan.trials - _finished(study))

    def _enqueue_reference(self, study: optuna.Study) -> None:
        """Queue the baseline, then the recommended configuration, unless done or queued."""
        runs = self.store.runs(self.plan.name)
        queued = {t.user_attrs.get("role") for t in _waiting(study)}
        if not any(r.role is Role.BASELINE and r.outcome.ok for r in runs):
            if Role.BASELINE.value not in queued:
                study.enqueue_trial({}, user_attrs={"role": Role.BASELINE.value})
            return
        rec = self.plan.space.recommended_params()
        if rec is not None and not any(r.role is Role.RECOMMENDED for r in runs):
            if Role.RECOMMENDED.value not in queued:
                study.enqueue_trial(rec, user_attrs={"role": Role.RECOMMENDED.value})

    def _run_trial(self, study: optuna.Study, trial: optuna.Trial, done: int) -> TrialEvent:
        role = Role(trial.user_attrs.get("role", Role.SEARCH.value))
        config = {} if role is Role.BASELINE else self.plan.space.sample(trial)
        request = self._request(config)
        if role is Role.SEARCH:
            request = replace(request, prune_ratio=self._prune_ratio(study))
        outcome = self.launcher.launch(request)  # Ctrl-C here kills the child
        with deferred_interrupt():  # recorded and told together, or neither
            outcome = self._guard(outcome)
            ratio = self._ratio(outcome)
            user_env = compose_env(config, self.plan.base_env, _catalog())
            run_id = self.store.record_run(
                self.plan.name, trial.number, role, config, user_env, outcome,
                _environment(outcome.measurement), ratio=ratio,
            )
            self._tell(study, trial, outcome, ratio, role, run_id)
        return TrialEvent(
            trial.number, role, outcome, 1 / ratio if ratio else None,
            _best_speedup(study), done, self.plan.trials,
        )

    def _prune_ratio(self, study: optuna.Study) -> float | None:
        """Stop a search trial once it is `prune_margin` times slower than the best so far.

        Only in PAIRED mode (the child compares against its own baseline) and
        only once a configuration has been measured; None disables pruning.
        """
        margin = self.plan.prune_margin
        best = _best_speedup(study)
        if margin is None or best is None or self.plan.mode is not MeasureMode.PAIRED:
            return None
        return margin / best

    def _request(self, config: Mapping[str, FlagValue]) -> TrialRequest:
        p = self.plan
        options = compiler_options(config, _catalog()) if p.mode is MeasureMode.PAIRED else None
        env = compose_env(config if options is None else {}, self.base_env, _catalog())
        return TrialRequest(
            workload=p.workload.path, preset=p.preset, env={**self.base_env, **env},
            compiler_options=options, steps=p.steps, warmup=p.warmup, max_warmup=p.max_warmup,
            timeout_s=p.timeout_per_trial, memory_limit_bytes=p.memory_limit_bytes,
            command=p.command, flags=dict(config),
            workdir=Path.cwd() if p.command is not None else None,
        )

    def _guard(self, outcome: TrialOutcome) -> TrialOutcome:
        """DIRECT mode: a result that differs from the baseline run's is numerics_mismatch.

        (PAIRED trials are judged in the child, where both outputs are at hand.)
        """
        m = outcome.measurement
        if not outcome.ok or m is None or m.mode is MeasureMode.PAIRED or m.checksum is None:
            return outcome
        base = _baseline_measurement(self.store.runs(self.plan.name, roles=[Role.BASELINE]))
        if base is None or base.checksum is None:
            return outcome
        if checksums_agree(m.checksum, base.checksum, base.abs_sum or 0.0, m.output_dtype):
            return outcome
        return replace(outcome, kind=OutcomeKind.NUMERICS_MISMATCH, message=(
            f"checksum {m.checksum:.9g} differs from the baseline's {base.checksum:.9g} beyond "
            f"the {tolerance(m.output_dtype):.3g} tolerance for {m.output_dtype or 'exact'} "
            "outputs: this configuration computes something else"))

    def _ratio(self, outcome: TrialOutcome) -> float | None:
        """Candidate time over baseline time, outlier steps left out of both medians.

        In-process against the baseline when paired, else against the study's
        baseline run.
        """
        m = outcome.measurement
        if not outcome.ok or m is None or not m.step_times_s:
            return None
        if m.mode is MeasureMode.PAIRED and m.baseline_step_times_s:
            return paired_ratio([m.step_times_s], [m.baseline_step_times_s], n_boot=200).ratio
        base = _baseline_median(self.store.runs(self.plan.name, roles=[Role.BASELINE]))
        mine = step_stats(m.step_times_s, n_boot=1)
        return mine.median / base if base and mine else None

    @staticmethod
    def _tell(study: optuna.Study, trial: optuna.Trial, outcome: TrialOutcome,
              ratio: float | None, role: Role, run_id: int) -> None:
        from optuna.trial import TrialState

        trial.set_user_attr("role", role.value)
        trial.set_user_attr("outcome", outcome.kind.value)
        trial.set_user_attr("run_id", run_id)
        if outcome.message:
            trial.set_user_attr("message", outcome.message[:500])
        if ratio is None:
            state = TrialState.PRUNED if outcome.kind is OutcomeKind.PRUNED else TrialState.FAIL
            study.tell(trial, state=state)
        else:
            study.tell(trial, ratio)


def _baseline_failed(outcome: TrialOutcome) -> BaselineFailedError:
    detail = outcome.message or outcome.stderr_tail.strip()[-300:]
    return BaselineFailedError(
        f"the baseline (XLA's defaults, no flags) ended as {outcome.kind.value}: {detail}. "
        "Nothing can be compared against it: make the workload run on its own first "
        "(python -m autotune.bench FILE --preset P), then run the same command again"
    )


@dataclass(frozen=True)
class ConfirmEvent:
    """Reported after each confirmation run."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int


def _fail_open_trial(study: optuna.Study, trial: optuna.Trial) -> None:
    from optuna.exceptions import UpdateFinishedTrialError
    from optuna.trial import TrialState

    try:
        trial.set_user_attr("outcome", "interrupted")
    except UpdateFinishedTrialError:
        return  # told already: nothing is left open
    study.tell(trial, state=TrialState.FAIL, skip_if_finished=True)


def _catalog() -> Any:
    from autotune.flags.catalog import load_catalog

    return load_catalog()


def _finished(study: optuna.Study) -> int:
    from optuna.trial import TrialState

    states = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def _waiting(study: optuna.Study) -> list[Any]:
    from optuna.trial import TrialState

    return study.get_trials(deepcopy=False, states=(TrialState.WAITING,))


def _best_speedup(study: optuna.Study) -> float | None:
    from optuna.trial import TrialState

    values = [t.value for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
              if t.value and t.user_attrs.get("role") != Role.BASELINE.value]
    return 1 / min(values) if values else None


def _baseline_measurement(runs: list[RunRecord]) -> Measurement | None:
    return next((r.outcome.measurement for r in runs
                 if r.outcome.ok and r.outcome.measurement is not None), None)


def _baseline_median(runs: list[RunRecord]) -> float | None:
    for run in runs:
        m = run.outcome.measurement
        if run.outcome.ok and m is not None:
            times = m.baseline_step_times_s or m.step_times_s
            summary = step_stats(times, n_boot=1)
            return summary.median if summary else None
    return None
