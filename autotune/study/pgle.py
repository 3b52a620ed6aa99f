"""PGLE runs of one configuration: 003's three steps as fresh-process trials.

Orchestration (layer 4b). Each run is one trial child with a PGLE job
(`autotune.launch.launcher.PgleSpec`, `autotune.child.pgle_phase`) that times the
configuration's performance run against the configuration itself, in one
process, like any PAIRED trial. In manual mode the first run also collects
the profile (003's profile run and the conversion) and writes it where the
plan says; the later runs read that file, so each checks it is fresh for
its own compile. A run that could not collect or read the profile ends the
series: there is nothing to time against. Judging the runs is the read
model's (`autotune.results.pgle`).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune import pgle as rules
from autotune.flags.catalog import Catalog
from autotune.flags.compose import split_per_compile
from autotune.ground.errors import UsageError
from autotune.ground.proc import raise_if_interrupted
from autotune.ground.records import ArtifactRecord, FlagValue, MeasureMode, Role, TrialOutcome
from autotune.launch.launcher import Launcher, PgleSpec, TrialRequest
from autotune.launch.workloads import WorkloadInfo, list_benchmarks
from autotune.results.pgle import pgle_runs, pgle_targets, profile_kind
from autotune.study.context import StudyContext
from autotune.study.plan import PgleEvent, StudyPlan
from autotune.study.trials import RequestSettings, TrialJudge

#: Called after each run: (runs done, runs planned, the run's outcome).
Progress = Callable[[int, int, TrialOutcome], None]


@dataclass(frozen=True)
class PglePlan:
    """What `autotune pgle` measures.

    Attributes:
        settings: what every request shares (PAIRED mode).
        config: the configuration the profile is for (XLA's defaults when empty),
            without a profile path of its own.
        mode: "manual" or "auto".
        profile: manual mode: where the profile is written (`collect`) or read.
        collect: manual mode: the first run profiles and writes `profile`.
        runs: runs profiled; percentile: of each instruction's durations.
        repeats: fresh processes timing the candidate against the configuration.
        model: the workload's identity (`model_identity`), recorded with a profile.
    """

    settings: RequestSettings
    config: Mapping[str, FlagValue]
    mode: str
    profile: Path | None
    collect: bool
    runs: int
    percentile: float
    repeats: int
    model: str


def model_identity(info: WorkloadInfo, preset: str, devices: int,
                   command: tuple[str, ...] | None) -> str:
    """`name/preset/N devices/sha256:...`: the workload file's content (or the command's
    words) with its size preset and device count; a profile belongs to one of these. A
    built-in benchmark's siblings count too (scan-transformer builds on transformer)."""
    digest = hashlib.sha256(info.path.read_bytes() if command is None
                            else "\0".join(command).encode())
    if command is None and info.path in {b.path for b in list_benchmarks()}:
        for sibling in sorted(info.path.parent.glob("*.py")):
            digest.update(sibling.name.encode() + b"\0" + sibling.read_bytes())
    return f"{info.name}/{preset}/{devices} devices/sha256:{digest.hexdigest()[:16]}"


def run_pgle(plan: PglePlan, catalog: Catalog, launcher: Launcher,
             progress: Progress | None = None) -> list[TrialOutcome]:
    """Launch the plan's runs in order; return their outcomes.

    Stops after a failed run that had to collect or read the profile first
    (the first run); later failures are kept and the series goes on.

    Raises:
        UsageError: the configuration has flags that act only through the
            environment (a PGLE trial is PAIRED).
    """
    judge = TrialJudge(plan.settings, catalog, lambda: [])
    request = judge.request(plan.config).with_job(prune_ratio=None, prune_curve=None)
    if request.job.compiler_options is None:
        _, outside = split_per_compile(plan.config, catalog)
        raise UsageError("PGLE times a configuration against itself in one process, through "
                         "per-compile options; these flags act only through the "
                         f"environment: {', '.join(sorted(outside))}. Set them in the "
                         "environment of `autotune pgle` instead, and leave them out of "
                         "--config")
    outcomes: list[TrialOutcome] = []
    for i in range(plan.repeats):
        outcome = launcher.launch(_with_spec(request, plan, collect=plan.collect and i == 0))
        outcomes.append(outcome)
        if progress is not None:
            progress(i + 1, plan.repeats, outcome)
        if i == 0 and not outcome.ok:
            break
    return outcomes


def _with_spec(request: TrialRequest, plan: PglePlan, collect: bool) -> TrialRequest:
    spec = PgleSpec(mode=plan.mode, profile=None if plan.profile is None else str(plan.profile),
                    collect=collect, runs=plan.runs, percentile=plan.percentile,
                    model=plan.model)
    return request.with_pgle(spec)


# --- PGLE in a study --------------------------------------------------------------------------


def pgle_refusal(plan: StudyPlan) -> str | None:
    """Why a study's PGLE phase cannot run, or None: PGLE trials are PAIRED and one
    process (a profile is written where the parent reads it)."""
    if plan.mode is not MeasureMode.PAIRED:
        return "PGLE needs --mode paired: a profile is timed against its configuration in " \
               "one process"
    if plan.options.launcher is not None:
        return "PGLE does not run through --launcher yet: one process writes the profile"
    return None


def study_pgle(ctx: StudyContext, top: int, repeats: int,
               on_run: Callable[[PgleEvent], None] | None = None,
               ) -> list[tuple[int, dict[str, FlagValue]]]:
    """The PGLE phase of a study: the best `top` configurations
    (`autotune.results.pgle.pgle_targets`, what `export` writes first) measured again
    with a profile collected for each, `repeats` fresh processes per configuration.

    Per configuration, in turn: while the study holds no profile for it (an artifact
    of its trial, `profile_kind`), one run collects one and stores it; then runs that
    use the stored profile (written to a local file; each child refuses it where it
    is stale) until the configuration has `repeats` PGLE runs. Each run is a claim
    (`pgle:TRIAL:FLAGS:N`), so processes of the study share the work and re-running
    continues; a collection that failed is tried again on the next call. Returns
    the configurations measured ([] where `pgle_refusal` says why not, or a
    configuration that must be timed in DIRECT mode, which is left out).
    """
    plan = ctx.plan
    if pgle_refusal(plan) is not None or top < 1:
        return []
    targets = [(n, f) for n, f in pgle_targets(ctx.runs(), plan.objectives,
                                               plan.memory_budget_bytes, ctx.judge.catalog, top)
               if ctx.judge.request(f).job.compiler_options is not None]
    model = model_identity(plan.workload, plan.options.preset, plan.options.devices, plan.command)
    with tempfile.TemporaryDirectory(prefix="autotune-pgle-") as folder:
        for number, flags in targets:
            _study_target(ctx, number, flags, repeats, model, Path(folder), on_run)
    return targets


def _study_target(ctx: StudyContext, number: int, flags: Mapping[str, FlagValue],
                  repeats: int, model: str, folder: Path,
                  on_run: Callable[[PgleEvent], None] | None) -> None:
    """The PGLE runs of one configuration still to make (see `study_pgle`)."""
    kind = profile_kind(flags)
    profile = folder / f"trial-{number}-{kind.split(':')[1]}" / "profile.pbtxt"
    while True:
        raise_if_interrupted()
        made = len(pgle_runs(ctx.runs([Role.PGLE]), number, flags))
        stored = ctx.store.artifact(ctx.name, number, ctx.env_key, kind)
        collect = stored is None
        if stored is not None:
            if made >= repeats:
                return
            _write_stored(stored, profile)
        spec = PgleSpec(mode="manual", profile=str(profile), collect=collect, model=model)
        request = ctx.judge.request(flags).with_job(
            prune_ratio=None, prune_curve=None, known_programs={}).with_pgle(spec)
        _, run = ctx.claimed_run(
            f"pgle:{number}:{kind.split(':')[1]}:{made}", Role.PGLE, flags, number, request,
            before_record=_storing(ctx, number, kind, profile) if collect else None)
        if run is None:
            return  # another process measures this configuration now
        if on_run:
            on_run(PgleEvent(number, run.outcome, made + 1, repeats))
        if collect and not run.outcome.ok:
            return  # no profile: nothing to time against until it is collected again


def _storing(ctx: StudyContext, number: int, kind: str,
             profile: Path) -> Callable[[TrialOutcome], None]:
    """What a collecting run does before its run is stored: store the profile it wrote
    (and its record) as an artifact of trial `number`, where it succeeded."""
    def store(outcome: TrialOutcome) -> None:
        if outcome.ok:
            costs, meta = rules.read_profile(str(profile))
            ctx.store.put_artifact(ctx.name, number, ctx.env_key, kind,
                                   rules.render_pbtxt(costs), json.loads(meta.to_json()))
    return store


def _write_stored(found: ArtifactRecord, path: Path) -> None:
    """Write a stored profile and its record to `path`, as the child reads them."""
    rules.write_profile(str(path), rules.parse_pbtxt(found.content),
                        rules.ProfileMeta.from_json(json.dumps(dict(found.meta))))
