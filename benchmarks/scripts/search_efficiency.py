"""What a user gets from a study on each recorded table, next to what an oracle could get.

    python benchmarks/scripts/search_efficiency.py                  # every table there
    python benchmarks/scripts/search_efficiency.py --report-seeds 1000-1009 --samplers random,auto
    python benchmarks/scripts/search_efficiency.py --seeds 20 --trials 40 --json
    python benchmarks/scripts/search_efficiency.py --samplers '' --startup-candidates 4,8,10

Each run is a real `autotune.study.runner.StudyRunner` study (baseline first, the
sampler, the no-repeat rule, pruning) whose trials are answered by
`TableLauncher` from a table recorded on a real machine (`benchmarks/tables/`,
see `record_table.py`; the corpus workloads are in `benchmarks/corpus/`), each
answer drawn from the recorded repeats (`replay_study.py`). A configuration's
*true* ratio is the median over the recorded repeats of every configuration
XLA compiled to the same program (`ReplayTable.true_ratio`); the table's
optimum is the lowest, the defaults' is the empty key's.

At each checkpoint B (10, 20, 40 and `--trials`, default 80) every report seed
runs a study planned with `--trials B`, the budget a user gives, so `auto`
resolves as it does for them; it stops once B processes have timed something
(a trial whose program was timed already only compiles, so a study may time
fewer), and is then confirmed as `autotune study` confirms by default (the best
3 configurations, 2 fresh processes each, then sequentially up to 16 processes
for the leader, `--confirm-max`). Per table, sampler, rule and
checkpoint (`outcome.py` defines each figure):

- `within`: the share of seeds whose search incumbent, by the study's own
  rule, is truly within 1%, 2% and 5% of the optimum after B timed processes;
- after confirmation, for the final recommendation (`recommend`):
  `captured_gain` {median, p10} ((defaults - recommendation) / (defaults -
  optimum), by true ratios; None where the table offers less than 1%),
  `slower` (the share of seeds truly slower than the defaults), `right` (the
  share within 2% of the optimum, the defaults included), `kept` (the share
  that recommended XLA's defaults), `sound` (`right` on a table whose optimum
  is at least 3% faster than the defaults, else `kept`: `outcome.py`);
- `device_seconds`: the median over seeds of every compile and timed process
  the study spent, confirmation included (from the recorded times; warm-up
  was not recorded), and its parts, `search_seconds` and
  `confirmation_seconds` (each its own median over seeds, so they need not
  add up to it); `timed`: the median processes the search timed;
- `matching` (beside random search): the first checkpoint at which a method's
  median captured gain and share right reach random search's at the last
  checkpoint, and its device-seconds as a ratio of random's there (issue 30's
  goal: at most half, at equal captured gain); and `random_matching`, the same
  from the other side: the first checkpoint at which random search's figures
  reach the method's at the last checkpoint (`--random-to N` runs random search
  on past `--trials`, doubling it while that stays within N: with `--trials 40
  --random-to 160`, at 80 and 160), and the method's device-seconds as a ratio
  of random's there; and `confirmation_floor`, what the method's confirmation alone
  spends at the last checkpoint (`confirmation_seconds`) as a ratio of random
  search's device-seconds there: the method's own ratio at that checkpoint cannot
  be lower, whatever its search spent, while it hands confirmation the leaders it
  does;
- `of_oracle`: the captured gain and the share right as fractions of the
  `oracle`'s, which knows the best program and spends B plus the
  confirmation's budget (16 processes) measuring it against the defaults.

Rules: `study`, the study as built (the space fitted to the workload, racing,
evidence pooled by program; incumbent `evidence.incumbent`), and `single`, the
study before this work (no fitting, no racing; incumbent the best single
observed ratio). Confirmation and `recommend` are the same for both.

Held-out seeds. Settings chosen from data are chosen on `--choose-seeds`
(default 0-19: `TPE_STARTUP` in `autotune/study/samplers.py` and `BACKED_BY`
in `autotune/results/evidence.py` were chosen on them), and every printed
figure is computed on `--report-seeds` (default 1000-1019), which must be
disjoint from them. `--startup-candidates 2,4,8` redoes the startup choice on
the choose seeds (TPE with each count; the pick has the fewest median trials to
within 2%, summed over the tables, ties broken by 1% and the ratio at 20) and
says whether it is the value `samplers.py` ships; the report always runs what
it ships. Held-out seeds are not held-out workloads: a setting chosen on a
table and reported on it says nothing of workloads it has not seen.

Structure or noise? It fits an additive model (one effect per flag value) to
the table's log ratios and prints the residual spread next to the noise of a
table value (a median of its program's recorded repeats). Where the two are equal, the
configurations differ from the model by no more than their measurement noise:
the table's best is then the luckiest draw of that noise, and no search can
aim for it (see the README's Search section).

Studies run in `--jobs` processes (default: 2, this machine's cores). A row
costs the sum of its budgets per seed (10 + 20 + 40 + 80 timed processes, each
study then confirmed), a few CPU seconds per study here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import outcome  # noqa: E402  (sibling scripts, not a package)
import replay_study  # noqa: E402
from replay_study import (  # noqa: E402
    CONFIRM_MAX,
    CONFIRM_REPEATS,
    CONFIRM_TOP,
    Answer,
    Runner,
    Trace,
    committed_tables,
    confirm_budget,
    loaded,
    parse_seeds,
    run_study,
    seeds_text,
)

__all__ = ["Answer", "parse_seeds", "run_study", "seeds_text"]  # for the tests

ROOT = Path(__file__).resolve().parents[2]
#: the developers' first three tables; the default is every table in benchmarks/tables
TABLES = ("norm-act-small.json", "transformer-small.json", "mlp-dp-small.json")
CHECKPOINTS = (10, 20, 40, 80)
RULES = ("study", "single")
WITHIN = (0.01, 0.02, 0.05)
CHOOSE_SEEDS = "0-19"
REPORT_SEEDS = "1000-1019"


def checkpoints(trials: int) -> list[int]:
    """The checkpoints a report of `trials` timed processes reaches (at least the last)."""
    return [n for n in CHECKPOINTS if n < trials] + [trials]


def figures_at(answers: list[Answer], budget: int, best: float, defaults: float,
               worth: bool | None = None) -> dict[str, Any]:
    """A row's figures at one checkpoint: the search's `within` (share of seeds whose
    incumbent after `budget` timed processes is truly within 1/2/5% of the best), then
    what the user got after confirmation (`outcome.summary`: captured gain, slower,
    right, device-seconds with confirmation; `worth`: `outcome.worth_having` of the
    table, None to judge by `best` and `defaults`), `search_seconds` and
    `confirmation_seconds`: the medians over seeds of what the search and confirmation
    alone spent, `timed`: the median processes the search timed, and
    `served`: the confirmation processes longer than the table's runs, over every seed, by
    how the replay served them ("long": one recorded run of that length; "joined": runs
    joined end to end, kinder than a real long process: `TableLauncher._long`) and the
    draws of a recorded process a second time ("reused"), `reused`: the share of seeds
    whose recommendation rests on such a draw (its interval narrower than the table
    supports), and `exhausted`: the share of seeds that asked for more processes than
    the table holds (with the runner's `fresh` only)."""
    within = {f"{w:.0%}": sum(a.trace.at(budget) <= best * (1 + w) for a in answers)
              / len(answers) for w in WITHIN}
    found = outcome.summary([a.true_ratio for a in answers],
                            [a.device_seconds for a in answers], defaults, best,
                            [a.recommended == "" for a in answers], worth)
    served = {kind: sum(a.served.get(kind, 0) for a in answers)
              for kind in ("long", "joined", "reused")}
    return {"within": within, **found,
            "search_seconds": round(statistics.median(a.search_seconds for a in answers), 2),
            "confirmation_seconds": round(statistics.median(
                a.device_seconds - a.search_seconds for a in answers), 2),
            "timed": statistics.median(a.timed for a in answers), "served": served,
            "reused": sum(a.reused for a in answers) / len(answers),
            "exhausted": sum(a.exhausted for a in answers) / len(answers)}


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


def beyond(trials: int, random_to: int | None) -> list[int]:
    """The checkpoints random search reaches past `trials` under `--random-to`: doubling
    from `trials` while that stays within `random_to` (none where twice `trials` does
    not, or `trials` is below 1)."""
    found: list[int] = []
    step = trials
    while random_to is not None and 1 <= step and step * 2 <= random_to:
        step *= 2
        found.append(step)
    return found


def report(path: Path, samplers: list[str], seeds: list[int], trials: int,
           runner: Runner, rules: Sequence[str] = RULES, quiet: bool = False,
           random_to: int | None = None) -> dict[str, Any]:
    """One table: its flatness and structure and, per sampler and rule, at each checkpoint
    B (`checkpoints`) the figures of studies planned with `--trials B` as a user would and
    confirmed as `autotune study` does (`figures_at`), beside the oracle's. Printed unless
    `quiet`; returned as a JSON-ready mapping (keys `table`, `best`, `defaults`,
    `structure`, `oracle`: checkpoint -> the oracle's figures, `results`: one entry per
    sampler and rule with `sampler`, `rule`, `resolved` (checkpoint -> the sampler `auto`
    became), `within`, `device_seconds`, `search_seconds`, `confirmation_seconds`,
    `captured_gain`, `slower`, `right`, `timed` and `of_oracle`, each keyed by checkpoint, and
    `matching`: the cost of doing as well as random search at the last checkpoint,
    `outcome.cost_to_match`, `random_matching`: random search's cost of doing as well
    as it, `outcome.cost_for_random`, and `confirmation_floor`,
    `outcome.confirmation_floor`, where random was run). Random search's figures also
    reach the checkpoints `beyond` the last, up to `random_to`; its `of_oracle`, and the
    table's `oracle`, stop at the last."""
    say = (lambda *a, **k: None) if quiet else print
    table, space, _ = loaded(str(path))
    defaults, best = outcome.truths(table)
    worth = outcome.worth_having(table)
    _describe(table, space, path, best, say)
    structured = _structure(table, say)
    marks = checkpoints(trials)
    limit = {str(b): outcome.oracle(table, [b + confirm_budget()] * len(seeds), seeds,
                                    runner.fresh) for b in marks}
    out: dict[str, Any] = {"table": path.name, "best": best, "defaults": defaults,
                           "structure": structured, "oracle": limit, "results": []}
    if not samplers:
        return out
    say(f"per checkpoint B (studies planned with --trials B, then confirmed: the best "
        f"{CONFIRM_TOP}, {CONFIRM_REPEATS} processes each, then sequentially up to "
        f"{replay_study.CONFIRM_MAX}"
        f"), over {len(seeds)} report seeds: the "
        "share whose search incumbent is truly within 2% of the best; the median captured "
        "gain of the recommendation and the share right (within 2% of the best)")
    say(f"{'sampler':8} {'rule':7} " + " ".join(f"{'2%/gain/right @' + str(b):>20}"
                                                for b in marks))
    say(f"{'oracle':8} {'':7} " + " ".join(_cell(limit[str(b)], None) for b in marks))
    done: dict[tuple[str, str, int], list[Answer]] = {}
    for rule in rules:
        for sampler in samplers:
            more = beyond(trials, random_to) if sampler == "random" else []
            entry = _entry(path, sampler, rule, seeds, marks + more, runner, done,
                           (best, defaults, worth), space)
            for b in marks:
                entry["of_oracle"][str(b)] = outcome.of_oracle(
                    {k: entry[k][str(b)] for k in ("captured_gain", "right")}, limit[str(b)])
            out["results"].append(entry)
            say(f"{sampler:8} {rule:7} " + " ".join(
                _cell({k: entry[k][str(b)] for k in ("captured_gain", "right")},
                      entry["within"]["2%"][str(b)]) for b in marks), flush=True)
            if more:
                say(f"{'':8} {'':7} and on: " + ", ".join(_beyond_cell(entry, b) for b in more),
                    flush=True)
    _match_random(out, str(marks[-1]), say)
    return out


def _beyond_cell(entry: dict[str, Any], b: int) -> str:
    """Random search's figures at a checkpoint past the table's last, with its device-seconds."""
    cell = _cell({k: entry[k][str(b)] for k in ("captured_gain", "right")},
                 entry["within"]["2%"][str(b)]).strip()
    return f"@{b} {cell} {entry['device_seconds'][str(b)]} device-s"


def _match_random(out: dict[str, Any], top: str, say) -> None:
    """Each method's cost to do as well as random search (same rule) does at the last
    checkpoint (`outcome.cost_to_match`), as `matching` in each result entry, and random
    search's cost to do as well as it does there (`outcome.cost_for_random`, reading
    random's checkpoints past the last), as `random_matching`."""
    for entry in out["results"]:
        reference = next((r for r in out["results"] if r["sampler"] == "random"
                          and r["rule"] == entry["rule"]), None)
        if reference is None or entry is reference:
            continue
        entry["matching"] = match = outcome.cost_to_match(entry, reference, top)
        where = ("never" if match["at"] is None else
                 f"at {match['at']} timed processes: {match['device_seconds']} device-s, "
                 f"x{match['ratio']} of random's {match['reference_device_seconds']}")
        say(f"matching: {entry['sampler']} ({entry['rule']}) does as well as random search "
            f"does at {top}: {where}")
        entry["random_matching"] = back = outcome.cost_for_random(entry, reference, top)
        where = (f"at {back['at']} timed processes: {back['device_seconds']} device-s; "
                 f"{entry['sampler']}'s {back['method_device_seconds']} at {top} is "
                 f"x{back['ratio']} of it" if back["at"] is not None else
                 f"at no checkpoint up to {back['last']}; {entry['sampler']}'s "
                 f"{back['method_device_seconds']} device-s at {top} is at most "
                 f"x{back['at_most']} of what random spent by {back['last']}")
        say(f"matching: random search does as well as {entry['sampler']} ({entry['rule']}) "
            f"does at {top}: {where}")
        entry["confirmation_floor"] = floor = outcome.confirmation_floor(entry, reference, top)
        say(f"floor: {entry['sampler']}'s confirmation alone spends "
            f"{floor['confirmation_seconds']} device-s at {top}, x{floor['floor']} of random's "
            f"{floor['reference_device_seconds']}: its own ratio at {top} is no lower, "
            "whatever its search spends")


def _entry(path: Path, sampler: str, rule: str, seeds: list[int], marks: list[int],
           runner: Runner, done: dict[tuple[str, str, int], list[Answer]],
           truth: tuple[float, float, bool], space) -> dict[str, Any]:
    """One row: the figures at each checkpoint, reusing the answers of the sampler `auto`
    resolves to where that one was run already (`truth`: the table's best and defaults'
    true ratios and whether its gain is worth having, `outcome.worth_having`)."""
    from autotune.study.samplers import Objective, choose_sampler

    best, defaults, worth = truth
    entry: dict[str, Any] = {"sampler": sampler, "rule": rule, "resolved": {}, "within": {},
                             "of_oracle": {}}
    for b in marks:
        same = choose_sampler(sampler, (Objective.TIME,), space, b).name \
            if sampler == "auto" else sampler
        entry["resolved"][str(b)] = same
        if (same, rule, b) not in done:
            done[same, rule, b] = runner.answers(path, same, seeds, b, rule=rule)
        for key, value in figures_at(done[same, rule, b], b, best, defaults, worth).items():
            if key == "within":
                for w, share in value.items():
                    entry["within"].setdefault(w, {})[str(b)] = share
            else:
                entry.setdefault(key, {})[str(b)] = value
    return entry


def _cell(figures: dict[str, Any], within: float | None) -> str:
    """`2%/gain/right` of one checkpoint: the search's share within 2% (blank for the
    oracle), the median captured gain ('-' where the table offers none), the share right."""
    gain = figures["captured_gain"]
    gain_text = "-" if gain is None else f"{gain['median']:.2f}"
    first = "" if within is None else f"{within:.0%}"
    return f"{first:>6}{gain_text:>7}{figures['right']:>7.0%}".rjust(20)


def _describe(table, space, path: Path, best: float, say) -> None:
    """Print what the table is: size, flatness, programs, the defaults, the noise."""
    ratios = table.ratios()
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
    say(f"noise: one measurement's ratio varies by {_noise(table):.1%} (median relative "
        "standard deviation over a configuration's repeats)")


def _structure(table, say) -> bool:
    """Whether an additive model of the flags leaves more than twice a value's noise."""
    fit = _additive_fit(table)
    structured = fit.residual > 2 * fit.value_noise
    verdict = ("the flags interact or matter beyond the noise" if structured
               else "no structure beyond the noise of the table's values")
    say(f"structure: an additive model of the flags leaves a residual of {fit.residual:.1%} "
        f"against a table value's own noise of about {fit.value_noise:.1%}: {verdict}")
    return structured


def choose_startup(paths: list[Path], candidates: list[int], seeds: list[int], trials: int,
                   runner: Runner) -> int:
    """TPE with each startup count on the choose seeds; the pick and why, printed."""
    from autotune.study.samplers import TPE_STARTUP

    print(f"choosing TPE's startup trials on the {len(seeds)} choose seeds "
          f"{seeds_text(seeds)} (median over them)")
    print(_header("startup") + "  table")
    score: dict[int, list[tuple[float, ...]]] = {c: [] for c in candidates}
    for path in paths:
        table, _, _ = loaded(str(path))
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
                        default=committed_tables())
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
    parser.add_argument("--random-to", type=int, default=None,
                        help="run random search on past --trials, doubling it while that "
                             "stays within this many timed processes, for random_matching "
                             "(default: no checkpoint past --trials)")
    parser.add_argument("--confirm-max", type=int, default=CONFIRM_MAX,
                        help=f"sequential confirmation's cap (default {CONFIRM_MAX}, as "
                             "autotune study; 0: the fixed rounds only)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="processes running studies (default: 2, or fewer cores)")
    parser.add_argument("--fresh", action="store_true",
                        help="never serve a recorded process twice: a study that asks for "
                             "more than the table holds stops there (a pessimistic bound)")
    args = parser.parse_args(argv)
    if args.trials < 1:
        parser.error(f"--trials {args.trials}: a study times at least 1 process")
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
    replay_study.CONFIRM_MAX = args.confirm_max  # before the pool forks its workers
    runner = Runner(max(1, args.jobs), fresh=args.fresh)
    tables = []
    try:
        if args.startup_candidates:
            candidates = [int(c) for c in args.startup_candidates.split(",")]
            choose_startup(args.tables, candidates, args.choose_seeds, args.trials, runner)
        for path in args.tables:
            tables.append(report(path, [s for s in args.samplers.split(",") if s],
                                 args.report_seeds, args.trials, runner, rules, args.json,
                                 args.random_to))
    finally:
        runner.close()
    if args.json:
        print(json.dumps({"seeds": seeds_text(args.report_seeds), "timed_processes": args.trials,
                          "fresh": args.fresh,
                          "checkpoints": checkpoints(args.trials),
                          "random_checkpoints": beyond(args.trials, args.random_to),
                          "confirm": [CONFIRM_TOP, CONFIRM_REPEATS, args.confirm_max],
                          "tables": tables}, indent=1))
    sys.stdout.flush()

if __name__ == "__main__":
    main()
