"""How far can autotune's figures be trusted on this machine? (issue: measurements)

1. Spread: the default configuration of `transformer small` measured in N fresh
   processes. Prints max/min of the per-process median step times (DIRECT:
   what comparing processes faces) and of the in-process default-vs-default
   ratios (PAIRED: what autotune compares). Target: under 1.05 on an idle
   machine.
2. Claim vs confirmation: a T-trial study of the `cpu` space, then the
   confirmation phase. Prints the search's best claimed speedup, the confirmed
   speedup of the same configuration with its interval, and the gap in
   percentage points. Target: within 2 points, or the claim marked as not
   confirmed.

    python benchmarks/scripts/measurement_check.py [--processes 10] [--trials 30]

Uses the launcher and the `autotune` command, never Optuna or SQLAlchemy directly.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from autotune.ground.protocol import Job
from autotune.launch.launcher import SubprocessLauncher, TrialRequest

ROOT = Path(__file__).resolve().parents[2]
TRANSFORMER = ROOT / "benchmarks" / "transformer.py"


def spread(processes: int, preset: str, devices: int) -> None:
    """Part 1: medians and A/A ratios over fresh processes."""
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    launcher = SubprocessLauncher()
    direct, ratios = [], []
    for i in range(processes):
        for options, sink in ((None, direct), ({}, ratios)):
            outcome = launcher.launch(TrialRequest(TRANSFORMER, preset,
                                                   job=Job(steps=20, compiler_options=options),
                                                   env=env))
            m = outcome.measurement
            if not outcome.ok or m is None or m.median_s is None:
                sys.exit(f"process {i} failed: {outcome.kind.value} {outcome.message}")
            sink.append(m.median_s if options is None else m.paired_ratio or float("nan"))
    print(f"# 1. the default configuration of transformer {preset}, {devices} devices, "
          f"{processes} fresh processes x 20 steps")
    print(f"DIRECT medians (ms): {' '.join(f'{v * 1e3:.1f}' for v in direct)}")
    print(f"  spread max/min = {max(direct) / min(direct):.3f}")
    print(f"PAIRED default-vs-default ratios: {' '.join(f'{v:.3f}' for v in ratios)}")
    print(f"  spread max/min = {max(ratios) / min(ratios):.3f}, "
          f"median {statistics.median(ratios):.3f}")


def autotune(*args: str, cwd: Path) -> str:
    cmd = [sys.executable, "-c", "from autotune.cli import main; main()", *args]
    done = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"autotune {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def claim_vs_confirmation(trials: int, preset: str, devices: int, confirm: int) -> None:
    """Part 2: a real study, then what its confirmation phase says of the search's winner."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        autotune("study", "--space", "cpu", "--benchmark", "transformer", "--preset", preset,
                 "--devices", str(devices), "--trials", str(trials), "--seed", "0",
                 "--confirm", str(confirm), "--name", "check", cwd=folder)
        exported = [_export(folder, rank) for rank in range(1, confirm + 4)]
    exported = [e for e in exported if e is not None]
    winner = max(exported, key=lambda e: e["search_speedup"] or 0)
    print(f"# 2. {trials}-trial study of the cpu space on transformer {preset}, "
          f"top {confirm} confirmed")
    for e in sorted(exported, key=lambda e: -(e["search_speedup"] or 0)):
        interval = e["speedup_interval"]
        shown = f"[{interval[0]:.3f}, {interval[1]:.3f}]" if interval else "-"
        print(f"search x{e['search_speedup']:.3f} -> confirmed x{e['speedup']:.3f} {shown} "
              f"({e['verdict']})")
    gap = 100 * (winner["search_speedup"] - winner["speedup"])
    marked = "" if winner["confirmed"] else " (the claim is marked as not confirmed)"
    print(f"search's best claim x{winner['search_speedup']:.3f}, "
          f"confirmed x{winner['speedup']:.3f}: gap {gap:+.1f} percentage points{marked}")


def _export(folder: Path, rank: int) -> dict | None:
    target = folder / f"rank{rank}.yaml"
    cmd = [sys.executable, "-c", "from autotune.cli import main; main()", "export", "check",
           "-o", str(target), "--rank", str(rank)]
    if subprocess.run(cmd, cwd=folder, capture_output=True).returncode != 0:
        return None
    return yaml.safe_load(target.read_text())["measured"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=10)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--confirm", type=int, default=3)
    parser.add_argument("--preset", default="small")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--skip-study", action="store_true")
    args = parser.parse_args()
    spread(args.processes, args.preset, args.devices)
    if not args.skip_study:
        claim_vs_confirmation(args.trials, args.preset, args.devices, args.confirm)


if __name__ == "__main__":
    main()
