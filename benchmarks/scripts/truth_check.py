"""Check a recorded table's truth of its leading programs against runs of confirmation length.

    python benchmarks/scripts/truth_check.py                # every table with long runs
    python benchmarks/scripts/truth_check.py benchmarks/tables/lj-md-small.json.gz --json

A table's truth of a program (`ReplayTable.true_ratio`) is the median of its short
recorded processes (15-20 steps), and the table's optimum is the program with the
lowest such median: picked as the lowest of some 30-160 noisy estimates, it is
likely an underestimate (the winner's curse). The runs of confirmation length
(`record_table.py --long-for`: the same programs, later, in fresh processes of
many more steps) are an independent measurement. For each program that has them,
this prints both estimates with their 95% intervals (`autotune.rules.stats.paired_ratio`
over the processes: the same estimator confirmation uses), and the share of the
defaults' truth that each says the program saves. A program's ratio differs between
CPUs, so the two estimates compare only where both were recorded on one kind of machine
(`ReplayTable.long_comparable`: the same known vector extension); each table says so.

JSON: `{tables: [{table, steps, long_steps, vector_isa, long_vector_isa, comparable,
defaults, programs: [{configuration, short, long}]}]}`, each estimate `{ratio, low, high,
processes}` (None where the program has no such runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from replay_study import committed_tables, loaded  # noqa: E402  (sibling script)


def estimate(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The paired ratio over the OK runs with its 95% interval (None without any)."""
    from autotune.rules.stats import paired_ratio

    good = [r for r in runs if r.get("status") == "ok" and r.get("step_times_s")]
    if not good:
        return None
    found = paired_ratio([r["step_times_s"] for r in good],
                         [r["baseline_step_times_s"] for r in good])
    return {"ratio": found.ratio, "low": found.low, "high": found.high,
            "processes": len(good)}


def check(path: Path) -> dict[str, Any]:
    """One table's defaults and, per program with long runs, its short and long estimates."""
    table, _, _ = loaded(str(path))
    rows, seen = [], set()
    for key in sorted(table.long_runs, key=lambda k: table.true_ratio(k) or 0.0):
        program = table.programs.get(key, key)
        if program in seen:
            continue
        seen.add(program)
        rows.append({"configuration": key,
                     "short": estimate(table.program_runs(key)),
                     "long": estimate(table.program_runs(key, long=True))})
    records = table.meta.get("long", [])
    return {"table": path.name, "steps": table.meta["steps"],
            "long_steps": max((r["steps"] for r in records), default=None),
            "vector_isa": (table.meta.get("made_on") or {}).get("vector_isa"),
            "long_vector_isa": sorted({str(r.get("vector_isa")) for r in records}),
            "comparable": table.long_comparable,
            "defaults": estimate(table.program_runs("")), "programs": rows}


def _text(found: dict[str, Any] | None, defaults: dict[str, Any] | None) -> str:
    if found is None:
        return "-"
    saves = "" if defaults is None else f" saves {1 - found['ratio'] / defaults['ratio']:+.1%}"
    return (f"{found['ratio']:.3f} [{found['low']:.3f}, {found['high']:.3f}] "
            f"n={found['processes']}{saves}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path)
    parser.add_argument("--json", action="store_true", help="print one JSON document only")
    args = parser.parse_args(argv)
    paths = args.tables or [p for p in committed_tables() if loaded(str(p))[0].long_runs]
    if not paths:
        parser.error("no table has runs of confirmation length (record_table.py --long-for)")
    found = [check(path) for path in paths]
    if args.json:
        print(json.dumps({"tables": found}, indent=1))
        return
    for row in found:
        defaults = row["defaults"]
        print(f"{row['table']}: defaults (A/A, {row['steps']} steps) {_text(defaults, None)}")
        if not row["comparable"]:
            print(f"  (not comparable: the table's runs on {row['vector_isa'] or 'an unknown CPU'}"
                  f", the long runs on {', '.join(row['long_vector_isa'])})")
        for program in row["programs"]:
            print(f"  {program['configuration'] or '(defaults)'}")
            print(f"    {row['steps']:>3} steps {_text(program['short'], defaults)}")
            print(f"    {row['long_steps']:>3} steps {_text(program['long'], defaults)}")


if __name__ == "__main__":
    main()
