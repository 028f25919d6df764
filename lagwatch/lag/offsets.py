"""Lag in offsets, per partition and summed per group and topic. Pure: snapshot in, figures out."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, NamedTuple, cast

from lagwatch.model import GroupKind, GroupSnapshot, Member, PartitionOffsets, TopicPartition


class LagState(StrEnum):
    OK = "ok"  # committed and log end known: lag is a number
    NO_COMMIT = "no_commit"  # assigned, but nothing committed yet: lag is None, never -1 or 0
    BELOW_LOG_START = "below_log_start"  # the records it would resume from are already deleted
    UNKNOWN = "unknown"  # the log end could not be read this poll


class PartitionLag(NamedTuple):
    """Immutable and typed like the frozen dataclasses elsewhere, but built 2.7x faster (0.7 us, not 1.9 us, with
    11 fields): one per group-partition at every poll (bench/daemon_step_bench.py)."""

    topic: str
    partition: int
    committed: int | None
    log_start: int | None
    log_end: int | None
    lag: int | None
    state: LagState
    member_id: str | None = None
    client_id: str | None = None
    client_host: str | None = None
    error: str | None = None


# TopicLag and GroupLag: NamedTuples too, one of each per group at every poll (a frozen dataclass sets each field
# through object.__setattr__).
class TopicLag(NamedTuple):
    topic: str
    sum_lag: int
    max_lag: int
    partitions: int
    unknown: int = 0  # committed partitions whose log end could not be read this poll (LagState.UNKNOWN)


class GroupLag(NamedTuple):
    """A group's lag at one poll. Its rows are columns, one entry per TopicPartition of `tps` in its order, not a
    PartitionLag per group-partition: those were 144 bytes each, built at every poll and kept until the next one
    (12 MB at 100k group-partitions, 120 MB at 1M; bench/daemon_step_bench.py). `partitions` and `row` build the
    rows on demand (log start, error and member from the poll's own data)."""

    group: GroupSnapshot
    tps: tuple[TopicPartition, ...]  # each row's TopicPartition, sorted (a topic's rows are adjacent)
    committed: tuple[int | None, ...]  # each row's committed offset (None: no commit)
    log_ends: tuple[int | None, ...]  # each row's log end (None: unread)
    # Each row's lag as a machine integer, 0 where the row has none (its state NO_COMMIT or UNKNOWN: `lag(i)` says
    # None there). An int object per group-partition kept till the next poll was 28 MB at 1M group-partitions.
    lags: array[int]
    states: tuple[LagState, ...]
    # The log ends group_lag was given (the poll's, or read through with idle partitions): the rows' log start and
    # error are looked up here when a row is built.
    offsets: Mapping[TopicPartition, PartitionOffsets]
    topics: tuple[TopicLag, ...] = ()
    sum_lag: int = 0  # over every partition with a known lag
    max_lag: int = 0
    below_log_start: int = 0  # rows in LagState.BELOW_LOG_START (the rule of that name looks only when > 0)
    unknown: int = 0  # rows in LagState.UNKNOWN: committed, but the log end could not be read this poll

    def count_state(self, state: LagState) -> int:
        return sum(1 for s in self.states if s is state)

    @property
    def known(self) -> bool:
        """Whether any row's lag is known: a group whose every row is unknown (a log end unread everywhere; a share
        group whose broker reports no lag) has no lag to say, not a lag of 0."""
        return self.unknown < len(self.tps) or not self.tps

    def lag(self, i: int) -> int | None:
        """Row `i`'s lag (None: no commit, or unknown)."""
        return None if self.states[i] in _NO_LAG else self.lags[i]

    def row(self, i: int, members: Mapping[TopicPartition, Member] | None = None) -> PartitionLag:
        """Row `i` as a PartitionLag (`members`: the group's member_of(), when many rows are built)."""
        tp = self.tps[i]
        offsets = self.offsets.get(tp)
        log_start, error = (None, None) if offsets is None else (offsets.log_start, offsets.error)
        if members is None:
            members = self.group.member_of() if self.group.members else {}
        member = members.get(tp)
        return _new_tuple(
            PartitionLag,
            (
                tp.topic,
                tp.partition,
                self.committed[i],
                log_start,
                self.log_ends[i],
                self.lag(i),
                self.states[i],
                None if member is None else member.member_id,
                None if member is None else member.client_id,
                None if member is None else member.client_host,
                error,
            ),
        )

    @property
    def partitions(self) -> tuple[PartitionLag, ...]:
        """Every row, built on demand."""
        members = self.group.member_of() if self.group.members else {}
        return tuple(self.row(i, members) for i in range(len(self.tps)))


_new_tuple = tuple.__new__
_NO_LAG = frozenset((LagState.NO_COMMIT, LagState.UNKNOWN))  # the states of the rows without a lag


def partition_lag(
    committed: int | None, offsets: PartitionOffsets | None, use_last_stable: bool = False
) -> tuple[int | None, LagState]:
    """Log end (or last stable offset) minus committed, clamped at 0 so that read races never go negative."""
    if committed is None:
        return None, LagState.NO_COMMIT
    end = None
    if offsets is not None:
        end = offsets.last_stable if use_last_stable and offsets.last_stable is not None else offsets.log_end
    if end is None:
        return None, LagState.UNKNOWN
    lag = max(0, end - committed)
    if lag and offsets is not None and offsets.consumable_end is not None and committed >= offsets.consumable_end:
        return 0, LagState.OK  # only transaction markers above it (PartitionOffsets.consumable_end)
    if offsets is not None and offsets.log_start is not None and committed < offsets.log_start:
        return lag, LagState.BELOW_LOG_START
    return lag, LagState.OK


def group_lag(
    group: GroupSnapshot, partitions: Mapping[TopicPartition, PartitionOffsets], use_last_stable: bool = False
) -> GroupLag:
    """Every partition the group committed or is assigned, with lag; then sums and max per topic.

    partition_lag inlined, and each topic's sums taken as its rows go by (sorted, a topic's rows are adjacent):
    this runs for every group-partition at every poll, and the calls and per-topic lists were half its time."""
    members = group.member_of()
    committed_offsets = group.committed
    committed_column: list[int | None] = []
    log_end_column: list[int | None] = []
    lag_column: list[int] = []
    state_column: list[LagState] = []
    topics: list[TopicLag] = []
    ordered = sorted({*committed_offsets, *members} if members else committed_offsets)
    # A share group's share-partitions without a lag (Kafka 4.1; none fetched yet): rows of unknown lag, not of
    # no commit (a share group never commits), nor left out (its lag was summed as 0 in the API and /metrics).
    shared = group.share_offsets if group.kind is GroupKind.SHARE else None
    if shared:
        ordered = sorted({*ordered, *shared})
    topic: str | None = None
    topic_sum = topic_max = topic_rows = topic_unknown = below = unknown = 0
    NO_COMMIT, UNKNOWN, OK, BELOW_LOG_START = (
        LagState.NO_COMMIT,
        LagState.UNKNOWN,
        LagState.OK,
        LagState.BELOW_LOG_START,
    )
    # Read as Any, the committed offset stays the snapshot's own int object in its column. Compiled (setup.py), an
    # int is read as a machine integer, and the column got a new int object per row: 40 MB more at 1M
    # group-partitions, kept from poll to poll.
    offset: Any
    for tp in ordered:
        committed = committed_offsets.get(tp)
        offsets = partitions.get(tp)
        if offsets is None:
            log_start = log_end = end = None
        else:
            log_start, log_end = offsets.log_start, offsets.log_end
            end = offsets.last_stable if use_last_stable and offsets.last_stable is not None else log_end
        if committed is None:
            offset = lag = None
            state = UNKNOWN if shared else NO_COMMIT
        else:
            offset = cast(Any, committed).offset
            if end is None:
                lag, state = None, UNKNOWN
            else:
                lag = end - offset if end > offset else 0  # clamped: read races never go negative
                markers = offsets.consumable_end if lag and offsets is not None else None
                if markers is not None and offset >= markers:  # only transaction markers left: nothing to consume
                    lag, state = 0, OK  # and nothing lost when retention deletes them
                elif log_start is not None and offset < log_start:
                    state = BELOW_LOG_START
                    below += 1
                else:
                    state = OK
        committed_column.append(offset)
        log_end_column.append(log_end)
        lag_column.append(0 if lag is None else lag)
        state_column.append(state)
        if tp.topic != topic:
            if topic is not None:
                topics.append(TopicLag(topic, topic_sum, topic_max, topic_rows, topic_unknown))
            topic, topic_sum, topic_max, topic_rows, topic_unknown = tp.topic, 0, 0, 0, 0
        topic_rows += 1
        if lag is not None:
            topic_sum += lag
            if lag > topic_max:
                topic_max = lag
        elif state is UNKNOWN:
            topic_unknown += 1
            unknown += 1
    if topic is not None:
        topics.append(TopicLag(topic, topic_sum, topic_max, topic_rows, topic_unknown))
    return GroupLag(
        group,
        tuple(ordered),
        tuple(committed_column),
        tuple(log_end_column),
        array("q", lag_column),
        tuple(state_column),
        partitions,
        tuple(topics),
        sum(t.sum_lag for t in topics),
        max((t.max_lag for t in topics), default=0),
        below,
        unknown,
    )
