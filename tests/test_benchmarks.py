"""Tests for the benchmark workloads in ``benchmarks/``.

Multi-device checks run in a subprocess because ``XLA_FLAGS`` (the CPU device
count) must be set before jax is imported.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).parents[1]
BENCHMARKS = REPO / "benchmarks"
DEVICES = 4

# Shared prologue of the child programs: load a benchmark by path, build and compile
# its tiny workload, and count the collectives in the compiled HLO.
PROLOGUE = """
import importlib.util, json, re
import jax, numpy as np
spec = importlib.util.spec_from_file_location("bench", {path!r})
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
w = mod.workload("tiny")
compiled = w.step.lower(*w.args).compile()
hlo = compiled.as_text()
ops = ("all-gather", "reduce-scatter", "all-reduce")
counts = {{op: len(re.findall(" " + op + r"(-start)?\\(", hlo)) for op in ops}}
finite = lambda tree: all(bool(np.isfinite(np.asarray(x)).all()) for x in jax.tree.leaves(tree))
"""

MATMUL_CHILD = """
out = jax.block_until_ready(compiled(*w.args))
a, b = (np.asarray(x).astype(np.float32) for x in w.args)
ref = -((a @ b) * 0.125)
got = np.asarray(out).astype(np.float32)
print(json.dumps({"shape": list(out.shape), "dtype": str(out.dtype), "finite": finite(out),
                  "max_err": float(np.abs(got - ref).max()), "max_ref": float(np.abs(ref).max()),
                  "meta": w.meta, "counts": counts}))
"""

TRANSFORMER_CHILD = """
params, inputs, targets = w.args
losses, ok = [], True
for _ in range(3):
    params, loss = jax.block_until_ready(compiled(params, inputs, targets))
    losses.append(float(loss))
    ok = ok and finite((params, loss))
print(json.dumps({"losses": losses, "finite": ok, "meta": w.meta, "counts": counts,
                  "devices": len(jax.devices())}))
"""


def load(name: str) -> ModuleType:
    """Import ``benchmarks/<name>.py`` by path."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_child(name: str, body: str) -> dict:
    """Run the prologue plus ``body`` for benchmark ``name`` on 4 CPU devices; parse its JSON."""
    code = PROLOGUE.format(path=str(BENCHMARKS / f"{name}.py")) + body
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={DEVICES}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_matmul_tiny_matches_numpy() -> None:
    """The tiny matmul is finite, (M, N) bf16, and matches numpy within bf16 rounding."""
    result = run_child("matmul", MATMUL_CHILD)
    meta = result["meta"]
    assert result["shape"] == [meta["M"], meta["N"]]
    assert result["dtype"] == "bfloat16"
    assert result["finite"]
    assert result["max_err"] <= 2**-7 * result["max_ref"]
    assert sum(result["counts"].values()) == 0


@pytest.mark.slow
def test_transformer_tiny_fsdp_collectives_and_training() -> None:
    """The tiny FSDP step gathers weights, reduce-scatters gradients, and lowers the loss."""
    result = run_child("transformer", TRANSFORMER_CHILD)
    assert result["devices"] == DEVICES
    assert result["meta"]["device_count"] == DEVICES
    assert result["counts"]["all-gather"] > 0
    assert result["counts"]["reduce-scatter"] > 0
    assert result["finite"]
    losses = result["losses"]
    assert losses[0] > losses[1] > losses[2], losses


@pytest.mark.parametrize("name", ["matmul", "transformer"])
def test_module_contract(name: str) -> None:
    """Each benchmark exposes the presets, a one-line description and a docstring."""
    module = load(name)
    assert module.PRESETS == ("tiny", "small", "large")
    assert isinstance(module.DESCRIPTION, str) and "\n" not in module.DESCRIPTION
    assert module.__doc__ and module.__doc__.strip()


@pytest.mark.parametrize("name", ["matmul", "transformer"])
def test_unknown_preset_raises(name: str) -> None:
    """An unknown preset raises ValueError naming the known presets."""
    module = load(name)
    with pytest.raises(ValueError, match="tiny, small, large"):
        module.workload("enormous")
