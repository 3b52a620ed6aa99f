"""Checks a study passes before its first trial: flags this XLA knows, the right backend.

A space copied from a guide may hold flags the installed XLA no longer has (a
job with one aborts at start) or be meant for another backend (its flags would
change nothing measurable here). Both are caught here, from the probe's
report, before a trial is spent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from autotune.flags.catalog import Catalog, Channel
from autotune.ground.errors import BackendMismatchError, UnknownFlagsInSpaceError
from autotune.ground.records import FlagValue
from autotune.spaces import Space
from autotune.spaces.params import same_value
from autotune.spaces.prune import without_flags, without_values

if TYPE_CHECKING:
    from autotune.flags.probe import ProbeReport


@dataclass(frozen=True)
class Preflight:
    """The space to run (unknown flags removed if asked) and what the checks found."""

    space: Space
    dropped: tuple[str, ...]
    backend: str
    backend_mismatch: bool
    dropped_values: dict[str, list[FlagValue]] = field(default_factory=dict)


def unknown_flags(space: Space, catalog: Catalog, report: ProbeReport) -> list[str]:
    """The space's XLA_FLAGS-channel flags that this XLA rejects, sorted."""
    names = [f for f in space.flags()
             if f not in catalog or catalog.get(f).channel is Channel.XLA_FLAGS]
    return sorted(report.unknown_in(names))


def _unknown_message(space: Space, unknown: list[str], catalog: Catalog, jaxlib: str) -> str:
    parts = []
    for name in unknown:
        spec = catalog.get(name) if name in catalog else None
        obsolete = spec.obsolete if spec is not None else None
        hint = f" (obsolete; use --{obsolete.replaced_by})" if obsolete and obsolete.replaced_by \
            else (" (obsolete)" if obsolete else "")
        parts.append(f"--{name}{hint}")
    return (f"space '{space.name}' sets flags this XLA (jaxlib {jaxlib}) does not know: "
            f"{', '.join(parts)}. A trial with one would abort at start. Remove them from the "
            "space, or pass --drop-unknown to leave them out of this study")


def check(space: Space, catalog: Catalog, report: ProbeReport, *, drop_unknown: bool,
          allow_backend_mismatch: bool) -> Preflight:
    """Run the checks.

    Raises:
        UnknownFlagsInSpaceError: unknown flags and not `drop_unknown`.
        BackendMismatchError: the space is for another backend than JAX reports
            here, and not `allow_backend_mismatch`.
    """
    unknown = unknown_flags(space, catalog, report)
    if unknown and not drop_unknown:
        raise UnknownFlagsInSpaceError(
            _unknown_message(space, unknown, catalog, report.jaxlib_version))
    mismatch = space.backend not in ("any", report.backend)
    if mismatch and not allow_backend_mismatch:
        raise BackendMismatchError(
            f"space '{space.name}' is for {space.backend} but JAX reports {report.backend} here: "
            "its flags would have no effect to measure. Run it where JAX sees a "
            f"{space.backend}, or pass --allow-backend-mismatch to run it anyway")
    pruned = without_flags(space, unknown) if unknown else space
    rejected = rejected_values(pruned, report)
    if rejected:
        pruned = without_values(pruned, rejected)
    return Preflight(pruned, tuple(unknown), report.backend, mismatch, rejected)


def rejected_values(space: Space, report: ProbeReport) -> dict[str, list[FlagValue]]:
    """flag -> the space's candidate values the probe saw this XLA reject.

    The search never proposes them: a trial with one would only end as
    `invalid_value`. A group member's candidates include the values its
    group's variants set.
    """
    out: dict[str, list[FlagValue]] = {}
    for param in space.params.values():
        candidates = [*(param.choices or ()), *_variant_values(space, param.name)]
        bad: list[FlagValue] = []
        for v in candidates:
            if report.value_ok(param.flag, v) is False and not any(same_value(v, b) for b in bad):
                bad.append(v)
        if bad:
            out.setdefault(param.flag, []).extend(bad)
    return out


def _variant_values(space: Space, member: str) -> list[FlagValue]:
    return [chosen[member] for group in space.groups.values() if member in group.params
            for chosen in group.variants.values()]
