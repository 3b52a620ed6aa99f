"""PAIRED measurements and outcomes stated by hand, as the tests record and replay them, and
trial requests written with the job's fields and the request's side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.ground.protocol import Job
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind, TrialOutcome
from autotune.launch.launcher import TrialRequest

#: A baseline of five steps about 1 ms, not all equal.
BASELINE_S = (1.0e-3, 1.02e-3, 0.98e-3, 1.01e-3, 0.99e-3)


def paired(ratio: float = 1.0, *, baseline: Sequence[float] = BASELINE_S,
           steps: Sequence[float] | None = None, compile_time_s: float = 0.1,
           **fields: Any) -> Measurement:
    """A PAIRED measurement of `baseline`'s steps and the candidate's: `steps` where given,
    else `ratio` times each baseline step. `fields`: any other `Measurement` field
    (fingerprints, memory, backend, `same_program_as`...)."""
    candidate = tuple(steps) if steps is not None else tuple(t * ratio for t in baseline)
    return Measurement(step_times_s=candidate, baseline_step_times_s=tuple(baseline),
                       compile_time_s=compile_time_s, mode=MeasureMode.PAIRED, **fields)


def paired_outcome(ratio: float = 1.0, *, kind: OutcomeKind = OutcomeKind.OK, message: str = "",
                   duration_s: float = 0.0, exit_code: int | None = None,
                   **measurement: Any) -> TrialOutcome:
    """A trial outcome of `kind` carrying `paired(ratio, **measurement)`."""
    return TrialOutcome(kind, message, paired(ratio, **measurement), duration_s=duration_s,
                        exit_code=exit_code)


def trial_request(workload: Any, preset: str, *, timed: bool = True,
                  **fields: Any) -> TrialRequest:
    """A request whose `fields` are the job's (`steps`, `compiler_options`, ...) or the
    request's (`env`, `flags`, `timeout_s`, ...); `timed=False` compiles only."""
    job = {k: fields.pop(k) for k in list(fields) if k in Job.__dataclass_fields__}
    request = TrialRequest(workload, preset, job=Job(**job), **fields)
    return request if timed else request.compile_only()
