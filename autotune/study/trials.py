"""One trial of a study: the request for a configuration, and its outcome judged.

`TrialJudge` turns a configuration into a `TrialRequest` (PAIRED through
`compiler_options` where the study is paired, else the environment) and reads
an outcome back: the DIRECT-mode numerics guard and the time ratio against the
baseline. The orchestration around it is `autotune.study`.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from autotune.flags.compose import (
    after_hlo_text,
    compiler_options,
    compose_env,
    parse_flag_string,
)
from autotune.ground.protocol import Job
from autotune.ground.records import (
    Environment,
    FlagValue,
    Measurement,
    MeasureMode,
    OutcomeKind,
    RunRecord,
    TrialOutcome,
)
from autotune.launch.launcher import TrialRequest
from autotune.rules.numerics import checksums_agree, tolerance
from autotune.rules.stats import paired_ratio, step_stats

DEVICE_COUNT_FLAG = "xla_force_host_platform_device_count"


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


def environment_key(facts: Environment | None = None,
                    mode: MeasureMode = MeasureMode.PAIRED) -> str:
    """The environment this process measures in, as known before any trial child runs.

    Claims, baselines and known programs are kept per environment key, so a
    ratio is only ever taken against a baseline of the same environment.
    With `facts` (the probe's, `ProbeReport.environment`): `facts.key(mode)`,
    16 hex digits over the devices, driver, runtime and versions, and in
    DIRECT mode the host too (`records.Environment.key` says why). Without:
    the host, the key of runs stored before environments had facts.
    """
    return platform.node() if facts is None else facts.key(mode)


def environment_of(m: Measurement | None, facts: Environment | None = None
                   ) -> Environment | None:
    """Where a measurement was taken: the trial child's versions and devices, with the
    rest of `facts` (host, Python, driver and runtime versions, which the child does not
    report); without `facts`, this host and Python and no driver or runtime."""
    if m is None:
        return None
    base = facts or Environment(
        host=platform.node(), python_version=platform.python_version(), jax_version="",
        jaxlib_version="", backend="", device_kind="", device_count=0)
    return replace(
        base, jax_version=m.jax_version or base.jax_version,
        jaxlib_version=m.jaxlib_version or base.jaxlib_version,
        backend=m.backend or base.backend, device_kind=m.device_kind or base.device_kind,
        device_count=m.device_count or base.device_count)


@dataclass(frozen=True)
class RequestSettings:
    """The parts of a study's plan that shape every trial request."""

    workload: Path
    preset: str
    mode: MeasureMode
    base_env: Mapping[str, str]
    #: what every trial's job shares (steps, warm-up); each request adds its configuration
    job: Job
    timeout_s: float
    memory_limit_bytes: int | None = None
    command: tuple[str, ...] | None = None
    #: a cluster launcher's template (`launch.launcher.parse_template`), or None: one process
    launcher: str | None = None


class TrialJudge:
    """Builds requests and judges outcomes for one study (see the module docstring).

    Args:
        settings: what every request shares.
        catalog: the flag catalog (channels and per-compilation support).
        baseline_runs: returns the study's baseline runs (read when a DIRECT
            outcome is judged against the baseline).
    """

    def __init__(self, settings: RequestSettings, catalog: Any,
                 baseline_runs: Callable[[], list[RunRecord]]) -> None:
        self.settings = settings
        self.catalog = catalog
        self._baseline_runs = baseline_runs

    def request(self, config: Mapping[str, FlagValue], steps: int | None = None
                ) -> TrialRequest:
        """The request that measures `config` (PAIRED where the study is paired), over
        `steps` timed steps instead of the study's where given (confirmation's)."""
        s = self.settings
        paired = s.mode is MeasureMode.PAIRED
        options = compiler_options(config, self.catalog) if paired else None
        env = compose_env(config if options is None else {}, s.base_env, self.catalog)
        return TrialRequest(
            workload=s.workload, preset=s.preset, env={**s.base_env, **env},
            job=replace(s.job, compiler_options=options,
                        program_flags=after_hlo_text(config, self.catalog),
                        steps=steps or s.job.steps),
            timeout_s=s.timeout_s, memory_limit_bytes=s.memory_limit_bytes,
            command=s.command, flags=dict(config),
            workdir=Path.cwd() if s.command is not None else None, launcher=s.launcher,
        )

    def user_env(self, config: Mapping[str, FlagValue]) -> dict[str, str]:
        """The variables a user sets to apply `config` to their own job."""
        return compose_env(config, self.settings.base_env, self.catalog)

    def guard(self, outcome: TrialOutcome) -> TrialOutcome:
        """DIRECT mode: a result that differs from the baseline run's is numerics_mismatch.

        (PAIRED trials are judged in the child, where both outputs are at hand.)
        """
        m = outcome.measurement
        if not outcome.ok or m is None or m.mode is MeasureMode.PAIRED or m.checksum is None:
            return outcome
        base = _baseline_measurement(self._baseline_runs())
        if base is None or base.checksum is None:
            return outcome
        if checksums_agree(m.checksum, base.checksum, base.abs_sum or 0.0, m.output_dtype):
            return outcome
        return replace(outcome, kind=OutcomeKind.NUMERICS_MISMATCH, message=(
            f"checksum {m.checksum:.9g} differs from the baseline's {base.checksum:.9g} beyond "
            f"the {tolerance(m.output_dtype):.3g} tolerance for {m.output_dtype or 'exact'} "
            "outputs: this configuration computes something else"))

    def ratio(self, outcome: TrialOutcome) -> float | None:
        """Candidate time over baseline time, outlier steps left out of both medians.

        In-process against the baseline when paired, else against the study's
        baseline run.
        """
        m = outcome.measurement
        if not outcome.ok or m is None or not m.step_times_s:
            return None
        if m.mode is MeasureMode.PAIRED and m.baseline_step_times_s:
            return paired_ratio([m.step_times_s], [m.baseline_step_times_s], n_boot=200).ratio
        base = _baseline_median(self._baseline_runs())
        mine = step_stats(m.step_times_s, n_boot=1)
        return mine.median / base if base and mine else None


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
