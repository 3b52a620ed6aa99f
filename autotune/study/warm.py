"""Warm start: a new study measures first what the team's earlier studies confirmed.

Once a study's baseline is measured (and its space fitted), `warm_configs` looks
in its database for earlier studies measured on the same backend and device kind
that recommend a confirmed configuration (`results.ranking.recommend`; the
minimal set that shrinking kept, where it did). They are ranked by how alike
their workloads are (`likeness`: the baselines' compiled programs, op counts and
collectives, and the workload, preset and device count), and the configurations
of the `WARM_FROM` most alike are mapped onto this study's space
(`Space.params_for`: their flags this space has, at values it takes) and queued
as the first search trials, before anything is sampled (`Search`). A warm start
never skips confirmation: the queued trials are measured, raced and confirmed
like any other. The plan records which studies it drew from (`PLAN_WARM`),
and `best` says so in its notes. `--no-warm-start` turns it off.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from autotune.flags.compose import config_key, effective_config
from autotune.ground.records import FlagValue, Role, RunRecord, StudyRecord
from autotune.results.ranking import recommend
from autotune.results.shrink import shrink
from autotune.results.study_results import study_catalog
from autotune.spaces import Space

#: How many earlier studies a warm start draws from, the most alike first.
WARM_FROM = 3


@dataclass(frozen=True)
class WarmConfig:
    """One configuration a warm start queues: from trial `trial` of study `study`, whose
    workload is `likeness` alike (higher is more), as Optuna `params` of this space
    (`key`: its effective configuration)."""

    study: str
    trial: int | None
    likeness: float
    params: dict[str, Any]
    key: str

    def to_json(self) -> dict[str, Any]:
        """What the plan records of it (`PLAN_WARM`)."""
        return {"study": self.study, "trial": self.trial, "likeness": round(self.likeness, 3),
                "key": self.key}


def warm_configs(store: Any, study: StudyRecord, runs: list[RunRecord], space: Space,
                 catalog: Any) -> list[WarmConfig]:
    """The configurations `study` (its `runs` so far, its baseline measured) starts its
    search with: one per earlier study, the most alike first, at most `WARM_FROM`, each
    distinct and other than XLA's defaults."""
    baseline = _baseline(runs)
    if baseline is None or baseline.environment is None:
        return []
    found: list[WarmConfig] = []
    for record in store.list_studies():
        if record.name == study.name:
            continue
        theirs = _donor(record, store.runs(record.name), (study, baseline), catalog)
        if theirs is None:
            continue
        trial, flags, alike = theirs
        params = mapped_params(flags, space, catalog)
        if params is not None:
            found.append(WarmConfig(record.name, trial, alike, params[0], params[1]))
    found.sort(key=lambda w: (-w.likeness, w.study))
    distinct: dict[str, WarmConfig] = {}
    for warm in found:
        distinct.setdefault(warm.key, warm)
    return list(distinct.values())[:WARM_FROM]


def _donor(record: StudyRecord, runs: list[RunRecord], mine: tuple[StudyRecord, RunRecord],
           catalog: Any) -> tuple[int | None, dict[str, FlagValue], float] | None:
    """What an earlier study offers: (its trial, the flags it recommends, how alike its
    workload is to this one's), or None: measured elsewhere, nothing confirmed. `mine`:
    this study and its baseline."""
    here = mine[1].environment
    assert here is not None
    kept = [r for r in runs if r.environment is not None
            and (r.environment.backend, r.environment.device_kind)
            == (here.backend, here.device_kind)]
    theirs = _baseline(kept)
    if theirs is None:
        return None
    rec = recommend(kept, record.objectives, record.memory_budget_bytes)
    if not rec.recommended or rec.run is None:
        return None
    state = shrink(kept, rec.run, study_catalog(catalog, record))
    flags = dict(state.minimal if state is not None and state.done else rec.run.flags)
    return rec.run.trial_number, flags, likeness(mine, (record, theirs))


def _baseline(runs: list[RunRecord]) -> RunRecord | None:
    return next((r for r in runs if r.role is Role.BASELINE and r.outcome.ok
                 and r.outcome.measurement is not None), None)


def mapped_params(flags: Mapping[str, FlagValue], space: Space, catalog: Any
            ) -> tuple[dict[str, Any], str] | None:
    """`flags` as params of `space` and the key of what they give, or None: the space
    cannot give the configuration's flags it has, or gives XLA's defaults."""
    def default_of(flag: str) -> FlagValue | None:
        return catalog.get(flag).default if flag in catalog else None

    params = space.params_for(flags, default_of)
    if params is None:
        return None
    from optuna.trial import FixedTrial

    got = effective_config(space.sample(FixedTrial(params)), catalog)
    wanted = {f: v for f, v in effective_config(dict(flags), catalog).items()
              if f in space.flags()}
    if not got or config_key(got) != config_key({**wanted, **{f: v for f, v in got.items()
                                                               if f in space.fixed}}):
        return None
    return params, config_key(got)


def likeness(a: tuple[StudyRecord, RunRecord], b: tuple[StudyRecord, RunRecord]) -> float:
    """How alike the workloads of two studies are, each given as (study, its baseline run),
    from 0 (nothing shared) to 3: the cosine of their baselines' compiled programs (op
    counts and collectives, each count as log(1 + n)), plus 1 for the same workload,
    plus 0.5 each for the same preset and the same device count."""
    (study_a, run_a), (study_b, run_b) = a, b
    score = _cosine(_profile(run_a), _profile(run_b))
    score += 1.0 if study_a.benchmark == study_b.benchmark else 0.0
    score += 0.5 if study_a.preset == study_b.preset else 0.0
    ea, eb = run_a.environment, run_b.environment
    return score + (0.5 if ea is not None and eb is not None
                    and ea.device_count == eb.device_count else 0.0)


def _profile(run: RunRecord) -> dict[str, float]:
    """A baseline's compiled program as numbers: log(1 + count) per op and collective."""
    m = run.outcome.measurement
    if m is None:
        return {}
    ops = {f"op:{k}": math.log1p(v) for k, v in (m.hlo_stats or {}).items()}
    ops.update({f"collective:{kind}": math.log1p(stats.count)
                for kind, stats in (m.collectives or {}).items()})
    return ops


def _cosine(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    dot = sum(v * b.get(k, 0.0) for k, v in a.items())
    norm = math.sqrt(sum(v * v for v in a.values()) * sum(v * v for v in b.values()))
    return dot / norm if norm else 0.0
