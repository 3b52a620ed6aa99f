"""A claim's heartbeat: while its measurement runs, a thread tells the database "alive".

A reader (the dashboard, `Store.live_claims`) tells a live worker from a dead
one by how recent the heartbeat of its RUNNING claim is: a process that was
SIGKILLed, or whose machine went away, leaves its claim RUNNING but stops
beating. The study runner wraps every launch made under a claim in
`claim_heartbeat` (`autotune.study`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

from autotune.ground.proc import deferred_interrupt
from autotune.ground.records import CLAIM_BEAT_S

log = logging.getLogger(__name__)


class Beats(Protocol):
    """What the heartbeat needs of the store: `Store.beat`."""

    def beat(self, claim_id: int) -> bool: ...


class _Beater(threading.Thread):
    """Calls `store.beat(claim_id)` every `every_s` seconds until stopped, or until the
    claim is no longer running. A failed beat (the database away, locked, restarting) is
    logged and tried again at the next beat: it never ends the study."""

    def __init__(self, store: Beats, claim_id: int, every_s: float) -> None:
        super().__init__(name=f"autotune-claim-{claim_id}-heartbeat", daemon=True)
        self.store, self.claim_id, self.every_s = store, claim_id, every_s
        self.stop = threading.Event()

    def run(self) -> None:
        failing = False
        while not self.stop.wait(self.every_s):
            try:
                running = self.store.beat(self.claim_id)
            except Exception as error:  # whatever failed: say so once, keep trying
                if not failing:
                    log.warning("cannot beat the heartbeat of claim %d (will keep trying): %s",
                                self.claim_id, error)
                failing = True
                continue
            failing = False
            if not running:  # finished or released meanwhile: nothing left to keep alive
                return


@contextmanager
def claim_heartbeat(store: Beats, claim_id: int, every_s: float = CLAIM_BEAT_S) -> Iterator[None]:
    """Beat claim `claim_id` every `every_s` seconds for the block, from a daemon thread.

    Contract: however the block ends, Ctrl-C included, the thread has
    stopped when this returns (as `_optuna.beating` does for Optuna's
    heartbeat): starting it and stopping it are shielded from stop signals,
    which are raised once it is running, or once it has stopped. The store's
    `beat` is called from that thread only (`Store.beat` may be).
    """
    beater = _Beater(store, claim_id, every_s)
    started = False
    try:
        with deferred_interrupt():
            beater.start()
            started = True
        yield
    finally:
        if started:
            with deferred_interrupt():
                beater.stop.set()
                beater.join()
