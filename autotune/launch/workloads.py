"""Find workload files: the built-in benchmarks by name, or a user's file by path.

A workload file follows the contract in `autotune.bench`. This module only
locates and describes files; it never imports jax or the workload itself.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from autotune.ground.errors import UnknownBenchmarkError, WorkloadError
from autotune.ground.resources import data_dir


@dataclass(frozen=True)
class WorkloadInfo:
    """A workload file and what its module docstring says about it."""

    name: str
    path: Path
    description: str


def _describe(path: Path) -> str:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "DESCRIPTION" for t in node.targets
        ):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    doc = ast.get_docstring(tree) or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


def list_benchmarks() -> list[WorkloadInfo]:
    """The built-in benchmarks, sorted by name."""
    folder = data_dir("benchmarks")
    files = sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
    return [WorkloadInfo(p.stem, p, _describe(p)) for p in files]


def resolve_benchmark(name: str) -> WorkloadInfo:
    """Look a benchmark up by name.

    Raises:
        UnknownBenchmarkError: no such benchmark; the message lists the known ones.
    """
    known = {info.name: info for info in list_benchmarks()}
    if name in known:
        return known[name]
    raise UnknownBenchmarkError(
        f"unknown benchmark '{name}'. Known benchmarks: {', '.join(sorted(known))}. "
        "Run `autotune benchmarks list` to see what each measures."
    )


def resolve_script(path: str) -> WorkloadInfo:
    """A user's workload file: it must exist and define `workload(preset)`.

    Raises:
        WorkloadError: the file is missing, is not Python, or defines no `workload`.
    """
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise WorkloadError(f"workload file {path} does not exist")
    try:
        tree = ast.parse(file.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"workload file {path} is not valid Python: {exc}") from exc
    if not any(isinstance(n, ast.FunctionDef) and n.name == "workload" for n in tree.body):
        raise WorkloadError(
            f"workload file {path} defines no `workload(preset)` function; "
            "see 'Your own workload' in the README"
        )
    return WorkloadInfo(file.stem, file, _describe(file))


def command_info(argv: tuple[str, ...]) -> WorkloadInfo:
    """Describe a user's program (`--command`): named after its script or executable."""
    script = next((a for a in reversed(argv) if a.endswith(".py")), None)
    name = Path(script).stem if script else Path(argv[0]).name
    return WorkloadInfo(name, Path(script or argv[0]), "command: " + " ".join(argv))
