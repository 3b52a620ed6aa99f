"""The export document (`schema_version: 2`) and its forms: YAML, JSON, env, jax.

The document says what to set (flags, environment variables, the ready
XLA_FLAGS string, compile options), whether autotune recommends it and why,
what was measured and on what, and the candidates behind the verdict, so a
user can apply it to their own job and know what to expect. autotune
recommends only a configuration that confirmation measured faster than XLA's
defaults; otherwise the document holds the defaults (nothing to set).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from autotune import pgle as rules
from autotune.flags.compose import compose_env, shell_exports, split_per_compile, xla_flags_string
from autotune.ground.errors import ExportError
from autotune.ground.records import Role, RunRecord, StudyRecord
from autotune.results.confirmation import Confirmation
from autotune.results.pgle import pgle_json, pgle_runs, pgle_verdict
from autotune.results.ranking import Order, main_runs, ordered, pick_reason, recommend
from autotune.results.shrink import Shrink, shrink
from autotune.results.table import best_row_json, best_rows, changed_flags
from autotune.rules.stats import RatioEstimate

#: Version 2: the document recommends only what confirmation proved (else XLA's
#: defaults), says so in `recommended` and `reason`, and carries `jax` and `candidates`.
EXPORT_SCHEMA_VERSION = 2


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


def exported_at() -> str:
    """Now, in UTC to the second; or the time `SOURCE_DATE_EPOCH` names, the convention of
    reproducible builds, so two exports of one study (the CLI's and the dashboard's) can
    be compared byte for byte."""
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    moment = datetime.fromtimestamp(int(epoch), UTC) if epoch.isdigit() else datetime.now(UTC)
    return moment.isoformat(timespec="seconds")


def export_document(study: StudyRecord, runs: list[RunRecord], catalog: Any,
                    rank: int | None = None, trial: int | None = None,
                    candidates: int = 10, pgle_profile: str | None = None) -> dict[str, Any]:
    """The export mapping: the recommendation, or an explicit pick.

    Without `rank` or `trial` the document holds what `ranking.recommend`
    recommends: a configuration confirmed faster than XLA's defaults, or else
    the defaults themselves (`flags: {}`, `xla_flags: ''`, `measured.verdict:
    no measurable gain`, `recommended: false`). `rank` (1 = first of `best`)
    or `trial` (a search trial number) export that configuration instead,
    `recommended` true only when it is the recommendation, with the reason.
    `candidates` lists the first rows of `best` either way, as evidence. A study
    measured in several environments exports from its main one (`ranking.main_runs`).

    `pgle` says what the PGLE phase found for the exported flags (None when it
    did not measure them, `autotune.results.pgle`). Where it keeps a profile and
    `pgle_profile` names the file the caller writes it to, the flags are 003's
    performance run of the configuration (the latency hiding scheduler on and
    that path) and `pgle.profile` names the file.

    Raises:
        ExportError: the study has no such rank or trial, or nothing of it
            ran successfully (not even the baseline).
    """
    from autotune.results.study_results import study_catalog

    catalog = study_catalog(catalog, study)
    runs = main_runs(runs)  # one environment: the recommendation's (`ranking.environments`)
    order = ordered(runs, study.objectives, study.memory_budget_bytes)
    rec = recommend(runs, study.objectives, study.memory_budget_bytes, order=order)
    baseline = next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok), None)
    if rank is not None or trial is not None:
        position = _pick(study, order, rank, trial)
        run, conf = order[position]
        recommended, reason = rec.run is not None and rec.run.id == run.id, \
            pick_reason(run, conf, rec)
        body = _configuration(run, conf, baseline, catalog)
        position += 1
    elif rec.run is not None:
        run, conf, recommended, reason = rec.run, rec.confirmation, True, rec.reason
        body = _minimal(run, conf, baseline, catalog, shrink(runs, run, catalog))
        position = 1
    else:
        if baseline is None:
            raise ExportError(f"study '{study.name}' has no successful baseline run, so "
                              f"nothing was measured; run `autotune trials {study.name}` to "
                              "see why, fix it, and run the study again")
        run, recommended, reason, position = baseline, False, rec.reason, None
        body = _defaults(baseline)
    body = _with_pgle(body, runs, run.trial_number, catalog, pgle_profile)
    return {
        "schema_version": EXPORT_SCHEMA_VERSION,
        "study": study.name,
        "recommended": recommended,
        "reason": reason,
        "rank": position,
        **body,
        "measured_on": _measured_on(run, study),
        "candidates": _candidates(runs, catalog, study, candidates, order),
        "objectives": list(study.objectives),
        "memory_budget_bytes": study.memory_budget_bytes,
        "exported_at": exported_at(),
    }


def _with_pgle(body: dict[str, Any], runs: list[RunRecord], number: int | None,
               catalog: Any, profile: str | None) -> dict[str, Any]:
    """`body` with its `pgle` key; with the flags of 003's performance run where the
    PGLE phase kept a profile for these very flags and `profile` names its file."""
    mine = [] if number is None else pgle_runs(runs, number, body["flags"])
    if not mine:
        return {**body, "pgle": None}
    verdict = pgle_verdict([r.outcome for r in mine], body["flags"])
    section = {key: value for key, value in pgle_json(verdict).items()
               if key in _PGLE_KEYS} | {"profile": None}
    if not verdict.keep or profile is None:
        return {**body, "pgle": section}
    flags = rules.performance_options(body["flags"], profile)
    return {**body, **_to_set(flags, catalog),
            "pgle": {**section, "profile": os.path.basename(profile)}}


#: What the export says about PGLE (`autotune.results.pgle.pgle_json`'s keys).
_PGLE_KEYS = ("keep", "verdict", "speedup", "speedup_interval", "runs", "same_program",
              "profile_costs", "profile_fingerprint", "note")


def _pick(study: StudyRecord, order: Order,
          rank: int | None, trial: int | None) -> int:
    """The index into `order` of `--rank N` or `--trial N`."""
    if trial is not None:
        found = [i for i, (run, _) in enumerate(order) if run.trial_number == trial]
        if not found:
            raise ExportError(
                f"study '{study.name}' has no ranked trial {trial} (it failed, repeated "
                f"another configuration, or does not exist); run `autotune best "
                f"{study.name}` to see the ranked trials")
        return found[0]
    assert rank is not None
    if not 1 <= rank <= len(order):
        raise ExportError(
            f"study '{study.name}' has {len(order)} successful configurations, no rank {rank}; "
            f"run `autotune best {study.name}` to see them")
    return rank - 1


def _configuration(run: RunRecord, conf: Confirmation | None, baseline: RunRecord | None,
                   catalog: Any) -> dict[str, Any]:
    """The keys that say what to set, and what was measured, for one configuration."""
    return {"trial": run.trial_number, **_to_set(run.flags, catalog),
            "measured": _measured(run, baseline, conf)}


def _to_set(flags: Mapping[str, Any], catalog: Any) -> dict[str, Any]:
    """What to set for `flags`: the flags, those that differ from XLA's defaults, the
    variables, the XLA_FLAGS string and the per-compile options with what they need."""
    options, environment_only = split_per_compile(flags, catalog)
    return {
        "flags": dict(flags),
        "changed_from_defaults": changed_flags(flags, catalog),
        # flags outside autotune's catalog (`autotune.flags.open_flags`): no documented
        # default, so "changed" above holds each of them as set
        "not_in_catalog": sorted(name for name in flags if not catalog.get(name).cataloged),
        "env": compose_env(flags, {}, catalog),
        "xla_flags": xla_flags_string(flags, catalog),
        "jax": {"compiler_options": options,
                "env": compose_env(environment_only, {}, catalog)},
    }


def _minimal(run: RunRecord, conf: Confirmation | None, baseline: RunRecord | None,
             catalog: Any, state: Shrink) -> dict[str, Any]:
    """The recommended configuration shrunk to the flags that matter (`results.shrink`):
    `flags` is the minimal set, `full_flags` what was confirmed, `dropped` and `kept`
    each flag with why. When the minimal set is another program than the confirmed one,
    the figures are its own check against XLA's defaults."""
    body = _configuration(replace(run, flags=state.minimal if state.done else run.flags),
                          conf, baseline, catalog)
    if state.done and state.check is not None:
        body["measured"].update(_estimate_claim(state.check, body["measured"]))
    return {
        **body,
        "full_flags": dict(run.flags),
        "dropped": [{"flag": r.flag, "value": r.value, "why": r.reason()}
                    for r in state.removals if r.dropped],
        "kept": [{"flag": r.flag, "value": r.value, "why": r.reason()}
                 for r in state.removals if not r.dropped],
        "shrink_note": state.note if state.done else (
            "not shrunk yet: run the study again (without --no-shrink) to find the flags "
            "that matter"),
    }


def _estimate_claim(estimate: RatioEstimate, measured: dict[str, Any]) -> dict[str, Any]:
    low, high = estimate.speedup_interval
    return {"speedup": estimate.speedup, "speedup_interval": [low, high],
            "confidence": estimate.confidence, "confirmed": True,
            "confirmation_runs": estimate.n_processes,
            "verdict": "faster", "median_step_time_s": None,
            "fingerprint": None, "same_program_as_baseline": False,
            "search_speedup": measured["search_speedup"]}


def _defaults(baseline: RunRecord) -> dict[str, Any]:
    """The keys of a document that recommends XLA's defaults: nothing to set."""
    m = baseline.outcome.measurement
    assert m is not None
    return {
        "trial": None, "flags": {}, "changed_from_defaults": {}, "not_in_catalog": [],
        "env": {}, "xla_flags": "",
        "jax": {"compiler_options": {}, "env": {}},
        "measured": {
            "verdict": "no measurable gain", "speedup": 1.0, "speedup_interval": None,
            "confidence": None, "confirmed": False, "confirmation_runs": 0,
            "median_step_time_s": m.median_s, "baseline_median_step_time_s": m.median_s,
            "search_speedup": None, "mode": m.mode.value, "steps": len(m.step_times_s),
            "compile_time_s": m.compile_time_s, "peak_memory_bytes": m.peak_memory_bytes,
            "memory_source": m.memory_source, "same_program_as_baseline": True,
            "fingerprint": m.baseline_fingerprint or m.fingerprint,
        },
    }


def _candidates(runs: list[RunRecord], catalog: Any, study: StudyRecord,
                limit: int, order: Order) -> list[dict[str, Any]]:
    """The first `limit` rows of `best --format json` (the baseline row left out)."""
    rows = best_rows(runs, catalog, limit=limit, memory_budget=study.memory_budget_bytes,
                     objectives=study.objectives, order=order)
    return [best_row_json(row) for row in rows if row.rank is not None]


class ExportFormat(StrEnum):
    """The forms one export document is written in.

    `yaml` and `json` are the whole document; `env` is the variables to set,
    as lines a POSIX shell can `source`; `jax` is the configuration for
    `jax.jit(f).lower(...).compile(compiler_options=...)`, as JSON, with the
    variables the flags that compile options cannot carry need.
    """

    YAML = "yaml"
    JSON = "json"
    ENV = "env"
    JAX = "jax"


def render_export(document: dict[str, Any], fmt: ExportFormat = ExportFormat.YAML) -> str:
    """The export document as text in `fmt` (see `ExportFormat`)."""
    if fmt is ExportFormat.JSON:
        return json.dumps(document, indent=1) + "\n"
    if fmt is ExportFormat.ENV:
        return render_env(document)
    if fmt is ExportFormat.JAX:
        return json.dumps(_jax_view(document), indent=1) + "\n"
    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False,
                          allow_unicode=True)


def render_env(document: dict[str, Any]) -> str:
    """The document's variables as `export NAME='value'` lines for `.`/`source`.

    Every value is quoted with `shlex.quote`, so no value can run a command or
    expand a variable; comment lines say what the file is. Sourcing it sets
    the variables exactly (a user's own XLA_FLAGS is replaced: `autotune apply`
    merges instead). XLA's defaults give comments only.
    """
    lines = [f"# autotune export of study {_comment(document['study'])}: "
             + (f"trial {document['trial']}" if document["trial"] is not None
                else "XLA's defaults, nothing to set"),
             f"# recommended: {'yes' if document['recommended'] else 'no'}: "
             f"{_comment(document['reason'])}",
             "# sets these variables exactly; `autotune apply FILE -- CMD` merges with your own"]
    lines += shell_exports(document["env"])
    return "\n".join(lines) + "\n"


def _comment(text: object) -> str:
    """`text` on one comment line: control characters written as escapes."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in str(text))


def _jax_view(document: dict[str, Any]) -> dict[str, Any]:
    """What `--format jax` writes: the options for one compile, the rest apart."""
    jax = document["jax"]
    return {"study": document["study"], "trial": document["trial"],
            "recommended": document["recommended"], "reason": document["reason"],
            "compiler_options": jax["compiler_options"],
            "environment": jax["env"],
            "usage": "jax.jit(f).lower(*args).compile(compiler_options=compiler_options); "
                     "set `environment` before JAX starts (those flags cannot be given "
                     "per compilation)"}


def write_export(document: dict[str, Any], path: Path,
                 fmt: ExportFormat = ExportFormat.YAML) -> None:
    """Write the export document; raises ExportError when the file cannot be written."""
    text = render_export(document, fmt)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ExportError(f"cannot write {path}: {exc.strerror}; choose another -o path") from exc
