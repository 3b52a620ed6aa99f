"""The trial protocol: the job the parent hands a trial child, and the result it gets back.

Both sides import this module and nothing else defines the contract: one
schema version, typed fields, validation that names the field at fault.
Standard library only (the child imports it before jax).

- The parent writes a `Job` as JSON into the child's environment
  (`JOB_ENV`); the configuration itself reaches the child through
  `XLA_FLAGS` and friends, or, in PAIRED mode, as the job's typed
  `compiler_options`.
- The child writes one JSON object to the file named by `RESULT_ENV`
  (`SCHEMA_VERSION`, `status`, `message` and what it measured);
  `parse_result` checks it field by field.
- A trial run through a launcher may be several processes of one workload.
  Each knows its rank from the launcher's variables (`RANK_VARIABLES`,
  `autotune.child.ranks`); process 0 writes the file named by `RESULT_ENV`,
  process k > 0 writes `rank_result_path(that, k)`. That path must lie on a
  filesystem every host of the trial sees.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

#: The version of both the job and the result documents.
SCHEMA_VERSION = 1
#: The environment variable holding the job as JSON.
JOB_ENV = "AUTOTUNE_JOB"
#: The environment variable naming the file the child writes its result to.
RESULT_ENV = "AUTOTUNE_RESULT"
#: Paired steps timed before a candidate may be pruned.
PRUNE_AFTER = 6
#: The variables in which a launcher tells each process its rank, in the order they are
#: believed: the local launcher's (`autotune.ground.local_launch`, and JAX's own name), then an
#: MPI launcher's, then Slurm's. An MPI launcher started inside a Slurm allocation inherits
#: the allocation's SLURM_PROCID, the same in every process, so its own variable goes first.
RANK_VARIABLES = ("JAX_PROCESS_ID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
#: The variables that say how many processes the launcher started, in the same order.
SIZE_VARIABLES = ("JAX_NUM_PROCESSES", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
#: Where the local launcher tells JAX's processes to meet (`jax.distributed.initialize`).
COORDINATOR_ENV = "JAX_COORDINATOR_ADDRESS"

OptionValue = bool | int | float | str


class ProtocolError(ValueError):
    """A job or result document that breaks the contract; the message names the field."""


class Phase(StrEnum):
    """What a child does, in this order: compile always, then optionally profile and measure."""

    COMPILE = "compile"
    PROFILE = "profile"
    MEASURE = "measure"


@dataclass(frozen=True)
class Job:
    """How the child measures one configuration.

    Attributes:
        steps: timed steps (per executable).
        warmup, max_warmup: warm-up rounds at least and at most; warming stops
            early once the last `settle_window` times of every executable lie
            within `settle_tolerance` of their median (`autotune.rules.stopping`).
        prune_ratio: PAIRED mode: stop once median(candidate)/median(baseline)
            exceeds it, after `prune_after` pairs; None never prunes.
        prune_curve: PAIRED mode: the other trials' median running ratio per
            number of pairs (`autotune.rules.stopping.median_curve`): item k-1 is
            the median after k pairs, null where it sets no limit. Once
            `prune_after` pairs are timed, the candidate also stops when its
            ratio after k pairs exceeds item k-1 (past the end: no limit).
            None: no median rule.
        compiler_options: None for DIRECT mode (the configuration is in the
            environment); a dict of typed options for PAIRED mode (baseline
            and candidate compiled in the child, steps alternated).
        phases: `compile` first, then `profile` and/or `measure`, in order. A
            job without `measure` times nothing.
        known_programs: program fingerprint -> the trial that measured it; a
            candidate whose program is among them is not timed again.
        artifact_dir: where the child keeps compiler dumps and profiles.
        memory_budget_bytes: a candidate whose compiled footprint exceeds it
            is not timed: its result says `over_budget`. None: no budget.
        reference_options: PAIRED mode: the options the in-process reference
            ("baseline") executable is compiled with; None: XLA's defaults.
            Shrinking times a configuration less one flag against the
            configuration itself this way.
        pgle_mode: None, or a PGLE job (PAIRED only; `autotune.pgle`): the
            reference is the configuration itself (`compiler_options`) and the
            candidate is 003's performance run of it. "manual": with the
            `profile` phase the child first profiles the configuration with
            the profile-run flags and writes the cost profile to
            `pgle_profile`; without it, it reads that profile and refuses it
            (`invalid_value`) where it is stale. "auto": JAX's automatic PGLE
            (`jax_enable_pgle`, `pgle_runs` profiling runs) makes the
            candidate; no file.
        pgle_profile: the profile's path (manual mode), on a filesystem the
            parent sees (the trial's scratch folder is removed).
        pgle_runs: runs profiled (manual) or JAX's profiling runs (auto).
        pgle_percentile: of each instruction's profiled durations.
        pgle_model: the workload's identity, recorded with a profile and
            compared with it.
        program_flags: the candidate's flags that act after the optimised HLO
            (`autotune.flags.compose.after_hlo_text`), hashed into its program
            fingerprint with the dump, which does not show them.
        reference_program_flags: the same for the in-process reference.
        also_compile: further configurations a compile-only PAIRED job (phases
            `compile` alone, no PGLE) compiles in the same process after its own,
            each an object of `compiler_options` and `program_flags`; the
            child writes the result of item i (from 1) to
            `case_result_path(its result file, i)`. One process start (and
            JAX's import and backend) serves a space fit's compiles.
    """

    steps: int = 20
    warmup: int = 2
    max_warmup: int = 30
    settle_window: int = 5
    settle_tolerance: float = 0.05
    prune_ratio: float | None = None
    prune_after: int = PRUNE_AFTER
    prune_curve: tuple[float | None, ...] | None = None
    compiler_options: Mapping[str, OptionValue] | None = None
    phases: tuple[Phase, ...] = (Phase.COMPILE, Phase.MEASURE)
    known_programs: Mapping[str, int] = field(default_factory=dict)
    artifact_dir: str | None = None
    memory_budget_bytes: int | None = None
    reference_options: Mapping[str, OptionValue] | None = None
    pgle_mode: str | None = None
    pgle_profile: str | None = None
    pgle_runs: int = 3
    pgle_percentile: float = 50.0
    pgle_model: str | None = None
    program_flags: str = ""
    reference_program_flags: str = ""
    also_compile: tuple[Mapping[str, Any], ...] = ()

    def __post_init__(self) -> None:
        for name in ("prune_curve", "also_compile"):  # JSON's lists, kept as tuples
            if isinstance(getattr(self, name), list):
                object.__setattr__(self, name, tuple(getattr(self, name)))
        _check_job(self)

    @property
    def paired(self) -> bool:
        """PAIRED mode: baseline and candidate compiled and timed in this one process."""
        return self.compiler_options is not None

    def to_json(self) -> str:
        """The job as the JSON text the child reads from `JOB_ENV`."""
        body = asdict(self)
        body["phases"] = [p.value for p in self.phases]
        body["compiler_options"] = (None if self.compiler_options is None
                                    else dict(self.compiler_options))
        body["known_programs"] = dict(self.known_programs)
        body["reference_options"] = (None if self.reference_options is None
                                     else dict(self.reference_options))
        body["also_compile"] = [dict(case) for case in self.also_compile]
        return json.dumps({"schema_version": SCHEMA_VERSION, **body})

    @classmethod
    def from_json(cls, text: str | None) -> Job:
        """Read a job written by `to_json`; no text gives the defaults.

        Raises:
            ProtocolError: not JSON, another schema version, an unknown key or
                a field of the wrong type or range (the message names it).
        """
        if not text:
            return cls()
        body = _json_object("job", text, "not JSON")
        _check_version("job", body.pop("schema_version", None))
        known = {f.name for f in fields(cls)}
        if unknown := sorted(set(body) - known):
            raise ProtocolError(f"job: unknown field {unknown[0]!r}")
        if "phases" in body:
            body["phases"] = _phases(body["phases"])
        return cls(**body)


def case_result_path(path: str, case: int) -> str:
    """The result file of item `case` (from 1) of a job's `also_compile`, beside the
    job's own result file `path` (never taken for a process's: `rank_result_path`)."""
    return f"{path}.case-{case}"


def rank_result_path(path: str, rank: int) -> str:
    """The result file of process `rank` of a trial whose `RESULT_ENV` is `path`.

    Process 0 writes `path` itself (a single-process trial is process 0), process
    k > 0 writes `path.k`. The parent reads process 0's result and the others'
    statuses (`autotune.launch.launcher.deciding_report`). Raises ValueError for a
    negative rank.
    """
    if rank < 0:
        raise ValueError(f"a process rank is 0 or more, got {rank}")
    return path if rank == 0 else f"{path}.{rank}"


def _json_object(document: str, text: str, unreadable: str) -> dict[str, Any]:
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise ProtocolError(f"{document}: {unreadable} ({exc})") from exc
    if not isinstance(body, dict):
        raise ProtocolError(f"{document}: expected a JSON object")
    return body


def _check_version(document: str, version: object) -> None:
    if version != SCHEMA_VERSION:
        raise ProtocolError(f"{document} field 'schema_version': expected {SCHEMA_VERSION}, "
                            f"got {version!r}")


def _phases(raw: object) -> tuple[Phase, ...]:
    if not isinstance(raw, list | tuple):
        raise ProtocolError(f"job field 'phases': expected a list, got {raw!r}")
    try:
        return tuple(Phase(p) for p in raw)
    except ValueError as exc:
        raise ProtocolError(f"job field 'phases': {exc}") from exc


def _check_job(job: Job) -> None:
    for name, low in (("steps", 1), ("warmup", 0), ("max_warmup", 0), ("settle_window", 1),
                      ("prune_after", 1)):
        value = getattr(job, name)
        if not _is_int(value) or value < low:
            raise ProtocolError(f"job field {name!r}: expected an integer >= {low}, got {value!r}")
    if not _is_number(job.settle_tolerance):
        raise ProtocolError(f"job field 'settle_tolerance': expected a number, "
                            f"got {job.settle_tolerance!r}")
    if job.prune_ratio is not None and not (_is_number(job.prune_ratio) and job.prune_ratio > 0):
        raise ProtocolError(f"job field 'prune_ratio': expected a positive number or null, "
                            f"got {job.prune_ratio!r}")
    _check_curve(job.prune_curve)
    for name in ("compiler_options", "reference_options"):
        options = getattr(job, name)
        if options is not None and not _options_ok(options):
            raise ProtocolError(f"job field '{name}': expected an object of names to "
                                f"booleans, numbers or strings, got {options!r}")
    if job.reference_options is not None and job.compiler_options is None:
        raise ProtocolError("job field 'reference_options': only a PAIRED job (with "
                            "compiler_options) compiles a reference")
    phases = list(job.phases)
    if not phases or phases[0] is not Phase.COMPILE or phases != sorted(
            set(phases), key=list(Phase).index):
        raise ProtocolError("job field 'phases': expected 'compile' first, then 'profile' "
                            f"and/or 'measure' in that order, got {[str(p) for p in phases]}")
    if not (isinstance(job.known_programs, Mapping) and all(
            isinstance(k, str) and _is_int(v) for k, v in job.known_programs.items())):
        raise ProtocolError("job field 'known_programs': expected an object of fingerprints "
                            f"to trial numbers, got {job.known_programs!r}")
    budget = job.memory_budget_bytes
    if budget is not None and not (_is_int(budget) and budget > 0):
        raise ProtocolError(f"job field 'memory_budget_bytes': expected a positive integer or "
                            f"null, got {budget!r}")
    if job.artifact_dir is not None and not isinstance(job.artifact_dir, str):
        raise ProtocolError(f"job field 'artifact_dir': expected a path, got {job.artifact_dir!r}")
    for name in ("program_flags", "reference_program_flags"):
        if not isinstance(getattr(job, name), str):
            raise ProtocolError(f"job field '{name}': expected a text of flags, "
                                f"got {getattr(job, name)!r}")
    _check_pgle(job)
    _check_also_compile(job)


#: The keys of each item of `Job.also_compile`.
CASE_KEYS = ("compiler_options", "program_flags")


def _check_also_compile(job: Job) -> None:
    """`also_compile`: items of per-compilation options and program flags, only in a
    compile-only PAIRED job that is not PGLE's."""
    if not isinstance(job.also_compile, tuple):
        raise ProtocolError(f"job field 'also_compile': expected a list, got {job.also_compile!r}")
    for i, case in enumerate(job.also_compile):
        if not (isinstance(case, Mapping) and sorted(case) == sorted(CASE_KEYS)
                and _options_ok(case["compiler_options"])
                and isinstance(case["program_flags"], str)):
            raise ProtocolError(f"job field 'also_compile[{i}]': expected an object of "
                                f"'compiler_options' and 'program_flags', got {case!r}")
    if job.also_compile and (job.phases != (Phase.COMPILE,) or not job.paired
                             or job.pgle_mode is not None):
        raise ProtocolError("job field 'also_compile': only a compile-only PAIRED job "
                            "(phases ['compile'], compiler_options, no PGLE) compiles more "
                            "configurations")


#: The ways a PGLE job makes its candidate (`Job.pgle_mode`).
PGLE_MODES = ("manual", "auto")


def _check_pgle(job: Job) -> None:
    """The PGLE fields: a mode only in PAIRED mode, a profile path for manual mode, the
    `profile` phase only in a PGLE job, runs >= 1 and a percentile in (0, 100]."""
    if not _is_int(job.pgle_runs) or job.pgle_runs < 1:
        raise ProtocolError(f"job field 'pgle_runs': expected an integer >= 1, "
                            f"got {job.pgle_runs!r}")
    if not (_is_number(job.pgle_percentile) and 0 < job.pgle_percentile <= 100):
        raise ProtocolError(f"job field 'pgle_percentile': expected a number in (0, 100], "
                            f"got {job.pgle_percentile!r}")
    for name in ("pgle_profile", "pgle_model"):
        if getattr(job, name) is not None and not isinstance(getattr(job, name), str):
            raise ProtocolError(f"job field {name!r}: expected text, got {getattr(job, name)!r}")
    if job.pgle_mode is None:
        if Phase.PROFILE in job.phases:
            raise ProtocolError("job field 'phases': 'profile' needs a PGLE job (pgle_mode)")
        return
    if job.pgle_mode not in PGLE_MODES:
        raise ProtocolError(f"job field 'pgle_mode': expected one of {list(PGLE_MODES)} or "
                            f"null, got {job.pgle_mode!r}")
    if job.compiler_options is None or job.reference_options is not None:
        raise ProtocolError("job field 'pgle_mode': a PGLE job is PAIRED (compiler_options) "
                            "and its reference is the configuration itself (no "
                            "reference_options)")
    if job.pgle_mode == "manual" and not job.pgle_profile:
        raise ProtocolError("job field 'pgle_profile': manual PGLE needs the profile's path")


def _check_curve(curve: object) -> None:
    if curve is None:
        return
    if not isinstance(curve, tuple):
        raise ProtocolError(f"job field 'prune_curve': expected a list of positive numbers or "
                            f"nulls, or null, got {curve!r}")
    for i, value in enumerate(curve):
        if value is not None and not (_is_number(value) and value > 0):
            raise ProtocolError(f"job field 'prune_curve[{i}]': expected a positive number or "
                                f"null, got {value!r}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _options_ok(options: object) -> bool:
    return isinstance(options, Mapping) and all(
        isinstance(k, str) and isinstance(v, bool | int | float | str) for k, v in options.items())


# --- the result ---------------------------------------------------------------------------------


def _part(kind: str, default: Any = None) -> Any:
    """A field of the result, with the kind of value it holds (what `parse_result` checks)."""
    return field(default=default, metadata={"kind": kind})


@dataclass(frozen=True)
class Result:
    """The result document: what the child fills and the parent reads, one field each.

    `status` is `ok` or a failure kind (`autotune.rules.failures`), `message`
    says why. A field the child did not fill keeps its default (nothing
    timed: no step times). The kind of each field (its metadata) says what
    `parse_result` accepts:

    - `times`: step times, each a positive finite number of seconds.
    - `number`: one non-negative finite number (`written_at`: when the child
      wrote the document, in seconds since the epoch; a multi-process trial's
      earliest failure is its cause, `autotune.launch.launcher.deciding_report`);
      `signed`: one finite number.
    - `count`: one whole number >= 0 (`process_count`, `process_index`: JAX's
      processes of the trial and which one wrote the document;
      `same_program_as`: the trial that measured this very program).
    - `text`, `flag` (true or false), `counts` (name -> whole number: the HLO
      statistics), `object` (the numerics verdict), `collectives` (kind ->
      figure name -> whole number) and `pgle` (a PGLE job's facts, each known
      key of its type, `PGLE_RESULT`).
    """

    status: str
    message: str
    mode: str | None = _part("text")
    step_times_s: tuple[float, ...] = _part("times", ())
    baseline_step_times_s: tuple[float, ...] = _part("times", ())
    warmup_times_s: tuple[float, ...] = _part("times", ())
    baseline_warmup_times_s: tuple[float, ...] = _part("times", ())
    compile_time_s: float | None = _part("number")
    baseline_compile_time_s: float | None = _part("number")
    first_step_time_s: float | None = _part("number")
    baseline_first_step_time_s: float | None = _part("number")
    abs_sum: float | None = _part("number")
    written_at: float | None = _part("number")
    checksum: float | None = _part("signed")
    baseline_checksum: float | None = _part("signed")
    peak_memory_bytes: int | None = _part("count")
    device_peak_bytes: int | None = _part("count")
    rss_peak_bytes: int | None = _part("count")
    device_count: int | None = _part("count")
    warmup_steps: int | None = _part("count")
    same_program_as: int | None = _part("count")
    process_count: int | None = _part("count")
    process_index: int | None = _part("count")
    fingerprint: str | None = _part("text")
    baseline_fingerprint: str | None = _part("text")
    memory_source: str | None = _part("text")
    jax_version: str | None = _part("text")
    jaxlib_version: str | None = _part("text")
    backend: str | None = _part("text")
    device_kind: str | None = _part("text")
    output_dtype: str | None = _part("text")
    warmup_settled: bool | None = _part("flag")
    hlo_stats: Mapping[str, int] | None = _part("counts")
    numerics: Mapping[str, Any] | None = _part("object")
    collectives: Mapping[str, Mapping[str, int]] | None = _part("collectives")
    pgle: Mapping[str, Any] | None = _part("pgle")

    def to_json(self, indent: int | None = None) -> str:
        """The document as the child writes it: the schema version, then every field that
        differs from its default (a field left out reads back as its default)."""
        body = {f.name: getattr(self, f.name) for f in fields(self)
                if f.name in ("status", "message") or getattr(self, f.name) != f.default}
        return json.dumps({"schema_version": SCHEMA_VERSION, **body}, indent=indent)

    @property
    def timed(self) -> bool:
        """Whether the candidate's steps were timed."""
        return bool(self.step_times_s)


def parse_result(text: str) -> Result:
    """Check a child's result document field by field and return it as a `Result`.

    Required: `schema_version` (== SCHEMA_VERSION), `status` (text) and
    `message` (text). Present fields must have their kind (`Result`); a key
    the contract does not name is ignored.

    Raises:
        ProtocolError: the first field at fault, named, with what was found.
    """
    body = _json_object("result", text, "not JSON, or cut short")
    _check_version("result", body.get("schema_version"))
    return result_of(body)


def result_of(body: Mapping[str, Any]) -> Result:
    """A `Result` from a document's fields (`parse_result`'s checks, without the version).

    Raises:
        ProtocolError: `status` or `message` is missing or not text, or a field breaks
            its kind (named, with what was found).
    """
    for required in ("status", "message"):
        if not isinstance(body.get(required), str):
            raise ProtocolError(f"result field {required!r}: missing or not text "
                                f"(got {body.get(required)!r})")
    values: dict[str, Any] = {"status": body["status"], "message": body["message"]}
    for part in fields(Result):
        value = body.get(part.name)
        if "kind" in part.metadata and value is not None:
            values[part.name] = _CHECKS[part.metadata["kind"]](part.name, value)
    return Result(**values)


def _times(key: str, values: object) -> tuple[float, ...]:
    if not isinstance(values, list | tuple):
        raise ProtocolError(f"result field {key!r}: expected a list, got {values!r}")
    for i, v in enumerate(values):
        if not (_is_number(v) and v > 0):
            raise ProtocolError(f"result field '{key}[{i}]': expected a positive finite "
                                f"number of seconds, got {v!r}")
    return tuple(float(v) for v in values)


def _number(key: str, v: object, signed: bool = False) -> object:
    if not (_is_number(v) and (signed or v >= 0)):  # type: ignore[operator]
        raise ProtocolError(f"result field {key!r}: expected a finite number, got {v!r}")
    return v


def _count(key: str, v: object) -> object:
    if not (_is_int(v) and v >= 0):  # type: ignore[operator]
        raise ProtocolError(f"result field {key!r}: expected a whole number, got {v!r}")
    return v


def _typed(kinds: type | tuple[type, ...], what: str) -> Any:
    def check(key: str, v: object) -> object:
        if not isinstance(v, kinds):
            raise ProtocolError(f"result field {key!r}: expected {what}, got {v!r}")
        return v
    return check


def _counts(key: str, value: object) -> object:
    """`hlo_stats`: name -> whole number."""
    if not isinstance(value, dict):
        raise ProtocolError(f"result field {key!r}: expected an object, got {value!r}")
    for name, v in value.items():
        _count(f"{key}.{name}", v)
    return value


def _collectives(key: str, value: object) -> object:
    """`collectives`: kind -> {figure name: whole number >= 0}."""
    if not isinstance(value, dict):
        raise ProtocolError(f"result field {key!r}: expected an object, got {value!r}")
    for kind, figures in value.items():
        if not isinstance(figures, dict):
            raise ProtocolError(f"result field '{key}.{kind}': expected an object, "
                                f"got {figures!r}")
        for name, v in figures.items():
            if not (_is_int(v) and v >= 0):
                raise ProtocolError(f"result field '{key}.{kind}.{name}': expected a "
                                    f"whole number, got {v!r}")
    return value


#: The `pgle` object of a PGLE job's result: what each key holds (`autotune.child.pgle_phase`).
PGLE_RESULT: dict[str, tuple[type, ...]] = {
    "mode": (str,), "profile": (str, type(None)), "collected": (bool,), "costs": (int,),
    "source": (str,), "names_in_program": (int,), "profile_fingerprint": (str, type(None)),
    "note": (str,)}


def _pgle_result(key: str, value: object) -> object:
    """`pgle`: an object whose known keys have their type (`PGLE_RESULT`)."""
    if not isinstance(value, dict):
        raise ProtocolError(f"result field {key!r}: expected an object, got {value!r}")
    for name, kinds in PGLE_RESULT.items():
        if name in value and (not isinstance(value[name], kinds) or (
                kinds == (int,) and isinstance(value[name], bool))):
            raise ProtocolError(f"result field '{key}.{name}': wrong type, got {value[name]!r}")
    return value


#: What `result_of` checks for each kind of field (`Result`'s field metadata).
_CHECKS: dict[str, Any] = {
    "times": _times, "number": _number, "signed": lambda k, v: _number(k, v, signed=True),
    "count": _count, "text": _typed(str, "text"), "flag": _typed(bool, "true or false"),
    "counts": _counts, "object": _typed(dict, "an object"), "collectives": _collectives,
    "pgle": _pgle_result}
