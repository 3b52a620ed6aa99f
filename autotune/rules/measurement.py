"""Read the trial child's result into records (step-time statistics: `rules.stats`).

The document's contract (fields, kinds, schema version) is
`autotune.ground.protocol.Result`; this module turns a checked `Result` into
the `Measurement` the parent stores. Nothing here imports jax.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from autotune.ground.protocol import ProtocolError, Result, parse_result
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind
from autotune.rules.collectives import profile_from_json


class ResultFileError(ValueError):
    """The result file is missing, breaks the protocol or names an unknown status."""


#: The fields a `Measurement` takes from the `Result` of the same name, as they are.
_SAME = tuple(sorted({f.name for f in fields(Measurement)} & {f.name for f in fields(Result)}
                     - {"mode", "compile_time_s", "memory_source", "hlo_stats", "collectives"}))


def measurement_from_result(result: Result) -> Measurement:
    """The `Measurement` of a result (status ok or not): every field of the same name,
    where the child filled it, and what differs (the mode, the numerics verdict's error,
    the collectives' profile; no compile time reads 0, no memory source `unknown`)."""
    same = {name: getattr(result, name) for name in _SAME if getattr(result, name) is not None}
    return Measurement(
        **same,
        mode=MeasureMode(result.mode or "direct"),
        compile_time_s=float(result.compile_time_s or 0.0),
        memory_source=result.memory_source or "unknown",
        hlo_stats=dict(result.hlo_stats or {}),
        numerics_error=(result.numerics or {}).get("max_rel_error"),
        collectives=profile_from_json(result.collectives),
    )


def read_result(path: Path) -> tuple[OutcomeKind, str, Measurement | None]:
    """Read a child's result file: (kind, message, measurement if any was taken).

    A program another trial measured (`same_program_as`), or a successful
    compile-only job (a fingerprint, nothing timed), counts as a measurement
    without timed steps.

    Raises:
        ResultFileError: the file is missing or cut short, breaks the protocol
            (`autotune.ground.protocol.parse_result`; the message names the field) or
            names an unknown status.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultFileError(f"unreadable result file {path}: {exc}") from exc
    try:
        result = parse_result(text)
        kind = OutcomeKind(result.status)
    except ProtocolError as exc:
        raise ResultFileError(f"the child's result breaks the protocol: {exc}") from exc
    except ValueError as exc:
        raise ResultFileError(f"result field 'status': {exc}") from exc
    has_data = (result.timed or result.same_program_as is not None
                or (kind is OutcomeKind.OK and bool(result.fingerprint)))  # compile only
    return kind, result.message, measurement_from_result(result) if has_data else None
