"""Every flag the installed XLA knows (`autotune flags list --all`).

XLA keeps no list it will print whole (its usage table is cut off after about 80
flags), so the list is found in two steps, neither importing jax in this process:

1. candidates: every `xla_...` word in jaxlib's shared libraries (and those of
   installed `jax_plugins`) whose names say jax or xla, where the flag registry's
   names are stored as text;
2. XLA's own answer: a child makes XLA parse `XLA_FLAGS` with every candidate
   set to `1`. XLA names each value it cannot parse (a known flag); only once
   every value parsed does it list, at once, every name it does not know, so
   such an answer proves the rest known. A parser that fails without naming its
   flag is found by halving the batch. The batches of one round are asked at
   once (up to one per CPU, 8 at most), each in a fork of one child per round
   that loaded jaxlib's extension before any flag was parsed (XLA parses
   `XLA_FLAGS` once per process, on first use); where that extension cannot
   be loaded so, a child per batch starts jax. 200 batches in 11 rounds with
   jaxlib 0.10.2 (23 flags whose parsers refuse `1` without a word): 3 s
   rather than 30 s in a child per batch on 2 CPUs.

The answer is cached per jaxlib version and interpreter, like the probe's.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from autotune.flags._probe_runner import ProbeError, jaxlib_version
from autotune.flags.compose import format_tokens
from autotune.ground.resources import cache_root, usable_cpus

__all__ = ["KnownFlags", "known_flags"]

REGISTRY_FORMAT = 1  # bump when the method or the cached fields change
MAX_RUNS = 300
#: Seconds a forked parse may take before it counts as no answer (it takes about 10 ms).
FORK_ALARM_S = 30

#: The candidates' scan, run as `python -c` in the interpreter of the jaxlib asked about.
_SCAN = r"""
import importlib.util, json, mmap, re
from pathlib import Path
roots = []
for package in ("jaxlib", "jax_plugins"):
    spec = importlib.util.find_spec(package)
    roots += list(spec.submodule_search_locations or []) if spec else []
names = set()
# a word where no word character comes before it (30 times a look-behind's speed):
word = re.compile(rb"xla_[a-z0-9_]{2,}")
inner = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
for root in roots:
    for path in Path(root).rglob("*.so*"):
        if not path.is_file() or path.stat().st_size < 1 << 20 or not (
                "jax" in path.name or "xla" in path.name):
            continue
        with open(path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
            names.update(w.group().decode() for w in word.finditer(m)
                         if w.start() == 0 or m[w.start() - 1] not in inner)
with open("candidates.json", "w", encoding="utf-8") as out:
    json.dump(sorted(names), out)
"""
_NO_FORKS = 3
#: One round: stdin holds a JSON list of `XLA_FLAGS` values; each is parsed in a fork of
#: this process made after jaxlib's extension loaded (argv: forks at once, seconds before
#: a fork gives up); stdout gets the list of their {returncode, stderr}. It exits with
#: `_NO_FORKS` where the extension is not there to load, or where fork is not.
_ROUND = """
import json, os, signal, sys, tempfile, traceback
try:
    from jaxlib import _jax
    _jax.CompileOptions, os.fork
except (ImportError, AttributeError):
    sys.exit(NO_FORKS)
parallel, timeout = int(sys.argv[1]), int(sys.argv[2])
batches = json.load(sys.stdin)
answers, running = [None] * len(batches), {}

def reap():
    pid, status = os.wait()
    i, path = running.pop(pid)
    with open(path, encoding="utf-8", errors="replace") as err:
        answers[i] = {"returncode": os.waitstatus_to_exitcode(status), "stderr": err.read()}

with tempfile.TemporaryDirectory() as tmp:
    for i, flags in enumerate(batches):
        if len(running) >= parallel:
            reap()
        path = os.path.join(tmp, str(i) + ".err")
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), 2)
                os.environ["XLA_FLAGS"] = flags
                signal.alarm(timeout)
                _jax.CompileOptions()
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stderr.flush()
                os._exit(code)
        running[pid] = (i, path)
    while running:
        reap()
json.dump(answers, sys.stdout)
""".replace("NO_FORKS", str(_NO_FORKS))
#: What makes XLA parse `XLA_FLAGS` in a child per batch: building compile options (a
#: tenth of a second), or, where jaxlib's extension has moved, starting a backend.
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
    """Sort `candidates` into known and unknown by asking XLA (see the module).

    The batches waiting at once (the two halves of a silent failure) are independent:
    each round asks them together, `_parallel()` at a time, in forks of one child
    (`_round`), or, where that child cannot fork, in a child each.
    """
    known: set[str] = set()
    queue, runs, forks = [set(candidates)], 0, True
    with ThreadPoolExecutor(max_workers=_parallel()) as pool:
        while queue:
            batches, queue = queue, []
            runs += len(batches)
            if runs > MAX_RUNS:
                raise ProbeError(f"XLA's answers did not settle in {MAX_RUNS} runs")
            answers = _round(python, batches, timeout_s) if forks else None
            if answers is None:
                forks = False
                answers = list(pool.map(lambda b: _start(python, b, timeout_s), batches))
            for batch, done in zip(batches, answers, strict=True):
                found, rest = _sorted_out(batch, done)
                known |= found
                queue += rest
    return KnownFlags(version, tuple(sorted(known)), len(candidates), runs)


def _round(python: str, batches: list[set[str]], timeout_s: float
           ) -> list[subprocess.CompletedProcess[str]] | None:
    """XLA's answer to each of `batches` (every name set to `1`), each parsed in a fork of
    one `_ROUND` child; None where that child gives no answers (it cannot load jaxlib's
    extension or fork, it failed, or a fork hung past `FORK_ALARM_S`), so that a child
    per batch asks instead."""
    flags = [format_tokens([(n, "1") for n in sorted(batch)]) for batch in batches]
    parallel, alarm = _parallel(), max(1, math.ceil(min(timeout_s, FORK_ALARM_S)))
    env = dict(os.environ, XLA_FLAGS="", TF_CPP_MIN_LOG_LEVEL="0")
    with tempfile.TemporaryDirectory(prefix="autotune-flags-") as tmp:
        try:
            done = subprocess.run(
                [python, "-c", _ROUND, str(parallel), str(alarm)], input=json.dumps(flags),
                env=env, cwd=tmp, capture_output=True, text=True, check=False,
                timeout=timeout_s * (1 + math.ceil(len(batches) / parallel)))
        except subprocess.TimeoutExpired:
            raise ProbeError(f"no answer from {python} in time while listing XLA's "
                             "flags") from None
    try:  # no answers (`_NO_FORKS`, or the child failed): a child per batch instead
        answers = json.loads(done.stdout) if done.returncode == 0 else None
        codes = [int(a["returncode"]) for a in answers or ()]
        texts = [str(a["stderr"]) for a in answers or ()]
    except (ValueError, TypeError, KeyError):
        return None
    if len(codes) != len(batches) or -signal.SIGALRM in codes:
        return None  # a fork that hung (a parse takes 10 ms) is no answer either
    return [subprocess.CompletedProcess(python, code, "", text)
            for code, text in zip(codes, texts, strict=True)]


def _parallel() -> int:
    """Children (or forks) started at once: the CPUs this process may use, up to 8."""
    return usable_cpus(8)


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
    if unknown:  # XLA lists the names it does not know once every other value parsed
        return batch - unknown, []
    rest = batch - rejected
    if rejected:
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
