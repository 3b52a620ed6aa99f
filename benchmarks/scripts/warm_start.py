"""Warm start from a sibling study: what a new study's user gets after a few processes.

    python benchmarks/scripts/warm_start.py                       # every pair below
    python benchmarks/scripts/warm_start.py --seeds 1000-1019 --budgets 3,10 --json
    python benchmarks/scripts/warm_start.py --set autotune.study.warm:LEND_EACH=1

For each pair of sibling tables (the same workload at two presets, and two
workloads of one family), and each report seed, one database holds two real
`StudyRunner` studies whose trials `TableLauncher` answers from the recorded
tables (`replay_study.py`):

1. the **sibling**, a study of the first table as `autotune study` runs it by
   default (`--trials 40`, then confirmation: `replay_study.CONFIRM_*`);
2. the **new study** of the second table, planned with `--trials B` for each
   budget B (default 3 and 10: the baseline counts, so 3 is the baseline and two
   more processes) and confirmed the same way, once with a warm start from the
   sibling (`autotune.study.warm`: its confirmed recommendation queued first) and
   once without (`--no-warm-start`), from the same seed.

Per pair and budget it prints the share of seeds whose final answer is right
(`outcome.summary`: within 2% of the table's optimum) and sound (right where
the optimum is at least 3% faster than the defaults, else the defaults kept),
the median captured gain, the share truly slower than
the defaults and the median device-seconds, with and without the warm start, and
the sibling's own share right (a warm start can pass on only what the sibling
found), the share of seeds on which it lent a right configuration at all
(`lent_right`: the most any rule over what is lent can be right on), and, seed by
seed, how many seeds are sound warm only and cold only: where the cold ones
outnumber the warm beyond the noise (`outcome.paired`, one-sided at 5%) the line
says the warm start is behind. Both directions of
each pair are run. Every figure is on report seeds no setting of autotune was
chosen on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import outcome  # noqa: E402  (sibling scripts, not a package)
from replay_study import (  # noqa: E402
    CONFIRM_MAX,
    CONFIRM_REPEATS,
    CONFIRM_TOP,
    Setting,
    loaded,
    memoised_ratios,
    parse_seeds,
    parse_tune,
    patched,
    seeds_text,
)

ROOT = Path(__file__).resolve().parents[2]
TABLES = ROOT / "benchmarks/tables"
#: (sibling, new study): the same workload at two presets, then two workloads of a family
PAIRS = (("lj-md-small.json.gz", "lj-md-tiny.json.gz"),
         # two presets, but two kinds of CPU: tiny's optima use 512-bit vectors (AVX-512)
         ("norm-act-small.json", "norm-act-tiny.json.gz"),
         ("norm-act-small.json", "norm-residual-small.json.gz"),
         ("attention-small.json.gz", "transformer-small.json"),
         ("gated-mlp-small.json.gz", "mlp-dp-small.json"),
         ("norm-act-small-avx512.json.gz", "norm-act-batch-small.json.gz"),
         # one workload at two presets, both tables recorded on one machine (AVX2)
         ("norm-act-small-avx2.json.gz", "norm-act-tiny-avx2.json.gz"),
         # and the same two presets on AVX-512 (tiny recorded and pinned there too)
         ("norm-act-small-avx512.json.gz", "norm-act-tiny.json.gz"))
SIBLING_TRIALS = 40
REPORT_SEEDS = "1000-1019"


def _environment() -> Any:
    """The one machine every replayed study runs on (a warm start matches backend and
    device kind)."""
    from autotune.ground.records import Environment

    return Environment("replay", "3.11", "0.10.2", "0.10.2", "cpu", "cpu", 1)


def _study(store: Any, path: Path, name: str, trials: int, seed: int, warm: bool) -> str:
    """One confirmed study of the table at `path` in `store`; the key of its answer."""
    import optuna

    from autotune.flags.compose import config_key, effective_config
    from autotune.launch.replay import TableLauncher
    from autotune.results.ranking import recommend
    from autotune.study.plan import StudyPlan
    from autotune.study.runner import StudyRunner

    table, space, catalog = loaded(str(path))
    plan = StudyPlan.of(name=name, space=space, workload=table.workload(ROOT), trials=trials,
                        sampler="auto", seed=seed, warm_start=warm,
                        preset=table.meta["preset"], devices=table.meta["devices"])
    runner = StudyRunner(plan, store, TableLauncher(table, catalog, seed=seed),
                         optuna.storages.InMemoryStorage(), facts=_environment())
    runner.run()
    runner.confirm(CONFIRM_TOP, CONFIRM_REPEATS, cap=CONFIRM_MAX)
    rec = recommend(store.runs(name))
    return "" if rec.run is None else config_key(effective_config(rec.run.flags, catalog))


def one_seed(job: tuple[str, str, int, tuple[int, ...], tuple[Setting, ...]]
             ) -> dict[str, Any]:
    """One seed of a pair: the sibling's answer, and the new study's with and without a
    warm start at each budget (true ratios and device-seconds), with the job's constants
    set (`--set`) in the process that runs it."""
    from autotune.storage.store import Store

    memoised_ratios()
    sibling, new, seed, budgets, settings = job
    answers: dict[str, Any] = {"budgets": {}}
    with patched(settings), Store.open("sqlite://") as store:
        key = _study(store, TABLES / sibling, "sibling", SIBLING_TRIALS, seed, False)
        answers["sibling"] = loaded(str(TABLES / sibling))[0].true_ratio(key)
        for warm in (True, False):
            for budget in budgets:
                name = f"new-{budget}-{warm}"
                got = _study(store, TABLES / new, name, budget, seed, warm)
                seconds = sum(r.outcome.duration_s for r in store.runs(name))
                drawn = (store.get_study(name).plan or {}).get("warm_start") or []
                store.delete_study(name)  # the next new study's only sibling is the sibling
                table = loaded(str(TABLES / new))[0]
                answers["budgets"].setdefault(str(budget), {})["warm" if warm else "cold"] = {
                    "true_ratio": table.true_ratio(got),
                    "kept": got == "", "device_seconds": seconds, "drew": len(drawn),
                    "lent": [table.true_ratio(d["key"]) for d in drawn]}
    return answers


def pair_report(sibling: str, new: str, seeds: list[int], budgets: list[int],
                jobs: int, settings: Sequence[Setting] = ()) -> dict[str, Any]:
    """Every figure of one pair (see the module docstring), with `settings` set."""
    work = [(sibling, new, seed, tuple(budgets), tuple(settings)) for seed in seeds]
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as pool:
            done = list(pool.map(one_seed, work))
    else:
        done = [one_seed(job) for job in work]
    defaults, optimum = outcome.truths(loaded(str(TABLES / new))[0])
    worth = outcome.worth_having(loaded(str(TABLES / new))[0])
    sib_defaults, sib_optimum = outcome.truths(loaded(str(TABLES / sibling))[0])
    report: dict[str, Any] = {
        "sibling": sibling, "new": new, "seeds": seeds_text(seeds),
        "new_gain": round(1 - optimum / defaults, 4),
        "sibling_right": outcome.summary([d["sibling"] for d in done], [0.0] * len(done),
                                         sib_defaults, sib_optimum,
                                         [False] * len(done))["right"],
        "sibling_drew": sum(d["budgets"][str(budgets[0])]["warm"]["drew"] > 0
                            for d in done) / len(done),
        "lent_right": lent_right([d["budgets"][str(budgets[0])]["warm"]["lent"] for d in done],
                                 optimum) if worth else None,
        "budgets": {}}
    for budget in budgets:
        row: dict[str, Any] = {}
        sound = {}
        for kind in ("warm", "cold"):
            got = [d["budgets"][str(budget)][kind] for d in done]
            found, kept = [g["true_ratio"] for g in got], [g["kept"] for g in got]
            row[kind] = outcome.summary(found, [g["device_seconds"] for g in got], defaults,
                                        optimum, kept, worth)
            row[kind]["drew"] = statistics.median(g["drew"] for g in got)
            sound[kind] = outcome.sound_seeds(found, defaults, optimum, kept, worth)
        row["paired"] = outcome.paired(sound["warm"], sound["cold"])
        report["budgets"][str(budget)] = row
    return report


def lent_right(lent: Sequence[Sequence[float | None]], optimum: float) -> float:
    """The share of seeds on which the sibling lent a right configuration (within
    `outcome.RIGHT_WITHIN` of the new table's `optimum` by its truth), from each seed's
    lent configurations' true ratios (None: not on the table). No rule that only orders,
    measures or confirms what a warm start lends is right on more seeds than this."""
    return sum(any(outcome.right_ratio(r, optimum) for r in seed if r is not None)
               for seed in lent) / len(lent)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default=REPORT_SEEDS)
    parser.add_argument("--budgets", default="3,10")
    parser.add_argument("--pairs", default="all",
                        help="'all', or indices into PAIRS (0,2), each run both ways")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="MODULE:ATTRIBUTE=VALUE",
                        help="run with a constant set (read when used), e.g. "
                             "autotune.results.confirmation:SLOWER_AFTER=16; repeatable")
    args = parser.parse_args(argv)
    seeds = parse_seeds(args.seeds)
    budgets = [int(b) for b in args.budgets.split(",")]
    chosen = PAIRS if args.pairs == "all" else [PAIRS[int(i)] for i in args.pairs.split(",")]
    settings = []
    for text in args.set:
        try:
            found = parse_tune(text)
        except ValueError as e:
            parser.error(str(e))
        if len(found) != 1:
            parser.error(f"--set '{text}' gives more than one value")
        settings += found
    reports = [pair_report(a, b, seeds, budgets, args.jobs, settings)
               for pair in chosen for a, b in (pair, pair[::-1])]
    if args.json:
        print(json.dumps(reports, indent=1))
        return
    print_table(reports)


def print_table(reports: list[dict]) -> None:
    """Each pair on a line of its own with full table names, then one row per budget;
    every line within 80 columns."""
    print(f"{'B':>5} {'right warm/cold':>16} {'sound w/c':>10} {'gain warm/cold':>15} "
          f"{'slower':>7} {'dev-s w/c':>11} {'drew':>5}")
    for r in reports:
        print(f"{r['sibling']} -> {r['new']}")
        for budget, row in r["budgets"].items():
            w, c = row["warm"], row["cold"]
            gain = "/".join("-" if x["captured_gain"] is None
                            else f"{x['captured_gain']['median']:.2f}" for x in (w, c))
            print(f"{budget:>5} {w['right']:>8.0%}/{c['right']:<7.0%} "
                  f"{w['sound']:>5.0%}/{c['sound']:<4.0%} {gain:>15} "
                  f"{max(w['slower'], c['slower']):>7.0%} "
                  f"{w['device_seconds']:>5.0f}/{c['device_seconds']:<5.0f} {w['drew']:>5}")
        ceiling = "" if r["lent_right"] is None else \
            f",\n   a right one on {r['lent_right']:.0%}"
        print(f"  (the sibling right on {r['sibling_right']:.0%}, a configuration drawn from "
              f"it on {r['sibling_drew']:.0%}{ceiling};\n   the new table's optimum "
              f"{r['new_gain']:.1%} faster than its defaults)")
        print("  seeds sound warm only/cold only: " + ", ".join(
            f"{b}: {row['paired']['only_mine']}/{row['paired']['only_theirs']}"
            + (f" (warm behind, p {row['paired']['p_behind']:.3f})"
               if row["paired"]["behind"] else "")
            for b, row in r["budgets"].items()))


if __name__ == "__main__":
    main()
