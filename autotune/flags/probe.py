"""Ask the installed XLA which flags and values it accepts.

The parent never imports jax: every question goes to a fresh `python -c` child
started with the `XLA_FLAGS` under test. XLA aborts at backend start on a flag
it does not know (listing all of them at once) and on a value it cannot parse
(naming the flag, or, for some list flags, naming nothing), so a few children
sort every name and documented value into accepted, unknown and rejected.
The answer is cached per jaxlib version, probed set of flags and values, host
and device settings (the device count flag, the variables that pick devices).
The children also report the environment's facts (`ProbeReport.environment`);
the GPU driver's version is read here, on every call, so a cached answer still
names the driver of today.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from autotune.flags._probe_runner import (
    ProbeError,
    Prober,
    driver_version,
    jaxlib_version,
    runtime_version,
)
from autotune.flags.catalog import Catalog, Channel, FlagSpec, FlagType
from autotune.flags.compose import render_value
from autotune.ground.records import Environment, FlagValue
from autotune.ground.resources import cache_root

__all__ = ["FlagStatus", "ProbeError", "ProbeReport", "check_values", "probe"]

PROBE_FORMAT = 3  # bump when the probe's method or the report's fields change

#: The XLA flag that sets how many devices the host (CPU) platform has.
DEVICE_COUNT_FLAG = "xla_force_host_platform_device_count"
#: Variables that choose which devices JAX sees: part of the cache's key.
DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
                    "JAX_PLATFORMS", "JAX_PLATFORM_NAME", "TPU_VISIBLE_CHIPS")


class FlagStatus(StrEnum):
    """What the probe says about one name."""

    ACCEPTED = "accepted"
    UNKNOWN = "unknown"
    CANNOT_CHECK = "cannot_check"
    NOT_XLA = "not_xla"
    NOT_PROBED = "not_probed"


_SETS = ("accepted", "unknown", "libtpu_flags", "env_variables")


@dataclass(frozen=True)
class ProbeReport:
    """What the installed XLA said about the probed flags.

    Attributes:
        jax_version, jaxlib_version: versions in the child interpreter.
        backend: `jax.default_backend()` in a plain child; device_kind: its first device's;
            device_count: `jax.device_count()` there (None in reports of older probes).
        libtpu: whether libtpu is importable there.
        accepted: names `XLA_FLAGS` knows; unknown: names it rejects (a job with one aborts).
        rejected_values: flag -> rendered value -> XLA's message.
        checked_values: flag -> the documented values tried.
        per_compile: name -> whether `compile(compiler_options=...)` knows it (a second
            opinion: its set of names differs from `XLA_FLAGS`').
        usage_defaults: flag -> default from XLA's usage table (only part of the flags,
            and only when a bad value made XLA print it).
        libtpu_flags: `LIBTPU_INIT_ARGS` names, not checkable here (probing libtpu
            needs a TPU host); env_variables: plain variables, not XLA flags.
        runs, duration_s: children started and wall time of the probe.
        created_at: when the probe ran (UTC).
        host, python_version: the children's `platform.node()` and Python.
        runtime_version: what the backend's platform version names (`cuda 12080`), None
            where it names nothing (CPU); driver_version: the GPU driver's, None where
            there is none (`_probe_runner.driver_version`).
    """

    jax_version: str
    jaxlib_version: str
    backend: str
    device_kind: str
    libtpu: bool
    accepted: frozenset[str]
    unknown: frozenset[str]
    rejected_values: dict[str, dict[str, str]]
    checked_values: dict[str, tuple[str, ...]]
    per_compile: dict[str, bool]
    usage_defaults: dict[str, str]
    libtpu_flags: frozenset[str] = frozenset()
    env_variables: frozenset[str] = frozenset()
    device_count: int | None = None
    runs: int = 0
    duration_s: float = 0.0
    created_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    host: str = ""
    python_version: str = ""
    runtime_version: str | None = None
    driver_version: str | None = None

    @property
    def environment(self) -> Environment:
        """The facts of the environment the children ran in (`records.Environment`):
        its key (`Environment.key`) is the study's environment key."""
        return Environment(
            host=self.host, python_version=self.python_version, jax_version=self.jax_version,
            jaxlib_version=self.jaxlib_version, backend=self.backend,
            device_kind=self.device_kind, device_count=self.device_count or 0,
            driver_version=self.driver_version, runtime_version=self.runtime_version)

    def status(self, name: str) -> FlagStatus:
        """Say whether the installed XLA knows `name` (with or without `--`)."""
        name = name.lstrip("-")
        if name in self.accepted:
            return FlagStatus.ACCEPTED
        if name in self.unknown:
            return FlagStatus.UNKNOWN
        if name in self.libtpu_flags:
            return FlagStatus.CANNOT_CHECK
        return FlagStatus.NOT_XLA if name in self.env_variables else FlagStatus.NOT_PROBED

    def value_ok(self, name: str, value: FlagValue) -> bool | None:
        """Whether XLA accepted `value` for flag `name`; None when it was not tried."""
        text = render_value(value)
        if text not in self.checked_values.get(name, ()):
            return None
        return text not in self.rejected_values.get(name, {})

    def unknown_in(self, names: Iterable[str]) -> list[str]:
        """The names (in the order given, `--` allowed) that `XLA_FLAGS` does not know."""
        return [name for name in names if name.lstrip("-") in self.unknown]

    def to_json(self) -> str:
        """Serialise for the cache (`from_json` reads it back)."""
        data = asdict(self) | {key: sorted(getattr(self, key)) for key in _SETS}
        return json.dumps(data | {"created_at": self.created_at.isoformat()}, indent=1)

    @classmethod
    def from_json(cls, text: str) -> ProbeReport:
        """Read `to_json`'s text back. Raises ValueError, KeyError or TypeError if malformed."""
        data: dict[str, Any] = json.loads(text)
        data |= {key: frozenset(data[key]) for key in _SETS}
        data["checked_values"] = {k: tuple(v) for k, v in data["checked_values"].items()}
        data["created_at"] = datetime.fromisoformat(data["created_at"])
        return cls(**data)


def probe(
    catalog: Catalog,
    *,
    python: str | None = None,
    extra: Iterable[str] | Mapping[str, Iterable[FlagValue]] = (),
    cache_dir: Path | None = None,
    refresh: bool = False,
    timeout_s: float = 120,
    env: Mapping[str, str] | None = None,
    devices: int | None = None,
) -> ProbeReport:
    """Probe every `xla_flags` flag of `catalog` plus `extra` names, or read the cache.

    Args:
        catalog: its `xla_flags` entries are probed with their documented values
            (default, recommended, candidates); `libtpu` and `env` entries are listed.
        python: the interpreter of the children (default: this one).
        extra: more names (e.g. from a user's flag string), tried with the value `true`
            (a name whose guessed value XLA refuses is still known); catalog names
            keep their channel. A mapping gives the values to try of each name outside
            the catalog (an open flag of a space or an export: `rejected_values` then
            says which of them XLA cannot parse); a name without values is guessed.
        cache_dir: default `$AUTOTUNE_CACHE_DIR` or `~/.cache/autotune`.
        refresh: probe even when a cached answer exists.
        timeout_s: limit for each child.
        env: the variables the children start with (default: this process's), e.g. a
            study's, whose device settings then make the report's devices the study's;
            its `XLA_FLAGS` is not used (the children's hold the flags under test).
        devices: the children's `--xla_force_host_platform_device_count` (the CPU
            platform's device count; other platforms ignore it); None sets none.

    Raises:
        ProbeError: jaxlib is missing, jax does not start, or the probe did not settle.
    """
    python = python or sys.executable
    env = dict(os.environ if env is None else env)
    fixed = [] if devices is None else [(DEVICE_COUNT_FLAG, str(devices))]
    plan = _Plan.of(catalog, extra)
    machine = [platform.node(), fixed, {name: env.get(name) for name in DEVICE_VARIABLES}]
    path = _cache_path(cache_dir, jaxlib_version(python), plan.key(python, machine))
    cached = None if refresh else _load(path)
    report = cached or _probe_cold(plan, python, timeout_s, env, fixed)
    report = replace(report, driver_version=driver_version(report.backend,
                                                           report.runtime_version))
    if cached is None:
        _store(path, report)
    return report


def check_values(
    python: str | None, values: Mapping[str, Iterable[str]], *, timeout_s: float = 120
) -> dict[str, dict[str, str | None]]:
    """Try rendered values of flags in `XLA_FLAGS`, one value per flag per child.

    Args:
        python: the children's interpreter (None: this one).
        values: flag -> the rendered values to try (`"true"`, `"0"`, `"fusion,cublas"`).
        timeout_s: limit for each child.

    Returns:
        flag -> value -> None when accepted, else XLA's message; values left
        untried (the run budget was spent) are missing.
    """
    return Prober(python or sys.executable, timeout_s).check(values)


@dataclass
class _Plan:
    """What to probe: the step-1 value of each name (rendered, and typed for compiler_options),
    the documented values, and the names of the other channels."""

    first: dict[str, str] = field(default_factory=dict)
    typed: dict[str, FlagValue] = field(default_factory=dict)
    documented: dict[str, list[str]] = field(default_factory=dict)
    guessed: set[str] = field(default_factory=set)
    channels: dict[Channel, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def of(cls, catalog: Catalog,
           extra: Iterable[str] | Mapping[str, Iterable[FlagValue]]) -> _Plan:
        plan, specs = cls(), [catalog.get(name) for name in catalog.names()]
        for channel in (Channel.LIBTPU, Channel.ENV):
            plan.channels[channel] = frozenset(s.name for s in specs if s.channel is channel)
        for spec in (s for s in specs if s.channel is Channel.XLA_FLAGS):
            plan.documented[spec.name] = _documented(spec)
            plan.first[spec.name], plan.typed[spec.name] = _first_value(spec)
        given = {str(n).lstrip("-"): list(v) for n, v in extra.items()} \
            if isinstance(extra, Mapping) else {}
        for name in sorted({n.lstrip("-") for n in extra} - set(catalog.names()) - {""}):
            if given.get(name):  # values to try: a flag outside the catalog, typed by them
                plan.documented[name] = list(dict.fromkeys(map(render_value, given[name])))
                plan.first[name], plan.typed[name] = plan.documented[name][0], given[name][0]
                continue
            plan.first[name], plan.typed[name] = "true", True  # a guess: its type is unknown
            plan.guessed.add(name)
        return plan

    def key(self, python: str, machine: object) -> str:
        names = {str(c): sorted(n) for c, n in self.channels.items()}
        text = json.dumps([PROBE_FORMAT, python, self.first, self.documented, names, machine],
                          sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def _raw_values(spec: FlagSpec) -> list[Any]:
    values = [spec.default, spec.recommended, *(getattr(spec, "candidates", None) or ())]
    return [value for value in values if value is not None]


def _documented(spec: FlagSpec) -> list[str]:
    return list(dict.fromkeys(render_value(value) for value in _raw_values(spec)))


def _first_value(spec: FlagSpec) -> tuple[str, FlagValue]:
    """A value valid by type: the first documented one, else one made from the type."""
    made: dict[FlagType, FlagValue] = {FlagType.BOOL: False, FlagType.STRING: "",
                                       FlagType.INT: int(spec.min or 1),
                                       FlagType.FLOAT: float(spec.min or 1)}
    value = next(iter(_raw_values(spec)), None)
    if value is None:
        value = made[spec.type] if spec.type in made else (spec.values or ("",))[0]
    text = render_value(value)
    # compiler_options wants the proto's upper-case names for list flags
    plain = isinstance(value, FlagValue) and spec.type is not FlagType.LIST
    return text, value if plain else text.upper()


def _probe_cold(plan: _Plan, python: str, timeout_s: float, env: Mapping[str, str],
                fixed: list[tuple[str, str]]) -> ProbeReport:
    """Step 1 sorts the names (trying each flag's first value), step 2 the other values."""
    start = time.monotonic()
    prober = Prober(python, timeout_s, options=plan.typed, guessed=plan.guessed, env=env,
                    fixed=fixed)
    accepted, unknown, rejected = prober.names(plan.first)
    results = prober.check({n: v[1:] for n, v in plan.documented.items() if n in accepted})
    for name in (n for n in results if plan.documented[n]):
        results[name] = {plan.first[name]: rejected.get(name)} | results[name]
    info = prober.info or {}
    return ProbeReport(
        jax_version=info["jax_version"], jaxlib_version=info["jaxlib_version"],
        backend=info["backend"], device_kind=info["device_kind"], libtpu=info["libtpu"],
        accepted=frozenset(accepted), unknown=frozenset(unknown),
        rejected_values={f: {v: m for v, m in r.items() if m is not None}
                         for f, r in results.items() if any(r.values())},
        checked_values={f: tuple(r) for f, r in results.items() if r},
        per_compile=info.get("per_compile", {}), usage_defaults=prober.usage,
        libtpu_flags=plan.channels[Channel.LIBTPU], env_variables=plan.channels[Channel.ENV],
        device_count=info.get("device_count"), runs=prober.runs,
        duration_s=round(time.monotonic() - start, 3), host=info.get("host", ""),
        python_version=info.get("python_version", ""),
        runtime_version=runtime_version(info.get("platform_version", ""), info["backend"]),
    )


def _cache_path(cache_dir: Path | None, version: str, key: str) -> Path:
    default = cache_root()
    return (cache_dir or default) / f"probe-jaxlib-{version}-{key}.json"


def _load(path: Path) -> ProbeReport | None:
    """The cached report, or None when there is none or it does not parse."""
    try:
        return ProbeReport.from_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _store(path: Path, report: ProbeReport) -> None:
    """Write the cache atomically; a cache that cannot be written costs only a re-probe."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        partial.write_text(report.to_json(), encoding="utf-8")
        os.replace(partial, path)
    except OSError:
        pass
