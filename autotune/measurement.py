"""Parse the trial child's result file (statistics of step times: `autotune.stats`).

The result file is the contract between `autotune.bench` (child) and the
parent: a JSON object with `schema_version`, `status` (an OutcomeKind value)
and the measured fields. Nothing here imports jax.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from autotune.records import Measurement, MeasureMode, OutcomeKind

RESULT_SCHEMA_VERSION = 1


class ResultFileError(ValueError):
    """The result file is missing fields or is not valid JSON (a fault of the child)."""


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
    )


def read_result(path: Path) -> tuple[OutcomeKind, str, Measurement | None]:
    """Read a child's result file: (kind, message, measurement if any was taken).

    Raises:
        ResultFileError: the file is not JSON, has another schema version or an
            unknown status.
    """
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        kind = OutcomeKind(body["status"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ResultFileError(f"unreadable result file {path}: {exc}") from exc
    if body.get("schema_version") != RESULT_SCHEMA_VERSION:
        raise ResultFileError(f"result file {path} has schema_version {body.get('schema_version')}")
    has_data = bool(body.get("step_times_s"))
    return kind, str(body.get("message") or ""), measurement_from_body(body) if has_data else None
