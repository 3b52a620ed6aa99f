"""The fit phase: the space fitted to the workload's program, once per study.

After this environment's baseline is measured OK and before anything is
sampled, the first process to claim the fit (`FIT_KEY`, role FINGERPRINT,
outside `--trials`) computes it (`autotune.spaces.fit`: the baseline's
collectives, then compile-only runs stored as FINGERPRINT runs) and stores it
with the study (`Store.save_fit`); the others wait for it and a resume reads
it back, so every process samples the same space. A study that sampled
configurations before it was fitted stores a fit that changes nothing
(`skipped`), since Optuna refuses other candidates for a param it has sampled.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import replace

import optuna

from autotune.flags.catalog import Catalog
from autotune.flags.compose import after_hlo_text, compiler_options, config_key, effective_config
from autotune.ground.proc import raise_if_interrupted
from autotune.ground.records import (
    ClaimRecord,
    ClaimState,
    ClaimVerdict,
    FlagValue,
    Role,
    RunRecord,
)
from autotune.spaces.fit import SpaceFit, apply_fit, collective_changes, probe_cases, run_probe
from autotune.spaces.fit import settle as settle_fit
from autotune.study.context import StudyContext
from autotune.study.plan import FIT_KEY, POLL_S
from autotune.study.reap import reap


def stored_fit(ctx: StudyContext, study: optuna.Study) -> SpaceFit:
    """The study's fit: read back, computed here under the fit's claim, or waited for
    while another process computes it (see the module docstring)."""
    while (stored := ctx.store.get_study(ctx.name).space_fit) is None:
        verdict, claim = ctx.claim(FIT_KEY, Role.FINGERPRINT, {}, None)
        if verdict is ClaimVerdict.CLAIMED and claim is not None:
            with ctx.held(claim, done=ClaimState.DONE):
                _store_fit(ctx, study, claim)
            continue
        if claim is not None and claim.state is ClaimState.DONE:  # stored by another process
            _store_fit(ctx, study, None)
            continue
        raise_if_interrupted()
        time.sleep(POLL_S)  # another process fits it now
        reap(ctx)  # releases the claim of a process of this host that died
        if claim is not None and claim.id not in {
                c.id for c in ctx.store.live_claims(ctx.name)}:
            ctx.store.release(claim.id)  # its owner (another host) stopped beating
    return SpaceFit.from_json(stored)


def _store_fit(ctx: StudyContext, study: optuna.Study, claim: ClaimRecord | None) -> None:
    """Compute the fit (its compiles under `claim`, None: unclaimed) and store it, unless
    another process stored one first."""
    ctx.store.save_fit(ctx.name, _compute_fit(ctx, study, claim).to_json())


def _compute_fit(ctx: StudyContext, study: optuna.Study, claim: ClaimRecord | None) -> SpaceFit:
    """The fit of the plan's space to this environment's baseline."""
    if any(t.params for t in study.get_trials(deepcopy=False)):
        return SpaceFit(skipped="the study sampled configurations before its space was "
                        "fitted: it keeps the space as documented")
    runs = ctx.runs()
    base = next((r.outcome.measurement for r in runs if r.role is Role.BASELINE
                 and r.outcome.ok and r.outcome.measurement is not None), None)
    if base is None:
        return SpaceFit(skipped="the baseline measured nothing to fit the space to")
    space, collectives, catalog = ctx.plan.space, base.collectives, ctx.judge.catalog
    changes = collective_changes(space, collectives) if collectives is not None else []
    compiled = _compiled_before(runs, catalog)  # an interrupted fit's compiles count
    if ctx.plan.paired and base.fingerprint:
        compiled[""] = base.fingerprint  # compiled the way the probe compiles
    made = len(compiled)

    def compile_many(configs: Sequence[Mapping[str, FlagValue]]) -> list[str | None]:
        keys = [config_key(effective_config(config, catalog)) for config in configs]
        new = {key: config for key, config in zip(keys, configs, strict=True)
               if key not in compiled}
        if new:
            compiled.update(zip(new, _compile_only(ctx, list(new.values()), claim),
                                strict=True))
        return [compiled[key] for key in keys]

    cases = probe_cases(apply_fit(space, settle_fit(space, changes)), catalog) \
        if base.fingerprint else []  # a launcher that fingerprints nothing: no probe
    changes += run_probe(cases, compile_many)
    return settle_fit(space, changes, probes=len(compiled) - made, collectives=collectives)


def _compiled_before(runs: list[RunRecord], catalog: Catalog) -> dict[str, str | None]:
    """Effective key -> fingerprint of the compile-only runs an interrupted fit stored."""
    return {config_key(effective_config(r.flags, catalog)):
            r.outcome.measurement.fingerprint if r.outcome.ok else None
            for r in runs if r.role is Role.FINGERPRINT and r.trial_number is None
            and r.outcome.measurement is not None}


def _compile_only(ctx: StudyContext, configs: Sequence[Mapping[str, FlagValue]],
                  claim: ClaimRecord | None) -> list[str | None]:
    """Compile each of `configs` per compilation (nothing timed; one process for all of
    them where the launcher can, `Launcher.launch_all`), store each run as FINGERPRINT
    (no trial) and return their programs' fingerprints (None: it did not compile)."""
    judge = ctx.judge
    requests = [replace(judge.request({}), flags=dict(config)).compile_only().with_job(
        compiler_options=compiler_options(config, judge.catalog),
        program_flags=after_hlo_text(config, judge.catalog)) for config in configs]
    outcomes = ctx.measure_all(Role.FINGERPRINT, configs, requests, claim)
    return [o.measurement.fingerprint if o.ok and o.measurement is not None else None
            for o in outcomes]
