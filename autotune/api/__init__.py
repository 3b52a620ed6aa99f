"""The Python API: a `Study` to create, run and read from a notebook or a script.

The `autotune` command line is a thin layer over this package: `autotune study`
builds its plan with `plan_study` and runs it as `Study.run` does; `best` and
`export` read what `Study.best` and `Study.export` return. Nothing here prints
or imports typer or rich; progress reaches the caller through callbacks.

    from autotune import Study

    study = Study.create(space="cpu", benchmark="matmul", preset="tiny", devices=1,
                         trials=8, storage="sqlite:///autotune.db")
    study.run(confirm=2, confirm_repeats=3)
    study.recommendation()      # RecommendationResult(recommended, trial, reason)
    study.best()                # [BestEntry]; .to_json() is `best --format json`'s row
    study.export("best.yaml")   # the document `autotune export` writes

    Study("cpu-matmul-tiny-1dev").best()   # an existing study, read only

Modules: `store` (the storage URL, opening the store), `inputs` (the user's
words checked), `plan` (`plan_study`, `join_study`), `study` (`Study`),
`profiling` (`pgle`). Importing this package loads no Optuna, SQLAlchemy or
jax: the heavy parts are imported by the functions that need them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.api.inputs import one_of
from autotune.api.store import DEFAULT_STORAGE, open_store, require_database, sqlite_file

if TYPE_CHECKING:
    from autotune.api.audit import AuditReport, audit_report, measure_audit, plan_audit
    from autotune.api.plan import (
        BASE_ENV_PREFIXES,
        OWN_ENV,
        Joined,
        PlannedStudy,
        join_study,
        plan_study,
    )
    from autotune.api.profiling import PgleResult, pgle
    from autotune.api.results import BestEntry, RecommendationResult
    from autotune.api.study import Study
    from autotune.study.options import StudyOptions

#: Where each name that planning or running needs lives. They are imported on first use
#: (PEP 562), so that the command line, which takes the store's helpers from here at start,
#: does not load the space and study machinery before a command needs it.
_LAZY = {"BASE_ENV_PREFIXES": "autotune.api.plan", "OWN_ENV": "autotune.api.plan",
         "Joined": "autotune.api.plan", "PlannedStudy": "autotune.api.plan",
         "join_study": "autotune.api.plan", "plan_study": "autotune.api.plan",
         "PgleResult": "autotune.api.profiling", "pgle": "autotune.api.profiling",
         "Study": "autotune.api.study", "StudyOptions": "autotune.study.options",
         "AuditReport": "autotune.api.audit", "audit_report": "autotune.api.audit",
         "measure_audit": "autotune.api.audit", "plan_audit": "autotune.api.audit",
         "BestEntry": "autotune.api.results",
         "RecommendationResult": "autotune.api.results"}

__all__ = ["BASE_ENV_PREFIXES", "DEFAULT_STORAGE", "OWN_ENV", "AuditReport", "BestEntry",
           "Joined", "PgleResult", "PlannedStudy", "RecommendationResult", "Study",
           "StudyOptions", "audit_report", "join_study",
           "measure_audit", "one_of", "open_store", "pgle", "plan_audit", "plan_study",
           "require_database", "sqlite_file"]


def __getattr__(name: str) -> Any:
    """A name of `_LAZY`, imported from its module on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module 'autotune.api' has no attribute {name!r}")
    return getattr(importlib.import_module(_LAZY[name]), name)
