"""Figures of how readable the package is: what issue 29 asks to track.

    python scripts/house_figures.py [--format json]

Prints modules per folder, the largest module, class and function, the
functions over 60 lines or with more than 12 parameters, the classes over
300 lines, import cycles between modules (from grimp's graph, the one
import-linter checks; with and without the imports under `if TYPE_CHECKING:`), and the
imports of autotune's own modules that stand inside a function.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "autotune"
MAX_MODULE, MAX_FUNCTION, MAX_PARAMS, MAX_CLASS = 500, 60, 12, 300


def _span(node: ast.AST) -> int:
    return int(getattr(node, "end_lineno", 0)) - int(getattr(node, "lineno", 0)) + 1


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args, *a.kwonlyargs]
    return len([n for n in names if n.arg not in ("self", "cls")]) + bool(a.vararg) + bool(
        a.kwarg)


def _own_import(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "autotune"
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "autotune" for alias in node.names)
    return False


def scan() -> dict[str, Any]:
    """Every figure, from the source files' syntax trees and grimp's import graph."""
    folders: Counter[str] = Counter()
    modules, classes, functions = [], [], []
    local_imports: Counter[str] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        folders[path.parent.relative_to(ROOT).as_posix()] += 1
        text = path.read_text()
        modules.append((len(text.splitlines()), rel))
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.append((_span(node), f"{rel}:{node.name}"))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                functions.append((_span(node), _params(node), f"{rel}:{node.name}"))
                for inner in ast.walk(node):
                    if _own_import(inner):
                        local_imports[rel] += 1
    return {
        "modules_per_folder": dict(sorted(folders.items())),
        "modules": len(modules),
        "largest_module": _top(modules),
        "modules_over_limit": [m for n, m in sorted(modules, reverse=True) if n > MAX_MODULE],
        "largest_class": _top(classes),
        "classes_over_limit": [c for n, c in sorted(classes, reverse=True) if n > MAX_CLASS],
        "largest_function": _top([(n, f) for n, _, f in functions]),
        "functions_over_60_lines": [f"{f} ({n})" for n, _, f in sorted(functions, reverse=True)
                                    if n > MAX_FUNCTION],
        "functions_over_12_params": [f"{f} ({p})" for _, p, f in sorted(
            functions, key=lambda x: -x[1]) if p > MAX_PARAMS],
        "function_level_imports": sum(local_imports.values()),
        "function_level_imports_by_module": dict(local_imports.most_common()),
        "import_cycles": _cycles(exclude_type_checking=True),
        "import_cycles_with_type_checking": _cycles(exclude_type_checking=False),
    }


def _top(items: list[tuple[int, str]]) -> dict[str, Any]:
    lines, name = max(items)
    return {"name": name, "lines": lines}


def _cycles(exclude_type_checking: bool) -> list[list[str]]:
    """Strongly connected groups of modules (more than one) in the import graph."""
    import grimp

    sys.path.insert(0, str(ROOT))
    graph = grimp.build_graph("autotune", exclude_type_checking_imports=exclude_type_checking,
                               cache_dir=None)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=["table", "json"], default="table")
    figures = scan()
    if parser.parse_args().format == "json":
        print(json.dumps(figures, indent=2))
        return
    for key, value in figures.items():
        if key == "function_level_imports_by_module":
            value = dict(list(value.items())[:8])
        print(f"{key}: {json.dumps(value)}")


if __name__ == "__main__":
    main()
