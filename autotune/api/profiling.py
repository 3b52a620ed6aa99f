"""`autotune pgle` as a function: a configuration profiled, then its PGLE performance run
timed against it in fresh processes."""

# Imports inside the methods are lazy on purpose: the command line imports this package at
# start, and a study's storage, Optuna and read model load only when a method needs them.

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.api.inputs import one_of, resolve_workload
from autotune.ground.errors import UsageError
from autotune.study.options import PgleOptions


@dataclass(frozen=True)
class PgleResult:
    """What `pgle` measured: the plan, each run's outcome and their verdict
    (`autotune.results.pgle`)."""

    plan: Any  # autotune.study.pgle.PglePlan
    workload: str
    outcomes: list[Any]
    verdict: Any  # autotune.results.pgle.PgleVerdict


def pgle(options: PgleOptions | None = None, *, base_env: Mapping[str, str] | None = None,
         progress: Callable[[int, int, Any], None] | None = None,
         **values: Any) -> PgleResult:
    """`autotune pgle`: profile a configuration, then time its PGLE performance run
    against the same configuration without the profile in `repeats` fresh processes.

    `options` (or the `PgleOptions` fields in `values`): `config` is a file
    `autotune export` wrote (XLA's defaults when None); its own profile path,
    if any, is left out. Manual mode collects the profile
    into `out` (default `autotune-pgle/NAME-PRESET/`) as `profile.pbtxt`, or
    reads the existing `profile` (never rewritten; each run refuses it where it
    is stale); auto mode lets JAX profile (`jax_enable_pgle`).

    Raises:
        UsageError: an unknown benchmark, preset or mode; a bad config file; a
            `profile` with auto mode, or one that is missing or has no record
            beside it; repeats, profile runs or percentile out of range.
    """
    from autotune import pgle as rules
    from autotune.api.config import load_config
    from autotune.bench import PRESETS
    from autotune.flags.catalog import load_catalog
    from autotune.ground.protocol import PGLE_MODES, Job
    from autotune.ground.records import MeasureMode
    from autotune.launch.launcher import SubprocessLauncher
    from autotune.results.pgle import pgle_verdict
    from autotune.study.pgle import PglePlan, model_identity, run_pgle
    from autotune.study.trials import RequestSettings, with_device_count

    o = options if options is not None else PgleOptions.of(**values)
    work, argv = resolve_workload(o.benchmark, o.script, o.command)
    one_of(o.preset, PRESETS, "preset")
    one_of(o.mode, PGLE_MODES, "mode")
    _pgle_ranges(o.repeats, o.profile_runs, o.percentile)
    flags = (rules.without_profile(load_config(o.config, profile=False).flags)
             if o.config is not None else {})
    path = _pgle_profile(o.mode, o.profile, o.out, f"{work.name}-{o.preset}")
    env = dict(os.environ if base_env is None else base_env)
    settings = RequestSettings(
        workload=work.path, preset=o.preset, mode=MeasureMode.PAIRED,
        base_env=with_device_count(env, o.devices),
        job=Job(steps=o.steps, warmup=o.warmup, max_warmup=o.max_warmup),
        timeout_s=o.timeout_per_trial, command=argv)
    plan = PglePlan(settings, flags, o.mode, path, o.mode == "manual" and o.profile is None,
                    o.profile_runs, o.percentile, o.repeats,
                    model_identity(work, o.preset, o.devices, argv))
    outcomes = run_pgle(plan, load_catalog(), SubprocessLauncher(), progress)
    return PgleResult(plan, work.name, outcomes, pgle_verdict(outcomes, flags))


def _pgle_ranges(repeats: int, profile_runs: int, percentile: float) -> None:
    if repeats < 1 or profile_runs < 1:
        raise UsageError("--repeats and --profile-runs must be 1 or more")
    if not 0 < percentile <= 100:
        raise UsageError(f"--percentile {percentile} must lie in (0, 100]")


def _pgle_profile(mode: str, profile: str | Path | None, out: str | Path | None,
                  default: str) -> Path | None:
    """Where manual mode writes (or, given `profile`, reads) the profile; None in auto."""
    from autotune import pgle as rules

    if mode == "auto":
        if profile is not None:
            raise UsageError("--profile is for --mode manual: auto mode lets JAX profile")
        return None
    if profile is None:
        return (Path(out) if out is not None else Path("autotune-pgle") / default).resolve() \
            / "profile.pbtxt"
    try:
        rules.read_profile(str(profile))
    except ValueError as exc:
        raise UsageError(f"--profile {profile}: {exc}") from None
    return Path(profile).resolve()
