"""How many trials each sampler needs to reach the best configuration of a recorded table.

    python benchmarks/scripts/search_efficiency.py                  # every committed table
    python benchmarks/scripts/search_efficiency.py --report-seeds 1000-1009 --samplers random,auto
    python benchmarks/scripts/search_efficiency.py --samplers '' --startup-candidates 4,8,10

Each run is a real `autotune.study.runner.StudyRunner` study (baseline first, the
sampler, the no-repeat rule, pruning) whose trials are answered by
`TableLauncher` from a table recorded on a real machine (`benchmarks/tables/`,
see `record_table.py`), each answer drawn from the recorded repeats. After
each launched trial the study's incumbent is the configuration with the best
*observed* time ratio so far (what the search would report); its *true* ratio
is the median over the recorded repeats of every configuration XLA compiled to
the same program (`ReplayTable.true_ratio`: a program measured 20 times, not
four equal programs measured 5 times each, whose luckiest would otherwise be
"the best"). The baseline (no flags, the empty key) is scored like any other
configuration: its recorded in-process ratio is its A/A noise, about 1.0, and
its true ratio is its program's median. Per table and sampler the script
prints the median over the report seeds of the number of launched trials until
the incumbent's true ratio is within 1%, 2% and 5% of the table's best, and the
incumbent's distance from the best after 20, 40 and 80 trials. It also prints
how flat the table is (the share of configurations within 1% and 2% of the
best): "reached within 2%" means little where most configurations are.

Held-out seeds. Settings chosen from data are chosen on `--choose-seeds`
(default 0-19: `TPE_STARTUP` in `autotune/study/samplers.py` was chosen on them; `auto`
picks by a rule on the space's size, not from data), and every printed figure
is computed on `--report-seeds` (default 1000-1099), which must be disjoint
from them. `--startup-candidates 2,4,8` redoes the startup choice on the choose
seeds (TPE with each count; the pick has the fewest median trials to within 2%,
summed over the tables, ties broken by 1% and the ratio at 20) and says whether
it is the value `search.py` ships; the report always runs what `search.py` ships.

Rank test. For each sampler other than `random`, the per-seed figures (trials
to within 1% and 2%, "never" ranked after every count; the incumbent's true
ratio at 20 and 40 trials) are compared with random search's on the same report
seeds by a two-sided Mann-Whitney U test (scipy). `A` is the chance that one
of the sampler's seeds does better than one of random's (fewer trials, lower
ratio; ties count half): 0.5 is no difference. The p-values are not corrected
for the number of tests.

Structure or noise? It fits an additive model (one effect per flag value) to
the table's log ratios and prints the residual spread next to the noise of a
table value (a median of its program's recorded repeats). Where the two are equal, the
configurations differ from the model by no more than their measurement noise:
the table's best is then the luckiest draw of that noise, and no search can
aim for it (see the README's Search section).

Studies run in `--jobs` processes (default: 2, this machine's cores). One
seeded 80-trial study takes about 4 CPU seconds here (3-6 s), so the defaults
(3 tables, `random` and `tpe`, whose studies `auto` reuses on these tables, 100
report seeds: 600 studies) take about 38 CPU minutes: 19 minutes on two free
cores, 31 on 2026-11-23 while other work shared them. 200 report seeds would
take twice that, hence 100.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("norm-act-small.json", "transformer-small.json", "mlp-dp-small.json")
CHECKPOINTS = (10, 20, 40, 80)
RULES = ("study", "single")
WITHIN = (0.01, 0.02, 0.05)
CHOOSE_SEEDS = "0-19"
REPORT_SEEDS = "1000-1099"
DEFAULT_NOTE = " (100, not 200: 200 would take about an hour on 2 cores)"


@dataclass
class Trace:
    """One seeded study: after each timed process, the incumbent's true ratio and the
    device-seconds spent so far (every compile and every timed process)."""

    true_ratios: list[float]
    device_seconds: list[float] = field(default_factory=list)

    def trials_to(self, target: float) -> float:
        """First count of timed processes at which the incumbent is within `target`, else
        infinity."""
        for n, ratio in enumerate(self.true_ratios, start=1):
            if ratio <= target:
                return n
        return math.inf

    def at(self, n: int) -> float:
        return self.true_ratios[min(n, len(self.true_ratios)) - 1]

    def seconds_at(self, n: int) -> float:
        return self.device_seconds[min(n, len(self.device_seconds)) - 1]


def parse_seeds(text: str) -> list[int]:
    """`0-19`, `1000-1199` or `1,2,5-7` as a sorted list of distinct seeds.

    Raises:
        ValueError: an item that is not a seed or a range of them, or no seed at all.
    """
    seeds: set[int] = set()
    for item in (part.strip() for part in text.split(",")):
        first, sep, last = item.partition("-")
        try:
            low, high = int(first), int(last) if sep else int(first)
        except ValueError:
            raise ValueError(f"'{item}' is not a seed or a range of seeds (e.g. 1000-1099)"
                             ) from None
        if low < 0 or high < low:
            raise ValueError(f"'{item}' is not a range of non-negative seeds, low-high")
        seeds.update(range(low, high + 1))
    if not seeds:
        raise ValueError("no seeds given")
    return sorted(seeds)


def seeds_text(seeds: Sequence[int]) -> str:
    """The seeds as ranges: [0, 1, 2, 7] -> '0-2,7'."""
    parts, start = [], None
    for i, seed in enumerate(seeds):
        if start is None:
            start = seed
        if i + 1 == len(seeds) or seeds[i + 1] != seed + 1:
            parts.append(str(seed) if seed == start else f"{start}-{seed}")
            start = None
    return ",".join(parts)


class _Enough(Exception):
    """Raised by `_Counting` at the launch after the last timed process a trace needs."""


class _Counting:
    """A launcher that stops the study once `goal` processes have timed something."""

    def __init__(self, inner: Any, goal: int) -> None:
        self.inner, self.goal, self.timed = inner, goal, 0

    def launch(self, request: Any) -> Any:
        if self.timed >= self.goal:
            raise _Enough
        outcome = self.inner.launch(request)
        m = outcome.measurement
        self.timed += bool(m is not None and m.step_times_s)
        return outcome


def run_study(table, space, sampler: str, seed: int, timed: int, catalog, *,
              rule: str = "study") -> Trace:
    """One seeded study on the table, until `timed` processes have timed something.

    `rule` "study": the study as built (the space fitted to the workload,
    racing on) and its own incumbent rule (`autotune.results.evidence.incumbent`:
    the best pooled program backed by enough processes, else XLA's defaults).
    "single": the study before pooling (no fitting, no racing), and the
    incumbent is the configuration with the best single observed ratio (the
    baseline, no flags, scored by its in-process A/A ratio like any other).
    """
    import optuna

    from autotune.launch.replay import TableLauncher
    from autotune.storage.store import Store
    from autotune.study.plan import StudyPlan
    from autotune.study.runner import StudyRunner

    plan = StudyPlan.of(name=f"{sampler}-{seed}", space=space,
                     workload=table.workload(ROOT), trials=timed * 20,
                     sampler=sampler, seed=seed, racing=rule == "study", fit=rule == "study")
    store = Store.open("sqlite://")
    runner = StudyRunner(plan, store, _Counting(TableLauncher(table, catalog, seed=seed), timed),
                         optuna.storages.InMemoryStorage())
    try:
        runner.run()
    except _Enough:
        pass
    runs = sorted(store.runs(plan.name), key=lambda r: r.id)
    store.close()
    return _trace(table, runs, catalog, rule)


def _trace(table, runs, catalog, rule: str) -> Trace:
    """The incumbent's true ratio and the device-seconds after each timed process."""
    from autotune.flags.compose import config_key, effective_config
    from autotune.results.evidence import incumbent, pooled

    truths: list[float] = []
    seconds: list[float] = []
    spent, best_seen, best_key = 0.0, math.inf, None
    for i, run in enumerate(runs):
        spent += run.outcome.duration_s
        m = run.outcome.measurement
        if m is None or not m.step_times_s:
            continue
        key = config_key(effective_config(run.flags, catalog))
        if rule == "single":
            if run.ratio is not None and run.ratio < best_seen:
                best_seen, best_key = run.ratio, key
        else:
            chosen = incumbent(pooled(runs[:i + 1]))
            best_key = "" if chosen is None else config_key(
                effective_config(chosen.first.flags, catalog))
        truth = table.true_ratio(best_key) if best_key is not None else None
        truths.append(math.inf if truth is None else truth)
        seconds.append(spent)
    return Trace(truths, seconds)


@cache
def _loaded(path: str) -> tuple[Any, Any, Any]:
    """The table, its space and the catalog, read once per process."""
    from autotune.flags.catalog import load_catalog
    from autotune.launch.replay import ReplayTable
    from autotune.spaces import load_space

    table = ReplayTable.load(path)
    return table, load_space(str(ROOT / table.meta["space"])), load_catalog()


def _trace_job(job: tuple[str, str, int, int, int | None, str]) -> Trace:
    """One study of a job (table path, sampler, seed, timed processes, TPE startup or
    None, rule)."""
    import autotune.study.samplers

    path, sampler, seed, timed, startup, rule = job
    table, space, catalog = _loaded(path)
    shipped = autotune.study.samplers.TPE_STARTUP
    if startup is not None:
        autotune.study.samplers.TPE_STARTUP = startup  # read when the sampler is made
    try:
        return run_study(table, space, sampler, seed, timed, catalog, rule=rule)
    finally:
        autotune.study.samplers.TPE_STARTUP = shipped


class Runner:
    """Runs studies in `jobs` processes (in this one for 1), results in order."""

    def __init__(self, jobs: int) -> None:
        self.pool = ProcessPoolExecutor(jobs) if jobs > 1 else None

    def traces(self, path: Path, sampler: str, seeds: Sequence[int], trials: int,
               startup: int | None = None, rule: str = "study") -> list[Trace]:
        jobs = [(str(path), sampler, seed, trials, startup, rule) for seed in seeds]
        done = self.pool.map(_trace_job, jobs) if self.pool else map(_trace_job, jobs)
        return list(done)

    def close(self) -> None:
        if self.pool:
            self.pool.shutdown()


def within_fractions(traces: list[Trace], best: float) -> dict[str, dict[str, float]]:
    """"2%" -> {"40": the share of seeds whose incumbent is truly within 2% of the best
    after 40 timed processes, ...} for every `WITHIN` and `CHECKPOINTS`."""
    return {f"{w:.0%}": {str(n): sum(t.at(n) <= best * (1 + w) for t in traces) / len(traces)
                         for n in CHECKPOINTS} for w in WITHIN}


def seconds_medians(traces: list[Trace]) -> dict[str, float]:
    """{"40": median over seeds of the device-seconds spent by 40 timed processes, ...}."""
    return {str(n): round(statistics.median(t.seconds_at(n) for t in traces), 2)
            for n in CHECKPOINTS}


def _row(name: str, traces: list[Trace], best: float) -> str:
    """One row: medians over the seeds of the trials to each `WITHIN` and of the
    incumbent's true ratio / best at each checkpoint."""
    to = [_median_text([t.trials_to(best * (1 + w)) for t in traces]) for w in WITHIN]
    at = [statistics.median(t.at(n) / best for t in traces) for n in CHECKPOINTS]
    return (f"{name:8} " + " ".join(f"{x:>7}" for x in to) + "  "
            + "  ".join(f"{a:7.3f}" for a in at))


def _header(first: str) -> str:
    return (f"{first:8} " + " ".join(f"{'to ' + format(w, '.0%'):>7}" for w in WITHIN) + "  "
            + "  ".join(f"{'at ' + str(n):>7}" for n in CHECKPOINTS))


def _per_seed(traces: list[Trace], best: float, figure: tuple[str, float],
              trials: int) -> list[float]:
    """One figure per seed, lower is better; 'never' is ranked after every trial count."""
    kind, value = figure
    if kind == "to":
        return [min(t.trials_to(best * (1 + value)), trials + 1) for t in traces]
    return [t.at(int(value)) / best for t in traces]


def report(path: Path, samplers: list[str], seeds: list[int], trials: int,
           runner: Runner, rules: Sequence[str] = RULES, quiet: bool = False) -> dict[str, Any]:
    """One table: its flatness and, per sampler and rule, the share of report seeds whose
    incumbent is within 1/2/5% of the best after 10/20/40/80 timed processes, and the
    device-seconds spent by then. Printed unless `quiet`; returned as a JSON-ready
    mapping (keys `table`, `best`, `structure`, `results`: one entry per sampler and
    rule with `sampler`, `rule`, `within`, `device_seconds`)."""
    from autotune.study.samplers import Objective, choose_sampler

    say = (lambda *a, **k: None) if quiet else print
    table, space, _ = _loaded(str(path))
    ratios = table.ratios()
    best = min(ratios.values())
    say(f"\n{path.name}: {table.meta['benchmark']} ({table.meta['preset']}), space "
        f"{space.name}: {table.meta['configurations']} configurations, {len(ratios)} distinct "
        f"measured, {table.meta['repeats']} repeats; best ratio {best:.3f}, worst "
        f"{max(ratios.values()):.3f}; flatness: {table.flatness(0.01):.1%} within 1%, "
        f"{table.flatness(0.02):.1%} within 2% of the best")
    programs = table.distinct_programs()
    say(f"programs: {programs} distinct programs; a configuration's true ratio pools the "
        "repeats of its program" if programs else
        "programs: not fingerprinted; a configuration's true ratio is its own repeats' median")
    baseline = table.true_ratio("")
    if baseline is not None:
        say(f"baseline: true ratio {baseline:.3f}, {baseline / best:.3f} x the best")
    noise = _noise(table)
    say(f"noise: one measurement's ratio varies by {noise:.1%} (median relative "
        "standard deviation over a configuration's repeats)")
    fit = _additive_fit(table)
    structured = fit.residual > 2 * fit.value_noise
    verdict = ("the flags interact or matter beyond the noise" if structured
               else "no structure beyond the noise of the table's values")
    say(f"structure: an additive model of the flags leaves a residual of {fit.residual:.1%} "
        f"against a table value's own noise of about {fit.value_noise:.1%}: {verdict}")
    auto = choose_sampler("auto", (Objective.TIME,), space, trials)
    out: dict[str, Any] = {"table": path.name, "best": best, "structure": structured,
                           "results": []}
    if not samplers:
        return out
    say(f"share of the {len(seeds)} report seeds whose incumbent is truly within 2% of the "
        f"best after N timed processes; device-seconds by then (median over seeds)")
    say(f"{'sampler':8} {'rule':7} " + " ".join(f"{'2% @' + str(n):>7}" for n in CHECKPOINTS)
        + "  " + " ".join(f"{'s @' + str(n):>7}" for n in CHECKPOINTS))
    traces: dict[tuple[str, str], list[Trace]] = {}
    for rule in rules:
        for sampler in samplers:
            same = auto.name if sampler == "auto" and auto.name in samplers else sampler
            if (same, rule) not in traces:
                traces[same, rule] = runner.traces(path, same, seeds, trials, rule=rule)
            found = traces[same, rule]
            within, secs = within_fractions(found, best), seconds_medians(found)
            out["results"].append({"sampler": sampler, "rule": rule, "within": within,
                                   "device_seconds": secs})
            say(f"{sampler:8} {rule:7} " + " ".join(f"{within['2%'][str(n)]:7.0%}"
                                                    for n in CHECKPOINTS)
                + "  " + " ".join(f"{secs[str(n)]:7.1f}" for n in CHECKPOINTS), flush=True)
    return out


def choose_startup(paths: list[Path], candidates: list[int], seeds: list[int], trials: int,
                   runner: Runner) -> int:
    """TPE with each startup count on the choose seeds; the pick and why, printed."""
    from autotune.study.samplers import TPE_STARTUP

    print(f"choosing TPE's startup trials on the {len(seeds)} choose seeds "
          f"{seeds_text(seeds)} (median over them)")
    print(_header("startup") + "  table")
    score: dict[int, list[tuple[float, ...]]] = {c: [] for c in candidates}
    for path in paths:
        table, _, _ = _loaded(str(path))
        best = min(table.ratios().values())
        for count in candidates:
            traces = runner.traces(path, "tpe", seeds, trials, startup=count)
            score[count].append(tuple(statistics.median(_per_seed(traces, best, f, trials))
                                      for f in (("to", 0.02), ("to", 0.01), ("at", 20))))
            print(_row(str(count), traces, best) + f"  {path.name}", flush=True)
    pick = min(candidates, key=lambda c: (*map(sum, zip(*score[c], strict=True)), c))
    agrees = ("the value autotune/study/samplers.py ships" if pick == TPE_STARTUP
              else f"autotune/study/samplers.py ships TPE_STARTUP = {TPE_STARTUP}")
    print(f"pick: {pick} (fewest median trials to within 2%, summed over the tables, "
          f"'never' counting {trials + 1}; ties: to within 1%, then the ratio at 20, then the "
          f"smaller count): {agrees}")
    return pick


def _noise(table) -> float:
    """Median over configurations of the relative standard deviation of their repeats."""
    spreads = []
    for key in table.runs:
        ratios = table.repeat_ratios(key)
        if len(ratios) > 1:
            spreads.append(statistics.pstdev(ratios) / statistics.fmean(ratios))
    return statistics.median(spreads) if spreads else 0.0


@dataclass
class Fit:
    """An additive model of a table: its residual spread and the noise of a table value."""

    residual: float
    value_noise: float


def _additive_fit(table) -> Fit:
    """Least squares of log ratio on one indicator per (flag, value), unset the reference."""
    import numpy as np

    ratios = table.ratios()
    keys = list(ratios)
    names = sorted({name for key in keys for name in table.flags[key]})
    levels = sorted({(n, str(table.flags[k][n])) for k in keys for n in names
                     if n in table.flags[k]})
    x = np.array([[1.0] + [float(str(table.flags[k].get(n, "\0")) == v) for n, v in levels]
                  for k in keys])
    y = np.log([ratios[k] for k in keys])
    beta, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ beta
    dof = len(y) - np.linalg.matrix_rank(x)
    spreads = [np.std(np.log(rs), ddof=1) for rs in map(table.repeat_ratios, keys)
               if len(rs) > 1]
    # The median of n normal draws has about 1.25/sqrt(n) times their spread (1.16 at n = 3);
    # a table value is the median of its program's pooled repeats.
    pooled = [len(table.pooled_repeats(key)) for key in keys]
    factor = statistics.fmean(1.25 / math.sqrt(n) for n in pooled if n)
    value_noise = float(np.sqrt(np.mean(np.square(spreads)))) * factor
    return Fit(float(np.sqrt(residual @ residual / dof)), value_noise)


def _median_text(values: list[float]) -> str:
    med = statistics.median(values)
    return "never" if math.isinf(med) else f"{med:g}"


def _seed_option(text: str) -> list[int]:
    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        default=[ROOT / "benchmarks/tables" / t for t in TABLES])
    parser.add_argument("--samplers", default="random,tpe,auto",
                        help="samplers to report on; '' for none (with --startup-candidates)")
    parser.add_argument("--choose-seeds", type=_seed_option, default=parse_seeds(CHOOSE_SEEDS),
                        help=f"seeds settings are chosen on (default {CHOOSE_SEEDS})")
    parser.add_argument("--report-seeds", type=_seed_option, default=parse_seeds(REPORT_SEEDS),
                        help=f"seeds every printed figure is computed on, disjoint from "
                             f"--choose-seeds (default {REPORT_SEEDS})")
    parser.add_argument("--startup-candidates", default="",
                        help="TPE startup counts to choose from on the choose seeds, e.g. 2,4,8")
    parser.add_argument("--seeds", type=int, default=None,
                        help="report on this many seeds from 1000 (default: --report-seeds)")
    parser.add_argument("--rules", default=",".join(RULES),
                        help="incumbent rules: study (racing, pooled) and/or single")
    parser.add_argument("--json", action="store_true", help="print one JSON document only")
    parser.add_argument("--trials", type=int, default=max(CHECKPOINTS),
                        help="timed processes per study (default 80)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes running studies (default: 2, or fewer cores)")
    args = parser.parse_args(argv)
    shared = sorted(set(args.choose_seeds) & set(args.report_seeds))
    if shared:
        parser.error(f"--report-seeds and --choose-seeds share {len(shared)} seeds "
                     f"({seeds_text(shared)}): figures must come from seeds no setting "
                     "was chosen on")
    if args.seeds is not None:
        args.report_seeds = list(range(1000, 1000 + args.seeds))
    rules = [r for r in args.rules.split(",") if r]
    unknown = sorted(set(rules) - set(RULES))
    if unknown:
        parser.error(f"unknown rule(s) {', '.join(unknown)}: choose from {', '.join(RULES)}")
    from autotune.study.samplers import TPE_STARTUP

    if not args.json:
        print(f"seeds: settings chosen on the {len(args.choose_seeds)} choose seeds "
              f"{seeds_text(args.choose_seeds)} (TPE_STARTUP = {TPE_STARTUP} in "
              "autotune/study/samplers.py, BACKED_BY in autotune/results/evidence.py); "
              "every figure "
              f"is over the {len(args.report_seeds)} report seeds "
              f"{seeds_text(args.report_seeds)}, disjoint from them; {args.trials} timed "
              "processes per study", flush=True)
    runner = Runner(max(1, args.jobs))
    tables = []
    try:
        if args.startup_candidates:
            candidates = [int(c) for c in args.startup_candidates.split(",")]
            choose_startup(args.tables, candidates, args.choose_seeds, args.trials, runner)
        for path in args.tables:
            tables.append(report(path, [s for s in args.samplers.split(",") if s],
                                 args.report_seeds, args.trials, runner, rules, args.json))
    finally:
        runner.close()
    if args.json:
        print(json.dumps({"seeds": seeds_text(args.report_seeds), "timed_processes": args.trials,
                          "checkpoints": list(CHECKPOINTS), "tables": tables}, indent=1))
    sys.stdout.flush()

if __name__ == "__main__":
    main()
