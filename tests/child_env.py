"""The environment of a JAX child process in the tests (shared by the benchmark tests)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cpu_child_env(devices: int) -> dict[str, str]:
    """A child on `devices` CPU devices that imports this checkout (and is no trial child:
    no result file named)."""
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_RESULT"}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env
