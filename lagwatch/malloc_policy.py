"""glibc's malloc, set for a daemon whose polls allocate and free large buffers (1-40 MB) at every poll.

glibc raises its mmap threshold each time a block it mapped is freed (up to 32 MB on 64-bit): after the first
polls, the history save's arrays, the JSON documents and the lists of a poll are carved from the heap instead,
and the heap's free space is not given back while anything above it lives. Measured with
bench/daemon_step_bench.py (synthetic polls, 100k group-partitions, 8 steps): RSS after the steps 385 MB with the
moving threshold, 324 MB with it fixed at glibc's own starting value, 128 KiB, and no slower (bench/README.md).
Setting M_MMAP_THRESHOLD turns the adjustment off: a block of 128 KiB or more is a mapping of its own, returned to
the system when freed. An operator's MALLOC_MMAP_THRESHOLD_ in the environment wins.
"""

from __future__ import annotations

import ctypes
import logging
import os
from typing import Any

log = logging.getLogger("lagwatch.malloc")

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD = 128 * 1024


# glibc's malloc_trim, once configure found it: after_poll gives the heap's free pages back.
_trim: Any = None


def configure() -> bool:
    """For `lagwatch run`, before the saved state is loaded. Whether the threshold was set (False where the C
    library has no mallopt, as musl, or the environment sets it)."""
    global _trim
    try:
        _trim = ctypes.CDLL(None).malloc_trim
        _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
    except (OSError, AttributeError):
        _trim = None
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        log.debug("no mallopt in this C library: its malloc keeps its own policy")
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def after_poll() -> None:
    """After a poll: the pages the poll freed in the middle of the heap go back to the system (malloc_trim). A
    poll's objects of more than 512 bytes (dicts and tuples of a group's partitions, lists, the exposition's
    text) come from glibc's heap, and what the last poll left free there stayed resident, below blocks still in
    use. bench/daemon_step_bench.py (synthetic polls, RSS after the steps): 100k group-partitions -13 MB,
    1M -130 MB (see bench/README.md), for 1.5 ms a poll at 100k. The peak within a poll is unchanged: the next
    poll takes the pages back as it needs them."""
    if _trim is not None:
        _trim(0)
