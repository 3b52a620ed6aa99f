"""What the benchmark tests share: a JAX child's environment, a benchmark loaded by path."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def cpu_child_env(devices: int) -> dict[str, str]:
    """A child on `devices` CPU devices that imports this checkout (and is no trial child:
    no result file named)."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_RESULT"}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def load_benchmark(name: str) -> ModuleType:
    """Import `benchmarks/<name>.py` by path (hyphenated names too); importing a benchmark
    starts no JAX backend."""
    path = REPO / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"benchmark_{name.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
