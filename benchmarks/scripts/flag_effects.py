"""Measure the effect of single XLA flag settings on the built-in benchmarks.

Each setting is measured PAIRED (baseline and candidate in one process,
steps alternated) in several fresh processes; the figure is the ratio of the
candidate's median step time to the baseline's (below 1 is faster). This is
how the `cpu` search space was chosen: keep the flags whose effect is outside
the spread of the default-vs-default (A/A) ratio.

    python benchmarks/scripts/flag_effects.py --benchmark transformer --preset small

Prints one row per setting: the median ratio over the processes, the min and
max, and whether the compiled program differs from the baseline's.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from autotune.ground.protocol import Job
from autotune.launch.launcher import SubprocessLauncher, TrialRequest

SETTINGS: list[dict[str, object]] = [
    {},
    {"xla_cpu_enable_fast_math": True},
    {"xla_backend_optimization_level": 0},
    {"xla_backend_optimization_level": 1},
    {"xla_backend_optimization_level": 2},
    {"xla_cpu_use_xnnpack": False},
    {"xla_cpu_prefer_vector_width": 128},
    {"xla_cpu_prefer_vector_width": 512},
    {"xla_cpu_multi_thread_eigen": False},
    {"xla_cpu_max_isa": "SSE4_2"},
    {"xla_cpu_max_isa": "AVX2"},
    {"xla_cpu_enable_concurrency_optimized_scheduler": True},
    {"xla_cpu_use_fusion_emitters": False},
    {"xla_cpu_enable_fast_min_max": False},
    {"xla_cpu_copy_insertion_use_region_analysis": True},
    {"xla_cpu_parallel_codegen_split_count": 1},
    {"xla_cpu_use_onednn": True},
]


def measure(workload: Path, preset: str, devices: int, options: dict, repeats: int,
            steps: int) -> tuple[list[float], str]:
    """Ratios over `repeats` fresh processes, and whether the program changed."""
    launcher = SubprocessLauncher()
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    ratios, same = [], "?"
    for _ in range(repeats):
        outcome = launcher.launch(TrialRequest(workload, preset,
                                               job=Job(steps=steps, warmup=3,
                                                       compiler_options=options),
                                               env=env, timeout_s=300))
        if not outcome.ok or outcome.measurement is None:
            return [], f"{outcome.kind.value}: {outcome.message[:60]}"
        m = outcome.measurement
        ratios.append(m.paired_ratio or float("nan"))
        same = "same" if m.same_program_as_baseline else "differs"
    return ratios, same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--benchmark", default="transformer")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    workload = Path(__file__).resolve().parents[1] / f"{args.benchmark}.py"
    print(f"# {args.benchmark} {args.preset}, {args.devices} devices, "
          f"{args.repeats} processes x {args.steps} paired steps")
    print(f"{'setting':58} {'ratio':>7} {'min':>7} {'max':>7}  program")
    for options in SETTINGS:
        ratios, same = measure(workload, args.preset, args.devices, options, args.repeats,
                               args.steps)
        label = " ".join(f"{k}={v}" for k, v in options.items()) or "(default vs default)"
        if not ratios:
            print(f"{label:58} {same}")
            continue
        print(f"{label:58} {statistics.median(ratios):7.3f} {min(ratios):7.3f} "
              f"{max(ratios):7.3f}  {same}", flush=True)


if __name__ == "__main__":
    main()
