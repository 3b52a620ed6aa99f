"""Choose a tuned constant leave-one-workload-out, and report it only on the table left out.

    python benchmarks/scripts/leave_one_out.py \\
        --tune autotune.study.samplers:TPE_STARTUP=2,4,8 --budget 40
    python benchmarks/scripts/leave_one_out.py --tune autotune.results.evidence:BACKED_BY=2,3,4 \\
        --tune autotune.study.samplers:TPE_STARTUP=4,8 --json

Held-out seeds are not held-out workloads: a constant chosen on a table's seeds
and reported on the same table's other seeds has still seen that workload. So
for each table T (every table in `benchmarks/tables/` by default), every
combination of the `--tune` values is scored on the tables of *other workloads*
(their `--choose-seeds`; each workload's score the mean over its tables), the
best combination is picked, and only then is it run on T, on `--report-seeds`,
disjoint from the choose seeds. A workload is a table's `benchmark`
(`workload_of`): norm-act's tables of every preset and CPU with its batch
sibling, lj-md's, and attention's CPU and GPU tables are each one workload,
left out together, since a constant chosen on norm-act small has seen norm-act
tiny. The figure printed for T is the left-out figure; beside it, what autotune
ships (the constants as the code has them) on the same seeds, and the oracle's
limit (`outcome.py`). Each combination's summed score on the other workloads
(`totals`; the JSON's `scores`, as [sound, gain, -device-seconds]) is printed
too, so a pick won by a tie-break on device-seconds shows as one.

Each study is the user's (`replay_study.py`): planned with `--trials B` (the
`--budget`, default 40), stopped after B timed processes, confirmed as
`autotune study` does. A combination's score on a table is, in order: the share
of seeds whose answer is sound (`outcome.py`: right where the table offers a
gain worth having, the defaults kept elsewhere: the issue's bar), the median
captured gain (0 where the table offers none), fewer device-seconds; summed
over the tables it is scored on.

A constant is named `module:ATTRIBUTE`; it is set in the worker process for the
study (`replay_study.patched`), so it must be read when used, not bound early.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import outcome  # noqa: E402  (sibling scripts, not a package)
from replay_study import (  # noqa: E402
    Runner,
    Setting,
    committed_tables,
    confirm_budget,
    loaded,
    parse_seeds,
    parse_tune,
    patched,
    seeds_text,
)
from search_efficiency import figures_at  # noqa: E402

CHOOSE_SEEDS, REPORT_SEEDS = "0-9", "1000-1019"

SIBLINGS = {"norm-act-batch": "norm-act"}
"""Corpus workloads that are another's computation at another size, by benchmark name:
`benchmarks/corpus/norm-act-batch.py` is the built-in norm-act step at four times its
batch."""


def workload_of(meta: Mapping[str, Any]) -> str:
    """The workload a recorded table measures (`meta`: the table's own keys, `ReplayTable.meta`):
    its benchmark, or the one it is a sibling of."""
    name = str(meta["benchmark"])
    return SIBLINGS.get(name, name)


def score(figures: dict[str, Any]) -> tuple[float, float, float]:
    """Higher is better: share sound, median captured gain (0 if none), -device-seconds."""
    gain = (figures["captured_gain"] or {}).get("median", 0.0)
    return figures["sound"], gain, -figures["device_seconds"]


def totals(scores: dict[tuple[Setting, ...], dict[str, tuple[float, ...]]],
           workloads: Mapping[str, str], left_out: str
           ) -> dict[tuple[Setting, ...], tuple[float, ...]]:
    """Each combination's score over every workload but `left_out` (`workloads`: each
    table's workload), in the order the combinations were given. A workload's score is
    the mean over its tables, so a workload recorded at three sizes weighs as much as one
    recorded once; the workloads' scores are summed, column by column (`score`).

    Raises:
        ValueError: every table belongs to `left_out`, so nothing is left to choose on.
    """
    kept = sorted({w for w in workloads.values() if w != left_out})
    if not kept:
        raise ValueError("every table belongs to the workload left out: nothing to choose on")

    def total(combo: tuple[Setting, ...]) -> tuple[float, ...]:
        means = []
        for workload in kept:
            rows = [s for table, s in scores[combo].items() if workloads[table] == workload]
            means.append([sum(column) / len(rows) for column in zip(*rows, strict=True)])
        return tuple(sum(column) for column in zip(*means, strict=True))

    return {combo: total(combo) for combo in scores}


def pick(scores: dict[tuple[Setting, ...], dict[str, tuple[float, ...]]],
         workloads: Mapping[str, str], left_out: str) -> tuple[Setting, ...]:
    """The combination with the best `totals` without `left_out`. Ties: the first in the
    order the combinations were given.

    Raises:
        ValueError: every table belongs to `left_out`, so nothing is left to choose on.
    """
    found = totals(scores, workloads, left_out)
    return max(found, key=found.__getitem__)


def label(combo: tuple[Setting, ...]) -> str:
    """A combination as `--tune` spells it: `module:ATTRIBUTE=value`, joined by spaces."""
    return " ".join(f"{m}:{a}={json.dumps(v)}" for m, a, v in combo)


def run(tables: list[Path], tunes: list[list[Setting]], budget: int, sampler: str,
        choose: list[int], report: list[int], runner: Runner) -> list[dict[str, Any]]:
    """Per table: the pick made without it and the left-out figures (see the module)."""
    combos = list(itertools.product(*tunes))
    scores: dict[tuple[Setting, ...], dict[str, tuple[float, ...]]] = {c: {} for c in combos}
    workloads: dict[str, str] = {}
    for i, path in enumerate(tables, start=1):
        _progress(f"choosing: {path.name} ({i}/{len(tables)}), {len(combos)} combinations "
                  f"x {len(choose)} seeds")
        table, _, _ = loaded(str(path))
        workloads[path.name] = workload_of(table.meta)
        defaults, best = outcome.truths(table)
        worth = outcome.worth_having(table)
        for combo in combos:
            answers = runner.answers(path, sampler, choose, budget, settings=combo)
            scores[combo][path.name] = score(figures_at(answers, budget, best, defaults,
                                                        worth))
    out = []
    for i, path in enumerate(tables, start=1):
        _progress(f"reporting: {path.name} ({i}/{len(tables)}), {len(report)} seeds")
        table, _, _ = loaded(str(path))
        defaults, best = outcome.truths(table)
        worth = outcome.worth_having(table)
        workload = workloads[path.name]
        chosen, margins = pick(scores, workloads, workload), totals(scores, workloads, workload)
        left = figures_at(runner.answers(path, sampler, report, budget, settings=chosen),
                          budget, best, defaults, worth)
        shipped = figures_at(runner.answers(path, sampler, report, budget), budget, best,
                             defaults, worth)
        with patched(chosen):  # the oracle is judged by the rules of the value it bounds
            limit = outcome.oracle(table, [budget + confirm_budget(chosen)] * len(report),
                                   report, runner.fresh)
        out.append({"table": path.name, "workload": workload,
                    "pick": {f"{m}:{a}": v for m, a, v in chosen},
                    "left_out": left, "shipped": shipped, "oracle": limit,
                    "of_oracle": outcome.of_oracle(left, limit),
                    "scores": {label(c): [round(x, 3) for x in t]
                               for c, t in margins.items()}})
    return out


def _progress(text: str) -> None:
    """One line of progress on standard error (standard output keeps the report)."""
    print(f"leave_one_out: {text}", file=sys.stderr, flush=True)


def _line(name: str, figures: dict[str, Any]) -> str:
    gain = figures["captured_gain"]
    text = "-" if gain is None else f"{gain['median']:.2f}/{gain['p10']:.2f}"
    return (f"  {name:9} right {figures['right']:4.0%}  gain (median/p10) {text:>11}  slower "
            f"{figures['slower']:4.0%}  kept {figures['kept']:4.0%}  "
            f"sound {figures['sound']:4.0%}  "
            f"{figures['device_seconds']:7.1f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        default=committed_tables())
    parser.add_argument("--tune", action="append", required=True,
                        help="module:ATTRIBUTE=v1,v2,... (repeat for several constants)")
    parser.add_argument("--budget", type=int, default=40, help="--trials of each study")
    parser.add_argument("--sampler", default="auto")
    parser.add_argument("--choose-seeds", default=CHOOSE_SEEDS)
    parser.add_argument("--report-seeds", default=REPORT_SEEDS)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", action="store_true", help="print one JSON document only")
    parser.add_argument("--fresh", action="store_true",
                        help="never serve a recorded process twice (see search_efficiency.py)")
    args = parser.parse_args(argv)
    try:
        tunes = [parse_tune(t) for t in args.tune]
        choose, report = parse_seeds(args.choose_seeds), parse_seeds(args.report_seeds)
    except ValueError as exc:
        parser.error(str(exc))
    if set(choose) & set(report):
        parser.error("--choose-seeds and --report-seeds must be disjoint")
    if len({workload_of(loaded(str(path))[0].meta) for path in args.tables}) < 2:
        parser.error("leaving one workload out needs tables of at least two workloads")
    runner = Runner(max(1, args.jobs), fresh=args.fresh)
    try:
        found = run(args.tables, tunes, args.budget, args.sampler, choose, report, runner)
    finally:
        runner.close()
    if args.json:
        print(json.dumps({"budget": args.budget, "sampler": args.sampler, "tune": args.tune,
                          "fresh": args.fresh,
                          "choose_seeds": seeds_text(choose), "report_seeds": seeds_text(report),
                          "tables": found}, indent=1))
        return
    print(f"each workload left out: the pick scored on the other workloads' choose seeds "
          f"{seeds_text(choose)}, reported on its report seeds {seeds_text(report)}; "
          f"--trials {args.budget}, sampler {args.sampler}, then the default confirmation")
    for row in found:
        print(f"{row['table']} ({row['workload']}): pick {row['pick']}")
        for combo, total in row["scores"].items():
            print(f"  on the others: {combo}: sound {total[0]:.2f}, gain {total[1]:.2f}, "
                  f"{-total[2]:.1f} s")
        for name in ("left_out", "shipped", "oracle"):
            print(_line(name, row[name]))
        served = row["left_out"].get("served") or {}
        if served.get("long") or served.get("joined"):
            print(f"  left out: {served['long']} confirmation processes served from runs of "
                  f"that length, {served['joined']} joined from shorter runs")
        if row["left_out"].get("reused") or row["oracle"].get("reused"):
            print(f"  a recorded process drawn twice behind the answer: left out on "
                  f"{row['left_out']['reused']:.0%} of seeds, the oracle on "
                  f"{row['oracle']['reused']:.0%} (their intervals narrower than the table "
                  "supports; --fresh bounds them)")


if __name__ == "__main__":
    main()
