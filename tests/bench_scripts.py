"""The benchmark scripts (`benchmarks/scripts/`, no package) as modules for the tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "benchmarks/scripts"


def script(name: str) -> ModuleType:
    """`benchmarks/scripts/NAME.py` imported once, by its own name (the scripts import each
    other by name, and their dataclasses look their module up in `sys.modules`)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
