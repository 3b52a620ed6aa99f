"""Which pruning rule saves the most steps without losing good configurations?

    python benchmarks/scripts/pruning_check.py                     # every committed table

Replays the recorded step times of a table (`benchmarks/tables/`) in seeded
random orders, as a random search would meet them, and applies each rule to
every configuration's paired steps as they come in:

- `margin M`: autotune's margin rule (`autotune.rules.stopping`, run in the trial
  child): after 6 pairs, stop once the candidate/baseline ratio of medians
  exceeds M times the best ratio measured so far;
- `child median`: autotune's median rule alone (`autotune.rules.stopping.median_curve`):
  after 6 pairs, stop once the candidate's lowest running ratio so far
  exceeds the median running ratio after k pairs of the configurations met
  so far (pruned ones up to where they stopped), once 5 of them reached k
  pairs;
- `median, else 1.3`: as a study runs by default: the median rule where the
  curve has a value after k pairs, else the margin 1.3 (the first trials);
- `optuna median`: Optuna's MedianPruner on the running ratio reported as
  intermediate values (5 startup trials, 5 warm-up steps);
- `optuna percentile 25`: PercentilePruner(25), the same reporting.

Per rule, over `--seeds` orders: the share of paired steps saved, how many
configurations within 2% of the table's best were pruned (a loss: the search
would never see them), and the true ratio of the best unpruned configuration
relative to the table's best (1.000: nothing lost).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from autotune.ground.protocol import PRUNE_AFTER
from autotune.rules.stopping import curve_of_ratios, prune_point, running_ratios

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("norm-act-small.json", "transformer-small.json", "mlp-dp-small.json")
AFTER = PRUNE_AFTER  # pairs before any rule may stop a trial


def running_ratio(cand: Sequence[float], base: Sequence[float], k: int) -> float:
    return statistics.median(cand[:k]) / statistics.median(base[:k])


def margin_rule(margin: float) -> Callable[[Any], Callable[[list[float], list[float], float],
                                                              int | None]]:
    """autotune's margin rule: the step at which a trial stops, or None (no best yet: None)."""
    def make(_study: Any) -> Callable[[list[float], list[float], float], int | None]:
        def stop(cand: list[float], base: list[float], best: float) -> int | None:
            if not math.isfinite(best):
                return None
            return prune_point(cand, base, margin * best, AFTER)
        return stop
    return make


def curve_rule(margin: float | None) -> Callable[[Any], Callable[[list[float], list[float],
                                                                   float], int | None]]:
    """autotune's median rule (with the margin rule too when `margin` is given), its curve
    built from every configuration met so far, as `StudyRunner` builds it."""
    def make(_study: Any) -> Callable[[list[float], list[float], float], int | None]:
        seen: list[list[float]] = []  # each configuration's running ratios, as far as it ran

        def stop(cand: list[float], base: list[float], best: float) -> int | None:
            limit = margin * best if margin is not None and math.isfinite(best) else None
            at = prune_point(cand, base, limit, AFTER, curve_of_ratios(seen))
            seen.append(running_ratios(cand, base)[:at])
            return at
        return stop
    return make


def optuna_rule(pruner: Any) -> Callable[[Any], Callable[[list[float], list[float], float],
                                                           int | None]]:
    """An Optuna pruner fed the running ratio as intermediate values."""
    def make(study: Any) -> Callable[[list[float], list[float], float], int | None]:
        study.pruner = pruner

        def stop(cand: list[float], base: list[float], best: float) -> int | None:
            if not math.isfinite(best):
                return None  # the first configuration is not told (as before)
            trial = study.ask()
            for k in range(1, len(cand) + 1):
                trial.report(running_ratio(cand, base, k), k)
                if k >= AFTER and trial.should_prune():
                    study.tell(trial, state=_pruned())
                    return k
            study.tell(trial, running_ratio(cand, base, len(cand)))
            return None
        return stop
    return make


def _pruned() -> Any:
    from optuna.trial import TrialState

    return TrialState.PRUNED


def simulate(table: Any, rule: Any, seed: int) -> tuple[int, int, int, float]:
    """(steps run, steps in all, good configurations pruned, best unpruned true ratio)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rng = random.Random(seed)
    ratios = table.ratios()
    best_true = min(ratios.values())
    keys = [k for k in ratios]
    rng.shuffle(keys)
    stop = rule(optuna.create_study())
    best_seen, run, total, good_lost, kept = float("inf"), 0, 0, 0, []
    for key in keys:
        rec = rng.choice([r for r in table.runs[key] if r.get("status") == "ok"])
        cand, base = rec["step_times_s"], rec["baseline_step_times_s"]
        total += len(cand)
        at = stop(cand, base, best_seen)  # best_seen is inf for the first configuration
        if at is not None:
            run += at
            good_lost += ratios[key] <= best_true * 1.02
            continue
        run += len(cand)
        kept.append(ratios[key])
        best_seen = min(best_seen, running_ratio(cand, base, len(cand)))
    return run, total, good_lost, min(kept) / best_true


def main() -> None:
    import optuna

    from autotune.launch.replay import ReplayTable

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tables", nargs="*", type=Path,
                        default=[ROOT / "benchmarks/tables" / t for t in TABLES])
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    rules = {
        "margin 1.1": margin_rule(1.1), "margin 1.2": margin_rule(1.2),
        "margin 1.3": margin_rule(1.3),
        "child median": curve_rule(None), "median, else 1.3": curve_rule(1.3),
        "optuna median": optuna_rule(optuna.pruners.MedianPruner(5, AFTER)),
        "optuna percentile 25": optuna_rule(optuna.pruners.PercentilePruner(25.0, 5, AFTER)),
    }
    for path in args.tables:
        table = ReplayTable.load(path)
        good = sum(r <= min(table.ratios().values()) * 1.02 for r in table.ratios().values())
        print(f"\n{path.name}: {len(table.ratios())} configurations, {good} within 2% of the best")
        print(f"{'rule':22} {'steps saved':>11} {'good pruned':>11} {'best kept / best':>16}")
        for name, rule in rules.items():
            results = [simulate(table, rule, seed) for seed in range(args.seeds)]
            saved = 1 - sum(r[0] for r in results) / sum(r[1] for r in results)
            lost = statistics.mean(r[2] for r in results)
            kept = statistics.median(r[3] for r in results)
            print(f"{name:22} {saved:11.1%} {lost:11.1f} {kept:16.3f}", flush=True)


if __name__ == "__main__":
    main()
