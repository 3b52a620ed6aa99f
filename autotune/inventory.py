"""What each benchmark compiles to: the collectives in its optimised HLO.

Read by compiling and running each workload once (tiny preset) in a trial
child; cached per workload file content, jaxlib version and device count, so
`autotune benchmarks list` is fast after the first call.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

from autotune.launcher import SubprocessLauncher, TrialRequest
from autotune.workloads import WorkloadInfo

COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "collective-permute", "all-to-all")


def _cache_file(info: WorkloadInfo, devices: int) -> Path:
    root = Path(os.environ.get("AUTOTUNE_CACHE_DIR", "~/.cache/autotune")).expanduser()
    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = "none"
    digest = hashlib.sha256(info.path.read_bytes()).hexdigest()[:16]
    return root / f"collectives-{info.name}-{jaxlib}-{devices}-{digest}.json"


def collectives(info: WorkloadInfo, devices: int = 8) -> dict[str, int] | str:
    """Collective counts of `info`'s tiny preset on `devices` devices, or why there are none."""
    cache = _cache_file(info, devices)
    if cache.exists():
        try:
            return dict(json.loads(cache.read_text()))
        except (OSError, ValueError):
            pass
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    outcome = SubprocessLauncher().launch(TrialRequest(
        info.path, "tiny", env, None, steps=1, warmup=1, max_warmup=1, timeout_s=120))
    if not outcome.ok or outcome.measurement is None:
        return f"{outcome.kind.value}: {outcome.message[:80]}"
    counts = {op: int(outcome.measurement.hlo_stats.get(op, 0)) for op in COLLECTIVES}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(counts))
    return counts


def describe(counts: dict[str, int] | str) -> str:
    """'all-gather 9, reduce-scatter 9' (or 'none', or the failure)."""
    if isinstance(counts, str):
        return counts
    return ", ".join(f"{op} {n}" for op, n in counts.items() if n) or "none"
