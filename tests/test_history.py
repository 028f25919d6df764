"""History and lag in seconds: interpolation, bounds, never NaN/Inf/negative, persistence."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from lagwatch.history import ClusterHistory, LogEndTimeline, lag_seconds
from tests.synthetic import TP, group, snapshot


def test_interpolates_when_the_committed_record_was_produced() -> None:
    tl = LogEndTimeline()
    for t, end in [(0, 0), (10, 100), (20, 200), (30, 300)]:
        tl.add(t, end)
    # Record 150 was appended between t=10 (end 100) and t=20 (end 200).
    assert lag_seconds(tl, 150, 300, now=30).seconds == 30 - 15.1
    assert lag_seconds(tl, 300, 300, now=30).seconds == 0.0  # caught up is 0 s


def test_unknown_with_too_little_history_and_estimated_beyond_it() -> None:
    tl = LogEndTimeline()
    tl.add(100, 1000)
    assert lag_seconds(tl, 500, 1000, now=100).seconds is None  # one point: unknown, not 0
    tl.add(110, 1100)  # 10 records/s
    lt = lag_seconds(tl, 950, 1100, now=110)
    assert lt.estimated and lt.seconds is not None
    assert lt.seconds == 10 + 5  # 50 records before the first point at 10/s
    far = lag_seconds(tl, 0, 1100, now=110)  # 100 s back at that rate, but capped at the span (10 s)
    assert far.estimated and far.seconds == 20


def test_timeline_bounded_and_keeps_reach() -> None:
    tl = LogEndTimeline(capacity=16)
    for i in range(1000):
        tl.add(float(i), i * 10)
    assert len(tl.times) == 16 and tl.times[0] == 0.0 and tl.times[-1] == 999.0
    assert lag_seconds(tl, 5000, 9990, now=999).seconds is not None


def test_truncated_log_restarts_the_timeline() -> None:
    tl = LogEndTimeline()
    tl.add(0, 500)
    tl.add(10, 600)
    tl.add(20, 5)  # topic deleted and created again
    assert tl.ends == [5]


@given(
    points=st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 10**9)), min_size=0, max_size=40),
    committed=st.integers(0, 10**9),
    end=st.integers(0, 10**9),
    now=st.floats(0, 2e6),
)
def test_lag_seconds_never_nan_inf_or_negative(
    points: list[tuple[float, int]], committed: int, end: int, now: float
) -> None:
    tl = LogEndTimeline(capacity=12)
    for t, e in sorted(points):
        tl.add(t, e)
    lt = lag_seconds(tl, committed, end, now)
    assert lt.seconds is None or (math.isfinite(lt.seconds) and lt.seconds >= 0)
    if committed >= end:
        assert lt.seconds == 0.0


def test_clocks_observed_and_assumed() -> None:
    h = ClusterHistory("c")
    h.observe(snapshot(0, [group("a", state="Empty", members=0), group("b")], {TP: 10}))
    assert h.groups["a"].empty_since is not None and not h.groups["a"].empty_since.observed
    assert h.groups["b"].partitions[TP].last_commit_change.observed is False  # type: ignore[union-attr]
    h.observe(
        snapshot(
            30,
            [group("a", state="Empty", members=0), group("b", state="Empty", members=0, committed={TP: 4})],
            {TP: 10},
        )
    )
    assert h.groups["b"].empty_since == h.groups["b"].empty_since.__class__(30, True)  # seen becoming Empty
    assert h.groups["b"].partitions[TP].last_commit_change.__repr__().startswith("Clock(since=30")  # type: ignore[union-attr]


def test_failed_poll_changes_nothing_and_vanished_offsets_are_remembered() -> None:
    h = ClusterHistory("c")
    h.observe(snapshot(0, [group("a", committed={TP: 3})], {TP: 10}))
    h.observe(snapshot(10, [], {}, error="down"))
    assert h.groups["a"].vanished is None and h.groups["a"].gone_since is None
    h.observe(snapshot(20, [group("a", committed={})], {TP: 10}))
    assert h.groups["a"].vanished is not None and h.groups["a"].vanished.offsets == {TP: 3}


def test_history_round_trips_through_json() -> None:
    h = ClusterHistory("c")
    for t in range(5):
        h.observe(snapshot(t * 10.0, [group("a", committed={TP: t * 3}, state="Empty", members=0)], {TP: 100 + t}))
    again = ClusterHistory.from_json(json.loads(json.dumps(h.to_json())))
    assert again.to_json() == h.to_json()
    assert lag_seconds(again.timelines[TP], 102, 104, 40) == lag_seconds(h.timelines[TP], 102, 104, 40)


def _records() -> Any:
    from lagwatch.offsets_topic import (
        GroupMember,
        GroupMetadata,
        GroupTombstone,
        OffsetCommit,
        OffsetTombstone,
        OtherRecord,
    )

    groups, topics, parts, times = st.sampled_from("ab"), st.sampled_from("xy"), st.integers(0, 1), st.integers(1, 9)
    return st.lists(
        st.one_of(
            st.builds(lambda g, t, p, ms: OffsetCommit(g, t, p, ms, None, "", ms * 1000, None, 3), groups, topics,
                      parts, times),
            st.builds(OffsetTombstone, groups, topics, parts),
            st.builds(lambda g, ms, empty: GroupMetadata(g, "consumer", 1, None, None, ms * 1000, () if empty else
                      (GroupMember("m", None, "c", "h", ("x",)),), 3), groups, times, st.booleans()),
            st.builds(GroupTombstone, groups),
            st.builds(OtherRecord, st.integers(3, 9)),
        ),
        max_size=30,
    )  # fmt: skip


@given(before=_records(), batch=_records())
def test_compacted_records_leave_the_exact_clocks_as_the_whole_batch(before: list[Any], batch: list[Any]) -> None:
    """What the lake records between two polls (compact_records) replays to the same clocks as every record read,
    whatever the clocks held before: commits, Empty times, and what tombstones moved aside."""
    from lagwatch.history.store import ExactClocks, compact_records

    def clocks(records: list[Any]) -> tuple[Any, ...]:
        c = ExactClocks()
        for r in [*before, *records]:
            c.apply(r)
        return c.commits, c.empty_since, c.removed_commits, c.removed_empty_since

    compacted = compact_records(batch)
    assert clocks(compacted) == clocks(batch)
    assert len(compacted) <= len(batch)
