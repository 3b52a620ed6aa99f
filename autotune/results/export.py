"""Write the winning configuration as the export document (`schema_version: 1`), YAML or JSON.

The file says what to set (flags, environment variables, the ready XLA_FLAGS
string), what was measured and on what, so a user can apply it to their own
job and know what to expect.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from autotune.errors import ExportError
from autotune.records import Role, RunRecord, StudyRecord
from autotune.results.confirmation import Confirmation
from autotune.results.ranking import changed_flags, ordered

EXPORT_SCHEMA_VERSION = 1


def _claim(conf: Confirmation | None, run: RunRecord) -> dict[str, Any]:
    """The speedup to claim: the confirmation's, with its interval, else the search's."""
    if conf is not None and conf.estimate is not None:
        low, high = conf.estimate.speedup_interval
        return {"speedup": conf.estimate.speedup, "speedup_interval": [low, high],
                "confidence": conf.estimate.confidence, "confirmed": True,
                "confirmation_runs": conf.runs, "verdict": conf.verdict()}
    same = conf is not None and conf.same_program
    return {"speedup": 1.0 if same else run.speedup, "speedup_interval": None,
            "confidence": None, "confirmed": same, "confirmation_runs": 0,
            "verdict": "no measurable gain" if same else "not confirmed"}


def _measured(run: RunRecord, baseline: RunRecord | None,
              conf: Confirmation | None) -> dict[str, Any]:
    m = run.outcome.measurement
    assert m is not None
    base_m = baseline.outcome.measurement if baseline else None
    return {
        "median_step_time_s": m.median_s,
        "baseline_median_step_time_s": m.baseline_median_s
        or (base_m.median_s if base_m else None),
        **_claim(conf, run),
        "search_speedup": run.speedup,
        "mode": m.mode.value,
        "steps": len(m.step_times_s),
        "compile_time_s": m.compile_time_s,
        "peak_memory_bytes": m.peak_memory_bytes,
        "memory_source": m.memory_source,
        "same_program_as_baseline": m.same_program_as_baseline,
        "fingerprint": m.fingerprint,
    }


def _measured_on(run: RunRecord, study: StudyRecord) -> dict[str, Any]:
    env = run.environment
    return {
        "backend": env.backend if env else None,
        "device_kind": env.device_kind if env else None,
        "device_count": env.device_count if env else None,
        "jax": env.jax_version if env else None,
        "jaxlib": env.jaxlib_version if env else None,
        "host": env.host if env else None,
        "benchmark": study.benchmark,
        "preset": study.preset,
        "space": study.space,
        "space_backend": study.space_backend,
    }


def export_document(study: StudyRecord, runs: list[RunRecord], catalog: Any,
                    rank: int = 1) -> dict[str, Any]:
    """The export mapping for the configuration ranked `rank` (1 = best).

    Ranked by the study's objectives (`ranking.ordered`; time first when it
    has two), never over its memory budget.

    Raises:
        ExportError: the study has no successful configuration of that rank.
    """
    from autotune.flags.compose import compose_env, xla_flags_string

    order = ordered(runs, study.objectives, study.memory_budget_bytes)
    if not 1 <= rank <= len(order):
        raise ExportError(
            f"study '{study.name}' has {len(order)} successful configurations, no rank {rank}; "
            f"run `autotune best {study.name}` to see them"
        )
    run, conf = order[rank - 1]
    baseline = next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok), None)
    return {
        "schema_version": EXPORT_SCHEMA_VERSION,
        "study": study.name,
        "rank": rank,
        "trial": run.trial_number,
        "flags": dict(run.flags),
        "changed_from_defaults": changed_flags(run.flags, catalog),
        "env": compose_env(run.flags, {}, catalog),
        "xla_flags": xla_flags_string(run.flags, catalog),
        "measured": _measured(run, baseline, conf),
        "measured_on": _measured_on(run, study),
        "objectives": list(study.objectives),
        "memory_budget_bytes": study.memory_budget_bytes,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class ExportFormat(StrEnum):
    """The forms one export document is written in."""

    YAML = "yaml"
    JSON = "json"


def render_export(document: dict[str, Any], fmt: ExportFormat = ExportFormat.YAML) -> str:
    """The export document as text: YAML (keys in document order) or JSON (indented)."""
    if fmt is ExportFormat.JSON:
        return json.dumps(document, indent=1) + "\n"
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def write_export(document: dict[str, Any], path: Path,
                 fmt: ExportFormat = ExportFormat.YAML) -> None:
    """Write the export document; raises ExportError when the file cannot be written."""
    text = render_export(document, fmt)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror}; choose another -o path") from exc
