"""What each benchmark compiles to: the collectives in its optimised HLO.

Read by compiling and running each workload once (tiny preset) in a trial
child, whose result carries the collectives per kind (`autotune.rules.collectives`:
how many, and how many of them inside a while loop). Cached per content of the
benchmark files, jaxlib version and device count, so `autotune benchmarks list`
is fast after the first call.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.bench import PRESETS
from autotune.ground.protocol import Job
from autotune.ground.resources import cache_root
from autotune.launch.launcher import SubprocessLauncher, TrialRequest
from autotune.launch.workloads import WorkloadInfo

#: The kinds (`autotune.rules.collectives.KINDS`) in the order they are shown, FSDP's first.
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "collective-permute", "all-to-all")
#: The figures of one kind: how many instructions, how many of them inside a while loop.
FIGURES = ("count", "in_loop")
#: Part of the cache file's name: another shape of what is cached gets another name.
CACHE_VERSION = "collectives-v2"

#: kind -> {"count": n, "in_loop": m}, every kind present (0 where the program has none).
Found = dict[str, dict[str, int]]


def _cache_file(info: WorkloadInfo, devices: int) -> Path:
    """The cache file of `info` on `devices` devices. The digest covers every workload
    file beside it too: a built-in benchmark may load a sibling (scan-transformer
    builds on transformer)."""
    root = cache_root()
    try:
        jaxlib = importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        jaxlib = "none"
    digest = hashlib.sha256(info.path.read_bytes())
    for sibling in sorted(info.path.parent.glob("*.py")):
        digest.update(sibling.name.encode() + b"\0" + sibling.read_bytes() + b"\0")
    return root / f"{CACHE_VERSION}-{info.name}-{jaxlib}-{devices}-{digest.hexdigest()[:16]}.json"


def _read_cache(cache: Path) -> Found | None:
    """The cached figures, or None when the file is missing or not of this shape."""
    try:
        raw = json.loads(cache.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(raw, dict) or set(raw) != set(COLLECTIVES):
        return None
    if not all(isinstance(v, dict) and set(v) == set(FIGURES)
               and all(type(n) is int for n in v.values()) for v in raw.values()):
        return None
    return {kind: dict(raw[kind]) for kind in COLLECTIVES}


def collectives(info: WorkloadInfo, devices: int = 8) -> Found | str:
    """The collectives of `info`'s tiny preset on `devices` devices, or why there are none.

    Per kind (`COLLECTIVES`, every one): `count`, the instructions in the optimised
    HLO, and `in_loop`, how many of them run inside a while loop.
    """
    cache = _cache_file(info, devices)
    cached = _read_cache(cache)
    if cached is not None:
        return cached
    env = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    outcome = SubprocessLauncher().launch(TrialRequest(
        info.path, "tiny", Job(steps=1, warmup=1, max_warmup=1), env, timeout_s=120))
    if not outcome.ok or outcome.measurement is None:
        return f"{outcome.kind.value}: {outcome.message[:80]}"
    profile = outcome.measurement.collectives
    if profile is None:
        return "the trial child reported no collectives"
    found = {kind: {"count": profile[kind].count if kind in profile else 0,
                    "in_loop": profile[kind].loop_count if kind in profile else 0}
             for kind in COLLECTIVES}
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps(found))
    return found


def presets(info: WorkloadInfo) -> list[str]:
    """The presets `info`'s file declares (a literal `PRESETS = (...)`), read without
    importing it; `autotune.bench.PRESETS` where it declares none."""
    tree = ast.parse(info.path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "PRESETS" for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            if isinstance(value, tuple | list) and all(isinstance(p, str) for p in value):
                return list(value)
    return list(PRESETS)


def describe(found: Mapping[str, Mapping[str, int]] | str) -> str:
    """One line per kind the program has: 'all-gather 9 (8 in loop)' (or 'none', or the
    failure)."""
    if isinstance(found, str):
        return found
    lines = [f"{kind} {figures['count']}"
             + (f" ({figures['in_loop']} in loop)" if figures["in_loop"] else "")
             for kind, figures in found.items() if figures["count"]]
    return "\n".join(lines) or "none"


def entry(info: WorkloadInfo, found: Found | str) -> dict[str, Any]:
    """The JSON object of one benchmark: benchmark, description, presets, and either
    collectives (kind -> count, in_loop) or error."""
    row: dict[str, Any] = {"benchmark": info.name, "description": info.description,
                           "presets": presets(info)}
    if isinstance(found, str):
        row["error"] = found
    else:
        row["collectives"] = found
    return row
