"""What a workload is (`Workload`, re-exported by `autotune.bench`), and loading a workload
file with its contract checked (`workload(preset) -> Workload`)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from autotune.child.failure import Failure

#: The size presets every workload accepts.
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


def load_workload_module(path: str) -> ModuleType:
    """Import a workload file by path and return the module."""
    file = Path(path).resolve()
    if not file.is_file():
        raise Failure("compile_error", f"no workload file {file}: give the path of a Python "
                      "file defining workload(preset)")
    spec = importlib.util.spec_from_file_location(f"autotune_workload_{file.stem}", file)
    if spec is None or spec.loader is None:
        raise Failure("compile_error", f"cannot import workload file {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build_workload(path: str, preset: str) -> Workload:
    """Call the file's `workload(preset)` and check that it returns a Workload, or a
    `(step, args)` pair (a function `jax.jit` can take and its arguments), made one.

    Raises:
        Failure: `compile_error` when the file is missing, defines no `workload`
            function, or it returns something else.
    """
    module = load_workload_module(path)
    factory = getattr(module, "workload", None)
    if not callable(factory):
        raise Failure("compile_error", f"{path} defines no function `workload(preset)`")
    result = factory(preset)
    if isinstance(result, tuple) and len(result) == 2 and callable(result[0]):
        step, args = result
        return Workload(step=step, args=tuple(args) if isinstance(args, tuple | list)
                        else (args,), name=Path(path).stem)
    if not isinstance(result, Workload):
        raise Failure("compile_error", f"{path}: workload() must return autotune.bench.Workload "
                      "or a (step, args) pair")
    return result
