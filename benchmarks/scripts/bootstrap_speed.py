"""How long the paired bootstrap takes: 10 processes x 20 steps, 2000 resamples.

Usage: python benchmarks/scripts/bootstrap_speed.py [--repeats N]

The confirmation phase and `best` compute one such interval per configuration,
so it should stay well under a tenth of a second. Prints the best and the
median of N timings (a speed goal is a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from autotune.rules.stats import paired_ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    speeds = rng.uniform(0.01, 0.02, 10)
    cand = [list(rng.lognormal(np.log(0.9 * s), 0.03, 20)) for s in speeds]
    base = [list(rng.lognormal(np.log(s), 0.03, 20)) for s in speeds]
    paired_ratio(cand, base)  # warm numpy up
    timings = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        paired_ratio(cand, base, n_boot=2000)
        timings.append(time.perf_counter() - start)
    print(f"paired_ratio, 10 processes x 20 steps, 2000 resamples: best "
          f"{min(timings) * 1e3:.1f} ms, median {statistics.median(timings) * 1e3:.1f} ms "
          f"over {args.repeats} runs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
