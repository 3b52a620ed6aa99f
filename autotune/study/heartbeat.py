"""A claim's heartbeat: while its measurement runs, a thread tells the database "alive".

A reader (the dashboard, `Store.live_claims`) tells a live worker from a dead
one by how recent the heartbeat of its RUNNING claim is: a process that was
SIGKILLed, or whose machine went away, leaves its claim RUNNING but stops
beating. The study runner wraps every launch made under a claim in
`claim_heartbeat` (`autotune.study`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from autotune.ground.beat import beating
from autotune.ground.records import CLAIM_BEAT_S


class Beats(Protocol):
    """What the heartbeat needs of the store: `Store.beat`."""

    def beat(self, claim_id: int) -> bool: ...


@contextmanager
def claim_heartbeat(store: Beats, claim_id: int, every_s: float = CLAIM_BEAT_S) -> Iterator[None]:
    """Beat claim `claim_id` every `every_s` seconds for the block, from a daemon thread
    (`ground.beat.beating`), until the claim is no longer running.

    Contract: however the block ends, Ctrl-C included, the thread has stopped when this
    returns. A failed beat is logged and tried again: it never ends the study. The
    store's `beat` is called from that thread only (`Store.beat` may be).
    """
    with beating(lambda: store.beat(claim_id), every_s, f"claim {claim_id}"):
        yield
