"""The user's bill: device-seconds until a trustworthy answer, on the recorded tables.

    python benchmarks/scripts/search_bill.py                       # every committed table
    python benchmarks/scripts/search_bill.py --seeds 20 --budgets 10,20,40 --json

A study is only done when its answer can be acted on: a recommendation that
confirmation measured faster than XLA's defaults, or a confident "keep the
defaults". This script models what that costs on a recorded table
(`benchmarks/tables/`, answered by `autotune.launch.replay.TableLauncher`): each
seeded study runs a search of B timed processes, then the confirmation phase
`autotune study` runs by default (the best 3 configurations, 4 fresh processes
each), and the answer is `recommend`'s. The bill counts every process the
study launched, from the table's recorded times: each compile (configurations
whose program was timed already, and compile-only probes, cost their compile
only), each timed process (its compile and its candidate and baseline steps),
and every confirmation process. Warm-up steps were not recorded and are not
counted, for any variant.

An answer is **right** when it recommends a configuration whose true ratio
(its program's pooled repeats, `ReplayTable.true_ratio`) is within 2% of the
table's best, or when it keeps XLA's defaults and the defaults' own true ratio
is within 2% of the best (nothing measurably better exists). The confidence of
a variant at budget B is the share of seeds whose answer is right.

Variants:

- `study`: the study as built (the space fitted to the workload, `auto`
  sampler, racing the leaders, evidence pooled by program, confirmation
  starting from it);
- `random`: random search over the space as written, no racing, then the
  same confirmation;
- `no-race`: the study without racing (so no pooled evidence before
  confirmation; the space still fitted), then the same confirmation.

For each variant the script prints, per budget, the confidence and the median
device-seconds, and then the cheapest budget whose confidence reaches
`--target` (default 0.8) with its median device-seconds; "equal confidence"
compares those. Seeds are 1000 onwards (the report seeds of
`search_efficiency.py`), never the choose seeds 0-19.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_efficiency as efficiency  # noqa: E402  (a sibling script, not a package)

ROOT = Path(__file__).resolve().parents[2]
#: variant -> (sampler, racing, space fitted to the workload)
VARIANTS = {"study": ("auto", True, True), "random": ("random", False, False),
            "no-race": ("auto", False, True)}
BUDGETS = (10, 20, 40, 80)
CONFIRM_TOP, CONFIRM_REPEATS = 3, 4
WITHIN = 0.02


def one_answer(job: tuple[str, str, int, int]) -> tuple[bool, float]:
    """(right, device-seconds) of one seeded study: a search of `budget` timed processes
    and the default confirmation, on the table at `path`."""
    import optuna

    from autotune.flags.compose import config_key, effective_config
    from autotune.launch.replay import TableLauncher
    from autotune.results.ranking import recommend
    from autotune.storage.store import Store
    from autotune.study.plan import StudyPlan
    from autotune.study.runner import StudyRunner

    path, variant, seed, budget = job
    table, space, catalog = efficiency._loaded(path)
    sampler, racing, fit = VARIANTS[variant]
    plan = StudyPlan.of(name=f"{variant}-{seed}", space=space,
                     workload=table.workload(ROOT), trials=budget * 20,
                     sampler=sampler, seed=seed, racing=racing, fit=fit)
    store = Store.open("sqlite://")
    launcher = efficiency._Counting(TableLauncher(table, catalog, seed=seed), budget)
    runner = StudyRunner(plan, store, launcher, optuna.storages.InMemoryStorage())
    try:
        runner.run()
    except efficiency._Enough:
        pass
    launcher.goal = math.inf  # confirmation is not part of the search's budget
    runner.confirm(CONFIRM_TOP, CONFIRM_REPEATS)
    runs = store.runs(plan.name)
    store.close()
    seconds = sum(r.outcome.duration_s for r in runs)
    best = min(table.ratios().values())
    rec = recommend(runs)
    key = "" if rec.run is None else config_key(effective_config(rec.run.flags, catalog))
    truth = table.true_ratio(key)
    return truth is not None and truth <= best * (1 + WITHIN), seconds


def bill(path: Path, seeds: Sequence[int], budgets: Sequence[int], target: float,
         pool: ProcessPoolExecutor | None, quiet: bool) -> dict[str, Any]:
    """One table's bill per variant: per budget the confidence and median device-seconds,
    and the cheapest budget reaching `target` (None when none does)."""
    say = (lambda *a, **k: None) if quiet else print
    table, _, _ = efficiency._loaded(str(path))
    best = min(table.ratios().values())
    baseline = table.true_ratio("") or math.nan
    say(f"\n{path.name}: best true ratio {best:.3f}, XLA's defaults {baseline:.3f} "
        f"({baseline / best:.3f} x the best): the right answer is "
        + ("keeping the defaults or " if baseline <= best * (1 + WITHIN) else "")
        + f"a configuration within {WITHIN:.0%} of the best")
    say(f"{'variant':8} " + " ".join(f"{'B=' + str(b):>16}" for b in budgets)
        + "   (share right, median device-seconds)")
    out: dict[str, Any] = {"table": path.name, "variants": []}
    for variant in VARIANTS:
        cells, entry = [], {"variant": variant, "budgets": {}, "cheapest": None}
        for budget in budgets:
            jobs = [(str(path), variant, seed, budget) for seed in seeds]
            answers = list(pool.map(one_answer, jobs) if pool else map(one_answer, jobs))
            right = sum(ok for ok, _ in answers) / len(answers)
            seconds = statistics.median(s for _, s in answers)
            entry["budgets"][str(budget)] = {"right": right, "device_seconds": round(seconds, 2)}
            if entry["cheapest"] is None and right >= target:
                entry["cheapest"] = {"budget": budget, "device_seconds": round(seconds, 2)}
            cells.append(f"{right:5.0%} {seconds:8.1f} s")
        out["variants"].append(entry)
        say(f"{variant:8} " + " ".join(f"{c:>16}" for c in cells), flush=True)
    cheapest = {e["variant"]: e["cheapest"] for e in out["variants"]}
    for variant, found in cheapest.items():
        text = (f"{target:.0%} right after {found['device_seconds']:.1f} device-seconds "
                f"(B={found['budget']})" if found
                else f"never {target:.0%} right within B={max(budgets)}")
        ratio = ""
        if found and cheapest["random"] and variant != "random":
            share = found["device_seconds"] / cheapest["random"]["device_seconds"]
            ratio = f", {share:.2f} x random's"
            found["vs_random"] = round(share, 3)
        say(f"  {variant}: {text}{ratio}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        default=[ROOT / "benchmarks/tables" / t for t in efficiency.TABLES])
    parser.add_argument("--seeds", type=int, default=20, help="seeds 1000.. (default 20)")
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)),
                        help="timed processes of the search to try (default 10,20,40,80)")
    parser.add_argument("--target", type=float, default=0.8,
                        help="share of seeds that must be right (default 0.8)")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--json", action="store_true", help="print one JSON document only")
    args = parser.parse_args(argv)
    budgets = sorted({int(b) for b in args.budgets.split(",") if b})
    seeds = list(range(1000, 1000 + args.seeds))
    pool = ProcessPoolExecutor(args.jobs) if args.jobs > 1 else None
    try:
        tables = [bill(p, seeds, budgets, args.target, pool, args.json) for p in args.tables]
    finally:
        if pool:
            pool.shutdown()
    if args.json:
        print(json.dumps({"seeds": len(seeds), "target": args.target,
                          "confirm": [CONFIRM_TOP, CONFIRM_REPEATS], "tables": tables}, indent=1))


if __name__ == "__main__":
    main()
