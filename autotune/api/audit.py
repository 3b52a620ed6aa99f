"""`autotune audit`: does each flag of a set you carry still help, on this XLA and workload?

Teams carry flag lists copied from guides across JAX upgrades. An audit answers,
for one workload, flag by flag, with the study's own machinery:

1. **Lint** (`autotune.flags.lint`, against the installed XLA): a flag it does not
   know, an obsolete one, one on the wrong channel or with a value it refuses is
   reported and left out (a job with it aborts at start, or it is not XLA's).
2. **The whole set against XLA's defaults**: a study whose space is exactly the
   set (one configuration, `space_yaml`): the baseline, the set in one paired
   process, then the study's confirmation rules (fresh processes interleaved with
   the baseline, sequential until the interval decides).
3. **Ablation** (`autotune.study.shrink.shrink_trial`, recommended or not):
   compile without each flag (same program: no effect on the compiled program),
   then time without each flag left against the set in one process, over fresh
   processes (`MEASURE_REPEATS`).

`audit_report` reads the verdicts from the stored runs (re-running the same
command resumes and measures nothing twice): each flag unknown, obsolete,
refused, at XLA's default, no effect on the compiled program, measurably helps
(removing it measurably slows the set), measurably hurts (removing it measurably
speeds the set up), or no measurable effect; and the minimal set, exported as
`autotune export` would (the recommendation: what is confirmed faster than XLA's
defaults, shrunk to the flags that matter, else XLA's defaults).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

from autotune.flags.catalog import Catalog, Channel, load_catalog
from autotune.flags.lint import Finding, FindingKind, FlagUse, lint, parse_uses, probe_extra
from autotune.flags.lint import typed_value as catalog_typed
from autotune.flags.probe import ProbeReport, probe
from autotune.ground.errors import UsageError
from autotune.ground.records import FlagValue, Role, RunRecord
from autotune.ground.resources import cache_root

__all__ = ["AuditPlan", "AuditReport", "FlagAudit", "Verdict", "audit_report", "measure_audit",
           "plan_audit"]


class Verdict(StrEnum):
    """What an audit says of one flag."""

    UNKNOWN = "unknown to this XLA"
    OBSOLETE = "obsolete"
    REFUSED = "refused"
    CANNOT_CHECK = "cannot be checked here"
    AT_DEFAULT = "XLA's default"
    NO_PROGRAM_CHANGE = "no effect on the compiled program"
    HELPS = "measurably helps"
    HURTS = "measurably hurts"
    NO_MEASURABLE_EFFECT = "no measurable effect"
    NOT_MEASURED = "not measured"


#: Lint findings that keep a flag out of the measured set, and the verdict they give.
_EXCLUDING = {FindingKind.UNKNOWN: Verdict.UNKNOWN, FindingKind.OBSOLETE: Verdict.OBSOLETE,
              FindingKind.WRONG_CHANNEL: Verdict.REFUSED, FindingKind.BAD_VALUE: Verdict.REFUSED}


@dataclass(frozen=True)
class FlagAudit:
    """One flag's verdict, with the evidence in words and, where timed, the paired ratio
    of the set without it over the set with it (above 1: slower without it)."""

    flag: str
    value: str | None
    verdict: Verdict
    evidence: str
    ratio: float | None = None
    interval: tuple[float, float] | None = None

    def to_json(self) -> dict[str, Any]:
        """`autotune audit --format json`'s entry of this flag (stable keys)."""
        return {"flag": self.flag, "value": self.value, "verdict": self.verdict.value,
                "evidence": self.evidence, "ratio_without": self.ratio,
                "interval_without": list(self.interval) if self.interval else None}


@dataclass(frozen=True)
class AuditPlan:
    """What `plan_audit` found before measuring: the lint's verdicts of the flags left
    out, the typed set to measure, and the study that measures it (None when nothing is
    left to measure)."""

    excluded: tuple[FlagAudit, ...]
    measured: dict[str, FlagValue]
    texts: dict[str, str | None]
    notes: dict[str, list[str]]
    jaxlib: str
    study: str | None
    planned: Any = None


@dataclass(frozen=True)
class AuditReport:
    """Every flag's verdict (in the order given), the whole set against XLA's defaults
    (`whole_set`: the export's `measured` keys of the set, None when nothing ran), and the
    minimal set's export document (None when nothing ran)."""

    study: str | None
    jaxlib: str
    flags: tuple[FlagAudit, ...]
    whole_set: dict[str, Any] | None = None
    export: dict[str, Any] | None = None
    note: str | None = None
    notes: dict[str, list[str]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """`autotune audit --format json` (stable keys)."""
        return {"study": self.study, "jaxlib": self.jaxlib,
                "flags": [f.to_json() for f in self.flags], "whole_set": self.whole_set,
                "minimal_set": None if self.export is None else self.export["flags"],
                "recommended": None if self.export is None else self.export["recommended"],
                "note": self.note, "lint_notes": self.notes}


def plan_audit(xla_flags: str, libtpu_args: str = "", *, name: str | None = None,
               devices: int = 8, **study: Any) -> AuditPlan:
    """Lint the set against the installed XLA and plan the study that measures what is
    left (`study`: `StudyOptions` fields such as benchmark, script, command, preset,
    steps; the audit sets its own space, sampler, trials and phases).

    Raises:
        UsageError: no flag given, a flag string that does not parse, or a bad option.
        ProbeError: jax cannot start to answer.
    """
    from autotune.api.plan import plan_study

    uses = _last_of_each(parse_uses(xla_flags, libtpu_args))
    if not uses:
        raise UsageError("no flags to audit: give --flags \"--xla_...=...\" or --from-env "
                         "with XLA_FLAGS or LIBTPU_INIT_ARGS set")
    catalog = load_catalog()
    report = probe(catalog, extra=probe_extra(uses, catalog), devices=devices)
    findings = lint(uses, catalog, report)
    excluded, measured, notes = _sort(uses, findings, catalog, report)
    texts = {u.name: u.value for u in uses}
    if not measured:
        return AuditPlan(tuple(excluded), {}, texts, notes, report.jaxlib_version, None)
    workload = study.get("script") or study.get("command") or study.get("benchmark",
                                                                          "transformer")
    digest = hashlib.sha256(json.dumps([sorted(measured.items(), key=str), workload],
                                       default=str).encode()).hexdigest()[:8]
    count = report.device_count or devices
    label = Path(str(workload)).stem if study.get("script") else (
        "command" if study.get("command") else str(workload))
    name = name or f"audit-{label}-{study.get('preset', 'small')}-{count}dev-{digest}"
    planned = plan_study(space=str(_write_space(measured, digest)), name=name, devices=devices,
                         sampler="grid", trials=2, fit=False, racing=False, shrink=False,
                         pgle=0, confirm=1, **study)
    return AuditPlan(tuple(excluded), measured, texts, notes, report.jaxlib_version, name,
                     planned)


def _last_of_each(uses: list[FlagUse]) -> list[FlagUse]:
    """One use per name, the last (as XLA reads a flag given twice), in first-seen order."""
    last = {u.name: u for u in uses}
    return [last[name] for name in dict.fromkeys(u.name for u in uses)]


def _sort(uses: list[FlagUse], findings: list[Finding], catalog: Catalog,
          report: ProbeReport) -> tuple[list[FlagAudit], dict[str, FlagValue],
                                        dict[str, list[str]]]:
    """The flags left out (with the lint's verdict), the typed set to measure, and the
    lint's other findings per flag (kept as notes)."""
    excluded: list[FlagAudit] = []
    measured: dict[str, FlagValue] = {}
    notes: dict[str, list[str]] = {}
    by_flag: dict[str, list[Finding]] = {}
    for finding in findings:
        by_flag.setdefault(finding.flag, []).append(finding)
    for use in uses:
        mine = by_flag.get(use.name, [])
        stop = next((f for f in mine if f.kind in _EXCLUDING and
                     (f.would_abort or f.kind is FindingKind.BAD_VALUE)), None)
        if stop is not None:
            excluded.append(FlagAudit(use.name, use.value, _EXCLUDING[stop.kind], stop.message))
        elif use.channel is Channel.LIBTPU and not report.libtpu:
            excluded.append(FlagAudit(use.name, use.value, Verdict.CANNOT_CHECK,
                                      "a libtpu flag: libtpu is not installed here"))
        else:
            measured[use.name] = _typed(use, catalog)
            notes.update({use.name: [f.message for f in mine]} if mine else {})
    return excluded, measured, notes


def _typed(use: FlagUse, catalog: Catalog) -> FlagValue:
    """The flag string's value as the catalog's type, or as the text reads for a flag
    outside the catalog (true/false, a whole number, a number, else the text)."""
    spec = catalog.get(use.name)
    if spec.cataloged:
        value: FlagValue = catalog_typed(spec, use.value)
        return value
    if use.value is None or use.value.lower() in ("true", "false"):
        return use.value is None or use.value.lower() == "true"
    for kind in (int, float):
        try:
            return kind(use.value)
        except ValueError:
            pass
    return use.value


def _write_space(measured: Mapping[str, FlagValue], digest: str) -> Path:
    """The space of exactly this set (one categorical param per flag, one choice each),
    written where the audit's study finds it again on a re-run."""
    root = cache_root()
    path = root / "audit" / f"audit-{digest}.yaml"
    document = {"schema_version": 1, "name": f"audit-{digest}", "backend": "any",
                "description": "a flag set under audit (autotune audit)",
                "params": {f"f{i}": {"type": "categorical", "flag": name, "choices": [value]}
                           for i, (name, value) in enumerate(measured.items())}}
    text = yaml.safe_dump(document, sort_keys=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def measure_audit(plan: AuditPlan, storage: str, *,
                  search: Callable[[Any, Any], None] | None = None,
                  watcher: Any = None) -> None:
    """Measure the set (steps 2 and 3 of the module): the study's search (`search(runner,
    plan)`, default `runner.run()`), its confirmation, then the ablation of the set
    whether or not it is recommended. Runs already stored count. `watcher` is told what
    `autotune.study.service.finish` does, and of each ablation run."""
    from autotune.api.store import open_store
    from autotune.study.options import AfterSearch
    from autotune.study.service import Watcher, finish, open_runner

    if plan.planned is None:
        return
    watch = watcher or Watcher()
    planned = plan.planned
    store = open_store(storage, must_exist=False, write=True)
    runner = open_runner(planned.plan, store, planned.report.environment)
    try:
        if search is None:
            runner.prepare()
            runner.run()
        else:
            search(runner, planned.plan)
        after = AfterSearch.of(planned.plan.options)
        finish(runner, after, watch)
        source = next((r for r in store.runs(planned.plan.name) if r.role is Role.SEARCH), None)
        if source is not None:
            watch.shrunk(runner.shrink_trial(source, after.measure_repeats,
                                             on_run=watch.shrinking))
    finally:
        runner.close()


def audit_report(plan: AuditPlan, storage: str) -> AuditReport:
    """The verdicts, read from the audit study's stored runs (see the module)."""
    from autotune.api.store import open_store
    from autotune.results.export import ExportError, export_document
    from autotune.results.shrink import shrink

    if plan.study is None:
        return AuditReport(None, plan.jaxlib, plan.excluded, note="nothing left to measure: "
                           "every flag was left out by the lint", notes=plan.notes)
    store = open_store(storage, must_exist=True)
    record, runs = store.get_study(plan.study), store.runs(plan.study)
    from autotune.results.study_results import study_catalog

    catalog = study_catalog(load_catalog(), record).covering_configs([plan.measured])
    source = next((r for r in runs if r.role is Role.SEARCH), None)
    if source is None:
        return AuditReport(plan.study, plan.jaxlib, plan.excluded, note="the set was not "
                           "measured: run the same command again", notes=plan.notes)
    try:
        whole = export_document(record, runs, catalog, trial=source.trial_number)["measured"]
    except ExportError:  # not ranked: the baseline's program, or the set failed
        whole = _unranked(source)
    state = shrink(runs, source, catalog)
    measured = [_verdict(name, plan.texts.get(name), state, source, runs, whole)
                for name in plan.measured]
    order = {name: i for i, name in enumerate(plan.texts)}
    flags = tuple(sorted([*plan.excluded, *measured], key=lambda f: order.get(f.flag, 0)))
    return AuditReport(plan.study, plan.jaxlib, flags, whole,
                       export_document(record, runs, catalog), state.note, plan.notes)


def _unranked(source: RunRecord) -> dict[str, Any] | None:
    """The whole set's figures where it is not ranked: it compiles to XLA's default
    program (nothing to time), or it failed (its kind and message)."""
    m = source.outcome.measurement
    if source.outcome.ok and m is not None and m.same_program_as is not None:
        return {"verdict": "the same program as XLA's defaults", "speedup": 1.0,
                "speedup_interval": None, "confirmation_runs": 0,
                "same_program_as_baseline": True}
    if not source.outcome.ok:
        return {"verdict": f"failed ({source.outcome.kind.value})", "speedup": None,
                "speedup_interval": None, "confirmation_runs": 0,
                "same_program_as_baseline": None, "message": source.outcome.message}
    return None


def _verdict(name: str, text: str | None, state: Any, source: RunRecord,
             runs: list[RunRecord], whole: dict[str, Any] | None) -> FlagAudit:
    """A measured flag's verdict from the ablation (`results.shrink`), or from the whole
    set where the set is this one flag."""
    from autotune.results.shrink import Effect

    removal = next((r for r in state.removals if r.flag == name), None)
    if removal is None:
        return _alone(name, text, state, source, runs, whole)
    if removal.effect is Effect.DEFAULT:
        return FlagAudit(name, text, Verdict.AT_DEFAULT, "setting it asks XLA for nothing "
                         "(the catalog's documented default)")
    if removal.effect is Effect.NO_PROGRAM_CHANGE:
        return FlagAudit(name, text, Verdict.NO_PROGRAM_CHANGE, "the set compiles to the same "
                         "program without it")
    est = removal.estimate
    if est is None:
        return FlagAudit(name, text, Verdict.NOT_MEASURED, str(removal.effect))
    words = f"×{est.ratio:.3f} [{est.low:.3f}, {est.high:.3f}] without it " \
            f"({est.n_processes} processes)"
    interval = (est.low, est.high)
    if removal.effect is Effect.SLOWER:
        return FlagAudit(name, text, Verdict.HELPS, f"removing it slows the set: {words}",
                         est.ratio, interval)
    if not est.includes_one and est.ratio < 1:
        return FlagAudit(name, text, Verdict.HURTS, f"removing it speeds the set up: {words}",
                         est.ratio, interval)
    return FlagAudit(name, text, Verdict.NO_MEASURABLE_EFFECT, words, est.ratio, interval)


def _alone(name: str, text: str | None, state: Any, source: RunRecord, runs: list[RunRecord],
           whole: dict[str, Any] | None) -> FlagAudit:
    """A flag the ablation did not time: the one left after every other was dropped. Its
    evidence is the check of it alone against XLA's defaults where the ablation made one,
    else the whole set's where every other flag left the program as it was; otherwise it
    is not measured (the ablation's note says why)."""
    from autotune.results.shrink import Effect, paired_estimate

    value = state.full.get(name)
    alone = [r for r in runs if r.role is Role.MINIMAL and r.trial_number ==
             source.trial_number and dict(r.flags) == {name: value}]
    est = paired_estimate(alone) if alone else None
    if est is not None:
        low, high = est.speedup_interval
        words = f"alone against XLA's defaults: ×{est.speedup:.3f} [{low:.3f}, {high:.3f}] " \
                f"({est.n_processes} processes)"
        return FlagAudit(name, text, _by_interval(est), words)
    # every other flag examined (those at XLA's default are not in `full`), and none of
    # them changed the program: the whole set compiles to this flag's program
    others = [r for r in state.removals if r.flag != name]
    at_default = sum(r.effect is Effect.DEFAULT for r in others)
    same_program = len(others) == len(state.full) - 1 + at_default and all(
        r.effect in (Effect.DEFAULT, Effect.NO_PROGRAM_CHANGE) for r in others)
    if not same_program or whole is None or not state.done:
        return FlagAudit(name, text, Verdict.NOT_MEASURED, state.note or "not ablated yet: "
                         "run the same command again")
    if whole.get("same_program_as_baseline"):
        return FlagAudit(name, text, Verdict.NO_PROGRAM_CHANGE, "the set compiles to XLA's "
                         "default program")
    verdict = str(whole.get("verdict"))
    interval = whole.get("speedup_interval")
    words = f"the set's program is this flag's alone; against XLA's defaults: {verdict}" + (
        f", ×{whole['speedup']:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "")
    kind = Verdict.HELPS if verdict == "faster" else (
        Verdict.HURTS if verdict.startswith("slower") else Verdict.NO_MEASURABLE_EFFECT)
    return FlagAudit(name, text, kind, words)


def _by_interval(est: Any) -> Verdict:
    """Helps (faster than XLA's defaults beyond doubt), hurts (slower), or neither."""
    if est.includes_one:
        return Verdict.NO_MEASURABLE_EFFECT
    return Verdict.HELPS if est.ratio < 1 else Verdict.HURTS
