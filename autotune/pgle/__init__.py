"""Profile-guided latency estimation (PGLE): the rules of the profile and its record.

XLA's latency-hiding scheduler can schedule with measured costs instead of
its own estimates. The workflow (XLA's PGLE guide) has two runs:

1. **Profile run**: every flag of the configuration unchanged, but the
   latency-hiding scheduler off and every async collective disabled, so no
   two operations overlap and each one's time is its own
   (`profile_run_options`). Its per-instruction times become costs.
2. **Performance run**: the configuration with the scheduler on and the
   profile's path given (`performance_options`).

The costs are written as the text proto XLA reads (`render_pbtxt`, lines of
`costs { name: "fusion.1" cost_us: 12.5 }`; the formats are `autotune.pgle.formats`),
with a JSON record beside it (`ProfileMeta`, in `<profile>.meta.json`) saying what the
profile belongs to: a profile depends on the model, the XLA version and the flags, and is
stale once any of them changes (`stale_reasons`).

Standard library only: the trial child imports this before jax, and the
parent applies the same rules.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from autotune.ground.protocol import OptionValue
from autotune.pgle.formats import (
    Cost,
    decode_profiled_instructions,
    parse_pbtxt,
    render_pbtxt,
)

__all__ = ["Cost", "decode_profiled_instructions", "parse_pbtxt", "render_pbtxt"]

#: The per-compile option naming the profile XLA's scheduler reads.
PROFILE_PATH_FLAG = "xla_gpu_pgle_profile_file_or_directory_path"
#: The latency-hiding scheduler: off in the profile run, on in the performance run.
LHS_FLAG = "xla_gpu_enable_latency_hiding_scheduler"
#: The collectives run synchronously in the profile run.
ASYNC_OFF_FLAG = "xla_gpu_disable_async_collectives"
#: The proto enum names for a per-compile option (XLA_FLAGS takes lower case): all kinds of
#: the guide's profile run.
ALL_ASYNC = "ALLREDUCE,ALLGATHER,REDUCESCATTER,COLLECTIVEBROADCAST,ALLTOALL,COLLECTIVEPERMUTE"
#: On CPU: one trace event per executed HLO instruction, named as the instruction.
CPU_TRACE_FLAG = "xla_cpu_enable_xprof_traceme"
#: The record beside a profile: `profile.pbtxt` -> `profile.pbtxt.meta.json`.
META_SUFFIX = ".meta.json"

#: The backends a profile may be recorded on (`jax.default_backend()`).
BACKENDS = ("cpu", "gpu", "tpu")
#: Where the costs came from: JAX's converter of a GPU trace, or the trace's own events.
SOURCES = ("converter", "trace-events")

@dataclass(frozen=True)
class ProfileMeta:
    """What a profile belongs to, recorded beside it.

    Attributes:
        model: the workload's identity, given by the parent (an opaque string).
        fingerprint: the program fingerprint of the configuration compiled
            WITHOUT the profile; None where none was taken.
        xla_version: the jaxlib version that made the profile.
        backend: "cpu", "gpu" or "tpu".
        flags: the configuration's options (no profile path, none of the
            profile run's overrides).
        source: "converter" (JAX's `get_profiled_instructions_proto`) or
            "trace-events" (the trace's per-instruction events).
        runs: how many runs were profiled.
        percentile: the percentile of each instruction's durations kept as its cost.
        created_at: when it was made (`time.time()`).
    """

    model: str
    fingerprint: str | None
    xla_version: str
    backend: str
    flags: dict[str, bool | int | float | str]
    source: str
    runs: int
    percentile: float
    created_at: float

    def to_json(self) -> str:
        """The record as a JSON document (keys sorted; NaN or infinity is a ValueError)."""
        return json.dumps(asdict(self), sort_keys=True, indent=1, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> ProfileMeta:
        """Read a record written by `to_json`. Keys it does not know are ignored.

        Raises:
            ValueError: not a JSON object, or a field missing or of the wrong
                type or range (the message names the field).
        """
        try:
            body = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"profile record: not JSON ({exc})") from exc
        if not isinstance(body, dict):
            raise ValueError("profile record: expected a JSON object")
        values = {}
        for f in fields(cls):
            if f.name not in body:
                raise ValueError(f"profile record field {f.name!r}: missing")
            value = body[f.name]
            if not _META_CHECKS[f.name](value):
                raise ValueError(f"profile record field {f.name!r}: expected "
                                 f"{_META_EXPECTED[f.name]}, got {value!r}")
            values[f.name] = value
        return cls(**values)


def _is_number(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _is_option(value: object) -> bool:
    return isinstance(value, bool | str) or _is_number(value)


_META_CHECKS: dict[str, Callable[[Any], bool]] = {
    "model": lambda v: isinstance(v, str),
    "fingerprint": lambda v: v is None or isinstance(v, str),
    "xla_version": lambda v: isinstance(v, str),
    "backend": lambda v: v in BACKENDS,
    "flags": lambda v: isinstance(v, dict) and all(
        isinstance(k, str) and _is_option(x) for k, x in v.items()),
    "source": lambda v: v in SOURCES,
    "runs": lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1,
    "percentile": lambda v: _is_number(v) and 0 <= v <= 100,
    "created_at": _is_number,
}
_META_EXPECTED = {
    "model": "text",
    "fingerprint": "text or null",
    "xla_version": "text",
    "backend": f"one of {', '.join(BACKENDS)}",
    "flags": "an object of names to booleans, numbers or strings",
    "source": f"one of {', '.join(SOURCES)}",
    "runs": "an integer >= 1",
    "percentile": "a number from 0 to 100",
    "created_at": "a finite number",
}


# --- the two runs -------------------------------------------------------------------------------

def profile_run_options(backend: str, options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """The guide's profile run: `options` unchanged but the latency-hiding scheduler off
    and every async collective disabled, any profile path removed. On "cpu" also
    `CPU_TRACE_FLAG`, so the trace has an event per executed instruction.

    Raises:
        ValueError: a backend other than "cpu", "gpu" or "tpu".
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    run = without_profile(options)
    run[LHS_FLAG] = False
    run[ASYNC_OFF_FLAG] = ALL_ASYNC
    if backend == "cpu":
        run[CPU_TRACE_FLAG] = True
    return run


def performance_options(options: Mapping[str, OptionValue],
                        profile_path: str) -> dict[str, OptionValue]:
    """The guide's performance run: `options` with the latency-hiding scheduler on and
    `PROFILE_PATH_FLAG` naming the profile (replacing any path `options` had)."""
    return {**options, LHS_FLAG: True, PROFILE_PATH_FLAG: profile_path}


def reference_options(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """What a PGLE candidate is timed against, and what its profile's `flags` are: the
    performance run without its profile (`options` with the latency-hiding scheduler on,
    no profile path). So the comparison isolates the profile, even for a configuration
    that had the scheduler off or unset."""
    return {**without_profile(options), LHS_FLAG: True}


def without_profile(options: Mapping[str, OptionValue]) -> dict[str, OptionValue]:
    """`options` less `PROFILE_PATH_FLAG`: what a profile's `flags` are compared with."""
    return {k: v for k, v in options.items() if k != PROFILE_PATH_FLAG}


# --- costs from what was measured ---------------------------------------------------------------

# `  %name = ...` or `  ROOT name.1 = ...`: an instruction line of an HLO module's text
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([A-Za-z_][\w.\-]*)\s*=\s*\S")


def hlo_instruction_names(hlo_text: str) -> set[str]:
    """Every instruction name of an HLO module's text (every computation's), with or
    without the leading `%`; header, computation and stack-frame lines name none."""
    return {m.group(1) for line in hlo_text.splitlines() if (m := _INSTRUCTION.match(line))}


def percentile_of(values: Sequence[float], percentile: float) -> float:
    """The `percentile` (0 to 100) of `values`, interpolated linearly between the two
    nearest ranks (numpy's default). Raises ValueError for no values or a percentile
    outside 0..100."""
    if not 0 <= percentile <= 100:
        raise ValueError(f"a percentile lies from 0 to 100, got {percentile!r}")
    if not values:
        raise ValueError("no values to take a percentile of")
    ordered = sorted(values)
    rank = percentile / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def aggregate(samples: Mapping[str, Sequence[float]], percentile: float) -> list[Cost]:
    """Per name, the `percentile` of its durations (microseconds), sorted by name.

    Durations that are not finite are left out; a name whose cost is not positive
    (or that has no duration left) gets no cost. Raises ValueError for a
    percentile outside 0..100.
    """
    if not 0 <= percentile <= 100:
        raise ValueError(f"a percentile lies from 0 to 100, got {percentile!r}")
    costs = []
    for name in sorted(samples):
        durations = [d for d in samples[name] if math.isfinite(d)]
        if durations and (cost := percentile_of(durations, percentile)) > 0:
            costs.append(Cost(name, cost))
    return costs


def costs_from_trace_events(events: Iterable[Mapping[str, Any]], names: Collection[str],
                            percentile: float) -> list[Cost]:
    """Costs from Chrome-trace events: the complete ("ph": "X") events whose name is in
    `names`, their durations ("dur", microseconds) aggregated per name over every
    run at `percentile` (`aggregate`). Other events (the runtime's, "end: ..."
    markers, ones without a numeric duration) are ignored."""
    samples: dict[str, list[float]] = {}
    for event in events:
        name, dur = event.get("name"), event.get("dur")
        if (event.get("ph") == "X" and isinstance(name, str) and name in names
                and isinstance(dur, int | float) and not isinstance(dur, bool)):
            samples.setdefault(name, []).append(float(dur))
    return aggregate(samples, percentile)


# --- the profile on disk ------------------------------------------------------------------------

def _write_atomically(path: str, text: str) -> None:
    """Write `text` to a temporary file beside `path`, then `os.replace` it into place."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_profile(path: str, costs: Sequence[Cost], meta: ProfileMeta) -> None:
    """Write the profile to `path` (a `.pbtxt` file, the folder made when missing) and
    its record to `path + META_SUFFIX`, each atomically (temporary file, then
    `os.replace`): a reader sees whole files, the record replaced first."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    text = render_pbtxt(costs)
    _write_atomically(path + META_SUFFIX, meta.to_json())
    _write_atomically(path, text)


def read_profile(path: str) -> tuple[list[Cost], ProfileMeta]:
    """The costs and the record of the profile at `path`.

    Raises:
        ValueError: no profile at `path`, no record beside it, or either one
            malformed (the message names the file, and the line or field).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ValueError(f"no profile at {path}: {exc.strerror or exc}") from exc
    try:
        with open(path + META_SUFFIX, encoding="utf-8") as fh:
            record = fh.read()
    except OSError as exc:
        raise ValueError(f"the profile {path} has no record beside it ({path + META_SUFFIX}: "
                         f"{exc.strerror or exc})") from exc
    try:
        costs = parse_pbtxt(text)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
    try:
        meta = ProfileMeta.from_json(record)
    except ValueError as exc:
        raise ValueError(f"{path + META_SUFFIX}: {exc}") from exc
    return costs, meta


# --- does a profile belong here -----------------------------------------------------------------

def _same(a: OptionValue, b: OptionValue) -> bool:
    """Equal values of the same kind: True is not 1, "1" is not 1 (1 and 1.0 are equal)."""
    return (isinstance(a, bool) == isinstance(b, bool)
            and isinstance(a, str) == isinstance(b, str) and a == b)


def _shown(value: OptionValue | None) -> str:
    return "unset" if value is None else json.dumps(value)


def flag_differences(there: Mapping[str, OptionValue],
                     here: Mapping[str, OptionValue]) -> list[str]:
    """`name=A there, B here` for each option that differs (by name), "unset" for a
    missing one; a profile path on either side is not compared."""
    there, here = without_profile(there), without_profile(here)
    return [f"{name}={_shown(there.get(name))} there, {_shown(here.get(name))} here"
            for name in sorted(set(there) | set(here))
            if name not in there or name not in here or not _same(there[name], here[name])]


def stale_reasons(meta: ProfileMeta, *, xla_version: str, backend: str,
                  fingerprint: str | None, flags: Mapping[str, OptionValue],
                  model: str | None = None) -> list[str]:
    """Every reason the profile described by `meta` does not belong to this
    configuration, each a sentence naming both values; [] when it is fresh.

    `flags` are the configuration's options as `profile_run_options` was given them
    (not the performance run's); both sides are compared less the profile path. A
    fingerprint of None on either side, or a `model` of None, is not compared.
    """
    reasons = []
    if model is not None and meta.model != model:
        reasons.append(f"the profile was recorded for model {meta.model!r}, this is {model!r}")
    if meta.backend != backend:
        reasons.append(f"the profile was recorded on the {meta.backend} backend, "
                       f"this is {backend}")
    if meta.xla_version != xla_version:
        reasons.append(f"the profile was recorded with XLA (jaxlib) {meta.xla_version}, "
                       f"this is {xla_version}")
    if meta.fingerprint is not None and fingerprint is not None and (
            meta.fingerprint != fingerprint):
        reasons.append(f"the profile was recorded for program {meta.fingerprint}, "
                       f"this configuration compiles to {fingerprint}")
    if differences := flag_differences(meta.flags, flags):
        reasons.append("the profile was recorded with other flags: " + "; ".join(differences))
    return reasons
