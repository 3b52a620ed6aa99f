"""The Python API: a `Study` to create, run and read from a notebook or a script.

The `autotune` command line is a thin layer over this package: `autotune study`
builds its plan with `plan_study` and runs it as `Study.run` does; `best` and
`export` read what `Study.best` and `Study.export` return. Nothing here prints
or imports typer or rich; progress reaches the caller through callbacks.

    from autotune import Study

    study = Study.create(space="cpu", benchmark="matmul", preset="tiny", devices=1,
                         trials=8, storage="sqlite:///autotune.db")
    study.run(confirm=2, confirm_repeats=3)
    study.recommendation()      # {"recommended": False, "trial": None, "reason": "..."}
    study.best()                # the rows of `autotune best --format json`
    study.export("best.yaml")   # the document `autotune export` writes

    Study("cpu-matmul-tiny").best()   # an existing study, read only

Modules: `store` (the storage URL, opening the store), `inputs` (the user's
words checked), `plan` (`plan_study`, `join_study`), `study` (`Study`),
`profiling` (`pgle`). Importing this package loads no Optuna, SQLAlchemy or
jax: the heavy parts are imported by the functions that need them.
"""

from __future__ import annotations

from autotune.api.inputs import one_of
from autotune.api.plan import (
    BASE_ENV_PREFIXES,
    OWN_ENV,
    Joined,
    PlannedStudy,
    join_study,
    plan_study,
)
from autotune.api.profiling import PgleResult, pgle
from autotune.api.store import DEFAULT_STORAGE, open_store, require_database, sqlite_file
from autotune.api.study import Study
from autotune.study.options import StudyOptions

__all__ = ["BASE_ENV_PREFIXES", "DEFAULT_STORAGE", "OWN_ENV", "Joined", "PgleResult",
           "PlannedStudy", "Study", "StudyOptions", "join_study", "one_of", "open_store", "pgle",
           "plan_study", "require_database", "sqlite_file"]
