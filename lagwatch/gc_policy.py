"""The cyclic garbage collector, set for a daemon that keeps a large heap alive between polls.

Measured with bench/daemon_step_bench.py at 100k group-partitions: with CPython's defaults (700, 10, 10) the
collector took about 0.7 s of every 3-4 s poll, mostly full collections scanning the whole heap again (each poll's
evaluation lives until the next poll, so its objects reach the oldest generation). lagwatch's garbage is freed by
reference counting; cycles are rare (exception tracebacks, a few library objects). So: young collections every
50,000 allocations instead of 700, no automatic full collection, and a full collection every FULL_EVERY_S on the
daemon's own schedule, timed (`full_collection`).

And none at all while a poll runs (`paused`): what a poll leaves alive is frozen right after it (`after_poll`),
garbage cycles with it, so the young collections during a poll could only find cycles made and dropped within
it. The bench found none (0 objects in the full collection after 8 polls at 100k group-partitions) while those
collections took 0.08-0.2 s of each poll at 100k and 3.4 s at 1M.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("lagwatch.gc")

YOUNG_THRESHOLD = 50_000
MIDDLE_THRESHOLD = 20
NEVER = 1_000_000_000  # middle-generation collections before a full one: in effect, only full_collection
FULL_EVERY_S = 300.0


_configured = False


def configure() -> None:
    """For `lagwatch run` (the process is the daemon's): what was loaded at start-up is never scanned again."""
    global _configured
    _configured = True
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, MIDDLE_THRESHOLD, NEVER)


_pauses = 0  # polls under way (clusters poll on threads of their own): collections resume when none is
_pauses_lock = threading.Lock()


@contextmanager
def paused() -> Iterator[None]:
    """No automatic collection while a poll runs (only under `lagwatch run`'s policy); the collector comes back
    when the last poll under way ends."""
    global _pauses
    if not _configured:
        yield
        return
    with _pauses_lock:
        _pauses += 1
        gc.disable()
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0:
                gc.enable()


def after_poll() -> None:
    """What a poll left alive (its snapshot and evaluation, the history it grew) is not scanned again by the young
    collections; full_collection looks at everything."""
    if _configured:
        gc.freeze()


def full_collection() -> float:
    """A full collection: the cycles left since the last one. Returns its duration in seconds."""
    started = time.monotonic()
    gc.unfreeze()
    found = gc.collect()
    if _configured:
        gc.freeze()
    took = time.monotonic() - started
    (log.info if took > 0.5 else log.debug)(
        "full garbage collection", extra={"seconds": round(took, 3), "found": found}
    )
    return took
