"""`lagwatch run`'s malloc policy: large blocks freed on a worker thread go back to the system.

Without it, glibc raises its mmap threshold when a large mapped block is freed, carves the next large blocks from
the thread's arena, and keeps that memory after they are freed: the daemon's polls run on worker threads and free
tens of MB of such blocks at every poll. Each case runs in a fresh interpreter (the policy is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = """
import resource, sys, threading
from lagwatch import malloc_policy

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20

print(malloc_policy.configure() if sys.argv[1] == "on" else "off")
kept = []

def poll():
    big = b"x" * (16 * 2**20)  # a large block, mapped then freed: glibc's threshold rises to 16 MB
    del big
    before = rss_mb()
    blocks, small = [], []
    for _ in range(10):  # 40 MB in 4 MB blocks, each followed by a small block that stays alive
        blocks.append(b"y" * (4 * 2**20))
        small.append(b"z" * 1000)
    held = rss_mb() - before
    del blocks
    kept.append(rss_mb() - before)
    assert held >= 38, held  # the blocks were there

worker = threading.Thread(target=poll)
worker.start()
worker.join()
print(round(kept[0]))
"""


def _retained_mb(mode: str, env: dict[str, str] | None = None) -> tuple[str, int]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True, env=env, timeout=60
    ).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_large_blocks_of_a_worker_thread_are_returned_under_the_policy() -> None:
    configured, retained_on = _retained_mb("on")
    assert configured == "True"
    assert retained_on < 8
    # The case it exists for: glibc's own policy keeps the freed 40 MB.
    assert _retained_mb("off")[1] >= 30


def test_an_operators_malloc_setting_wins() -> None:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    configured, _ = _retained_mb("on", env)
    assert configured == "False"


TRIM_PROBE = """
import resource, sys
from lagwatch import malloc_policy

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize() / 2**20

malloc_policy.configure()
size = int(sys.argv[1])
blocks = [b"x" * size for _ in range(20000)]  # 80 MB of heap blocks (above pymalloc's 512 bytes)
kept = blocks[::50]  # every 50th stays alive: the heap cannot shrink from its top
del blocks
before = rss_mb()
malloc_policy.after_poll()
print(round(before - rss_mb()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_after_poll_gives_the_free_pages_within_the_heap_back() -> None:
    """What a poll freed below blocks still in use stayed resident until the next poll took it again."""
    out = subprocess.run(
        [sys.executable, "-c", TRIM_PROBE, "4000"], capture_output=True, text=True, check=True, timeout=60
    )
    assert int(out.stdout) >= 50
