"""Lag math: never negative, None for no commit, below-log-start flagged, sums and max per topic."""

from __future__ import annotations

from hypothesis import example, given, settings
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
    # Only transaction markers above it (from 29): nothing to consume, and nothing lost once they are deleted.
    assert partition_lag(29, PartitionOffsets(0, 30, consumable_end=29)) == (0, LagState.OK)
    assert partition_lag(29, PartitionOffsets(30, 30, consumable_end=29)) == (0, LagState.OK)
    assert partition_lag(28, PartitionOffsets(0, 30, consumable_end=29)) == (2, LagState.OK)


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
    assert (lag.sum_lag, lag.max_lag, lag.count_state(LagState.NO_COMMIT)) == (12, 10, 1)
    assert all(p.member_id == "m1" for p in lag.partitions)


def _reference_group_lag(
    group: GroupSnapshot, partitions: dict[TopicPartition, PartitionOffsets], use_last_stable: bool
) -> tuple[list[tuple[object, ...]], list[tuple[str, int, int, int]], int, int]:
    """group_lag as plainly as it can be written (partition_lag per row, a list per topic): the fast one must agree."""
    members = {tp: m for m in group.members for tp in m.assignment}
    rows, by_topic = [], {}  # type: ignore[var-annotated]
    for tp in sorted({*group.committed, *members}):
        committed = group.committed[tp].offset if tp in group.committed else None
        offsets = partitions.get(tp)
        lag, state = partition_lag(committed, offsets, use_last_stable)
        member = members.get(tp)
        rows.append(
            (
                tp.topic,
                tp.partition,
                committed,
                offsets.log_start if offsets else None,
                offsets.log_end if offsets else None,
                lag,
                state,
                member.member_id if member else None,
                member.client_id if member else None,
                member.client_host if member else None,
                offsets.error if offsets else None,
            )
        )
        by_topic.setdefault(tp.topic, []).append(lag)
    topics = [
        (t, sum(x for x in lags if x is not None), max((x for x in lags if x is not None), default=0), len(lags))
        for t, lags in sorted(by_topic.items())
    ]
    return rows, topics, sum(t[1] for t in topics), max((t[2] for t in topics), default=0)


_TPS = [TopicPartition(t, p) for t in ("a", "b", "c d") for p in range(3)]
_OFFSET = st.one_of(st.none(), st.integers(0, 60))


@given(
    committed=st.dictionaries(st.sampled_from(_TPS), st.integers(0, 60), max_size=9),
    assignments=st.lists(st.lists(st.sampled_from(_TPS), max_size=4, unique=True), max_size=3),
    offsets=st.dictionaries(
        st.sampled_from(_TPS),
        st.builds(PartitionOffsets, _OFFSET, _OFFSET, _OFFSET, st.sampled_from([None, "NOT_LEADER"]), _OFFSET),
        max_size=9,
    ),
    use_last_stable=st.booleans(),
)
@example(  # committed at the log start exactly: not below it
    committed={_TPS[0]: 5}, assignments=[], offsets={_TPS[0]: PartitionOffsets(5, 10)}, use_last_stable=False
)
@settings(max_examples=300)
def test_group_lag_agrees_with_the_plain_definition(
    committed: dict[TopicPartition, int],
    assignments: list[list[TopicPartition]],
    offsets: dict[TopicPartition, PartitionOffsets],
    use_last_stable: bool,
) -> None:
    """group_lag inlines partition_lag and sums each topic as its rows go by: every row, sum and max must be what
    the plain definition gives, for any mix of commits, assignments, unknown ends, log starts and LSOs."""
    members = tuple(Member(f"m{i}", f"c{i}", f"/h{i}", assignment=tuple(a)) for i, a in enumerate(assignments))
    group = GroupSnapshot(
        group_id="g",
        state="Stable" if members else "Empty",
        protocol_type="consumer",
        kind=GroupKind.CLASSIC,
        coordinator_id=1,
        members=members,
        committed={tp: CommittedOffset(o) for tp, o in committed.items()},
    )
    lag = group_lag(group, offsets, use_last_stable)
    rows, topics, sum_lag, max_lag = _reference_group_lag(group, offsets, use_last_stable)
    assert [tuple(p) for p in lag.partitions] == rows
    # The rows are built on demand from the columns (and the poll's log starts, errors and members).
    assert [tuple(lag.row(i)) for i in range(len(lag.tps))] == rows
    columns = list(zip(lag.committed, lag.log_ends, lag.lags, lag.states, strict=True))
    assert columns == [(r[2], r[4], 0 if r[5] is None else r[5], r[6]) for r in rows]
    assert [lag.lag(i) for i in range(len(lag.tps))] == [r[5] for r in rows]
    assert [(t.topic, t.sum_lag, t.max_lag, t.partitions) for t in lag.topics] == topics
    assert (lag.sum_lag, lag.max_lag) == (sum_lag, max_lag)
    assert list(lag.tps) == [TopicPartition(r[0], r[1]) for r in rows]  # type: ignore[arg-type]
