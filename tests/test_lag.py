"""Lag math: never negative, None for no commit, below-log-start flagged, sums and max per topic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from lagwatch.lag import LagState, group_lag, partition_lag
from lagwatch.model import CommittedOffset, GroupKind, GroupSnapshot, Member, PartitionOffsets, TopicPartition


def test_no_commit_is_its_own_state() -> None:
    assert partition_lag(None, PartitionOffsets(0, 10)) == (None, LagState.NO_COMMIT)


def test_unknown_log_end() -> None:
    assert partition_lag(5, None) == (None, LagState.UNKNOWN)
    assert partition_lag(5, PartitionOffsets(None, None, error="x")) == (None, LagState.UNKNOWN)


def test_below_log_start_keeps_the_lag_and_flags_it() -> None:
    assert partition_lag(5, PartitionOffsets(20, 30)) == (25, LagState.BELOW_LOG_START)


def test_last_stable_offset_when_asked() -> None:
    offsets = PartitionOffsets(0, 100, last_stable=90)
    assert partition_lag(80, offsets) == (20, LagState.OK)
    assert partition_lag(80, offsets, use_last_stable=True) == (10, LagState.OK)


@given(committed=st.integers(0, 10**12), end=st.integers(0, 10**12), start=st.integers(0, 10**12))
def test_lag_is_never_negative(committed: int, end: int, start: int) -> None:
    lag, state = partition_lag(committed, PartitionOffsets(min(start, end), end))
    assert lag is not None and lag >= 0
    assert lag == max(0, end - committed)
    assert (state is LagState.BELOW_LOG_START) == (committed < min(start, end))


def test_group_sums_and_max_per_topic() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    group = GroupSnapshot(
        group_id="g",
        state="Stable",
        protocol_type="consumer",
        kind=GroupKind.CLASSIC,
        coordinator_id=1,
        members=(Member("m1", "c1", "/h", assignment=(a0, a1, b0)),),
        committed={a0: CommittedOffset(5), b0: CommittedOffset(7)},
    )
    partitions = {a0: PartitionOffsets(0, 15), a1: PartitionOffsets(0, 4), b0: PartitionOffsets(0, 9)}
    lag = group_lag(group, partitions)
    assert [(p.topic, p.partition, p.lag, p.state) for p in lag.partitions] == [
        ("a", 0, 10, LagState.OK),
        ("a", 1, None, LagState.NO_COMMIT),
        ("b", 0, 2, LagState.OK),
    ]
    assert [(t.topic, t.sum_lag, t.max_lag, t.partitions) for t in lag.topics] == [("a", 10, 10, 2), ("b", 2, 2, 1)]
    assert (lag.sum_lag, lag.max_lag, lag.count(LagState.NO_COMMIT)) == (12, 10, 1)
    assert all(p.member_id == "m1" for p in lag.partitions)
