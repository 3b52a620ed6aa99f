"""The pages of the dashboard and the report, as plain JSON-ready mappings.

Every figure a page shows is computed here, from the records storage hands
out, with the functions `best`, `export` and `importance` use (ranking,
confirmation, shrinking, notes), so a page can never disagree with the
command line: the `best` key of `study_page` *is* `best --format json`.
Renderers (`autotune.dashboard`, `autotune.dashboard.report`) only lay these out.

Keys are stable (the dashboard's `/api/...` routes return them as JSON).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, fields
from datetime import datetime
from typing import Any

from autotune.flags.compose import config_key, render_value, xla_flags_string
from autotune.ground.records import (
    ClaimRecord,
    Environment,
    Measurement,
    OutcomeKind,
    Role,
    RunRecord,
    StudyRecord,
    WorkerRecord,
)
from autotune.results.confirmation import confirmation
from autotune.results.evidence import Pool, answer_speedup
from autotune.results.fitted import fit_json
from autotune.results.importance import ablation_json
from autotune.results.notes import study_notes
from autotune.results.ranking import (
    RANKED_ROLES,
    Order,
    Recommendation,
    main_runs,
    ordered,
    pareto_front,
    peak_memory,
    programs,
    ranked,
    recommend,
    verdict_text,
    within_budget,
)
from autotune.results.shrink import Effect, Shrink, shrink
from autotune.results.study_results import StudyResults, study_catalog
from autotune.results.table import changed_flags, study_state, trial_rows

#: How many messages of one failure kind a page lists (the count says how many there were).
MESSAGES_PER_KIND = 5

#: How many trials of one program a best row names (the count says how many there are).
GROUP_SHOWN = 12

#: How many runs one page of a study's runs lists (`runs_page`).
RUNS_PER_PAGE = 100

#: Outcomes a rule stopped on purpose: counted apart from the failed runs.
STOPPED_KINDS = frozenset({OutcomeKind.PRUNED, OutcomeKind.OVER_BUDGET})

#: Roles a search's progress is read from (one figure per launched configuration).
SEARCH_ROLES = frozenset({Role.BASELINE, Role.RECOMMENDED, Role.SEARCH})

#: Roles the best-so-far chart follows: every process that is evidence of a program.
PROGRESS_ROLES = SEARCH_ROLES | {Role.RACE, Role.CONFIRM}


def environment_text(env: Environment | None) -> str:
    """One line naming where runs were measured, e.g. `host: cpu x8, jax 0.10.2`."""
    if env is None:
        return "unknown"
    return (f"{env.host}: {env.device_kind or env.backend} x{env.device_count}, "
            f"jax {env.jax_version}")


def environments(runs: Iterable[RunRecord]) -> list[str]:
    """Where the study's runs were measured, one `environment_text` each, sorted."""
    return sorted({environment_text(r.environment) for r in runs if r.environment})


def study_header(record: StudyRecord) -> dict[str, Any]:
    """The settings of a study a page names it by."""
    return {"name": record.name, "space": record.space, "benchmark": record.benchmark,
            "preset": record.preset, "devices": record.devices, "mode": record.mode.value,
            "objectives": list(record.objectives),
            "memory_budget_bytes": record.memory_budget_bytes,
            "space_backend": record.space_backend, "created": record.created_at.isoformat()}


def last_activity(runs: Sequence[RunRecord], workers: Iterable[WorkerRecord],
                  record: StudyRecord) -> datetime:
    """The latest of the study's creation, its runs and its workers' heartbeats."""
    return max([record.created_at, *(r.created_at for r in runs),
                *(w.last_seen for w in workers)])


def recommendation_view(rec: Recommendation, state: Shrink | None,
                        catalog: Any) -> dict[str, Any]:
    """What to apply, in one line: the minimal winning configuration or XLA's defaults.

    `rec` is `ranking.recommend`'s answer and `state` its shrinking (None when
    nothing is recommended). Keys: `recommended`, `trial`, `reason`, `flags`
    (the minimal set once shrunk, else the confirmed set; {} for the
    defaults), `xla_flags` (those flags as the `XLA_FLAGS` line; "" for the
    defaults), `speedup` and `interval` (the figure of those very flags: the minimal
    set's own check against XLA's defaults where shrinking made another program of
    it, else the confirmed figure; None for the defaults), `text` (the one line).
    """
    if rec.run is None:
        return {"recommended": False, "trial": None, "reason": rec.reason, "flags": {},
                "xla_flags": "", "speedup": None, "interval": None,
                "text": f"defaults: nothing measurably faster ({rec.reason})"}
    flags = state.minimal if state is not None and state.done \
        else changed_flags(rec.run.flags, catalog)
    estimate = rec.confirmation.estimate if rec.confirmation is not None else None
    text = f"trial {rec.run.trial_number}: {verdict_text(rec.confirmation)}"
    if state is not None and state.done and state.check is not None:
        estimate = state.check  # the minimal set is another program: its own figure
        low, high = estimate.speedup_interval
        text = (f"trial {rec.run.trial_number}, shrunk to {len(flags)} of {len(state.full)} "
                f"flags: ×{estimate.speedup:.3f} [{low:.3f}, {high:.3f}] faster")
    return {"recommended": True, "trial": rec.run.trial_number, "reason": rec.reason,
            "flags": dict(flags), "xla_flags": xla_flags_string(dict(flags), catalog),
            "speedup": estimate.speedup if estimate else None,
            "interval": list(estimate.speedup_interval) if estimate else None,
            "text": text}


def _recommended(record: StudyRecord, runs: list[RunRecord], catalog: Any,
                 order: Order | None = None) -> tuple[Recommendation, Shrink | None]:
    """The recommendation of a study and its shrinking (None when it is XLA's defaults);
    `order` is `ranking.ordered` of the study when the caller has it."""
    rec = recommend(runs, record.objectives, record.memory_budget_bytes, order=order)
    return rec, (shrink(runs, rec.run, catalog) if rec.run is not None else None)


def program_groups(runs: Sequence[RunRecord], trials: Iterable[int | None],
                   most: int = GROUP_SHOWN) -> dict[str, dict[str, Any]]:
    """For each of `trials`: the other trials whose configuration compiled to its program.

    Keys are the trial numbers as text; each value holds `count` (how many
    other trials) and `trials` (the first `most` of them, in trial order).
    Trials without a known fingerprint are left out.
    """
    by_print: dict[str, list[int]] = defaultdict(list)
    print_of: dict[int, str] = {}
    for run in runs:
        m = run.outcome.measurement
        if run.role in SEARCH_ROLES and m is not None and m.fingerprint \
                and run.trial_number is not None:
            by_print[m.fingerprint].append(run.trial_number)
            print_of.setdefault(run.trial_number, m.fingerprint)
    groups = {}
    for number in trials:
        if number is not None and number in print_of:
            others = sorted(set(by_print[print_of[number]]) - {number})
            groups[str(number)] = {"count": len(others), "trials": others[:most]}
    return groups


def best_so_far(runs: Sequence[RunRecord], memory_budget: int | None = None
                ) -> list[dict[str, Any]]:
    """The study's incumbent after each process of the search, racing and confirmation.

    One point per baseline, recommended, search, race or confirmation run in the
    order they ran: `n` (1-based), `trial`, `role`, `speedup` (that process's own
    figure; None when it failed or timed nothing of its own), and the incumbent
    then (`results.evidence.incumbent`: the best pooled program backed by enough
    processes, within the memory budget): `best` (its pooled speedup; 1.0 for
    XLA's defaults once the baseline ran, None before), `best_trial` (None for
    the defaults) and `best_n` (its processes). So the line is what the study
    would have answered at that point, never one lucky process.
    """
    steps = sorted((r for r in runs if r.role in PROGRESS_ROLES), key=lambda r: r.id)
    pool = Pool(steps, lambda r: within_budget(r, memory_budget))
    points, baseline = [], False
    for n, run in enumerate(steps, start=1):
        pool.add(run)
        baseline = baseline or (run.role is Role.BASELINE and run.outcome.ok)
        leader = pool.incumbent()
        speedup = run.speedup if run.outcome.ok else None
        points.append({
            "n": n, "trial": run.trial_number, "role": run.role.value, "speedup": speedup,
            "best": answer_speedup(leader, baseline),
            "best_trial": leader.first.trial_number if leader else None,
            "best_n": leader.n if leader else None})
    return points


#: The most flags the slice plots show (those whose values moved the speedup most first).
SLICES_MOST = 12


def slices(runs: Sequence[RunRecord], catalog: Any) -> list[dict[str, Any]]:
    """Each flag's slice of the search: the speedups of the timed search processes against
    the value they gave the flag (`default` where they left XLA's), as Optuna's slice
    plot shows a param, one point per program and value. One entry per flag that took
    at least two values: `flag`, `points` ({value, speedup (the median of that
    program's processes that gave the flag that value), trial (the first of them)}, in
    the order of those first runs); the flags whose median speedup differs most between
    their values (over every process) first, at most `SLICES_MOST`. A run whose program
    is unknown is a program of its own."""
    by_flag: dict[str, dict[tuple[str, str], list[tuple[float, int | None]]]] = \
        defaultdict(lambda: defaultdict(list))
    timed = [r for r in runs if r.role in (Role.SEARCH, Role.RECOMMENDED) and r.outcome.ok
             and r.speedup is not None]
    changed = [changed_flags(r.flags, catalog) for r in timed]
    flags = {f for c in changed for f in c}
    for run, its in zip(timed, changed, strict=True):
        m = run.outcome.measurement
        program = m.fingerprint if m is not None and m.fingerprint else f"run {run.id}"
        for flag in flags:
            value = render_value(its[flag]) if flag in its else "default"
            by_flag[flag][value, program].append((float(run.speedup or 0.0), run.trial_number))
    shown = []
    for flag, groups in by_flag.items():
        medians = [statistics.median(s for (v, _), got in groups.items() if v == value
                                     for s, _ in got)
                   for value in {v for v, _ in groups}]
        if len(medians) > 1:
            shown.append((max(medians) - min(medians), flag, groups))
    shown.sort(key=lambda e: (-e[0], e[1]))
    return [{"flag": flag, "points": [
        {"value": value, "speedup": statistics.median(s for s, _ in got), "trial": got[0][1]}
        for (value, _), got in groups.items()]}
            for _, flag, groups in shown[:SLICES_MOST]]


#: The most claims the timeline draws (the latest): a chart of 10,000 bars says no more.
TIMELINE_MOST = 2000


def timeline(runs: Sequence[RunRecord], claims: Sequence[ClaimRecord]) -> list[dict[str, Any]]:
    """Who measured what, when: one bar per claim that measured a run (the latest
    `TIMELINE_MOST`), oldest first. Keys: `worker` (`host:pid` of the process that held
    the claim), `role` (the phase: baseline, search, race, confirm, shrink...), `trial`,
    `start` (when it was claimed) and `end` (when its run was stored), ISO 8601, and
    `outcome` (the run's kind). A claim still running has no bar."""
    stored = {run.id: run for run in runs}
    bars: list[dict[str, Any]] = []
    for claim in claims:
        run = stored.get(claim.run_id) if claim.run_id is not None else None
        if run is None:
            continue
        bars.append({"worker": f"{claim.owner_host}:{claim.owner_pid}",
                     "role": claim.role.value, "trial": claim.trial_number,
                     "start": claim.claimed_at.isoformat(), "end": run.created_at.isoformat(),
                     "outcome": run.outcome.kind.value})
    return sorted(bars, key=lambda b: str(b["start"]))[-TIMELINE_MOST:]


def scatter(record: StudyRecord, runs: list[RunRecord]) -> dict[str, Any]:
    """Step time against peak memory: one point per compiled program and the baseline.

    `points`: {trial (the run that first timed the program), median_step_s (that
    run's own-process median), peak_memory_bytes, speedup (the program's pooled
    figure over its `n` processes, `results.evidence`; the baseline's own A/A
    figure), n, pareto}; `pareto` marks the time/memory front (two-objective
    studies only; the front is computed by `ranking.pareto_front`).
    """
    budget = record.memory_budget_bytes
    base = [r for r in runs if r.role is Role.BASELINE and r.outcome.ok][:1]
    front = {r.id for r in pareto_front(runs, budget)} if record.multi_objective else set()
    pooled = [(p.first, 1 / p.ratio, p.n) for p in programs(runs, budget)]
    points = []
    for run, speedup, n in [(r, r.speedup, 1) for r in base] + pooled:
        m = run.outcome.measurement
        points.append({"trial": run.trial_number, "median_step_s": m.median_s if m else None,
                       "peak_memory_bytes": peak_memory(run), "speedup": speedup, "n": n,
                       "pareto": run.id in front})
    return {"points": points, "two_objectives": record.multi_objective}


def contributions(rec: Recommendation, state: Shrink | None) -> dict[str, Any]:
    """The paired ablation of the recommendation (as `importance --format json`'s
    `ablation`), its flags split into those that changed the compiled program
    (`measured`) and those that did not (`no_program_change`)."""
    doc = ablation_json(state, rec.reason)
    same = [f for f in doc["flags"] if f["effect"] == str(Effect.NO_PROGRAM_CHANGE)]
    return {**doc, "measured": [f for f in doc["flags"] if f not in same],
            "no_program_change": same}


def failures(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Failed runs grouped by kind, most frequent first: `kind`, `count` and up to
    `MESSAGES_PER_KIND` distinct `messages` ({trial, role, message})."""
    groups: dict[str, list[RunRecord]] = defaultdict(list)
    for run in runs:
        if not run.outcome.ok:
            groups[run.outcome.kind.value].append(run)
    out = []
    for kind, members in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        seen: dict[str, dict[str, Any]] = {}
        for run in members:
            if len(seen) < MESSAGES_PER_KIND and run.outcome.message not in seen:
                seen[run.outcome.message] = {"trial": run.trial_number, "role": run.role.value,
                                             "message": run.outcome.message}
        out.append({"kind": kind, "count": len(members), "messages": list(seen.values())})
    return out


def progress(runs: Sequence[RunRecord], workers: Sequence[WorkerRecord]) -> dict[str, Any]:
    """Per-environment and per-worker progress.

    `environments`: {env_key, where, runs, ok, failed, baseline} per
    environment key; `workers`: {owner (host:pid), done, running, interrupted,
    last_seen, live} per claiming process (`Store.workers`), `live` when one
    of its running claims has a current heartbeat.
    """
    envs: dict[str, dict[str, Any]] = {}
    for run in runs:
        key = run.env_key or (run.environment.host if run.environment else "unknown")
        row = envs.get(key)
        if row is None:
            row = envs[key] = {"env_key": key, "where": environment_text(run.environment),
                               "runs": 0, "ok": 0, "failed": 0, "baseline": False}
        row["runs"] += 1
        row["ok" if run.outcome.ok else "failed"] += 1
        row["baseline"] |= run.role is Role.BASELINE and run.outcome.ok
    return {"environments": list(envs.values()),
            "workers": [{"owner": w.owner, "done": w.done, "running": w.running,
                         "interrupted": w.interrupted, "last_seen": w.last_seen.isoformat(),
                         "live": w.live} for w in workers]}


def study_summary(record: StudyRecord, runs: list[RunRecord], workers: Sequence[WorkerRecord],
                  order: Order | None = None) -> dict[str, Any]:
    """One line of the studies page.

    Keys: the `study_header` keys, `environments` (where it was measured),
    `trials` (distinct trials measured), `failed` (runs that failed), `stopped`
    (runs a rule stopped on purpose: pruned as clearly slower, or over the
    memory budget; `STOPPED_KINDS`), `runs`,
    `best_confirmed` ({trial, speedup, interval, verdict} of the best
    confirmed configuration, None when nothing was confirmed),
    `recommended`, `last_activity` (ISO 8601) and `running` (a claim with a
    current heartbeat) and `state` (`table.study_state`: queued, searching,
    confirming, done or failed). `order` is `ranking.ordered` of the study when the
    caller has it.
    """
    if order is None:
        order = ordered(runs, record.objectives, record.memory_budget_bytes)
    best = next(({"trial": run.trial_number, "speedup": c.estimate.speedup,
                  "interval": list(c.estimate.speedup_interval), "verdict": c.verdict()}
                 for run, c in order if c is not None and c.estimate is not None), None)
    return {**study_header(record), "environments": environments(runs),
            "trials": len({r.trial_number for r in runs if r.trial_number is not None}),
            "failed": sum(not r.outcome.ok and r.outcome.kind not in STOPPED_KINDS
                          for r in runs),
            "stopped": sum(r.outcome.kind in STOPPED_KINDS for r in runs), "runs": len(runs),
            "best_confirmed": best,
            "recommended": recommend(runs, record.objectives, record.memory_budget_bytes,
                                     order=order).recommended,
            "last_activity": last_activity(runs, workers, record).isoformat(),
            "running": any(w.live for w in workers),
            "state": study_state(record, runs, any(w.live for w in workers))}


def study_page(record: StudyRecord, runs: list[RunRecord], catalog: Any,
               workers: Sequence[WorkerRecord] = (), limit: int = 10,
               claims: Sequence[ClaimRecord] = ()) -> dict[str, Any]:
    """Everything the study page shows.

    Keys: `study` (header), `summary` (as on the studies page), `recommendation`,
    `best` (exactly `best --format json` for the same `limit`), `programs`
    (for each row's trial, the other trials of its program: see
    `program_groups`), `notes` ({kind, text}), `best_so_far`,
    `scatter`, `timeline` (who measured what, when, from `claims`), `slices` (each
    flag's values against the speedups they gave), `contributions`,
    `failures`, `progress`, `space_fit` (what fitting the
    search space to the workload dropped or clipped and why, `results.fitted.fit_json`;
    None when the study has no fit). The charts show the main environment's runs
    (`ranking.main_runs`): step times and ratios of two environments do not compare.
    """
    catalog = study_catalog(catalog, record)
    results = StudyResults.of(record, runs, catalog)
    rows = results.rows(limit)
    rec, state = _recommended(record, runs, catalog, results.order)
    return {
        "study": study_header(record),
        "summary": study_summary(record, runs, workers, results.order),
        "recommendation": recommendation_view(rec, state, catalog),
        "best": results.best_json(rows),
        "programs": program_groups(runs, [row.run.trial_number for row in rows]),
        "notes": [{"kind": n.kind, "text": n.text} for n in study_notes(record, runs, rows)],
        # one environment's ratios: comparable
        "best_so_far": best_so_far(main_runs(runs), record.memory_budget_bytes),
        "scatter": scatter(record, main_runs(runs)),
        "timeline": timeline(runs, claims),
        "slices": slices(main_runs(runs), catalog),
        "contributions": contributions(rec, state),
        "failures": failures(runs),
        "progress": progress(runs, workers),
        "space_fit": fit_json(record),
    }


def _run_view(run: RunRecord) -> dict[str, Any]:
    """One run of a trial with every figure it holds: the run's own keys, then every field
    of its `Measurement` (all None, steps empty, when it measured nothing) and
    `median_step_s`."""
    o, m = run.outcome, run.outcome.measurement
    measured = asdict(m) if m is not None else {
        **dict.fromkeys(f.name for f in fields(Measurement)),
        "step_times_s": (), "baseline_step_times_s": (), "hlo_stats": {}}
    return {
        "run": run.id, "role": run.role.value, "outcome": o.kind.value, "message": o.message,
        "created": run.created_at.isoformat(), "speedup": run.speedup,
        "duration_s": o.duration_s, "exit_code": o.exit_code, "signal": o.signal,
        "where": environment_text(run.environment), "stdout_tail": o.stdout_tail,
        "stderr_tail": o.stderr_tail, **measured, "median_step_s": m.median_s if m else None,
    }


def runs_page(runs: Sequence[RunRecord], *, role: str | None = None,
              outcome: str | None = None, flag: str | None = None, page: int = 1,
              per_page: int = RUNS_PER_PAGE) -> dict[str, Any]:
    """One page of a study's runs, every run reachable: the rows of `trials --format json`
    (`table.trial_rows`) that match the filters, in the order they ran.

    Filters (None: any): `role` and `outcome` by value; `flag` a text that a
    `name=value` of the run's flags, written as XLA_FLAGS writes it (`true`, not
    `True`), must contain, in any case. `page` counts from 1 and is
    clamped to the pages there are. Keys: `rows`, `total` (every run), `matched`,
    `page`, `pages` (at least 1), `per_page`, `filters` ({role, outcome, flag}),
    `roles` and `outcomes` ({value: runs} over every run, for the filter's choices).
    """
    def keep(run: RunRecord) -> bool:
        texts = [f"{k}={render_value(v)}".lower() for k, v in run.flags.items()]
        return ((role is None or run.role.value == role)
                and (outcome is None or run.outcome.kind.value == outcome)
                and (not flag or any(flag.lower() in t for t in texts)))

    matched = [r for r in runs if keep(r)]
    pages = max(1, -(-len(matched) // per_page))
    page = min(max(page, 1), pages)
    roles: dict[str, int] = defaultdict(int)
    outcomes: dict[str, int] = defaultdict(int)
    for run in runs:
        roles[run.role.value] += 1
        outcomes[run.outcome.kind.value] += 1
    return {"rows": trial_rows(matched[(page - 1) * per_page:page * per_page]),
            "total": len(runs), "matched": len(matched), "page": page, "pages": pages,
            "per_page": per_page, "filters": {"role": role, "outcome": outcome, "flag": flag},
            "roles": dict(sorted(roles.items())), "outcomes": dict(sorted(outcomes.items()))}


def trial_runs(runs: Sequence[RunRecord], number: int) -> list[RunRecord]:
    """The runs of trial `number` (its search run first, then confirmation and the rest)."""
    return [r for r in runs if r.trial_number == number]


def trial_page(record: StudyRecord, runs: list[RunRecord], number: int,
               catalog: Any, reused_run: int | None = None) -> dict[str, Any] | None:
    """Everything the trial page shows, or None when the study has no such trial.

    Keys: `study`, `trial`, `flags` (every flag as measured), `changed`
    (those that differ from XLA's defaults), `env` (the variables the trial was
    given), `xla_flags` (the ready `XLA_FLAGS` line of its flags), `confirmation`
    (verdict text, None when not confirmed), `same_program_as_baseline`,
    `runs` (each run's figures, step times and log tails), `proposal` (None, or
    the number asked for when it names a proposal that reused another trial's
    measurement).

    A proposal that repeated a configuration measured already has no run of its
    own: given `reused_run` (the id of the run it reused, `Store.reused_run`),
    its page is that run's trial's, with `proposal` set to `number`.
    """
    catalog = study_catalog(catalog, record)
    mine = trial_runs(runs, number)
    proposal = None
    if not mine and reused_run is not None:
        measured = next((r for r in runs if r.id == reused_run), None)
        if measured is not None and measured.trial_number is not None:
            proposal, number = number, measured.trial_number
            mine = trial_runs(runs, number)
    if not mine:
        return None
    head = mine[0]
    conf = confirmation(runs, head) if head.role in RANKED_ROLES and head.outcome.ok else None
    m = head.outcome.measurement
    return {
        "study": study_header(record), "trial": number, "role": head.role.value,
        "flags": dict(head.flags), "changed": changed_flags(head.flags, catalog),
        "env": dict(head.env), "xla_flags": xla_flags_string(head.flags, catalog),
        "confirmation": verdict_text(conf) if conf is not None else None,
        "same_program_as_baseline": m.same_program_as_baseline if m else None,
        "runs": [_run_view(r) for r in mine], "proposal": proposal,
    }


def compare_trials(runs: list[RunRecord], a: int, b: int,
                   catalog: Any) -> dict[str, Any] | None:
    """Two trials side by side: their flags, their figures and their compiled programs.

    Keys: `a`, `b` (trial numbers), `diff` ({flag, a, b, default} for every flag
    whose effective value differs; `a`/`b` None where a trial leaves XLA's
    default, `default` that value, None where the catalog does not state it),
    `same` (flags set alike in both), `same_program` (True/False by fingerprint,
    None when either is unknown), `speedup_a`, `speedup_b` (the search's figures),
    `claimed_a`, `claimed_b` (each trial's confirmed figure with its interval and
    verdict where it was confirmed, else the search's: {trial, speedup, interval,
    verdict}) and `program_diff` ({op, a, b} for each operation count of the
    compiled programs, `hlo_stats`, that differs; empty when either is unknown).
    None when either trial does not exist.
    """
    ra, rb = trial_runs(runs, a), trial_runs(runs, b)
    if not ra or not rb:
        return None
    fa, fb = changed_flags(ra[0].flags, catalog), changed_flags(rb[0].flags, catalog)
    names = sorted(set(fa) | set(fb))
    ma, mb = ra[0].outcome.measurement, rb[0].outcome.measurement
    prints = [m.fingerprint if m else None for m in (ma, mb)]
    return {
        "a": a, "b": b,
        "diff": [{"flag": n, "a": fa.get(n), "b": fb.get(n), "default": _default(n, catalog)}
                 for n in names if fa.get(n) != fb.get(n)],
        "same": {n: fa[n] for n in names if n in fa and n in fb and fa[n] == fb[n]},
        "same_program": None if None in prints else prints[0] == prints[1],
        "speedup_a": ra[0].speedup, "speedup_b": rb[0].speedup,
        "claimed_a": _claimed(runs, ra[0]), "claimed_b": _claimed(runs, rb[0]),
        "program_diff": _program_diff(ma, mb),
    }


def _default(name: str, catalog: Any) -> Any:
    """XLA's default of a flag as the catalog states it (None where it does not)."""
    return catalog.get(name).default if name in catalog else None


def _program_diff(ma: Measurement | None, mb: Measurement | None) -> list[dict[str, Any]]:
    """The operation counts (`hlo_stats`) that differ between two compiled programs."""
    if ma is None or mb is None or not ma.hlo_stats or not mb.hlo_stats:
        return []
    ops = sorted(set(ma.hlo_stats) | set(mb.hlo_stats))
    return [{"op": op, "a": ma.hlo_stats.get(op, 0), "b": mb.hlo_stats.get(op, 0)}
            for op in ops if ma.hlo_stats.get(op, 0) != mb.hlo_stats.get(op, 0)]


def _claimed(runs: list[RunRecord], run: RunRecord) -> dict[str, Any]:
    """A configuration's figure in one study: confirmed when it was, else the search's."""
    conf = confirmation(runs, run)
    estimate = conf.estimate if conf is not None else None
    return {"trial": run.trial_number,
            "speedup": estimate.speedup if estimate else run.speedup,
            "interval": list(estimate.speedup_interval) if estimate else None,
            "verdict": verdict_text(conf)}


def _by_config(runs: list[RunRecord], budget: int | None,
               catalog: Any) -> dict[str, RunRecord]:
    """Each ranked configuration of a study, keyed by its effective flags."""
    return {config_key(changed_flags(r.flags, catalog)): r for r in ranked(runs, budget)}


def _holds(winner: dict[str, Any] | None, other: Mapping[str, RunRecord],
           other_runs: list[RunRecord]) -> dict[str, Any] | None:
    """How one study's recommended configuration measured in the other study."""
    if winner is None:
        return None
    twin = other.get(config_key(winner["flags"]))
    if twin is None:
        return {**winner, "there": None, "holds": None,
                "text": "not measured in the other study"}
    there = _claimed(other_runs, twin)
    holds = there["interval"][0] > 1.0 if there["interval"] else None
    return {**winner, "there": there, "holds": holds,
            "text": "holds" if holds else ("does not hold" if holds is False
                                           else "measured there, not confirmed")}


def compare_studies(ra: StudyRecord, runs_a: list[RunRecord], rb: StudyRecord,
                    runs_b: list[RunRecord], catalog: Any) -> dict[str, Any]:
    """Two studies side by side: does a tuned configuration transfer?

    Keys: `a`, `b` (headers with `environments`), `same_space`, `common`
    ({flags, a, b}: each configuration both measured, with each study's
    figure), `winner_a_on_b` and `winner_b_on_a` (the recommendation of one,
    with how it measured in the other and whether it `holds` there: its
    confirmed interval lies above 1.0; None when nothing is recommended).
    """
    ka = _by_config(runs_a, ra.memory_budget_bytes, catalog)
    kb = _by_config(runs_b, rb.memory_budget_bytes, catalog)
    common = [{"flags": changed_flags(ka[k].flags, catalog), "a": _claimed(runs_a, ka[k]),
               "b": _claimed(runs_b, kb[k])} for k in ka if k in kb]
    common.sort(key=lambda row: -(row["a"]["speedup"] or 0))
    winners = [recommendation_view(*_recommended(r, runs, catalog), catalog)
               for r, runs in ((ra, runs_a), (rb, runs_b))]
    pick = [w if w["recommended"] else None for w in winners]

    def header(record: StudyRecord, runs: list[RunRecord]) -> dict[str, Any]:
        return {**study_header(record), "environments": environments(runs)}

    return {"a": header(ra, runs_a), "b": header(rb, runs_b), "same_space": ra.space == rb.space,
            "common": common, "winner_a_on_b": _holds(pick[0], kb, runs_b),
            "winner_b_on_a": _holds(pick[1], ka, runs_a)}
