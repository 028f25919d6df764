"""Lag in offsets, per partition and summed per group and topic. Pure: snapshot in, figures out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple

from lagwatch.model import GroupSnapshot, PartitionOffsets, TopicPartition


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


@dataclass(frozen=True, slots=True)
class TopicLag:
    topic: str
    sum_lag: int
    max_lag: int
    partitions: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    group: GroupSnapshot
    partitions: tuple[PartitionLag, ...]
    tps: tuple[TopicPartition, ...]  # each row's TopicPartition, in the same order (the measures key on them)
    topics: tuple[TopicLag, ...] = field(default=())

    @property
    def sum_lag(self) -> int:
        return sum(t.sum_lag for t in self.topics)

    @property
    def max_lag(self) -> int:
        return max((t.max_lag for t in self.topics), default=0)

    def count(self, state: LagState) -> int:
        return sum(1 for p in self.partitions if p.state is state)


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
    if offsets is not None and offsets.log_start is not None and committed < offsets.log_start:
        return lag, LagState.BELOW_LOG_START
    return lag, LagState.OK


def group_lag(
    group: GroupSnapshot, partitions: Mapping[TopicPartition, PartitionOffsets], use_last_stable: bool = False
) -> GroupLag:
    """Every partition the group committed or is assigned, with lag; then sums and max per topic."""
    members = group.member_of()
    committed_offsets = group.committed
    rows: list[PartitionLag] = []
    by_topic: dict[str, tuple[list[int], list[PartitionLag]]] = {}  # topic -> (known lags, rows)
    ordered = sorted({*committed_offsets, *members} if members else committed_offsets)
    for tp in ordered:
        committed = committed_offsets.get(tp)
        offset = committed.offset if committed is not None else None
        offsets = partitions.get(tp)
        lag, state = partition_lag(offset, offsets, use_last_stable)
        member = members.get(tp) if members else None
        row = PartitionLag(
            tp.topic,
            tp.partition,
            offset,
            offsets.log_start if offsets is not None else None,
            offsets.log_end if offsets is not None else None,
            lag,
            state,
            member.member_id if member is not None else None,
            member.client_id if member is not None else None,
            member.client_host if member is not None else None,
            offsets.error if offsets is not None else None,
        )
        rows.append(row)
        lags, topic_rows = by_topic.get(tp.topic) or by_topic.setdefault(tp.topic, ([], []))
        topic_rows.append(row)
        if lag is not None:
            lags.append(lag)
    topics = tuple(
        TopicLag(topic=t, sum_lag=sum(lags), max_lag=max(lags, default=0), partitions=len(topic_rows))
        for t, (lags, topic_rows) in sorted(by_topic.items())
    )
    return GroupLag(group=group, partitions=tuple(rows), topics=topics, tps=tuple(ordered))
