"""How often a ratio's interval holds the truth, on processes recorded on a real machine.

For each recorded table, each program with at least three times N recorded processes,
and each N: draw N of its processes (without replacement), compute the paired ratio's
95% interval three ways, and count how often it holds the program's truth (the median
of all its recorded processes, `ReplayTable.true_ratio`):

- `shipped`: `autotune.rules.stats.paired_ratio` as it ships (the steps within each
  process are resampled too below `STEPS_RESAMPLED_BELOW` processes);
- `hierarchical`: processes, then the steps within each, at every N (what shipped
  before 2026-12-06);
- `processes_only`: processes only, at every N.

A calibrated 95% interval holds the truth on about 95% of draws; one that holds it
on nearly all is wider than the noise needs, and confirms less than is there. The
drawn processes are among those the truth is the median of, which raises every
method's share a little.

    python benchmarks/scripts/interval_coverage.py
    python benchmarks/scripts/interval_coverage.py benchmarks/tables/lj-md-small.json.gz \\
        --processes 4,8,12 --draws 20 --json

The last table, `every table` (JSON: `overall`), pools the draws of all of them (the
width: the median of the tables' medians). Runs in one process, about a minute for
every committed table at the defaults.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_study import committed_tables, loaded, patched  # noqa: E402  (sibling script)

METHODS = {"shipped": None, "hierarchical": 10**9, "processes_only": 2}
#: the bootstrap's resamples per interval (the study's 2000 would take 4 times as long)
N_BOOT = 500


def steps_resampled_below(value: int | None) -> Any:
    """`stats.STEPS_RESAMPLED_BELOW` set to `value` inside the block (None: as shipped)."""
    return patched([] if value is None else
                   [("autotune.rules.stats", "STEPS_RESAMPLED_BELOW", value)])


def program_runs(table: Any) -> list[tuple[float, list[Mapping[str, Any]]]]:
    """(truth, its OK recorded processes) for each program of the table."""
    seen: set[Any] = set()
    out = []
    for key, truth in sorted(table.ratios().items()):
        program = table.programs.get(key, key)
        if program in seen:
            continue
        seen.add(program)
        runs = [r for r in table.program_runs(key)
                if r.get("status") == "ok" and r.get("step_times_s")]
        out.append((truth, runs))
    return out


def coverage(table: Any, n: int, draws: int, seed: int = 0) -> dict[str, Any]:
    """Each method's share of draws whose interval holds the truth, and the median width
    of its interval (log high/low), over `draws` draws of `n` processes per program.
    A program the bootstrap draws from is drawn with `seed`, the same for every method."""
    from autotune.rules.stats import paired_ratio

    rng = random.Random(seed)
    picks = [(truth, rng.sample(runs, n), rng.randrange(1 << 30))
             for truth, runs in program_runs(table) if len(runs) >= 3 * n
             for _ in range(draws)]
    row: dict[str, Any] = {"processes": n, "draws": len(picks)}
    for method, value in METHODS.items():
        hits, widths = 0, []
        with steps_resampled_below(value):
            for truth, runs, boot_seed in picks:
                est = paired_ratio([r["step_times_s"] for r in runs],
                                   [r["baseline_step_times_s"] for r in runs],
                                   n_boot=N_BOOT, seed=boot_seed)
                hits += est.low <= truth <= est.high
                widths.append(math.log(est.high / est.low))
        row[method] = ({"covered": round(hits / len(picks), 3),
                        "width": round(statistics.median(widths), 4)} if picks else None)
    return row


def report(paths: Sequence[Path], sizes: Sequence[int], draws: int) -> list[dict[str, Any]]:
    """One entry per table: its name, steps per process and a row per N (`coverage`)."""
    out = []
    for path in paths:
        table = loaded(str(path))[0]
        out.append({"table": path.name, "steps": table.meta.get("steps"),
                    "rows": [coverage(table, n, draws) for n in sizes]})
    return out


def overall(tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per N, each method's share covered over every table's draws together, and the
    median over tables of its median width."""
    out = []
    for i, n in enumerate(r["processes"] for r in tables[0]["rows"]) if tables else ():
        rows = [t["rows"][i] for t in tables if t["rows"][i]["draws"]]
        draws = sum(r["draws"] for r in rows)
        row: dict[str, Any] = {"processes": n, "draws": draws}
        for m in METHODS:
            row[m] = {"covered": round(sum(r[m]["covered"] * r["draws"] for r in rows)
                                       / draws, 3),
                      "width": round(statistics.median(r[m]["width"] for r in rows), 4)
                      } if draws else None
        out.append(row)
    return out


def print_text(tables: list[dict[str, Any]]) -> None:
    """A table per recorded table: N, draws, then each method's coverage and width."""
    head = f"{'N':>3} {'draws':>5}" + "".join(f" {m:>22}" for m in METHODS)
    every = {"table": "every table", "steps": "its", "rows": overall(tables)}
    for entry in [*tables, every] if len(tables) > 1 else tables:
        print(f"{entry['table']} ({entry['steps']} steps per process): covered / width")
        print(head)
        for row in entry["rows"]:
            cells = "".join(
                f" {'-':>22}" if row[m] is None else
                f" {row[m]['covered']:>11.1%} / {row[m]['width']:<8.4f}" for m in METHODS)
            print(f"{row['processes']:>3} {row['draws']:>5}{cells}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        help="recorded tables (default: every one in benchmarks/tables)")
    parser.add_argument("--processes", default="4,8,12",
                        help="processes per draw, comma-separated")
    parser.add_argument("--draws", type=int, default=10, help="draws per program and N")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        sizes = [int(x) for x in args.processes.split(",")]
    except ValueError:
        parser.error(f"--processes: '{args.processes}' is not a list of counts, e.g. 4,8,12")
    if any(n < 1 for n in sizes) or args.draws < 1:
        parser.error("--processes and --draws must be at least 1")
    tables = report(args.tables or committed_tables(), sizes, args.draws)
    if args.json:
        print(json.dumps({"processes": sizes, "draws": args.draws, "tables": tables,
                          "overall": overall(tables)}, indent=1))
    else:
        print_text(tables)


if __name__ == "__main__":
    main()
