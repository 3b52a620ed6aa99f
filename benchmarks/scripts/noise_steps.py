"""Where does the noise of a paired ratio come from: the steps a process times, or the
process itself?

Each process is a real trial child in PAIRED mode whose candidate is the baseline
again (two compiles of XLA's defaults, timed in alternation): its paired ratio is
pure noise. For each step count S the script launches N fresh processes and prints
the spread of log(ratio) over them. If the noise is the sampling of steps, the
spread falls as 1/sqrt(S) (`sd x sqrt(S)` stays put); a floor that more steps do not
lower is noise of the process (where it lands, what else runs), which only more
processes average out. The last column is what a confirmation of a 4% gain at 95%
then needs: (1.96 sd / 0.04)^2 processes of S steps.

    python benchmarks/scripts/noise_steps.py --benchmark norm-act --preset small \\
        --devices 1 --processes 10 --steps 20,80,320 [--json]

`--script benchmarks/corpus/lj-md.py` measures a corpus workload instead of a built-in
`--benchmark`.
Uses the launcher only, never Optuna or SQLAlchemy.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autotune.ground.protocol import Job
from autotune.launch.launcher import SubprocessLauncher, TrialRequest

ROOT = Path(__file__).resolve().parents[2]
GAIN = 0.04  # the gain a confirmation should tell from the defaults, in the last column


def workload_path(benchmark: str, script: str | None) -> Path:
    """The built-in `benchmark`, or the workload file `script` (a corpus workload), as
    `autotune study` resolves them; exits with the project's one-line message."""
    from autotune.ground.errors import UnknownBenchmarkError, WorkloadError
    from autotune.launch.workloads import resolve_benchmark, resolve_script

    try:
        return (resolve_script(script) if script else resolve_benchmark(benchmark)).path
    except (UnknownBenchmarkError, WorkloadError) as exc:
        sys.exit(str(exc))


def aa_ratios(workload: Path, preset: str, devices: int, steps: int,
              processes: int) -> tuple[list[float], float]:
    """`processes` A/A paired ratios of `steps` steps each, and the mean wall seconds of a
    process."""
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    launcher = SubprocessLauncher()
    ratios, start = [], time.monotonic()
    for i in range(processes):
        outcome = launcher.launch(TrialRequest(workload, preset, env=env, timeout_s=600,
                                               job=Job(steps=steps, compiler_options={})))
        m = outcome.measurement
        if not outcome.ok or m is None or m.paired_ratio is None:
            sys.exit(f"process {i} at {steps} steps failed: {outcome.kind.value} "
                     f"{outcome.message}")
        ratios.append(m.paired_ratio)
    return ratios, (time.monotonic() - start) / processes


def row(steps: int, ratios: list[float], seconds: float) -> dict[str, Any]:
    """The figures of one step count (stable JSON keys)."""
    logs = [math.log(r) for r in ratios]
    sd = statistics.stdev(logs)
    return {"steps": steps, "processes": len(ratios), "sd_log_ratio": sd,
            "sd_times_sqrt_steps": sd * math.sqrt(steps),
            "spread": max(ratios) / min(ratios), "median_ratio": statistics.median(ratios),
            "seconds_per_process": seconds,
            "processes_to_confirm": (1.96 * sd / GAIN) ** 2, "ratios": ratios}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="norm-act")
    parser.add_argument("--script", help="a workload file (e.g. benchmarks/corpus/lj-md.py) "
                        "instead of a built-in --benchmark")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--steps", default="20,80,320", help="step counts, comma-separated")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.processes < 2:
        parser.error("--processes must be at least 2 (a spread needs two)")
    workload = workload_path(args.benchmark, args.script)
    rows = [row(s, *aa_ratios(workload, args.preset, args.devices, s, args.processes))
            for s in (int(x) for x in args.steps.split(","))]
    if args.json:
        print(json.dumps({"benchmark": workload.stem, "preset": args.preset,
                          "devices": args.devices, "rows": rows}, indent=1))
        return
    print(f"{workload.stem} {args.preset}, {args.devices} device(s): A/A paired ratios, "
          f"{args.processes} fresh processes per step count")
    print(f"{'steps':>6} {'sd log':>8} {'sd*sqrt(S)':>11} {'max/min':>8} {'median':>7} "
          f"{'s/process':>10} {'to confirm 4%':>14}")
    for r in rows:
        print(f"{r['steps']:>6} {r['sd_log_ratio']:>8.4f} {r['sd_times_sqrt_steps']:>11.3f} "
              f"{r['spread']:>8.3f} {r['median_ratio']:>7.3f} {r['seconds_per_process']:>10.1f} "
              f"{r['processes_to_confirm']:>14.1f}")


if __name__ == "__main__":
    main()
