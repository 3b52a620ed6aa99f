"""A heartbeat: a daemon thread that calls `beat()` every few seconds for a block.

Two things beat this way: a claim of autotune's (`study.heartbeat.claim_heartbeat`,
`Store.beat`) and an Optuna trial (`storage._optuna.beating`, which replaces Optuna's
own thread: that one ends at the first failed beat). One loop serves both.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from autotune.ground.proc import deferred_interrupt

log = logging.getLogger(__name__)


@contextmanager
def beating(beat: Callable[[], bool | None], every_s: float, what: str, *,
            first_now: bool = False,
            reason: Callable[[BaseException], str] = str) -> Iterator[None]:
    """Call `beat()` every `every_s` seconds for the block (also at once with `first_now`),
    from a daemon thread named after `what` ("claim 7", "trial 3").

    A beat that raises (the database away, locked, restarting) is tried again at the
    next beat: it never ends the block. A run of failures is logged once, in `reason`'s
    words, at its second: one missed beat costs nothing (a claim goes stale only after
    several), and a fault the block itself meets at once (a full disk) is then told by
    the block alone, in one line, not first by this thread. A beat that returns False
    ends the thread (nothing is left to keep alive). Contract: however the block ends,
    Ctrl-C included, the thread has stopped when this returns; starting and stopping it
    are shielded from stop signals, which are raised once it runs, or once it has
    stopped.
    """
    stop = threading.Event()
    thread = threading.Thread(target=_loop, args=(beat, every_s, what, first_now, reason, stop),
                              name=f"autotune-{what.replace(' ', '-')}-heartbeat", daemon=True)
    try:
        with deferred_interrupt():
            thread.start()
        yield
    finally:
        with deferred_interrupt():
            stop.set()
            if thread.ident is not None:
                thread.join()


def _loop(beat: Callable[[], bool | None], every_s: float, what: str, first_now: bool,
          reason: Callable[[BaseException], str], stop: threading.Event) -> None:
    failed = 0  # beats failed in a row
    if not first_now and stop.wait(every_s):
        return
    while True:
        try:
            alive = beat()
            failed = 0
        except Exception as error:  # whatever failed: say so once, keep trying
            failed, alive = failed + 1, None
            if failed == 2:
                log.warning("cannot record the heartbeat of %s (will keep trying): %s",
                            what, reason(error))
        if alive is False or stop.wait(every_s):
            return
