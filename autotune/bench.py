"""Measurement helper for workloads; runs inside the trial child process.

Contract for a workload file (the benchmarks in `benchmarks/` and a user's
`--script FILE` follow it):

    from autotune.bench import Workload

    def workload(preset: str) -> Workload:
        ...  # build arrays on jax.devices(), return the step and its arguments

`Workload.step` is a function of `*args` (a `jax.jit`-wrapped one keeps its
shardings); autotune jits it if it is not. The file never imports optuna,
sqlalchemy or the autotune CLI.

This module imports only the standard library at import time; jax and numpy are
imported inside the functions that run in the child.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autotune.stopping import PRUNE_AFTER

PRESETS = ("tiny", "small", "large")


@dataclass
class Workload:
    """One step function and the concrete arguments to call it with.

    Attributes:
        step: the step; called as `step(*args)`. May already be `jax.jit`-ed.
        args: concrete (possibly sharded) arrays or pytrees of them.
        name: a short label for logs.
        meta: free-form facts about the workload (sizes, parameter count).
    """

    step: Callable[..., Any]
    args: tuple[Any, ...]
    name: str = ""
    meta: dict[str, Any] = field(default_factory=dict)


RESULT_ENV = "AUTOTUNE_RESULT"
MEASURE_ENV = "AUTOTUNE_MEASURE"
RESULT_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class MeasureSettings:
    """How the child measures; passed by the parent as JSON in `AUTOTUNE_MEASURE`.

    `compiler_options` None means DIRECT mode (the configuration is already in
    XLA_FLAGS); a dict means PAIRED mode (baseline and candidate compiled here).

    Warm-up: after the first step (recorded apart as `first_step_time_s`), at
    least `warmup` and at most `max(warmup, max_warmup)` warm-up steps run (per
    executable); warming stops early once the last `settle_window` warm-up
    times lie within `settle_tolerance` of their median (`autotune.stopping.settled`;
    in PAIRED mode both executables must have settled).

    Pruning (PAIRED mode): with `prune_ratio` set, once `prune_after` pairs are
    timed, the trial stops as soon as the candidate/baseline ratio of medians
    exceeds it; the result then has status `pruned` and the steps so far.
    """

    steps: int = 20
    warmup: int = 2
    compiler_options: dict[str, Any] | None = None
    dump_dir: str | None = None
    max_warmup: int = 30
    settle_window: int = 5
    settle_tolerance: float = 0.05
    prune_ratio: float | None = None
    prune_after: int = PRUNE_AFTER

    @classmethod
    def from_env(cls, environ: dict[str, str]) -> MeasureSettings:
        import json

        raw = environ.get(MEASURE_ENV)
        return cls(**json.loads(raw)) if raw else cls()


class _Failure(Exception):
    """A classified failure of the workload (a result, not a fault of the tool)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def load_workload_module(path: str) -> Any:
    """Import a workload file by path and return the module."""
    import importlib.util
    import sys
    from pathlib import Path

    file = Path(path).resolve()
    spec = importlib.util.spec_from_file_location(f"autotune_workload_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise _Failure("compile_error", f"cannot import workload file {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_workload(path: str, preset: str) -> Workload:
    """Call the file's `workload(preset)` and check the contract."""
    module = load_workload_module(path)
    factory = getattr(module, "workload", None)
    if not callable(factory):
        raise _Failure("compile_error", f"{path} defines no function `workload(preset)`")
    result = factory(preset)
    if not isinstance(result, Workload):
        raise _Failure("compile_error", f"{path}: workload() must return autotune.bench.Workload")
    return result


def _classify_exception(exc: BaseException) -> _Failure:
    """Map an exception raised by JAX/XLA while compiling or running to a failure kind."""
    from autotune.failures import classify_exception

    kind, message = classify_exception(exc)
    return _Failure(kind.value, message)


def _compile(lowered: Any, options: dict[str, Any], dump_dir: str | None) -> tuple[Any, float]:
    """Compile `lowered` with per-compilation options; return (executable, seconds)."""
    import time

    opts = dict(options)
    if dump_dir:
        opts["xla_dump_to"] = dump_dir
    start = time.perf_counter()
    try:
        compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    except Exception as exc:  # XLA raises several types; all are results here
        raise _classify_exception(exc) from exc
    return compiled, time.perf_counter() - start


def _run_once(compiled: Any, args: tuple[Any, ...]) -> tuple[float, Any]:
    """One step ending in block_until_ready; returns (seconds, outputs)."""
    import time

    import jax

    start = time.perf_counter()
    try:
        out = jax.block_until_ready(compiled(*args))
    except Exception as exc:
        raise _classify_exception(exc) from exc
    return time.perf_counter() - start, out


def checksum(outputs: Any) -> float:
    """Sum of every output element in float64; raises _Failure on NaN or Inf."""
    import jax
    import numpy as np

    total = 0.0
    for leaf in jax.tree_util.tree_leaves(outputs):
        arr = np.asarray(jax.device_get(leaf), dtype=np.float64)
        if not np.all(np.isfinite(arr)):
            raise _Failure("nonfinite", "the step produced NaN or Inf values")
        total += float(arr.sum())
    return total


def _time_direct(compiled: Any, args: tuple[Any, ...], s: MeasureSettings) -> dict[str, Any]:
    """Warm up until settled (see MeasureSettings), then time `s.steps` steps of one executable."""
    first, out = _run_once(compiled, args)
    (warm,), settled = _warm_up([compiled], args, s)
    times = [_run_once(compiled, args)[0] for _ in range(s.steps)]
    return {
        "first_step_time_s": first,
        "warmup_steps": len(warm),
        "warmup_settled": settled,
        "warmup_times_s": warm,
        "step_times_s": times,
        "checksum": checksum(out),
    }


def _time_paired(
    base: Any, cand: Any, args: tuple[Any, ...], s: MeasureSettings
) -> dict[str, Any]:
    """Warm up both until settled, then alternate their steps in A B B A order to cancel drift."""
    first, out = _run_once(cand, args)
    base_first, base_out = _run_once(base, args)
    (base_warm, cand_warm), settled = _warm_up([base, cand], args, s)
    base_times: list[float] = []
    cand_times: list[float] = []
    pruned: dict[str, Any] = {}
    for i in range(s.steps):
        order = ((base, base_times), (cand, cand_times))
        for exe, sink in order if i % 2 == 0 else reversed(order):
            sink.append(_run_once(exe, args)[0])
        if pruned := _prune_verdict(cand_times, base_times, s):
            break
    return {
        **pruned,
        "first_step_time_s": first,
        "baseline_first_step_time_s": base_first,
        "warmup_steps": len(cand_warm),
        "warmup_settled": settled,
        "warmup_times_s": cand_warm,
        "baseline_warmup_times_s": base_warm,
        "step_times_s": cand_times,
        "baseline_step_times_s": base_times,
        "checksum": checksum(out),
        "baseline_checksum": checksum(base_out),
    }


def _prune_verdict(cand: list[float], base: list[float], s: MeasureSettings) -> dict[str, Any]:
    """{"status": "pruned", "message": ...} when the candidate is clearly slower, else {}."""
    from autotune.stopping import prune_verdict

    why = prune_verdict(cand, base, s.prune_ratio, s.prune_after)
    return {"status": "pruned", "message": why} if why else {}


def _warm_up(
    exes: list[Any], args: tuple[Any, ...], s: MeasureSettings
) -> tuple[list[list[float]], bool]:
    """Warm-up rounds of every executable until all settled (`autotune.stopping.warm_up`)."""
    from autotune.stopping import warm_up

    steps = [lambda exe=exe: _run_once(exe, args)[0] for exe in exes]
    return warm_up(steps, minimum=s.warmup, cap=s.max_warmup, window=s.settle_window,
                   tolerance=s.settle_tolerance)


def _versions() -> dict[str, Any]:
    import jax
    import jaxlib

    devices = jax.devices()
    return {
        "jax_version": jax.__version__,
        "jaxlib_version": getattr(jaxlib, "__version__", ""),
        "backend": jax.default_backend(),
        "device_kind": devices[0].device_kind,
        "device_count": len(devices),
    }


def _subdir(root: str | None, name: str) -> str | None:
    import os

    return os.path.join(root, name) if root else None


def measure(work: Workload, s: MeasureSettings) -> dict[str, Any]:
    """Compile and time a workload; the dict is the result file's body.

    Raises _Failure for a configuration that fails (compile error, OOM, NaN...).
    """
    import jax

    from autotune._program import hlo_stats, memory_figures, program_fingerprint

    step = work.step if hasattr(work.step, "lower") else jax.jit(work.step)
    lowered = step.lower(*work.args)
    paired = s.compiler_options is not None
    result: dict[str, Any] = {"mode": "paired" if paired else "direct"}
    cand, result["compile_time_s"] = _compile(
        lowered, s.compiler_options or {}, _subdir(s.dump_dir, "candidate")
    )
    result["fingerprint"] = program_fingerprint(_subdir(s.dump_dir, "candidate"))
    if paired:
        base, result["baseline_compile_time_s"] = _compile(
            lowered, {}, _subdir(s.dump_dir, "baseline")
        )
        result["baseline_fingerprint"] = program_fingerprint(_subdir(s.dump_dir, "baseline"))
        result.update(_time_paired(base, cand, work.args, s))
        result.update(_numerics(cand, base, work.args))
    else:
        result.update(_time_direct(cand, work.args, s))
        result.update(_numerics(cand, None, work.args))
    result["hlo_stats"] = hlo_stats(cand)
    result.update(memory_figures(cand, direct=not paired))
    return result


def _numerics(cand: Any, base: Any | None, args: tuple[Any, ...]) -> dict[str, Any]:
    """Facts for the numerics guard; in PAIRED mode also the verdict against the baseline.

    One more step of each executable gives outputs to compare leaf by leaf. The
    lowest-precision float dtype and the sum of |x| let the parent compare
    checksums of DIRECT-mode runs from separate processes.
    """
    import jax
    import numpy as np

    from autotune import numerics

    leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(_run_once(cand, args)[1])]
    floats = [str(x.dtype) for x in leaves if "float" in str(x.dtype)]
    body: dict[str, Any] = {
        "output_dtype": min(floats, key=numerics.tolerance, default="") if floats else "",
        "abs_sum": float(sum(np.abs(x.astype(np.float64)).sum() for x in leaves)),
    }
    if base is not None:
        base_leaves = [np.asarray(x) for x in jax.tree_util.tree_leaves(_run_once(base, args)[1])]
        verdict = numerics.compare_arrays(leaves, base_leaves)
        body["numerics"] = verdict
        if not verdict["ok"]:
            body.update(status="numerics_mismatch", message=numerics.describe_mismatch(verdict))
    return body


def _write(path: str | None, body: dict[str, Any]) -> None:
    import json
    import sys

    body = {"schema_version": RESULT_SCHEMA_VERSION, **body}
    text = json.dumps(body, indent=1)
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text + "\n")


def run_file(path: str, preset: str, environ: dict[str, str]) -> int:
    """Measure the workload in `path`; write the result file; return the exit code.

    A failing configuration still exits 0 with `status` set to its kind: the
    parent reads the kind from the file. Faults outside the measured code
    (a missing file, a bad contract) also end up in the file as compile_error.
    """
    return _measure_to_file(lambda: build_workload(path, preset), environ)


def report(work: Workload | Callable[[], Workload]) -> int:
    """Measure a workload from your own program, for `autotune study --command`.

    Call it where your program has built its step and arguments (or pass a
    function that builds them). It reads the settings the parent passed in
    `AUTOTUNE_MEASURE`, measures, writes the result to `AUTOTUNE_RESULT` (or
    prints it when unset) and returns 0; the configuration under test reaches
    the process through XLA_FLAGS or, in paired mode, the settings.
    """
    import os

    return _measure_to_file(work if callable(work) else (lambda: work), dict(os.environ))


def _measure_to_file(build: Callable[[], Workload], environ: dict[str, str]) -> int:
    settings = MeasureSettings.from_env(environ)
    body: dict[str, Any] = {"status": "ok", "message": ""}
    try:
        body.update(_versions())
        body.update(measure(build(), settings))
    except _Failure as failure:
        body.update(status=failure.kind, message=str(failure)[-4000:])
    except Exception as exc:  # the workload's own failure (OOM while building, a bug...)
        classified = _classify_exception(exc)
        body.update(status=classified.kind, message=str(classified)[-4000:])
    _write(environ.get(RESULT_ENV), body)
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m autotune.bench FILE [--preset P]`: measure one workload file."""
    import argparse
    import os

    parser = argparse.ArgumentParser(prog="python -m autotune.bench")
    parser.add_argument("file", help="workload file defining workload(preset)")
    parser.add_argument("--preset", default="small")
    args = parser.parse_args(argv)
    return run_file(args.file, args.preset, dict(os.environ))


if __name__ == "__main__":
    # Run through the imported module so that workload files, which import
    # autotune.bench, see the same Workload class as the runner.
    from autotune import bench as _bench

    raise SystemExit(_bench.main())
