"""PGLE runs of one configuration: 003's three steps as fresh-process trials.

Orchestration (layer 4b). Each run is one trial child with a PGLE job
(`autotune.launcher.PgleSpec`, `autotune.child.pgle_phase`) that times the
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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from autotune._proc import deferred_interrupt, raise_if_interrupted
from autotune.launcher import Launcher, PgleSpec, TrialRequest
from autotune.records import FlagValue, TrialOutcome
from autotune.trials import RequestSettings, TrialJudge, environment_of
from autotune.workloads import WorkloadInfo

if TYPE_CHECKING:
    from autotune.study import StudyRunner

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
    words) with its size preset and device count; a profile belongs to one of these."""
    body = info.path.read_bytes() if command is None else "\0".join(command).encode()
    digest = hashlib.sha256(body).hexdigest()[:16]
    return f"{info.name}/{preset}/{devices} devices/sha256:{digest}"


def run_pgle(plan: PglePlan, catalog: object, launcher: Launcher,
             progress: Progress | None = None) -> list[TrialOutcome]:
    """Launch the plan's runs in order; return their outcomes.

    Stops after a failed run that had to collect or read the profile first
    (the first run); later failures are kept and the series goes on.
    """
    judge = TrialJudge(plan.settings, catalog, lambda: [])
    request = replace(judge.request(plan.config), prune_ratio=None, prune_curve=None)
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
    return replace(request, pgle=spec)


# --- PGLE in a study --------------------------------------------------------------------------


@dataclass(frozen=True)
class PgleEvent:
    """Reported after each PGLE run of a study."""

    trial_number: int
    outcome: TrialOutcome
    done: int
    total: int


def study_pgle(runner: StudyRunner, top: int, repeats: int,
               on_run: Callable[[PgleEvent], None] | None = None,
               ) -> list[tuple[int, dict[str, FlagValue]]]:
    """The PGLE phase of a study: the best `top` configurations
    (`autotune.results.pgle.pgle_targets`, what `export` writes first) measured again
    with a profile collected for each, `repeats` fresh processes per configuration.

    Round 0 of a configuration profiles it and stores the profile as an artifact of
    its trial (kind `PROFILE_ARTIFACT`); later rounds, in any process of the study,
    write that artifact to a local file and use it (each child refuses it where it
    is stale). Each round is a claim (`pgle:TRIAL:ROUND`); a round whose profile is
    not stored yet (another process collects it, or collecting failed) is left.
    Runs already stored count: re-running continues. PAIRED studies only (a DIRECT
    study returns []). Returns the configurations measured.
    """
    from autotune.records import MeasureMode
    from autotune.results.pgle import pgle_runs, pgle_targets

    plan = runner.plan
    if plan.mode is not MeasureMode.PAIRED or top < 1:
        return []
    runs = runner.store.runs(plan.name, env_key=runner.env_key)
    targets = pgle_targets(runs, plan.objectives, plan.memory_budget_bytes,
                           runner.judge.catalog, top)
    pending = [(number, flags, round_) for round_ in range(repeats)
               for number, flags in targets
               if len(pgle_runs(runs, number, flags)) <= round_]
    model = model_identity(plan.workload, plan.preset, plan.devices, plan.command)
    with tempfile.TemporaryDirectory(prefix="autotune-pgle-") as folder:
        for done, (number, flags, round_) in enumerate(pending, start=1):
            raise_if_interrupted()
            outcome = _study_round(runner, number, flags, round_, model, Path(folder))
            if on_run and outcome is not None:
                on_run(PgleEvent(number, outcome, done, len(pending)))
    return targets


def _study_round(runner: StudyRunner, number: int, flags: Mapping[str, FlagValue],
                 round_: int, model: str, folder: Path) -> TrialOutcome | None:
    """Claim and run round `round_` of trial `number`'s PGLE (None: not run here)."""
    from autotune.records import ClaimVerdict, Role
    from autotune.results.pgle import PROFILE_ARTIFACT

    plan, store = runner.plan, runner.store
    profile = folder / f"trial-{number}" / "profile.pbtxt"
    collect = round_ == 0
    if not collect and not _fetch_profile(runner, number, profile):
        return None
    verdict, claim = store.claim(plan.name, runner.env_key, f"pgle:{number}:{round_}",
                                 Role.PGLE, flags, number, runner.owner)
    if claim is None or verdict is not ClaimVerdict.CLAIMED:
        return None
    spec = PgleSpec(mode="manual", profile=str(profile), collect=collect, model=model)
    request = replace(runner.judge.request(flags), pgle=spec, prune_ratio=None,
                      prune_curve=None, known_programs={})
    try:
        outcome = runner.measure_claimed(request, claim.id)
    except BaseException:
        with deferred_interrupt():
            store.release(claim.id)
        raise
    with deferred_interrupt():
        if collect and outcome.ok and profile.exists():
            from autotune import pgle as rules

            store.put_artifact(plan.name, number, runner.env_key, PROFILE_ARTIFACT,
                               profile.read_text(encoding="utf-8"),
                               json.loads(rules.ProfileMeta.from_json(Path(
                                   str(profile) + rules.META_SUFFIX).read_text(
                                       encoding="utf-8")).to_json()))
        store.record_run(plan.name, number, Role.PGLE, flags, runner.judge.user_env(flags),
                         outcome, environment_of(outcome.measurement, runner.facts),
                         env_key=runner.env_key, claim_id=claim.id)
    return outcome


def _fetch_profile(runner: StudyRunner, number: int, path: Path) -> bool:
    """Write trial `number`'s stored profile (and its record) to `path`; False when the
    study holds none for this environment."""
    from autotune import pgle as rules
    from autotune.results.pgle import PROFILE_ARTIFACT

    found = runner.store.artifact(runner.plan.name, number, runner.env_key, PROFILE_ARTIFACT)
    if found is None:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(found.content, encoding="utf-8")
    Path(str(path) + rules.META_SUFFIX).write_text(json.dumps(dict(found.meta)),
                                                   encoding="utf-8")
    return True
