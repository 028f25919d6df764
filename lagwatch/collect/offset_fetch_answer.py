"""OffsetFetch v8 answers decoded straight into lagwatch's records (lagwatch.collect.offset_fetch sends the request).

Apart from the request, which is kafka-python's class, so that setup.py can compile it: at 1M group-partitions
(100,000 groups on one broker) the answer is 22 MB and its decoding took 0.47 s on kafka-python's I/O thread,
0.32 s compiled (bench/README.md).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any, ClassVar

from lagwatch.model import CommittedOffset, TopicPartition
from lagwatch.offsets_topic.decode import WireReader

VERSION = 8
# A partition with empty metadata and no tagged fields, as nearly all are: index, offset, leader epoch, the
# metadata's compact length (1: empty), error code, tagged field count (0). One unpack instead of six reads.
_COMMON = struct.Struct(">iqiBhB")


class OffsetFetchAnswer:
    """A decoded OffsetFetch v8 answer: per group, its error code and its committed offsets (partitions with an
    error or nothing committed left out, as before)."""

    API_VERSION: ClassVar[int] = VERSION
    __slots__ = ("groups", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, groups: list[tuple[str, int, dict[TopicPartition, CommittedOffset]]]):
        self.throttle_time_ms = throttle_time_ms
        self.groups = groups

    def __repr__(self) -> str:  # kafka-python logs every response at DEBUG: a count, not 100k offsets
        return f"OffsetFetchAnswer(groups={len(self.groups)})"


def topic_ahead(
    r: WireReader, interned: dict[str, dict[int, TopicPartition]], topic: str, fixed: struct.Struct
) -> tuple[dict[int, TopicPartition], int, Iterator[tuple[Any, ...]] | None]:
    """For the partition records of `topic` that follow: the topic's partitions made so far in this answer (one
    TopicPartition per partition for a whole answer: ten groups on a topic share them, and so do the snapshot
    and the history's keys), how many records follow, and a run of them read as `fixed` (WireReader.peek_run).
    Shared with the share groups' offsets (lagwatch.collect.group_describes)."""
    by_index = interned.get(topic)
    if by_index is None:
        by_index = interned[topic] = {}
    partitions = r.compact_array_length()
    return by_index, partitions, r.peek_run(fixed, partitions) if partitions > 0 else None


def decode(data: bytes) -> OffsetFetchAnswer:
    """The body of an OffsetFetch v8 answer (after its header), read with the `__consumer_offsets` decoder's
    reader (its bounds checks, varints, compact strings and tagged fields)."""
    r = WireReader(data)
    common, skip = _COMMON, r.skip
    new_tuple = tuple.__new__  # CommittedOffset's own __new__ is a Python function around this call
    throttle = r.int32()
    groups: list[tuple[str, int, dict[TopicPartition, CommittedOffset]]] = []
    interned: dict[str, dict[int, TopicPartition]] = {}  # see topic_ahead
    for _ in range(r.compact_array_length()):
        group_id = r.compact_string()
        committed: dict[TopicPartition, CommittedOffset] = {}
        for _ in range(r.compact_array_length()):
            # Nearly every commit has no metadata and no tagged fields: a run of them is unpacked in one call, up
            # to the first that has (read field by field below, with the rest of the topic's).
            topic = r.compact_string()
            by_index, partitions, run = topic_ahead(r, interned, topic, common)
            done = 0
            if run is not None:
                for index, offset, epoch, metadata_length, error_code, tags in run:
                    if metadata_length != 1 or tags != 0:
                        break
                    done += 1
                    if error_code == 0 and offset >= 0:
                        tp = by_index.get(index)
                        if tp is None:
                            tp = by_index[index] = TopicPartition(topic, index)
                        committed[tp] = new_tuple(CommittedOffset, (offset, epoch if epoch >= 0 else None, ""))
                skip(done * common.size)
            for _ in range(partitions - done):
                index, offset, epoch = r.int32(), r.int64(), r.int32()
                metadata = r.compact_nullable_string()
                error_code = r.int16()
                r.skip_tagged_fields()
                # -1 means "nothing committed"; a partition-level error leaves the partition out.
                if error_code == 0 and offset >= 0:
                    tp = by_index.get(index)
                    if tp is None:
                        tp = by_index[index] = TopicPartition(topic, index)
                    committed[tp] = new_tuple(CommittedOffset, (offset, epoch if epoch >= 0 else None, metadata or ""))
            r.skip_tagged_fields()
        error_code = r.int16()
        r.skip_tagged_fields()
        groups.append((group_id, error_code, committed))
    r.skip_tagged_fields()
    r.expect_end("OffsetFetch answer")
    return OffsetFetchAnswer(throttle, groups)
