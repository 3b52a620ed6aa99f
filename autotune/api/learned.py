"""`recommend_for`: what a database's confirmed results recommend for a workload of a shape
(`autotune recommend`; the rule is `autotune.results.learned`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autotune.api.store import open_store


def recommend_for(storage: str, device_kind: str, devices: int | None = None,
                  collectives: Sequence[str] = ()) -> dict[str, Any]:
    """The export document the database's confirmed studies recommend for a workload on
    `devices` (None: any count) devices of `device_kind` whose program holds every
    collective kind of `collectives`, with the evidence under `learned`. Reads only.

    Raises:
        StorageError: a bad URL, an unreachable or missing database.
    """
    from autotune.flags.catalog import load_catalog
    from autotune.results.learned import evidence_of, learned

    catalog = load_catalog()
    with open_store(storage, must_exist=True) as store:
        found = [e for record in store.list_studies()
                 if (e := evidence_of(record, store.runs(record.name), catalog)) is not None]
    return learned(found, device_kind, devices, collectives)
