"""A PGLE job in the trial child: the configuration against 003's performance run of it.

Reference document 003 makes profile-guided latency estimation three manual
steps; here they are one job (`autotune.ground.protocol.Job.pgle_mode`):

- the reference executable is the configuration as 003's performance run
  compiles it, without the profile (`autotune.pgle.reference_options`: the
  latency hiding scheduler on), compiled here and fingerprinted: that program
  and those flags are what a profile belongs to;
- manual mode, with the `profile` phase: the configuration is compiled again
  with 003's profile-run flags (`autotune.pgle.profile_run_options`), run
  `pgle_runs` times under `jax.profiler`, and the costs are written to
  `pgle_profile` with the record of what they belong to;
- manual mode without it: the profile at `pgle_profile` is read and refused,
  as `invalid_value`, where it belongs to another XLA, backend, program, set of
  flags or workload (`autotune.pgle.stale_reasons`);
- the candidate is the performance run (`autotune.pgle.performance_options`:
  the latency hiding scheduler on and the profile's path), or in auto mode the
  step jitted under JAX's automatic PGLE (`jax_enable_pgle`), which profiles
  its first `pgle_runs` calls and compiles again with what it saw;
- then the two are timed in alternation like any PAIRED job.

The result's `pgle` object says what was done (`autotune.ground.protocol.PGLE_RESULT`).
jax is imported inside the functions.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from autotune import pgle
from autotune.child.failure import Failure
from autotune.child.program import program_fingerprint
from autotune.child.timing import compile_lowered, run_once
from autotune.ground.protocol import Job, Phase

#: Said on a backend whose compiler does not read the profile.
CPU_NOTE = ("the CPU compiler does not use a PGLE profile (its scheduler has no latency "
            "estimator to feed), so no speedup is expected here")


def pgle_candidate(lowered: Any, step: Any, args: tuple[Any, ...], job: Job,
                   dumps: str | None) -> tuple[Any, Any, dict[str, Any]]:
    """Compile the reference and the PGLE candidate of a PGLE job.

    Returns (reference, candidate, result fields): the fields hold the compile
    times, both fingerprints (none for an auto-mode candidate, which JAX
    compiles itself) and the `pgle` object. Raises Failure for a configuration
    XLA refuses, a profile that cannot be built, or a stale profile.
    """
    import jax
    import jaxlib

    config = pgle.reference_options(job.compiler_options or {})
    ref, ref_s = compile_lowered(lowered, config, _sub(dumps, "baseline"))
    ref_fp = program_fingerprint(_sub(dumps, "baseline"), job.program_flags)
    backend = jax.default_backend()
    here = _Here(jaxlib.__version__, backend, ref_fp, config, job.pgle_model)
    fields: dict[str, Any] = {"baseline_compile_time_s": ref_s, "baseline_fingerprint": ref_fp}
    if job.pgle_mode == "auto":
        cand, seconds, facts = _auto(step, args, config, job.pgle_runs)
        fields.update(compile_time_s=seconds, fingerprint=None)
    else:
        assert job.pgle_profile is not None  # the protocol requires it in manual mode
        if Phase.PROFILE in job.phases:
            names, facts = _collect(lowered, args, job, here)
        else:
            names, facts = _fresh_profile(job.pgle_profile, here)
        options = pgle.performance_options(config, job.pgle_profile)
        cand, seconds = compile_lowered(lowered, options, _sub(dumps, "candidate"))
        fields.update(compile_time_s=seconds, fingerprint=program_fingerprint(
            _sub(dumps, "candidate"), job.program_flags))
        facts["names_in_program"] = len(names & pgle.hlo_instruction_names(cand.as_text()))
    if backend == "cpu":
        facts["note"] = "; ".join(filter(None, (facts.get("note"), CPU_NOTE)))
    fields["pgle"] = {"mode": job.pgle_mode, "profile_fingerprint": ref_fp, **facts}
    return ref, cand, fields


class _Here:
    """What a profile is compared with in this process."""

    def __init__(self, xla: str, backend: str, fingerprint: str | None,
                 flags: dict[str, Any], model: str | None) -> None:
        self.xla, self.backend, self.fingerprint = xla, backend, fingerprint
        self.flags, self.model = flags, model


def _collect(lowered: Any, args: tuple[Any, ...], job: Job,
             here: _Here) -> tuple[set[str], dict[str, Any]]:
    """003's profile run of the configuration; the costs written to `job.pgle_profile`."""
    import time

    from autotune.child.profile import collect_profile

    assert job.pgle_profile is not None
    options = pgle.profile_run_options(here.backend, here.flags)
    exe, _ = compile_lowered(lowered, options, None)
    trace_dir = os.path.join(job.artifact_dir or os.path.dirname(job.pgle_profile),
                             "pgle-trace")
    costs, source = collect_profile(exe, args, runs=job.pgle_runs,
                                    percentile=job.pgle_percentile, trace_dir=trace_dir,
                                    hlo_text=exe.as_text() or "")
    meta = pgle.ProfileMeta(
        model=here.model or "", fingerprint=here.fingerprint, xla_version=here.xla,
        backend=here.backend, flags=pgle.without_profile(here.flags), source=source,
        runs=job.pgle_runs, percentile=job.pgle_percentile, created_at=time.time())
    os.makedirs(os.path.dirname(os.path.abspath(job.pgle_profile)), exist_ok=True)
    pgle.write_profile(job.pgle_profile, costs, meta)
    return ({c.name for c in costs},
            {"profile": job.pgle_profile, "collected": True, "costs": len(costs),
             "source": source})


def _fresh_profile(path: str, here: _Here) -> tuple[set[str], dict[str, Any]]:
    """The profile at `path` with its record; Failure `invalid_value` when it is missing,
    malformed or stale (every reason named)."""
    try:
        costs, meta = pgle.read_profile(path)
    except ValueError as exc:
        raise Failure("invalid_value", f"PGLE profile refused: {exc}") from exc
    reasons = pgle.stale_reasons(meta, xla_version=here.xla, backend=here.backend,
                                 fingerprint=here.fingerprint, flags=here.flags,
                                 model=here.model)
    if reasons:
        raise Failure("invalid_value", f"PGLE profile {path} refused as stale: "
                      + "; ".join(reasons) + ". Collect a new one with `autotune pgle`.")
    return ({c.name for c in costs},
            {"profile": path, "collected": False, "costs": len(costs), "source": meta.source})


def _auto(step: Any, args: tuple[Any, ...], config: dict[str, Any],
          runs: int) -> tuple[Any, float, dict[str, Any]]:
    """JAX's automatic PGLE: the step jitted with `config` (the scheduler on), called
    `runs` times to profile and once more to compile with the profile. Returns the jitted
    step, the seconds those calls took and the facts (JAX's warnings become the note;
    `collected` is False where JAX said its trace was empty)."""
    import jax

    jax.config.update("jax_enable_pgle", True)
    jax.config.update("jax_pgle_profiling_runs", runs)
    fn = jax.jit(step, compiler_options=config)
    seconds = 0.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(runs + 1):
            seconds += run_once(fn, args)[0]
    said = sorted({str(w.message).split(",")[0] for w in caught if "PGLE" in str(w.message)})
    empty = any("empty" in s for s in said)
    return fn, seconds, {"profile": None, "collected": not empty, "costs": 0,
                         "source": "jax-auto", "names_in_program": 0,
                         "note": "; ".join(f"JAX: {s}" for s in said)}


def _sub(root: str | None, name: str) -> str | None:
    return os.path.join(root, name) if root else None
