"""Every flag the installed XLA knows (`autotune flags list --all`).

XLA keeps no list it will print whole (its usage table is cut off after about 80
flags), so the list is found in two steps, neither importing jax in this process:

1. candidates: every `xla_...` word in jaxlib's shared libraries (and those of
   installed `jax_plugins`) whose names say jax or xla, where the flag registry's
   names are stored as text;
2. XLA's own answer: a child starts jax with every candidate set to `1` in
   `XLA_FLAGS`. XLA names each value it cannot parse (a known flag), then, once
   those are left out, lists every name it does not know at once; a start with
   what is left proves the rest known. A parser that fails without naming its
   flag is found by halving the batch; the halves are asked at once, a child per
   CPU (up to 8). 239 children in 11 rounds with jaxlib 0.10.2 (23 such flags).

The answer is cached per jaxlib version and interpreter, like the probe's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.flags._probe_runner import ProbeError, jaxlib_version
from autotune.flags.compose import format_tokens
from autotune.ground.resources import cache_root

__all__ = ["KnownFlags", "known_flags"]

REGISTRY_FORMAT = 1  # bump when the method or the cached fields change
MAX_RUNS = 300

#: The candidates' scan, run as `python -c` in the interpreter of the jaxlib asked about.
_SCAN = r"""
import importlib.util, json, mmap, re
from pathlib import Path
roots = []
for package in ("jaxlib", "jax_plugins"):
    spec = importlib.util.find_spec(package)
    roots += list(spec.submodule_search_locations or []) if spec else []
names = set()
for root in roots:
    for path in Path(root).rglob("*.so*"):
        if not path.is_file() or path.stat().st_size < 1 << 20 or not (
                "jax" in path.name or "xla" in path.name):
            continue
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            names.update(w.decode() for w in re.findall(rb"(?<![A-Za-z0-9_])xla_[a-z0-9_]{2,}", m))
with open("candidates.json", "w", encoding="utf-8") as out:
    json.dump(sorted(names), out)
"""
#: What makes XLA parse `XLA_FLAGS`: building compile options (a tenth of a second), or,
#: where jaxlib's extension has moved, starting a backend.
_START = """
try:
    from jaxlib import _jax
    _jax.CompileOptions()
except (ImportError, AttributeError):
    import jax
    jax.devices()
"""
_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS: (.*)")
_BAD_VALUE = re.compile(r"(?:Illegal value for|Couldn't interpret value .* for flag) "
                        r"-{0,2}(xla_[a-z0-9_]+)")


@dataclass(frozen=True)
class KnownFlags:
    """What the installed XLA knows: `names`, found among `candidates` words of its
    libraries in `runs` children, for jaxlib `jaxlib_version`."""

    jaxlib_version: str
    names: tuple[str, ...]
    candidates: int
    runs: int


def known_flags(python: str | None = None, *, cache_dir: Path | None = None,
                refresh: bool = False, timeout_s: float = 120,
                candidates: Iterable[str] | None = None) -> KnownFlags:
    """Every flag name the `XLA_FLAGS` of `python`'s jaxlib accepts (see the module).

    `candidates` replaces the scan of the libraries (the answer is then not cached).

    Raises:
        ProbeError: jaxlib is missing, the scan fails, or XLA's answers do not settle.
    """
    import sys

    python = python or sys.executable
    version = jaxlib_version(python)
    if candidates is not None:
        return _settle(python, timeout_s, version, sorted(set(candidates)))
    key = hashlib.sha256(json.dumps([REGISTRY_FORMAT, python]).encode()).hexdigest()[:12]
    default = cache_root()
    path = (cache_dir or default) / f"flags-jaxlib-{version}-{key}.json"
    if not refresh:
        try:
            cached = json.loads(path.read_text(encoding="utf-8"))
            return KnownFlags(**cached | {"names": tuple(cached["names"])})
        except (OSError, ValueError, TypeError, KeyError):
            pass
    found = _ask(python, timeout_s, version)
    try:  # atomically: another process may read it meanwhile
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(json.dumps(asdict(found)), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass  # a cache that cannot be written costs only a new answer
    return found


def _ask(python: str, timeout_s: float, version: str) -> KnownFlags:
    with tempfile.TemporaryDirectory(prefix="autotune-flags-") as tmp:
        scan = _child(python, _SCAN, {}, timeout_s, Path(tmp))
        try:
            candidates = json.loads(Path(tmp, "candidates.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise ProbeError(f"could not read jaxlib's libraries with {python}: "
                             f"{scan.stderr.strip()[-300:] or 'no output'}") from None
    return _settle(python, timeout_s, version, candidates)


def _settle(python: str, timeout_s: float, version: str, candidates: list[str]) -> KnownFlags:
    """Sort `candidates` into known and unknown by starting children (see the module).

    The batches waiting at once (the two halves of a silent failure, and what is left of
    each) are independent: each round starts them together, `_parallel()` at a time.
    """
    known: set[str] = set()
    queue, runs = [set(candidates)], 0
    with ThreadPoolExecutor(max_workers=_parallel()) as pool:
        while queue:
            batches, queue = queue, []
            runs += len(batches)
            if runs > MAX_RUNS:
                raise ProbeError(f"XLA's answers did not settle in {MAX_RUNS} runs")
            for batch, done in zip(batches, pool.map(
                    lambda b: _start(python, b, timeout_s), batches), strict=True):
                found, rest = _sorted_out(batch, done)
                known |= found
                queue += rest
    return KnownFlags(version, tuple(sorted(known)), len(candidates), runs)


def _parallel() -> int:
    """Children started at once: the CPUs this process may use, up to 8."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


def _start(python: str, batch: set[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """A child that makes XLA parse every name of `batch` set to `1`."""
    with tempfile.TemporaryDirectory(prefix="autotune-flags-") as tmp:
        return _child(python, _START, {n: "1" for n in sorted(batch)}, timeout_s, Path(tmp))


def _sorted_out(batch: set[str], done: subprocess.CompletedProcess[str]
                ) -> tuple[set[str], list[set[str]]]:
    """What XLA's answer to `batch` proves known, and the batches still to ask about."""
    if done.returncode == 0:
        return batch, []
    unknown = {n.lstrip("-").partition("=")[0] for m in _UNKNOWN.finditer(done.stderr)
               for n in m.group(1).split()} & batch
    rejected = set(_BAD_VALUE.findall(done.stderr)) & batch  # XLA parsed the name: known
    rest = batch - unknown - rejected
    if unknown or rejected:
        return rejected, [rest] if rest else []
    if len(batch) == 1:
        return batch, []  # parsing failed on its value alone, without words: known
    ordered = sorted(batch)  # a parser failed without naming its flag: halve the batch
    return set(), [set(ordered[:len(ordered) // 2]), set(ordered[len(ordered) // 2:])]


def _child(python: str, code: str, flags: dict[str, str], timeout_s: float,
           folder: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -c code` in `folder` with `flags` as its XLA_FLAGS; its whole stderr is
    kept (XLA lists every unknown name on one line, longer than a log tail)."""
    env = dict(os.environ, XLA_FLAGS=format_tokens(list(flags.items())), TF_CPP_MIN_LOG_LEVEL="0")
    try:
        return subprocess.run([python, "-c", code], env=env, cwd=folder, capture_output=True,
                              text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise ProbeError(f"no answer from {python} in {timeout_s:g} s while listing XLA's "
                         "flags") from None
