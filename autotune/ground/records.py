"""Plain, frozen records passed between the layers.

Nothing here imports a heavy library. Storage hands these out instead of ORM
rows; the launcher returns them; analysis consumes them.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

FlagValue = bool | int | float | str


class OutcomeKind(StrEnum):
    """How a trial ended. Everything but OK is a failure taxonomy entry (docs/ARCHITECTURE.md)."""

    OK = "ok"
    UNKNOWN_FLAG = "unknown_flag"
    INVALID_VALUE = "invalid_value"
    COMPILE_ERROR = "compile_error"
    OOM = "oom"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    NONFINITE = "nonfinite"
    NUMERICS_MISMATCH = "numerics_mismatch"
    PRUNED = "pruned"
    OVER_BUDGET = "over_budget"


class Role(StrEnum):
    """Why a configuration was measured."""

    BASELINE = "baseline"
    RECOMMENDED = "recommended"
    SEARCH = "search"
    CONFIRM = "confirm"
    RACE = "race"  # a leader of the search measured again, before it may be called best
    FINGERPRINT = "fingerprint"  # compiled only, for its program's fingerprint (shrinking)
    ABLATION = "ablation"  # the winner less one flag, timed against the winner in one process
    MINIMAL = "minimal"  # the shrunk winner, timed against XLA's defaults
    PGLE = "pgle"  # a configuration's PGLE performance run, timed against the configuration


class MeasureMode(StrEnum):
    """How a trial was timed.

    PAIRED: baseline and candidate compiled in the same child process (the
    candidate through `compile(compiler_options=...)`), their steps alternated;
    the ratio of the medians is the figure. DIRECT: the configuration reaches
    the child through the environment only; the figure is compared with the
    baseline measured in another process.
    """

    PAIRED = "paired"
    DIRECT = "direct"


def median(values: tuple[float, ...]) -> float | None:
    """Median of `values`, or None when empty."""
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class CollectiveStats:
    """One kind of collective (all-reduce, all-gather...) in a compiled program, as
    `autotune.rules.collectives.collective_profile` reads it from the optimised HLO.

    Sizes are bytes of the instructions' results, which XLA's combine and
    latency-bound thresholds compare: `bytes` over every instruction of the
    kind, `loop_count` and `loop_bytes` over those inside a while loop (its
    body or condition, or a computation they call), `smallest_bytes` the
    smallest array one of them produces (one operand of a combined tuple),
    `largest_bytes` the largest single instruction.
    """

    count: int
    bytes: int
    loop_count: int = 0
    loop_bytes: int = 0
    smallest_bytes: int = 0
    largest_bytes: int = 0

    @property
    def in_loop(self) -> bool:
        """Whether any collective of the kind runs inside a while loop."""
        return self.loop_count > 0


@dataclass(frozen=True)
class Measurement:
    """What one trial child measured (parsed from its JSON result file).

    Times are in seconds. In PAIRED mode `baseline_step_times_s` holds the
    steps of the baseline executable alternated with the candidate's in the same
    process; in DIRECT mode it is empty. `same_program_as` names the trial that
    already measured this very program: then nothing was timed here (the child
    compiled, fingerprinted and stopped).
    """

    step_times_s: tuple[float, ...]
    compile_time_s: float
    mode: MeasureMode = MeasureMode.DIRECT
    baseline_step_times_s: tuple[float, ...] = ()
    first_step_time_s: float | None = None
    peak_memory_bytes: int | None = None
    memory_source: str = "unknown"
    rss_peak_bytes: int | None = None
    checksum: float | None = None
    baseline_checksum: float | None = None
    hlo_stats: Mapping[str, int] = field(default_factory=dict)
    fingerprint: str | None = None
    baseline_fingerprint: str | None = None
    jax_version: str = ""
    jaxlib_version: str = ""
    backend: str = ""
    device_kind: str = ""
    device_count: int = 0
    warmup_steps: int | None = None
    warmup_settled: bool | None = None
    warmup_times_s: tuple[float, ...] = ()
    baseline_warmup_times_s: tuple[float, ...] = ()
    output_dtype: str = ""
    abs_sum: float | None = None
    numerics_error: float | None = None
    same_program_as: int | None = None
    #: kind -> its collectives in the compiled program (kinds the program lacks are left
    #: out); None where it was not read (runs stored before it was).
    collectives: Mapping[str, CollectiveStats] | None = None
    #: a PGLE job's facts (`autotune.ground.protocol.PGLE_RESULT`: mode, profile path, costs,
    #: source, names found in the candidate's program, note); None for any other job
    pgle: Mapping[str, Any] | None = None

    @property
    def timed_steps(self) -> int:
        """Steps of the candidate that were timed (0 for a program measured by another trial)."""
        return len(self.step_times_s)

    @property
    def median_s(self) -> float | None:
        """Median step time of the candidate."""
        return median(self.step_times_s)

    @property
    def baseline_median_s(self) -> float | None:
        """Median step time of the in-process baseline (PAIRED mode only)."""
        return median(self.baseline_step_times_s)

    @property
    def paired_ratio(self) -> float | None:
        """Candidate median / in-process baseline median (below 1 is faster)."""
        cand, base = self.median_s, self.baseline_median_s
        if cand is None or base is None or base <= 0:
            return None
        return cand / base

    @property
    def same_program_as_baseline(self) -> bool | None:
        """Whether the candidate compiled to the very program of the baseline."""
        if self.fingerprint is None or self.baseline_fingerprint is None:
            return None
        return self.fingerprint == self.baseline_fingerprint

    def __repr__(self) -> str:
        """One short line (the step times are summed up, not listed): mode, steps timed,
        median step, the paired ratio where there is one, peak memory, the program."""
        parts = [self.mode.value, f"{self.timed_steps} steps"]
        if self.median_s is not None:
            parts.append(f"median {self.median_s * 1e3:.4g} ms")
        if self.paired_ratio is not None:
            parts.append(f"ratio {self.paired_ratio:.3f}")
        if self.peak_memory_bytes is not None:
            parts.append(f"peak {self.peak_memory_bytes} B")
        if self.fingerprint:
            parts.append(f"program {self.fingerprint[:12]}")
        return f"Measurement({', '.join(parts)})"


@dataclass(frozen=True)
class TrialOutcome:
    """The result of launching one trial: a kind, a message and, if OK, a measurement.

    `exit_code` is None when the child was killed by a signal (`signal` set) or
    timed out. Stream tails are the last few KiB of stdout/stderr.
    """

    kind: OutcomeKind
    message: str
    measurement: Measurement | None = None
    duration_s: float = 0.0
    exit_code: int | None = None
    signal: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.kind is OutcomeKind.OK

    def __repr__(self) -> str:
        """One short line: the kind, the message (cut), the measurement's own short form
        and the duration; the streams' tails are left out."""
        message = self.message if len(self.message) <= 80 else self.message[:77] + "..."
        return (f"TrialOutcome({self.kind.value}, {message!r}, {self.measurement!r}, "
                f"{self.duration_s:.1f} s)")


@dataclass(frozen=True)
class Environment:
    """Where measurements were taken: the facts a worker records of its environment.

    `driver_version` is the GPU's kernel driver (NVIDIA's or AMD's), None where
    there is none (CPU, TPU) or it cannot be read; `runtime_version` is the
    backend's platform version where it names one (e.g. `cuda 12080`), else None.
    """

    host: str
    python_version: str
    jax_version: str
    jaxlib_version: str
    backend: str
    device_kind: str
    device_count: int
    driver_version: str | None = None
    runtime_version: str | None = None

    @property
    def fingerprint(self) -> str:
        """All the facts, the host included, as 16 hex digits (one stored row per value)."""
        return _digest(asdict(self))

    def key(self, mode: MeasureMode) -> str:
        """The environment key of a study measured in `mode`: 16 hex digits.

        Claims, baselines, known programs and the ranking are kept per key, so
        a ratio is only ever taken against a baseline of the same environment.
        PAIRED: every fact but the host. The ratio is taken inside one process,
        so identical machines (same devices, driver, runtime, versions) share
        one environment: one baseline, one set of known programs, one ranking.
        DIRECT: the host too, which is then the fingerprint. A step time is
        compared with a baseline run in another process, which only holds on
        the same machine.
        """
        facts = asdict(self)
        if mode is MeasureMode.PAIRED:
            del facts["host"]
        return _digest(facts)


def _digest(facts: Mapping[str, Any]) -> str:
    """16 hex digits of sha256 over the canonical JSON of `facts`."""
    text = json.dumps(facts, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:16]


@dataclass(frozen=True)
class StudyRecord:
    """The settings a study was created with (autotune's own table)."""

    name: str
    space: str
    benchmark: str
    preset: str
    devices: int
    mode: MeasureMode
    created_at: datetime
    space_backend: str | None = None
    objectives: tuple[str, ...] = ("time",)
    memory_budget_bytes: int | None = None
    #: The search space fitted to the workload, as stored (the JSON document of
    #: `autotune.spaces.fit.SpaceFit`); None until the study fitted it, or never (--no-fit).
    space_fit: Mapping[str, Any] | None = None
    #: The stored plan (JSON): the fields a re-run must match and, under `recipe`, how a
    #: worker rebuilds the plan (`autotune.api.join_study`); None for studies made before.
    plan: Mapping[str, Any] | None = None

    @property
    def multi_objective(self) -> bool:
        """Whether the study searches a Pareto front (time and memory)."""
        return len(self.objectives) > 1


@dataclass(frozen=True)
class RunRecord:
    """One stored measurement run, linked to an Optuna trial by (study, number)."""

    id: int
    study_name: str
    trial_number: int | None
    role: Role
    flags: Mapping[str, FlagValue]
    env: Mapping[str, str]
    outcome: TrialOutcome
    created_at: datetime
    environment: Environment | None = None
    ratio: float | None = None
    env_key: str | None = None

    @property
    def speedup(self) -> float | None:
        """Baseline time over this run's time (above 1 is faster)."""
        return 1 / self.ratio if self.ratio else None


class ClaimState(StrEnum):
    """Where a claim on a configuration stands.

    RUNNING: a process measures it now. DONE: measured (its run is stored).
    INTERRUPTED: the process stopped or died first; anyone may claim it again.
    RETRY: measured, but the measurement is to be taken again (a failed baseline).
    """

    RUNNING = "running"
    DONE = "done"
    INTERRUPTED = "interrupted"
    RETRY = "retry"


class ClaimVerdict(StrEnum):
    """What `Store.claim` answered: CLAIMED (measure it), TAKEN (another process has it or
    had it), FULL (the study holds its trials)."""

    CLAIMED = "claimed"
    TAKEN = "taken"
    FULL = "full"


@dataclass(frozen=True)
class ClaimRecord:
    """One claim: a process's right to measure one configuration in one environment.

    `key` is the text that identifies the measurement (a configuration's
    effective flags, or a confirmation round); the store keeps its hash unique
    per (study, `env_key`). `owner_host` and `owner_pid` name the process that
    holds (or held) it.
    """

    id: int
    study_name: str
    env_key: str
    key: str
    role: Role
    flags: Mapping[str, FlagValue]
    trial_number: int | None
    state: ClaimState
    owner_host: str
    owner_pid: int
    run_id: int | None
    claimed_at: datetime
    heartbeat_at: datetime | None = None

    @property
    def last_seen(self) -> datetime:
        """When its owner last said it is alive: the last heartbeat, else the claim itself."""
        return self.heartbeat_at or self.claimed_at


#: Seconds between two heartbeats of a claim while its measurement runs (`Store.beat`).
CLAIM_BEAT_S = 10.0

#: Seconds a SQLite connection waits for another writer's commit before it fails (the busy
#: timeout: several workers share one file).
SQLITE_TIMEOUT_S = 30.0


def sqlite_file(url: Any) -> bool:
    """Whether a SQLAlchemy URL names a SQLite database in a file (not in memory).

    Both engines on such a file (autotune's store and Optuna's) keep no idle
    connection (`NullPool`): each closes when its work is done, so the last one to
    close folds the write-ahead log into the file then, never later when a
    forgotten pool is collected (a reader closing last would change the file)."""
    return bool(url.get_backend_name() == "sqlite"
                and url.database not in (None, "", ":memory:"))


#: Keys of a study's stored plan beside its settings: `submitted` marks a study that
#: `autotune study --submit` stored and no process has planned yet; `finished` says that
#: the phases after the search ended, for how many trials and when (`Store.mark_finished`).
PLAN_SUBMITTED = "submitted"
PLAN_FINISHED = "finished"
#: ... and `warm_start` the earlier studies a warm start drew from (`Store.save_warm_start`).
PLAN_WARM = "warm_start"
#: The plan's key for the earlier studies whose measured programs were given to the
#: sampler as evidence (`autotune.study.warm.prior_trials`; `Store.save_warm_start`).
PLAN_PRIOR = "warm_prior"

#: A study's states (`results.table.study_state`), in the order a study goes through them.
STUDY_STATES = ("queued", "searching", "confirming", "done", "failed")

#: A RUNNING claim is live while its last heartbeat is at most this old (three beats
#: missed: the process that holds it is gone or stuck); see `Store.live_claims`.
LIVE_WITHIN_S = 3 * CLAIM_BEAT_S


@dataclass(frozen=True)
class WorkerRecord:
    """One process that claimed work in a study, as its claims add up (`Store.workers`).

    `interrupted` counts claims it left interrupted or marked for a retry;
    `last_seen` is its latest heartbeat (or claim); `live` is True while one
    of its running claims has a heartbeat within `LIVE_WITHIN_S`.
    """

    owner_host: str
    owner_pid: int
    done: int
    running: int
    interrupted: int
    last_seen: datetime
    live: bool

    @property
    def owner(self) -> str:
        """`host:pid`, as the study's trials name their owner."""
        return f"{self.owner_host}:{self.owner_pid}"


@dataclass(frozen=True)
class ArtifactRecord:
    """A file a trial produced that later processes (on other machines) and the export
    need, stored in the database (`Store.put_artifact`), e.g. a PGLE cost profile.

    One per (study, `env_key`, `trial_number`, `kind`): storing another with the same
    four replaces it (a re-collected profile wins). `kind` names what it is
    (`"pgle-profile"`: the profile's text proto), at most 32 characters; `content`
    is the file's text, whole (tens of KB to a few MB); `meta` is a JSON-ready
    document of what it belongs to (for a profile: the program, the flags, where and
    how it was collected). `created_at` is when it was last stored, in UTC.
    """

    study: str
    trial_number: int
    env_key: str
    kind: str
    content: str
    meta: Mapping[str, Any]
    created_at: datetime


@dataclass(frozen=True)
class NewRun:
    """A finished run to store with `Store.record_runs`: the arguments of `record_run`.

    With `claim_key`, the run is stored together with its claim, as if it had
    been claimed (`Store.claim`, key `claim_key`, in `env_key`, by `owner`)
    and recorded with it: the claim ends in `claim_state` and links to the run.
    """

    trial_number: int | None
    role: Role
    flags: Mapping[str, FlagValue]
    env: Mapping[str, str]
    outcome: TrialOutcome
    environment: Environment | None = None
    ratio: float | None = None
    env_key: str | None = None
    claim_key: str | None = None
    owner: tuple[str, int] = ("", 0)
    claim_state: ClaimState = ClaimState.DONE
