"""The notes that qualify a study's best table, computed once for every renderer.

Each note is a plain sentence (no markup) with a stable `kind`, so the CLI
prints it and `--format json` or the dashboard can show the same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from autotune.ground.records import PLAN_PRIOR, PLAN_WARM, Role, RunRecord, StudyRecord
from autotune.results.evidence import BACKED_BY, incumbent, pooled
from autotune.results.fitted import change_text, fit_of, summary_text
from autotune.results.pgle import study_verdicts, verdict_text
from autotune.results.ranking import (
    EnvironmentGroup,
    environments,
    main_runs,
    measured_elsewhere,
    over_budget,
    within_budget,
)
from autotune.results.table import BestRow, measured_backend, outcome_counts


@dataclass(frozen=True)
class Note:
    """One sentence about a study's results; `kind` names what it is about."""

    kind: str
    text: str


def study_notes(record: StudyRecord, runs: Sequence[RunRecord],
                rows: Sequence[BestRow]) -> list[Note]:
    """The notes under `best`, in the order they are printed."""
    notes = [Note("outcomes", "runs by outcome: " + (", ".join(
        f"{k}: {v}" for k, v in sorted(outcome_counts(list(runs)).items())) or "none"))]
    notes += [n for n in (environments_note(record, runs),) if n is not None]
    if same := measured_elsewhere(list(runs)):
        notes.append(Note("same_program", f"{same} trials compiled to a program another trial "
                          "had timed: not timed again, each shown as that trial's row"))
    notes.append(Note("speedup", "speedup = baseline median step time / configuration's "
                      "median step time, both timed in one process, steps alternated, so the "
                      "process's own speed cancels; own step is the configuration's median in "
                      "its own process, which a busier or quieter host moves: compare "
                      "speedups, not own steps. Search: one paired process per trial, a "
                      "program's processes pooled (n) (baseline row: default vs default, the "
                      "noise floor). Confirmed: re-measured in fresh processes interleaved with "
                      "the baseline; an interval that holds 1.0 is no measurable gain."))
    notes.append(memory_note(runs, rows))
    notes += [n for n in (incumbent_note(record, runs), budget_note(record, runs),
                          noise_note(rows), backend_note(record, runs)) if n is not None]
    return notes + fit_notes(record) + warm_notes(record, runs) + pgle_notes(runs)


def warm_notes(record: StudyRecord, runs: Sequence[RunRecord] | None = None) -> list[Note]:
    """Where a warm start came from (kind `warm_start`): the earlier studies whose
    confirmed configurations the search began with, the most alike first, and those
    whose measured programs the sampler was given (`PLAN_PRIOR`). Given the study's
    `runs`, a queued configuration no search run measured (`--trials` ran out first) is
    named apart, not among those measured."""
    plan = record.plan or {}
    notes = []
    drawn = plan.get(PLAN_WARM) or []
    late: list[dict[str, Any]] = []
    if runs is not None and drawn:
        measured = _searched_keys(record, runs)
        late = [d for d in drawn if d.get("key") not in measured]
        drawn = [d for d in drawn if d.get("key") in measured]
    if confirmed := [d for d in drawn if d.get("confirmed", True)]:
        notes.append(Note("warm_start", f"warm start: the search began with the confirmed "
                          f"configurations of {_drawn(confirmed)}, each measured and confirmed "
                          "here like any other (--no-warm-start: from nothing)"))
    if leaders := [d for d in drawn if not d.get("confirmed", True)]:
        notes.append(Note("warm_start", f"warm start: the search then measured the leaders of "
                          f"{_drawn(leaders)}, faster there but not confirmed, each measured "
                          "and confirmed here like any other"))
    if late:
        notes.append(Note("warm_start", f"warm start: --trials ran out before {_drawn(late)} "
                          f"{'was' if len(late) == 1 else 'were'} measured"))
    if prior := plan.get(PLAN_PRIOR) or []:
        named = "; ".join(f"{d.get('programs')} of '{d.get('study')}' (likeness "
                          f"{d.get('likeness')} of 3, each counted {d.get('copies')}x)"
                          for d in prior)
        notes.append(Note("warm_start", f"warm start: the sampler was given the programs "
                          f"earlier studies measured as evidence: {named}; none counts "
                          "toward --trials or is recommended without being measured here"))
    return notes


def _searched_keys(record: StudyRecord, runs: Sequence[RunRecord]) -> set[str]:
    """The effective configurations (`config_key`) the study's search runs measured."""
    from autotune.flags.catalog import load_catalog
    from autotune.flags.compose import config_key, effective_config
    from autotune.results.study_results import study_catalog

    catalog = study_catalog(load_catalog(), record)
    return {config_key(effective_config(r.flags, catalog)) for r in runs
            if r.role is Role.SEARCH}


def _drawn(drawn: list[dict[str, Any]]) -> str:
    """The earlier studies' trials a warm start queued, with their likeness, in words."""
    return "; ".join(f"'{d.get('study')}' trial {d.get('trial')} (likeness "
                     f"{d.get('likeness')} of 3)" for d in drawn)


#: What each source of a peak-memory figure measures (`child.program.memory_figures`).
MEMORY_SOURCES = {
    "memory_stats": "the device allocator's peak, in a process of its own",
    "memory_analysis": "the compiled program's footprint",
}


def memory_note(runs: Sequence[RunRecord], rows: Sequence[BestRow]) -> Note:
    """Where the peak-memory figures come from (kind `memory_source`). Where rows differ
    from the baseline's source (a DIRECT configuration in a PAIRED study: seen on an
    H200, 148.5 MiB from the allocator beside the baseline's 19.3 MiB program), the
    table marks them with `*` and this says the two do not compare."""
    sources = sorted({r.outcome.measurement.memory_source for r in runs
                      if r.outcome.measurement is not None})
    text = f"peak memory from: {', '.join(sources) or '-'}"
    base = next((row.memory_source for row in rows if row.rank is None), None)
    marked = sorted({row.memory_source for row in rows if row.rank is not None
                     and row.peak_memory_bytes is not None and base is not None
                     and row.memory_source is not None and row.memory_source != base})
    if marked and base is not None:
        text += (f"; * marks {', '.join(marked)} ("
                 + "; ".join(MEMORY_SOURCES.get(s, s) for s in marked)
                 + f"), not comparable with the baseline's {base} "
                 f"({MEMORY_SOURCES.get(base, base)})")
    return Note("memory_source", text)


def pgle_notes(runs: Sequence[RunRecord]) -> list[Note]:
    """One sentence per configuration the PGLE phase measured (kind `pgle`): its speedup
    over the same flags without a profile, and whether the profile is kept."""
    return [Note("pgle", verdict_text(number, verdict))
            for number, verdict in study_verdicts(main_runs(runs))]


def fit_notes(record: StudyRecord) -> list[Note]:
    """What fitting the search space to the workload did (kind `space_fitted`): one
    sentence in all, then one per param dropped or clipped with the reason; none when
    the study has no fit (`--no-fit`, or made before fitting existed)."""
    fit = fit_of(record)
    if fit is None:
        return []
    return [Note("space_fitted", summary_text(fit)),
            *(Note("space_fitted", change_text(change)) for change in fit.changes)]


def environments_note(record: StudyRecord, runs: Sequence[RunRecord]) -> Note | None:
    """Said when the study was measured in several environments (kind `environments`):
    which one the recommendation, the export and the study-wide notes use, and how to
    see another alone."""
    groups = environments(runs)
    if len(groups) < 2:
        return None
    main = groups[0]
    return Note("environments", f"measured in {len(groups)} environments, each ranked against "
                f"its own baseline; the recommendation, export and notes use {main.key} "
                f"({main.timed} timed runs, the most); `autotune best {record.name} "
                "--environment KEY` shows one alone")


def environment_header(group: EnvironmentGroup) -> str:
    """One line naming an environment of `best`: its key, devices, backend, versions,
    runtime and driver where it has them, and its hosts."""
    facts = group.facts
    parts = [f"environment {group.key}"]
    if facts is not None:
        versions = (f"jax {facts.jax_version}" if facts.jax_version == facts.jaxlib_version
                    else f"jax {facts.jax_version}, jaxlib {facts.jaxlib_version}")
        parts += [f"{facts.device_count} × {facts.device_kind}", facts.backend, versions]
        parts += [text for text in (facts.runtime_version, facts.driver_version
                                    and f"driver {facts.driver_version}") if text]
    hosts = group.hosts
    if hosts:
        parts.append(f"host {hosts[0]}" if len(hosts) == 1 else
                     f"hosts {hosts[0]}, {hosts[1]}" if len(hosts) == 2 else
                     f"hosts {hosts[0]} and {len(hosts) - 1} more")
    return parts[0] + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")


def incumbent_note(record: StudyRecord, runs: Sequence[RunRecord]) -> Note | None:
    """The search's incumbent by evidence pooled per program (`results.evidence`), with
    its interval over every process that timed it (the main environment's, `main_runs`);
    None when nothing was timed."""
    found = pooled(main_runs(runs), lambda r: within_budget(r, record.memory_budget_bytes))
    if not found:
        return None
    best = incumbent(found)
    if best is None:
        return Note("incumbent", f"search incumbent: XLA's defaults (no program backed by "
                    f"{BACKED_BY} processes measured faster than them)")
    estimate = best.estimate()
    interval = ""
    if estimate is not None:
        low, high = estimate.speedup_interval
        interval = f" [{low:.3f}, {high:.3f}]"
    return Note("incumbent", f"search incumbent: trial {best.first.trial_number}'s program, "
                f"×{1 / best.ratio:.3f}{interval} pooled over {best.n} processes")


def budget_note(record: StudyRecord, runs: Sequence[RunRecord]) -> Note | None:
    """How many configurations the memory budget left out (None without a budget)."""
    budget = record.memory_budget_bytes
    if budget is None:
        return None
    over = over_budget(list(runs), budget)
    return Note("memory_budget", f"memory budget {size_text(budget)}: {over} configuration"
                f"{'' if over == 1 else 's'} above it are infeasible and not ranked")


def noise_note(rows: Sequence[BestRow]) -> Note | None:
    """Said when the unconfirmed best speedup is not outside the baseline's own A/A spread."""
    floor = next((r.speedup for r in rows if r.rank is None and r.speedup), None)
    best = next((r.speedup for r in rows if r.rank == 1 and r.speedup and not r.confirmed), None)
    if floor is None or best is None or abs(best - 1) > abs(floor - 1):
        return None
    return Note("noise_floor", f"note: the best speedup ×{best:.3f} is within this "
                f"study's noise floor (baseline vs itself: ×{floor:.3f}); no measurable "
                "gain on this workload so far.")


def backend_note(record: StudyRecord, runs: Sequence[RunRecord]) -> Note | None:
    """Said when the space's flags are for another backend than the trials ran on."""
    ran_on = measured_backend(list(runs))
    if record.space_backend in (None, "any") or ran_on in (None, record.space_backend):
        return None
    return Note("backend", f"note: space '{record.space}' holds {record.space_backend} flags "
                f"but the trials ran on {ran_on}: the flags had no effect to measure; "
                "differences are noise.")


def size_text(n: int | None) -> str:
    """Bytes in binary units with one decimal, as tables show them (`-` for None)."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.1f} {unit}" if unit != "B" else f"{int(size)} B"
        size /= 1024
    return f"{n} B"
