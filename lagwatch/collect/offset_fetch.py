"""OffsetFetch v8 answers (every group's committed offsets, one request per coordinator) decoded by lagwatch.

Why by hand: at 10,000 groups x 10 partitions the answer is 2.2 MB. kafka-python decodes it into an object per
partition and lagwatch then built its own records from those: 0.29 s of CPU with the garbage collector off
(about 0.5 s with it), on kafka-python's I/O thread, and in a poll twice that while the poll thread competes for
the GIL. Reading the bytes straight into lagwatch's records (with the reader of the `__consumer_offsets`
decoder, and each topic's run of plain commits unpacked in one call) takes 75 ms (115 ms with an unpack per
partition; bench/offset_fetch_bench.py, which also checks that both decoders agree on a real broker's answer).
The poll at that size went from about 1.05 s to 0.5-0.6 s (bench/daemon_step_bench.py --kafka).

Only version 8 (Kafka 3.0+: every group in one request) is decoded here; older versions, and everything else,
go through kafka-python as before. The request is kafka-python's class (sent, counted and retried by it), its
bytes written here: the tests require them equal to kafka-python's own encoding. A malformed answer raises
ValueError, which kafka-python treats as it treats its own decoding errors.
"""

from __future__ import annotations

import struct

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from lagwatch.collect.own_answers import OwnAnswer, register
from lagwatch.model import CommittedOffset, TopicPartition
from lagwatch.offsets_topic.decode import WireReader

VERSION = 8
# A partition with empty metadata and no tagged fields, as nearly all are: index, offset, leader epoch, the
# metadata's compact length (1: empty), error code, tagged field count (0). One unpack instead of six reads.
_COMMON = struct.Struct(">iqiBhB")


class OffsetFetchAnswer:
    """A decoded OffsetFetch v8 answer: per group, its error code and its committed offsets (partitions with an
    error or nothing committed left out, as before)."""

    API_VERSION = VERSION
    __slots__ = ("groups", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, groups: list[tuple[str, int, dict[TopicPartition, CommittedOffset]]]):
        self.throttle_time_ms = throttle_time_ms
        self.groups = groups

    def __repr__(self) -> str:  # kafka-python logs every response at DEBUG: a count, not 100k offsets
        return f"OffsetFetchAnswer(groups={len(self.groups)})"


class OffsetFetchV8Request(OwnAnswer, OffsetFetchRequest, init=False):  # type: ignore[call-arg,misc]
    """kafka-python's OffsetFetchRequest (sent, counted and retried by kafka-python), for every committed offset of
    `group_ids`, encoded by lagwatch: kafka-python built an object per group and encoded them one field at a time,
    8 % of a poll at 10,000 groups. Its v8 answer is decoded by `decode`."""

    def __init__(self, group_ids: list[str]) -> None:
        super().__init__(groups=[], require_stable=False, min_version=VERSION, max_version=VERSION)
        self.group_ids = group_ids

    def encode(self, version: int | None = None, header: bool = False, framed: bool = False) -> bytes:
        """The bytes kafka-python would send for OffsetFetchRequest(groups=[{group_id, topics: null}...]) v8."""
        if (version if version is not None else self.API_VERSION) != VERSION:
            raise ValueError(f"OffsetFetchV8Request encodes version {VERSION} only")
        self.API_VERSION = VERSION
        parts = [self.encode_header(flexible=True)] if header else []
        parts.append(_uvarint(len(self.group_ids) + 1))  # compact array: length + 1
        for group_id in self.group_ids:
            name = group_id.encode()
            # compact string, then topics: null (compact length 0: every committed offset), no tagged fields
            parts += (_uvarint(len(name) + 1), name, b"\x00\x00")
        parts.append(b"\x00\x00")  # require_stable false, no tagged fields
        body = b"".join(parts)
        return struct.pack(">i", len(body)) + body if framed else body

    def __repr__(self) -> str:  # kafka-python logs requests at DEBUG: a count, not 10,000 names
        return f"OffsetFetchV8Request(groups={len(self.group_ids)})"


def _uvarint(value: int) -> bytes:
    """Kafka's unsigned varint: 7 bits a byte, low bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decode(data: bytes) -> OffsetFetchAnswer:
    """The body of an OffsetFetch v8 answer (after its header), read with the `__consumer_offsets` decoder's
    reader (its bounds checks, varints, compact strings and tagged fields)."""
    r = WireReader(data)
    common, skip = _COMMON, r.skip
    new_tuple = tuple.__new__  # CommittedOffset's own __new__ is a Python function around this call
    throttle = r.int32()
    groups: list[tuple[str, int, dict[TopicPartition, CommittedOffset]]] = []
    # One TopicPartition per partition for the whole answer (ten groups on a topic share them): fewer objects
    # built here, and fewer kept by the snapshot and the history's keys.
    interned: dict[str, dict[int, TopicPartition]] = {}
    for _ in range(r.compact_array_length()):
        group_id = r.compact_string()
        committed: dict[TopicPartition, CommittedOffset] = {}
        for _ in range(r.compact_array_length()):
            topic = r.compact_string()
            by_index = interned.get(topic)
            if by_index is None:
                by_index = interned[topic] = {}
            partitions = r.compact_array_length()
            done = 0
            # Nearly every commit has no metadata and no tagged fields: a run of them is unpacked in one call, up
            # to the first that has (read field by field below, with the rest of the topic's).
            run = r.peek_run(common, partitions) if partitions > 0 else None
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


_Decoder = register(OffsetFetchResponse, VERSION, decode)
