"""Where the Python API keeps studies: the storage URL and the store opened for reading or
writing (reading never writes)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.ground.errors import StudyNotFoundError

if TYPE_CHECKING:
    from autotune.storage.store import Store

#: Where studies are kept unless told otherwise: ./autotune.db.
DEFAULT_STORAGE = "sqlite:///autotune.db"


def sqlite_file(url: str) -> Path | None:
    """The file of a `sqlite:///FILE` URL (None for any other URL)."""
    prefix = "sqlite:///"
    return Path(url[len(prefix):]) if url.startswith(prefix) and url != prefix else None


def require_database(url: str) -> None:
    """A reader's SQLite file must exist (opening it would create an empty one).

    Raises:
        StudyNotFoundError: there is no such file.
    """
    file = sqlite_file(url)
    if file is not None and not file.exists():
        raise StudyNotFoundError(
            f"no database at {file}: run `autotune study ...` first, or pass --storage URL")


def open_store(url: str, must_exist: bool, write: bool = False,
               foreign_ok: bool = False) -> Store:
    """Open the store. Reading never writes: only `write=True` creates or migrates tables,
    and in a database holding tables of others only with `foreign_ok` too.

    For readers (`must_exist`) a missing SQLite file is an error, and a
    database that is not autotune's or not at the code's schema revision is
    refused with what to do (`Store.open(upgrade=False)`).
    """
    from autotune.storage.store import Store

    if must_exist:
        require_database(url)
    return Store.open(url, upgrade=write, foreign_ok=foreign_ok)


def delete_study(url: str, name: str) -> int:
    """Delete the study called `name` from the database at `url`: autotune's rows (runs,
    claims, artifacts, the study) and Optuna's study of the same name. Returns how many
    runs it held.

    Raises:
        StudyNotFoundError: no database there, or no such study (the known ones named).
    """
    from autotune.storage._optuna import delete_optuna_study

    store = open_store(url, must_exist=True, write=True)
    try:
        runs = store.delete_study(name)
        delete_optuna_study(store.url, name)
    finally:
        store.close()
    return runs
