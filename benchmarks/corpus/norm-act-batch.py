"""The built-in norm-act step at four times its batch: norm-act's sibling.

The same computation as `benchmarks/norm-act.py` (layer norm, exact GELU and
softmax over each row, mixed back with the input; float32, no matmul), its
inputs and step built by that file's `build`, on four times the rows of the
built-in preset of the same name (`small`: 8192 rows of 1024, where norm-act
has 2048). A team that tuned a model and then raises its batch size has such
a pair: the warm-start benchmark (`benchmarks/scripts/warm_start.py`) replays
this table against norm-act's own, both recorded on one machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax

from autotune.bench import Workload

PRESETS = ("tiny", "small")
DESCRIPTION = "the built-in norm-act step at 4x its batch (small: 8192 x 1024), one device"
SIZES = {"tiny": dict(rows=256, width=128), "small": dict(rows=8192, width=1024)}


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
    cfg = SIZES[preset]
    if cfg["rows"] % len(jax.devices()):
        raise ValueError(f"norm-act-batch: {cfg['rows']} rows do not split over "
                         f"{len(jax.devices())} devices; use --devices 1")
    return _norm_act().build(cfg, preset, f"norm-act-batch-{preset}")
