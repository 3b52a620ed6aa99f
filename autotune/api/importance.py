"""Which flags matter in a study: the paired ablation of its recommendation and the search's
share of variance per flag (`autotune importance`, the dashboard's importance chart)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.ground.errors import UsageError


@dataclass(frozen=True)
class Importance:
    """A study's flag importance: `trials` compared, the `noise` level, the `effects`
    (`results.importance.FlagEffect`, empty below 2 trials) and the paired `ablation`
    (`results.importance.ablation_json`)."""

    study: str
    trials: int
    noise: float | None
    effects: list[Any]
    ablation: dict[str, Any]

    @property
    def enough(self) -> bool:
        """At least 2 complete search trials: anything to compare."""
        return self.trials >= 2

    def to_json(self) -> dict[str, Any]:
        """`importance --format json`."""
        from autotune.results.importance import importance_json

        return importance_json(self.study, self.trials, self.noise, self.effects,
                               self.ablation)


def importance(store: Any, name: str) -> Importance:
    """The importance of the flags of study `name` in `store` (reads only).

    Raises:
        StudyNotFoundError: no such study, or Optuna holds none of that name.
        UsageError: the study minimises peak memory alone (importance ranks flags by step
            time, which its trials do not optimise).
    """
    from autotune.flags.catalog import load_catalog
    from autotune.results.importance import (
        ablation_json,
        compared_trials,
        flag_effects,
        noise_level,
    )
    from autotune.results.ranking import recommend
    from autotune.results.shrink import shrink
    from autotune.results.study_results import study_catalog
    from autotune.storage._optuna import load_trials

    record = store.get_study(name)
    if "time" not in record.objectives:
        raise UsageError(f"study {name!r} minimises peak memory only; importance ranks "
                         "flags by their effect on step time, which its trials do not optimise. "
                         "Use a study run with --objective time or time,memory")
    trials = compared_trials(load_trials(store.url, name))
    runs = store.runs(name)
    noise = noise_level(runs) if len(trials) >= 2 else None
    effects = flag_effects(trials, noise, objective_index=record.objectives.index("time")) \
        if len(trials) >= 2 else []
    rec = recommend(runs, record.objectives, record.memory_budget_bytes)
    if rec.run is None:
        ablation = ablation_json(None, f"nothing to ablate: {rec.reason}")
    else:
        catalog = study_catalog(load_catalog(), record)
        ablation = ablation_json(shrink(runs, rec.run, catalog), rec.reason)
    return Importance(name, len(trials), noise, effects, ablation)
