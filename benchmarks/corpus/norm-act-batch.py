"""The built-in norm-act step at four times its batch: norm-act's sibling.

The same computation as `benchmarks/norm-act.py` (layer norm, exact GELU and
softmax over each row, mixed back with the input; float32, no matmul), its
`block` and `make_step` loaded from that file, on four times the rows of the
built-in preset of the same name (`small`: 8192 rows of 1024, where norm-act
has 2048). A team that tuned a model and then raises its batch size has such
a pair: the warm-start benchmark (`benchmarks/scripts/warm_start.py`) replays
this table against norm-act's own, both recorded on one machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from autotune.bench import Workload

PRESETS = ("tiny", "small")
DESCRIPTION = "the built-in norm-act step at 4x its batch (small: 8192 x 1024), one device"
SIZES = {"tiny": dict(rows=256, width=128), "small": dict(rows=8192, width=1024)}
SEED = 1701


def _norm_act():
    """The built-in norm-act module, loaded by path (its file name has a hyphen)."""
    path = Path(__file__).resolve().parents[1] / "norm-act.py"
    spec = importlib.util.spec_from_file_location("autotune_corpus_norm_act", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def workload(preset: str = "small") -> Workload:
    """The jitted row-parallel step of norm-act and its inputs at `preset`'s size."""
    if preset not in SIZES:
        raise ValueError(f"unknown preset {preset!r}; known presets: {', '.join(PRESETS)}")
    base = _norm_act()
    devices = jax.devices()
    cfg = SIZES[preset]
    if cfg["rows"] % len(devices):
        raise ValueError(f"norm-act-batch: {cfg['rows']} rows do not split over "
                         f"{len(devices)} devices; use --devices 1")
    mesh = Mesh(np.array(devices), (base.AXIS,))
    key_x, key_g = jax.random.split(jax.random.PRNGKey(SEED))
    x = jax.random.normal(key_x, (cfg["rows"], cfg["width"]), jnp.float32)
    gain = 1.0 + 0.1 * jax.random.normal(key_g, (cfg["width"],), jnp.float32)
    args = (jax.device_put(x, NamedSharding(mesh, P(base.AXIS))),
            jax.device_put(gain, NamedSharding(mesh, P())))
    meta = dict(cfg, preset=preset, device_count=len(devices))
    return Workload(step=base.make_step(mesh), args=args, name=f"norm-act-batch-{preset}",
                    meta=meta)
