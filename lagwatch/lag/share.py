"""A share group's share-partitions as Kafka's `kafka-share-groups --describe --offsets` lists them. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import NamedTuple

from lagwatch.model import GroupSnapshot, PartitionOffsets, ShareOffset, TopicPartition

# How a share-partition's lag is known where the broker reports none (Kafka 4.1), said wherever it is shown.
ESTIMATED = "estimated: log end - start offset, an upper bound (the broker reports no lag before Kafka 4.2)"


class LagSource(StrEnum):
    BROKER = "broker"  # DescribeShareGroupOffsets v1 (KIP-1226, Kafka 4.2+): records not delivered to completion
    ESTIMATED = "estimated"  # ESTIMATED: the records after the start offset already delivered are counted too


class SharePartition(NamedTuple):
    topic: str
    partition: int
    start_offset: int | None  # None: no consumer fetched from it yet (Kafka's tool shows "-")
    log_start: int | None
    log_end: int | None
    lag: int | None
    lag_source: LagSource | None  # None: no lag known
    members: int  # members assigned the share-partition (several may share one)


def share_estimate(share: ShareOffset, offsets: PartitionOffsets | None) -> int | None:
    """An upper bound of a share-partition's lag where its broker reports none: log end - start offset."""
    if share.start_offset is None or offsets is None or offsets.log_end is None:
        return None
    return max(0, offsets.log_end - share.start_offset)


def share_partitions(
    group: GroupSnapshot, partitions: Mapping[TopicPartition, PartitionOffsets]
) -> list[SharePartition]:
    """Every share-partition the group's coordinator has state for, in order, with the lag the broker gave or,
    where it gave none, ESTIMATED."""
    sharing: dict[TopicPartition, int] = {}
    for m in group.members:
        for tp in m.assignment:
            sharing[tp] = sharing.get(tp, 0) + 1
    rows = []
    for tp, share in sorted(group.share_offsets.items()):
        offsets = partitions.get(tp)
        lag, source = share.lag, LagSource.BROKER
        if lag is None:
            lag = share_estimate(share, offsets)
            source = LagSource.ESTIMATED
        rows.append(
            SharePartition(
                tp.topic,
                tp.partition,
                share.start_offset,
                offsets.log_start if offsets else None,
                offsets.log_end if offsets else None,
                lag,
                source if lag is not None else None,
                sharing.get(tp, 0),
            )
        )
    return rows
