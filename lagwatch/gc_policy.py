"""The cyclic garbage collector, set for a daemon that keeps a large heap alive between polls.

Measured with bench/daemon_step_bench.py at 100k group-partitions: with CPython's defaults (700, 10, 10) the
collector took about 0.7 s of every 3-4 s poll, mostly full collections scanning the whole heap again (each poll's
evaluation lives until the next poll, so its objects reach the oldest generation). lagwatch's garbage is freed by
reference counting; cycles are rare (exception tracebacks, a few library objects). So: young collections every
50,000 allocations instead of 700, no automatic full collection, and a full collection every FULL_EVERY_S on the
daemon's own schedule, timed (`full_collection`).
"""

from __future__ import annotations

import gc
import logging
import time

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
