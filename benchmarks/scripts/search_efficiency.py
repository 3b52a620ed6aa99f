"""How many trials each sampler needs to reach the best configuration of a recorded table.

    python benchmarks/scripts/search_efficiency.py                  # every committed table
    python benchmarks/scripts/search_efficiency.py --seeds 5 --samplers random,auto

Each run is a real `autotune.study.StudyRunner` study (baseline first, the
sampler, the no-repeat rule, pruning) whose trials are answered by
`TableLauncher` from a table recorded on a real machine (`benchmarks/tables/`,
see `record_table.py`), each answer drawn from the recorded repeats. After
each launched trial the study's incumbent is the configuration with the best
*observed* time ratio so far (what the search would report); its *true* ratio
is the median over the recorded repeats of every configuration XLA compiled to
the same program (`ReplayTable.true_ratio`: a program measured 20 times, not
four equal programs measured 5 times each, whose luckiest would otherwise be
"the best"). Per table and sampler, over `--seeds` seeded
studies, the script prints the median number of launched trials until the
incumbent's true ratio is within 1% and 2% of the table's best, and the
incumbent's distance from the best after 20, 40 and 80 trials. It also prints
how flat the table is (the share of configurations within 1% and 2% of the
best): "reached within 2%" means little where most configurations are.

Structure or noise? It fits an additive model (one effect per flag value) to
the table's log ratios and prints the residual spread next to the noise of a
table value (a median of its program's recorded repeats). Where the two are equal, the
configurations differ from the model by no more than their measurement noise:
the table's best is then the luckiest draw of that noise, and no search can
aim for it (see the README's Search section).
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("norm-act-small.json", "transformer-small.json", "mlp-dp-small.json")
CHECKPOINTS = (20, 40, 80)
WITHIN = (0.01, 0.02, 0.05)


@dataclass
class Trace:
    """The incumbent's true ratio after each launched trial of one seeded study."""

    true_ratios: list[float]

    def trials_to(self, target: float) -> float:
        """First trial count at which the incumbent is within `target`, else infinity."""
        for n, ratio in enumerate(self.true_ratios, start=1):
            if ratio <= target:
                return n
        return math.inf

    def at(self, n: int) -> float:
        return self.true_ratios[min(n, len(self.true_ratios)) - 1]


def run_study(table, space, sampler: str, seed: int, trials: int, catalog) -> Trace:
    """One seeded study on the table; the incumbent's true ratio after each launch."""
    import optuna

    from autotune.flags.compose import config_key, effective_config
    from autotune.records import Role
    from autotune.replay import TableLauncher
    from autotune.storage.store import Store
    from autotune.study import StudyPlan, StudyRunner
    from autotune.workloads import resolve_benchmark

    plan = StudyPlan(name=f"{sampler}-{seed}", space_name=space.name, space=space,
                     workload=resolve_benchmark(table.meta["benchmark"]), trials=trials,
                     sampler=sampler, seed=seed)
    store = Store.open("sqlite://")
    runner = StudyRunner(plan, store, TableLauncher(table, catalog, seed=seed),
                         optuna.storages.InMemoryStorage())
    runner.run()
    runs = [r for r in store.runs(plan.name) if r.role is not Role.CONFIRM]
    trace, best_seen, best_key = [], math.inf, ""
    for run in sorted(runs, key=lambda r: r.id):
        key = config_key(effective_config(run.flags, catalog))
        if run.ratio is not None and run.ratio < best_seen:
            best_seen, best_key = run.ratio, key
        trace.append(table.true_ratio(best_key) if best_key else math.inf)
    store.close()
    return Trace(trace)


def report(path: Path, samplers: list[str], seeds: int, trials: int) -> None:
    """Print one table's flatness and each sampler's figures."""
    from autotune.flags.catalog import load_catalog
    from autotune.replay import ReplayTable
    from autotune.spaces import load_space

    table = ReplayTable.load(path)
    space = load_space(str(ROOT / table.meta["space"]))
    catalog = load_catalog()
    ratios = table.ratios()
    best = min(ratios.values())
    print(f"\n{path.name}: {table.meta['benchmark']} ({table.meta['preset']}), space "
          f"{space.name}: {table.meta['configurations']} configurations, {len(ratios)} distinct "
          f"measured, {table.meta['repeats']} repeats; best ratio {best:.3f}, worst "
          f"{max(ratios.values()):.3f}; flatness: {table.flatness(0.01):.1%} within 1%, "
          f"{table.flatness(0.02):.1%} within 2% of the best")
    programs = table.distinct_programs()
    print(f"programs: {programs} distinct programs; a configuration's true ratio pools the "
          "repeats of its program" if programs else
          "programs: not fingerprinted; a configuration's true ratio is its own repeats' median")
    noise = _noise(table)
    print(f"noise: one measurement's ratio varies by {noise:.1%} (median relative "
          "standard deviation over a configuration's repeats)")
    fit = _additive_fit(table)
    verdict = ("the flags interact or matter beyond the noise" if fit.residual > 2 * fit.value_noise
               else "no structure beyond the noise of the table's values")
    print(f"structure: an additive model of the flags leaves a residual of {fit.residual:.1%} "
          f"against a table value's own noise of about {fit.value_noise:.1%}: {verdict}")
    print(f"{'sampler':8} " + " ".join(f"{'to ' + format(w, '.0%'):>7}" for w in WITHIN) + "  "
          + "  ".join(
        f"{'at ' + str(n):>7}" for n in CHECKPOINTS) + "   (median over seeds; 'at N': "
        "incumbent's true ratio / best)")
    for sampler in samplers:
        traces = [run_study(table, space, sampler, seed, trials, catalog) for seed in range(seeds)]
        to = [_median_text([t.trials_to(best * (1 + w)) for t in traces]) for w in WITHIN]
        at = [statistics.median(t.at(n) / best for t in traces) for n in CHECKPOINTS]
        print(f"{sampler:8} " + " ".join(f"{x:>7}" for x in to) + "  "
              + "  ".join(f"{a:7.3f}" for a in at), flush=True)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        default=[ROOT / "benchmarks/tables" / t for t in TABLES])
    parser.add_argument("--samplers", default="random,tpe,auto")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--trials", type=int, default=max(CHECKPOINTS))
    args = parser.parse_args()
    for path in args.tables:
        report(path, args.samplers.split(","), args.seeds, args.trials)


if __name__ == "__main__":
    main()
