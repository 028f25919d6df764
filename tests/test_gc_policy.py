"""The garbage-collector policy of `lagwatch run`: what polls leave alive is frozen out of the young collections,
and the scheduled full collection still frees the cycles that were frozen with it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from lagwatch import gc_policy


@pytest.fixture
def policy() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc_policy.configure()
    try:
        yield
    finally:
        gc_policy._configured = False
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_cycle_frozen_after_a_poll_is_freed_by_the_scheduled_full_collection(policy: None) -> None:
    assert gc.get_threshold() == (gc_policy.YOUNG_THRESHOLD, gc_policy.MIDDLE_THRESHOLD, gc_policy.NEVER)
    cycle = _cycle()
    gc_policy.after_poll()  # the cycle is garbage already, but frozen with what the poll left alive
    assert gc.get_freeze_count() > 0
    gc.collect()  # an ordinary collection does not look at frozen objects
    assert cycle() is not None
    took = gc_policy.full_collection()
    assert cycle() is None and took >= 0
    assert gc.get_freeze_count() > 0  # and what is alive is frozen again


def test_without_the_policy_nothing_is_frozen() -> None:
    """Tests and library users (a Daemon without `lagwatch run`) keep CPython's own collector."""
    gc_policy.after_poll()
    assert gc.get_freeze_count() == 0


def test_no_collection_while_polls_run_and_back_after_the_last(policy: None) -> None:
    """Two clusters polling at once on their own threads: the collector stays off until both have ended; a full
    collection (the scheduled one) still runs meanwhile."""
    import threading

    inside, release, done = threading.Barrier(3), threading.Event(), []

    def poll(hold: float) -> None:
        with gc_policy.paused():
            inside.wait()
            release.wait(hold)
        done.append(gc.isenabled())

    threads = [threading.Thread(target=poll, args=(h,)) for h in (0.0, 5.0)]
    for t in threads:
        t.start()
    inside.wait()
    assert not gc.isenabled()
    threads[0].join()
    assert done == [False] and not gc.isenabled()  # the first poll ended, the second still runs
    cycle = _cycle()
    gc_policy.full_collection()
    assert cycle() is None
    release.set()
    threads[1].join()
    assert done == [False, True] and gc.isenabled()


def test_without_the_policy_polls_do_not_touch_the_collector() -> None:
    with gc_policy.paused():
        assert gc.isenabled()
