"""Facts about a compiled program, read inside the trial child: collectives, code, memory.

Imports only the standard library at import time; jax inside the functions.
"""

from __future__ import annotations

import re
from typing import Any

_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")


def hlo_stats(compiled: Any) -> dict[str, int]:
    """Count collectives (sync and async starts) and fusions in the optimised HLO."""
    import re

    text = compiled.as_text() or ""
    stats = {}
    for op in _COLLECTIVES:
        stats[op] = len(re.findall(rf"\s{op}(?:-start)?\(", text))
    stats["fusion"] = len(re.findall(r"\sfusion\(", text))
    stats["instructions"] = sum(1 for line in text.splitlines() if " = " in line)
    return stats


def collectives(compiled: Any) -> dict[str, dict[str, int]]:
    """The collectives of the optimised HLO per kind (`autotune.rules.collectives`), as the
    result document holds them."""
    from autotune.rules.collectives import collective_profile, profile_json

    return profile_json(collective_profile(compiled.as_text() or ""))


def program_fingerprint(dump_dir: str | None, after_hlo: str = "") -> str | None:
    """Hash the optimised HLO (with schedule) and the generated code of a dump folder,
    and `after_hlo`: the flags that act after that HLO (`Job.program_flags`; CUDA graphs
    are built from the thunks, and the dump does not show them). None without a dump.

    Module numbers in file names differ between compilations of one program, so
    files are keyed by name with the `module_NNNN.` prefix removed. The HLO's
    source metadata (`metadata={...}` and the trailing tables of file names and
    stack frames) is left out: it names the Python files and lines that traced
    the step, so the same program traced from another path, another line or
    another version of the caller would otherwise hash differently.
    """
    import hashlib
    import re
    from pathlib import Path

    if not dump_dir or not Path(dump_dir).is_dir():
        return None
    wanted = re.compile(r"(after_optimizations\.txt|\.o|\.ptx|\.cubin)$")
    digest = hashlib.sha256()
    files = [p for p in Path(dump_dir).iterdir() if wanted.search(p.name)]
    for path in sorted(files, key=lambda p: re.sub(r"^module_\d+\.", "", p.name)):
        digest.update(re.sub(r"^module_\d+\.", "", path.name).encode())
        data = path.read_bytes()
        digest.update(without_source(data) if path.name.endswith(".txt") else data)
    if after_hlo:
        digest.update(b"\0after_hlo\0" + after_hlo.encode())
    return digest.hexdigest()[:16] if files else None


#: `, metadata={...}` of an HLO instruction (its quoted strings may hold braces)
_METADATA = re.compile(rb', metadata=\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\}')
#: the tables after the module that say where each instruction was traced from
_SOURCE_TABLES = re.compile(rb"\n\n(?:FileNames|FunctionNames|FileLocations|StackFrames)\n.*\Z",
                            re.S)


def without_source(hlo: bytes) -> bytes:
    """An HLO text without its source metadata (see `program_fingerprint`)."""
    return _SOURCE_TABLES.sub(b"\n", _METADATA.sub(b"", hlo))


def program_bytes(compiled: Any) -> int | None:
    """The compiled program's own footprint from `memory_analysis` (arguments + outputs +
    temporaries - aliased + code), None where the backend gives no analysis."""
    analysis = compiled.memory_analysis()
    if analysis is None:
        return None
    return int(analysis.argument_size_in_bytes + analysis.output_size_in_bytes
               + analysis.temp_size_in_bytes - analysis.alias_size_in_bytes
               + analysis.generated_code_size_in_bytes)


def memory_figures(compiled: Any, direct: bool) -> dict[str, Any]:
    """Peak memory of the step and where the figure comes from.

    The headline figure is the device allocator's peak (`memory_stats`) where
    the backend has one and the process ran only this executable (DIRECT
    mode); otherwise the compiled program's own footprint from
    `memory_analysis` (arguments + outputs + temporaries - aliased + code).
    The process's peak RSS is recorded beside it. Figures are this process's (its
    first local device), also in a multi-process trial.
    """
    import resource

    import jax

    program = program_bytes(compiled)
    stats = jax.local_devices()[0].memory_stats() or {}
    device_peak = stats.get("peak_bytes_in_use")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    peak: int | None = program
    source = "memory_analysis"
    if direct and device_peak is not None:
        peak, source = int(device_peak), "memory_stats"
    return {
        "peak_memory_bytes": peak,
        "memory_source": source,
        "device_peak_bytes": device_peak,
        "rss_peak_bytes": rss,
    }
