"""The numerics guard: does a configuration compute the same thing as the baseline?

A flag that makes a step faster by computing something else must not win.
Outputs are compared with a tolerance that fits their dtype: the lowest
precision floating dtype among the outputs decides it. Integer outputs must
match exactly. Used in the trial child (PAIRED mode: both executables' outputs
are at hand) and in the parent (DIRECT mode: checksums of separate processes).
Imports numpy only inside functions; jax never.
"""

from __future__ import annotations

from typing import Any

# Relative tolerance per dtype name, against the largest magnitude of the output.
TOLERANCES: dict[str, float] = {
    "float64": 1e-9,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 2e-2,
    "float8_e4m3fn": 1.5e-1,
    "float8_e5m2": 2.5e-1,
}
EXACT = 0.0


def tolerance(dtype: str) -> float:
    """The relative tolerance for outputs of `dtype` (exact for integers and bools)."""
    return TOLERANCES.get(dtype, 1e-2 if "float" in dtype else EXACT)


def compare_arrays(candidate: list[Any], baseline: list[Any]) -> dict[str, Any]:
    """Compare output leaves pairwise (array-likes); report the worst leaf.

    Returns:
        {"ok", "max_rel_error", "tolerance", "dtype", "leaf"} for the leaf whose
        error is largest relative to its tolerance; `max_rel_error` is
        max|c - b| / max|b| of that leaf. `ok` holds when every leaf is within.
    """
    rows = [_leaf_error(i, c, b) for i, (c, b) in enumerate(zip(candidate, baseline, strict=True))]
    if not rows:
        return {"ok": True, "max_rel_error": 0.0, "tolerance": EXACT, "dtype": "", "leaf": None}
    worst = max(rows, key=lambda r: _excess(r["max_rel_error"], r["tolerance"]))
    return {**worst, "ok": all(r["max_rel_error"] <= r["tolerance"] for r in rows)}


def _leaf_error(index: int, candidate: Any, baseline: Any) -> dict[str, Any]:
    import numpy as np

    dtype = str(baseline.dtype)
    c64, b64 = np.asarray(candidate, dtype=np.float64), np.asarray(baseline, dtype=np.float64)
    if c64.shape != b64.shape:
        return {"max_rel_error": float("inf"), "tolerance": EXACT, "dtype": dtype, "leaf": index}
    scale = float(np.max(np.abs(b64))) if b64.size else 0.0
    err = float(np.max(np.abs(c64 - b64))) / (scale or 1.0) if b64.size else 0.0
    return {"max_rel_error": err, "tolerance": tolerance(dtype), "dtype": dtype, "leaf": index}


def _excess(err: float, tol: float) -> float:
    return err / tol if tol else (float("inf") if err else 0.0)


def describe_mismatch(result: dict[str, Any]) -> str:
    """One sentence for a failed comparison."""
    return (f"output {result['leaf']} ({result['dtype']}) differs from the baseline's by "
            f"{result['max_rel_error']:.3g} relative, over the {result['tolerance']:.3g} "
            f"tolerance for {result['dtype']}: this configuration computes something else")


def checksums_agree(candidate: float, baseline: float, abs_sum: float, dtype: str) -> bool:
    """DIRECT mode: do two processes' checksums agree within the dtype's tolerance?

    `abs_sum` (sum of |x| over the baseline's outputs) scales the difference, so
    sums that cancel to near zero are not compared against zero.
    """
    tol = tolerance(dtype)
    return abs(candidate - baseline) <= max(tol, 1e-12) * max(abs_sum, abs(baseline), 1e-30)
