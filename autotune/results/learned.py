"""What a database's confirmed results recommend for a new workload of a given shape.

`autotune recommend --device-kind KIND [--mesh N] [--collectives KINDS]` asks it:
every study of the database whose recommendation is a confirmed configuration
(`results.export.export_document`: the minimal set shrinking kept, with its
confirmed interval) is one piece of `Evidence`, with the device kind and count
it was measured on and the collectives its baseline's program holds. Those of
the asked shape (the device kind; the device count where `--mesh` is given;
every asked collective kind among the baseline's) vote for their flags: the
flags recommended by the most studies win, ties going to the higher lower end
of the confirmed intervals. The answer is that study's export document, which
`autotune apply` and `load_config` read, with the evidence beside it
(`learned`: the shape asked, every matching study with its flags and interval,
and which ones agree). Where no study of that shape confirmed anything, it is
XLA's defaults (`flags: {}`, `recommended: false`), and says so.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from autotune.ground.records import Role, RunRecord, StudyRecord
from autotune.results.export import (
    EXPORT_SCHEMA_VERSION,
    ExportError,
    export_document,
    exported_at,
)
from autotune.results.ranking import main_runs


@dataclass(frozen=True)
class Evidence:
    """One study's confirmed recommendation, and the shape of what it was measured on."""

    study: str
    trial: int | None
    flags: dict[str, Any]
    speedup: float
    interval: tuple[float, float]
    device_kind: str | None
    devices: int | None
    collectives: frozenset[str]
    document: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The evidence as `recommend --format json` lists it."""
        return {"study": self.study, "trial": self.trial, "flags": self.flags,
                "speedup": self.speedup, "interval": list(self.interval),
                "device_kind": self.device_kind, "devices": self.devices,
                "collectives": sorted(self.collectives)}


def evidence_of(study: StudyRecord, runs: list[RunRecord], catalog: Any) -> Evidence | None:
    """The study's confirmed recommendation as evidence, or None (it recommends the
    defaults, or nothing of it ran)."""
    try:
        doc = export_document(study, runs, catalog)
    except ExportError:
        return None
    measured = doc.get("measured") or {}
    interval = measured.get("speedup_interval")
    if not doc["recommended"] or not interval:
        return None
    baseline = next((r for r in main_runs(runs) if r.role is Role.BASELINE and r.outcome.ok
                     and r.outcome.measurement is not None), None)
    m = baseline.outcome.measurement if baseline is not None else None
    on = doc["measured_on"]
    return Evidence(study.name, doc.get("trial"), dict(doc["flags"]), measured["speedup"],
                    (interval[0], interval[1]), on.get("device_kind"), on.get("device_count"),
                    frozenset((m.collectives or {}) if m is not None else ()), doc)


def learned(evidence: Iterable[Evidence], device_kind: str, devices: int | None = None,
            collectives: Sequence[str] = ()) -> dict[str, Any]:
    """The export document the evidence recommends for a workload of this shape, with
    the evidence under `learned` (see the module docstring)."""
    asked = {"device_kind": device_kind, "devices": devices,
             "collectives": sorted(set(collectives))}
    matching = [e for e in evidence if e.device_kind == device_kind
                and (devices is None or e.devices == devices)
                and set(collectives) <= e.collectives]
    votes: dict[tuple[tuple[str, str], ...], list[Evidence]] = defaultdict(list)
    for e in matching:
        votes[tuple(sorted((k, repr(v)) for k, v in e.flags.items()))].append(e)
    if not votes:
        return {"schema_version": EXPORT_SCHEMA_VERSION, "study": "autotune recommend",
                "recommended": False,
                "reason": f"no study of this database confirmed a configuration faster than "
                          f"XLA's defaults on {_shape(asked)}: keep the defaults, or tune "
                          "this workload with `autotune study`",
                "rank": None, "trial": None, "flags": {}, "changed_from_defaults": {},
                "not_in_catalog": [], "env": {}, "xla_flags": "",
                "jax": {"compiler_options": {}, "env": {}}, "measured": None,
                "measured_on": {"device_kind": device_kind, "device_count": devices},
                "learned": {"asked": asked, "evidence": [], "agreeing": []},
                "exported_at": exported_at()}
    chosen = max(votes.values(), key=lambda group: (
        len(group), max(e.interval[0] for e in group)))
    best = max(chosen, key=lambda e: (e.interval[0], e.study))
    reason = (f"{len(chosen)} of the {len(matching)} studies of this database that confirmed "
              f"a configuration on {_shape(asked)} recommend these flags; the strongest, "
              f"study '{best.study}' (trial {best.trial}), confirmed them ×{best.speedup:.3f} "
              f"[{best.interval[0]:.3f}, {best.interval[1]:.3f}] faster than XLA's defaults "
              "on its own workload: measure yours before you rely on it")
    return {**best.document, "reason": reason,
            "learned": {"asked": asked, "evidence": [e.to_json() for e in matching],
                        "agreeing": [e.study for e in chosen]},
            "exported_at": exported_at()}


def _shape(asked: dict[str, Any]) -> str:
    text = str(asked["device_kind"])
    if asked["devices"] is not None:
        text = f"{asked['devices']} {text}"
    if asked["collectives"]:
        text += f" with {', '.join(asked['collectives'])}"
    return text
