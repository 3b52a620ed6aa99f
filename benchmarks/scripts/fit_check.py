"""What fitting the built-in spaces to a benchmark's program drops and clips, and why.

Compiles each benchmark in this process on N host devices (XLA_FLAGS is set
before jax starts), reads the collectives of its optimised HLO
(`autotune.rules.collectives.collective_profile`) and prints, per space, what
`autotune.spaces.fit.collective_changes` does with them: the evidence of
the baseline's collectives only. The compile-only probe (flags whose every
value compiles to the baseline's program) needs one trial child per value:
`autotune study` runs it, and `autotune best` lists what it dropped.

Usage: python benchmarks/scripts/fit_check.py [--devices 8] [--preset small]
       [--benchmark transformer --benchmark mlp-dp] [--space gpu-collectives ...]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPACES = ("gpu-collectives", "gpu-fsdp", "gpu-p2p", "tpu-latency-bound", "tpu-collectives")


def profile_of(benchmark: str, preset: str) -> dict:
    """The collectives of the benchmark's compiled step."""
    import jax

    from autotune.child.workload import build_workload
    from autotune.rules.collectives import collective_profile

    work = build_workload(str(ROOT / "benchmarks" / f"{benchmark}.py"), preset)
    step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
    return collective_profile(step.lower(*work.args).compile().as_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--benchmark", action="append")
    parser.add_argument("--space", action="append")
    args = parser.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={args.devices}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    from autotune.results.fitted import change_text
    from autotune.spaces import load_space
    from autotune.spaces.fit import collective_changes, settle

    for benchmark in args.benchmark or ["transformer", "mlp-dp"]:
        profile = profile_of(benchmark, args.preset)
        print(f"== {benchmark} ({args.preset}, {args.devices} devices)")
        for kind, stats in profile.items():
            loop = f", {stats.loop_count} in while loops" if stats.loop_count else ""
            print(f"   {kind}: {stats.count} ops, {stats.bytes} bytes in all, largest "
                  f"{stats.largest_bytes}, smallest array {stats.smallest_bytes}{loop}")
        for name in args.space or SPACES:
            space = load_space(name)
            fit = settle(space, collective_changes(space, profile), collectives=profile)
            print(f"-- {name}: {len(fit.changes)} of {len(space.params)} params changed")
            for change in fit.changes:
                print(f"   {change_text(change)}")


if __name__ == "__main__":
    main()
