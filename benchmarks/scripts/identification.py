"""How hard a recorded table makes it to identify a right program: a reference point.

    python benchmarks/scripts/identification.py                   # every table with a gain
    python benchmarks/scripts/identification.py benchmarks/tables/lj-md-small.json.gz --json

A reference point for best-program identification, a search far luckier than a
real one in what it sees, though not in how it spends: it knows every program the
table's configurations compile to (compiles are free and nothing is missed) and
times each of them `n` times (`--draws`, each a recorded process of the program
drawn without replacement, as the replay serves them; all of them where the table
holds fewer), the same `n` for every program. An adaptive allocation, or a rule
that uses what the flags share, may do better with as many processes. It then
ranks the programs by their pooled estimate (the median of the processes' log
ratios, as `autotune.results.evidence` pools them) and counts the share of
`--seeds` draws in which a right program (`outcome.right_ratio`: within 2% of
the optimum by the table's truth) is among the first `k` (`--top`), the
programs a confirmation phase would go on to measure. That costs up to `n` times
the table's program count in timed processes, before any confirmation: where even
that leaves a right program out of the first few on many draws, a study of 40
timed processes, which times a fraction of the programs once, leaves it to its
confirmation to find the program.

The noise column is the pooled within-program standard deviation of one
process's log ratio over the programs with at least two processes.

`--seeds` is how many times the whole table is drawn (one generator, seeded 0).

JSON: `{draws: [...], top: [...], seeds, tables: [{table, programs, right, noise,
defaults, optimum, shares: {"N": {"K": share}}, processes: {"N": N x programs}}]}`
(`processes` counts N for every program, where a program with fewer recorded
processes than N is timed in all it has).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from outcome import right_ratio, truths, worth_having  # noqa: E402  (sibling script)
from replay_study import committed_tables, loaded  # noqa: E402


def program_ratios(table) -> dict[str, tuple[float, list[float]]]:
    """Program (a configuration of it stands for it) -> (its true ratio, the ratio of each
    recorded process of it), for every program with an OK process."""
    out: dict[str, tuple[float, list[float]]] = {}
    seen: set[tuple[str, str]] = set()
    for key in sorted(table.runs):
        program = ("program", table.programs[key]) if key in table.programs else ("config", key)
        ratios = table.pooled_repeats(key)
        if program in seen or not ratios:
            continue
        seen.add(program)
        out[key] = (table.true_ratio(key), list(ratios))
    return out


def noise(programs: dict[str, tuple[float, list[float]]]) -> float | None:
    """The pooled within-program standard deviation of one process's log ratio (None
    without two degrees of freedom): `autotune.results.evidence.within_noise`."""
    from autotune.results.evidence import within_noise

    return within_noise(ratios for _, ratios in programs.values())


def shares(programs: dict[str, tuple[float, list[float]]], optimum: float, draws: int,
           top: Sequence[int], seeds: int) -> dict[int, float]:
    """k -> the share of `seeds` draws (each program timed `draws` times) whose first k
    programs by pooled estimate hold a right one."""
    right = {key for key, (truth, _) in programs.items() if right_ratio(truth, optimum)}
    hits = dict.fromkeys(top, 0)
    rng = random.Random(0)
    for _ in range(seeds):
        estimate = {key: statistics.median(math.log(r) for r in
                                           rng.sample(ratios, min(draws, len(ratios))))
                    for key, (_, ratios) in programs.items()}
        order = sorted(estimate, key=lambda key: (estimate[key], key))
        for k in top:
            hits[k] += not right.isdisjoint(order[:k])
    return {k: hits[k] / seeds for k in top}


def check(path: Path, draws: Sequence[int], top: Sequence[int], seeds: int) -> dict[str, Any]:
    """One table's row (see the module's JSON)."""
    table, _, _ = loaded(str(path))
    defaults, optimum = truths(table)
    programs = program_ratios(table)
    right = sum(right_ratio(truth, optimum) for truth, _ in programs.values())
    return {"table": path.name, "programs": len(programs), "right": right,
            "noise": noise(programs), "defaults": defaults, "optimum": optimum,
            "shares": {str(n): {str(k): s for k, s in shares(programs, optimum, n, top,
                                                              seeds).items()}
                       for n in draws},
            "processes": {str(n): n * len(programs) for n in draws}}


def _numbers(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        help="default: every committed table with a gain worth having")
    parser.add_argument("--draws", type=_numbers, default=[1, 2, 3],
                        help="processes per program, e.g. 1,2,3")
    parser.add_argument("--top", type=_numbers, default=[1, 3, 5],
                        help="how many of the first programs count, e.g. 1,3,5")
    parser.add_argument("--seeds", type=int, default=2000, help="draws of the whole table")
    parser.add_argument("--json", action="store_true", help="print one JSON document only")
    args = parser.parse_args(argv)
    if args.seeds < 1 or not args.draws or not args.top or min(args.draws + args.top) < 1:
        parser.error("--seeds, --draws and --top must be positive")
    paths = args.tables or [p for p in committed_tables() if worth_having(loaded(str(p))[0])]
    rows = [check(path, args.draws, args.top, args.seeds) for path in paths]
    if args.json:
        print(json.dumps({"draws": args.draws, "top": args.top, "seeds": args.seeds,
                          "tables": rows}, indent=1))
        return
    print(f"a right program among the first k by pooled estimate, every program timed n "
          f"times ({args.seeds} draws)")
    for row in rows:
        sd = "-" if row["noise"] is None else f"{row['noise']:.3f}"
        print(f"{row['table']}: {row['programs']} programs, {row['right']} right, "
              f"noise {sd} a process")
        for n in args.draws:
            cells = "  ".join(f"top {k} {row['shares'][str(n)][str(k)]:4.0%}" for k in args.top)
            print(f"  n={n} ({row['processes'][str(n)]:>3} processes)  {cells}")


if __name__ == "__main__":
    main()
