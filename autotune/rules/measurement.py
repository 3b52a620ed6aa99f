"""Read the trial child's result file into records (step-time statistics: `rules.stats`).

The document's contract (fields, types, schema version) is `autotune.ground.protocol`;
this module turns a checked document into a `Measurement`. Nothing here
imports jax.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autotune.ground.protocol import ProtocolError, parse_result
from autotune.ground.records import Measurement, MeasureMode, OutcomeKind
from autotune.rules.collectives import profile_from_json


class ResultFileError(ValueError):
    """The result file is missing, breaks the protocol or names an unknown status."""


def _floats(body: dict[str, Any], key: str) -> tuple[float, ...]:
    return tuple(float(v) for v in body.get(key) or ())


def measurement_from_body(body: dict[str, Any]) -> Measurement:
    """Build a Measurement from a parsed result body (status ok or not)."""
    return Measurement(
        step_times_s=_floats(body, "step_times_s"),
        baseline_step_times_s=_floats(body, "baseline_step_times_s"),
        compile_time_s=float(body.get("compile_time_s") or 0.0),
        mode=MeasureMode(body.get("mode", "direct")),
        first_step_time_s=body.get("first_step_time_s"),
        peak_memory_bytes=body.get("peak_memory_bytes"),
        memory_source=body.get("memory_source") or "unknown",
        rss_peak_bytes=body.get("rss_peak_bytes"),
        checksum=body.get("checksum"),
        baseline_checksum=body.get("baseline_checksum"),
        hlo_stats=dict(body.get("hlo_stats") or {}),
        fingerprint=body.get("fingerprint"),
        baseline_fingerprint=body.get("baseline_fingerprint"),
        jax_version=body.get("jax_version", ""),
        jaxlib_version=body.get("jaxlib_version", ""),
        backend=body.get("backend", ""),
        device_kind=body.get("device_kind", ""),
        device_count=int(body.get("device_count") or 0),
        warmup_steps=body.get("warmup_steps"),
        warmup_settled=body.get("warmup_settled"),
        warmup_times_s=_floats(body, "warmup_times_s"),
        baseline_warmup_times_s=_floats(body, "baseline_warmup_times_s"),
        output_dtype=body.get("output_dtype") or "",
        abs_sum=body.get("abs_sum"),
        numerics_error=(body.get("numerics") or {}).get("max_rel_error"),
        same_program_as=body.get("same_program_as"),
        collectives=profile_from_json(body.get("collectives")),
        pgle=body.get("pgle"),
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
        body = parse_result(text)
        kind = OutcomeKind(body["status"])
    except ProtocolError as exc:
        raise ResultFileError(f"the child's result breaks the protocol: {exc}") from exc
    except ValueError as exc:
        raise ResultFileError(f"result field 'status': {exc}") from exc
    has_data = (bool(body.get("step_times_s")) or body.get("same_program_as") is not None
                or (kind is OutcomeKind.OK and bool(body.get("fingerprint"))))  # compile only
    return kind, body["message"], measurement_from_body(body) if has_data else None
