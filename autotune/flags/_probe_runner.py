"""The flag probe's engine: children that sort flag names and values by what XLA says.

`Prober` starts `python -c <_probe_child.py>` with the `XLA_FLAGS` under test,
under a time limit and at most `max_runs` times. XLA aborts at backend start on
a name it does not know (listing all of them) and on a value it cannot parse
(naming the flag, or for some list flags naming nothing): a batch is retried
without what XLA named, and halved when it named nothing. `autotune.flags.probe`
builds the report from the answers; neither module imports jax.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.flags.compose import format_tokens, parse_flag_string
from autotune.ground.errors import UsageError
from autotune.ground.proc import run_bounded
from autotune.ground.records import FlagValue, OutcomeKind
from autotune.rules.failures import classify_stderr

MAX_RUNS = 60
_CHILD = Path(__file__).with_name("_probe_child.py")
_RESULT, _OPTIONS = "probe.json", "options.json"

Sorted = tuple[set[str], set[str], dict[str, str]]  # accepted, unknown, rejected (-> message)


class ProbeError(UsageError):
    """The probe cannot run: no jaxlib, jax does not start even without flags, or no answer."""


@dataclass
class _Run:
    """One child: it started (`info`), or XLA named unknown names or bad values, or just failed."""

    info: dict[str, Any] | None
    unknown: set[str] = field(default_factory=set)
    rejected: dict[str, str] = field(default_factory=dict)
    message: str = ""


class Prober:
    """Starts the children (at most `max_runs`) and sorts names and values by what they say."""

    def __init__(
        self,
        python: str,
        timeout_s: float,
        *,
        options: Mapping[str, FlagValue] | None = None,
        guessed: Iterable[str] = (),
        max_runs: int = MAX_RUNS,
        env: Mapping[str, str] | None = None,
        fixed: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Set up a prober.

        Args:
            python: the children's interpreter.
            timeout_s: the limit of each child.
            options: name -> typed value to ask compiler_options about, in the first
                child that starts (its answer lands in `info["per_compile"]`).
            guessed: names whose step-1 value is a guess (set apart first when a batch
                fails and XLA names no flag).
            max_runs: the most children to start.
            env: the variables the children start with (default: this process's);
                their `XLA_FLAGS` is replaced by `fixed` and the flags under test.
            fixed: (name, value) flags every child's `XLA_FLAGS` starts with (e.g. the
                study's `xla_force_host_platform_device_count`), never under test.
        """
        self.python, self.timeout_s, self.max_runs = python, timeout_s, max_runs
        self.runs, self.plain_ok = 0, False
        self.info: dict[str, Any] | None = None  # the first started child's answer
        self.options, self.guessed = dict(options or {}), set(guessed)
        self.usage: dict[str, str] = {}  # XLA's usage table, when it printed one
        self.env = dict(os.environ if env is None else env)
        self.fixed = list(fixed)

    def names(self, first: dict[str, str]) -> Sorted:
        """Step 1: which names XLA_FLAGS knows (a name whose value it rejects is known)."""
        accepted, unknown, rejected = self._settle(first)
        if self.info is None:
            self._require_plain_start()
        undecided = first.keys() - accepted - unknown - rejected.keys()
        if undecided:
            raise ProbeError(f"the flag probe did not settle {len(undecided)} flags in "
                             f"{self.max_runs} runs (e.g. {min(undecided)}); probe again with "
                             "refresh, and report it if it persists")
        return accepted | rejected.keys(), unknown, rejected

    def check(self, values: Mapping[str, Iterable[str]]) -> dict[str, dict[str, str | None]]:
        """Step 2: one untried value per flag per batch, until every value is tried."""
        queues = {flag: list(dict.fromkeys(vals)) for flag, vals in values.items()}
        results: dict[str, dict[str, str | None]] = {flag: {} for flag in queues}
        while self.runs < self.max_runs and any(queues.values()):
            batch = {flag: queue.pop(0) for flag, queue in queues.items() if queue}
            for flag in [f for f, v in batch.items() if any(c.isspace() for c in v)]:
                results[flag][batch.pop(flag)] = "XLA_FLAGS cannot carry a value with whitespace"
            accepted, unknown, rejected = self._settle(batch)
            for flag in accepted | rejected.keys():
                results[flag][batch[flag]] = rejected.get(flag)
            for flag in unknown:
                message = f"Unknown flag in XLA_FLAGS: --{flag}"
                results[flag] |= dict.fromkeys([batch[flag], *queues.pop(flag)], message)
        return results

    def _settle(self, batch: dict[str, str]) -> Sorted:
        """Run `batch`, less each name XLA names, halving it when XLA names none."""
        accepted, unknown, rejected = set[str](), set[str](), dict[str, str]()
        pending = [batch] if batch else []
        while pending and self.runs < self.max_runs:
            tokens = pending.pop()
            run = self._run(tokens)
            unknown, rejected = unknown | run.unknown, rejected | run.rejected
            rest = {n: v for n, v in tokens.items() if n not in run.unknown | run.rejected.keys()}
            if run.info is not None:
                accepted.update(tokens)
            elif rest != tokens:
                pending += [rest] if rest else []
            else:
                self._require_plain_start()
                if len(tokens) == 1:
                    rejected |= dict.fromkeys(tokens, run.message)
                else:
                    pending += _split(tokens, self.guessed)
        return accepted, unknown, rejected

    def _require_plain_start(self) -> None:
        """Before blaming a flag, make sure that jax starts without any."""
        if not self.plain_ok:
            run = self._run({})
            if run.info is None:
                raise ProbeError(f"jax does not start in a plain subprocess of {self.python}: "
                                 f"{run.message}. Install jax first (pip install jax)")
            self.plain_ok = True

    def _run(self, tokens: Mapping[str, str]) -> _Run:
        self.runs += 1
        env = dict(self.env, XLA_FLAGS=format_tokens([*self.fixed, *tokens.items()]),
                   TF_CPP_MIN_LOG_LEVEL="0")  # XLA's flag errors are log lines
        with tempfile.TemporaryDirectory(prefix="autotune-probe-") as tmp:
            if self.info is None and self.options:
                Path(tmp, _OPTIONS).write_text(json.dumps(self.options), encoding="utf-8")
            argv = [self.python, "-c", _CHILD.read_text(encoding="utf-8")]
            done = run_bounded(argv, env, Path(tmp), self.timeout_s, scratch=Path(tmp))
            found = Path(tmp, _RESULT)
            info = json.loads(found.read_text(encoding="utf-8")) if found.exists() else None
        stderr = done.stderr_head + "\n" + done.stderr
        self.usage |= _usage_table(stderr)
        if info is not None and done.returncode == 0:
            self.info = self.info or info
            return _Run(info)
        message = f"no answer in {self.timeout_s:g} s" if done.timed_out else _first_error(stderr)
        return _Run(None, *_named_problems(stderr, tokens), message or f"exit {done.returncode}")


def _split(tokens: dict[str, str], guessed: set[str]) -> list[dict[str, str]]:
    """Halve a batch; names whose value was guessed (not typed) go apart first."""
    items = sorted(tokens.items(), key=lambda item: item[0] not in guessed)
    cut = sum(name in guessed for name in tokens) or len(items) // 2
    cut = cut if cut < len(items) else len(items) // 2
    return [dict(items[:cut]), dict(items[cut:])]


def _named_problems(stderr: str, tokens: Mapping[str, str]) -> tuple[set[str], dict[str, str]]:
    """The unknown names and the rejected values (flag -> XLA's line) in a child's stderr."""
    unknown: set[str] = set()
    rejected: dict[str, str] = {}
    for line in stderr.splitlines():
        found = classify_stderr(line)
        if found and found[0] is OutcomeKind.UNKNOWN_FLAG:
            unknown.update(n for n, _ in parse_flag_string(found[1].partition(": ")[2]))
        elif found:
            rejected.setdefault(found[1].rpartition(" for --")[2], line.partition("] ")[2])
    return unknown & tokens.keys(), {n: m for n, m in rejected.items() if n in tokens}


def _first_error(stderr: str) -> str:
    """XLA's log line that best explains an abort (prefix cut), else stderr's last line."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    logged = [line for line in lines if line[:1] in "EF" and line[1:5].isdigit()]
    about_flags = [line for line in logged if "flag" in line.lower()]
    best = (about_flags or [x for x in logged if x[0] == "F"] or logged or lines[-1:] or [""])[0]
    return (best.partition("] ")[2] if best in logged else best).strip()


def _usage_table(stderr: str) -> dict[str, str]:
    """flag -> default from the `\\t--name=default\\ttype\\thelp` lines XLA prints."""
    table: dict[str, str] = {}
    for line in stderr.splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and not parts[0] and parts[1].startswith("--"):
            name, _, default = parts[1][2:].rstrip().partition("=")
            quoted = parts[2] == "string" and len(default) >= 2 and default[0] == default[-1] == '"'
            table[name] = default[1:-1] if quoted else default
    return table


def jaxlib_version(python: str) -> str:
    """jaxlib's version in `python`, without importing jax."""
    if Path(python).absolute() != Path(sys.executable).absolute():  # another environment
        with tempfile.TemporaryDirectory(prefix="autotune-probe-") as tmp:
            done = run_bounded([python, "-c", "import importlib.metadata as m; "
                                "print(m.version('jaxlib'))"], os.environ, Path(tmp), 60)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[-1]
        raise ProbeError(f"jaxlib is not installed for {python}: install jax first "
                         "(pip install jax)")
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        raise ProbeError("jaxlib is not installed: install jax first (pip install jax)") from None




#: The longest driver and runtime texts kept (the columns of `autotune_environments`).
DRIVER_CHARS, RUNTIME_CHARS = 64, 255
_VERSION = re.compile(r"\b\d+(?:\.\d+)+\b")
_RUNTIME = re.compile(r"\b(?:cuda|rocm)\s+[\d.]+", re.IGNORECASE)


def runtime_version(platform_version: str, backend: str) -> str | None:
    """The runtime a backend's `platform_version` names, None where it names none.

    On CUDA the text holds `cuda 12080` (ROCm: `rocm ...`): that is kept. The CPU
    client says `cpu` or `<unknown>`: no runtime. Anything else is kept whole, its
    whitespace collapsed.
    """
    text = " ".join(platform_version.split())
    if text.lower() in ("", "<unknown>", "unknown", backend.lower()):
        return None
    found = _RUNTIME.search(text)
    return (found.group(0) if found else text)[:RUNTIME_CHARS]


def nvidia_driver(text: str) -> str | None:
    """The driver version in `/proc/driver/nvidia/version`'s text (its `NVRM version` line,
    e.g. `... Kernel Module  550.54.15  Tue Mar ...`), or in nvidia-smi's first line."""
    lines = text.splitlines()
    line = next((x for x in lines if x.startswith("NVRM version")), lines[0] if lines else "")
    found = _VERSION.search(line)
    return found.group(0)[:DRIVER_CHARS] if found else None


def driver_version(backend: str, runtime: str | None, root: Path = Path("/"),
                   timeout_s: float = 10) -> str | None:
    """The GPU driver's version, None on other backends or where it cannot be read.

    NVIDIA: `/proc/driver/nvidia/version`, else `nvidia-smi` when installed. AMD
    (a `rocm` runtime): `/sys/module/amdgpu/version` (the packaged amdgpu driver;
    a kernel's own amdgpu has none: None). `root` is where those paths are looked
    up (tests; nvidia-smi is asked only under the real root).
    """
    if backend.lower() not in ("gpu", "cuda", "rocm"):
        return None
    if backend.lower() == "rocm" or (runtime or "").lower().startswith("rocm"):
        text = _read(root / "sys/module/amdgpu/version")
        return (text.strip()[:DRIVER_CHARS] or None) if text is not None else None
    text = _read(root / "proc/driver/nvidia/version")
    if text is not None:
        return nvidia_driver(text)
    smi = shutil.which("nvidia-smi")
    if smi is None or root != Path("/"):
        return None
    with tempfile.TemporaryDirectory(prefix="autotune-probe-") as tmp:
        done = run_bounded([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                           os.environ, Path(tmp), timeout_s)
    return nvidia_driver(done.stdout) if done.returncode == 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
