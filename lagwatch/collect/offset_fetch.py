"""OffsetFetch v8 answers (every group's committed offsets, one request per coordinator) decoded by lagwatch.

Why by hand: at 10,000 groups x 10 partitions the answer is 2.2 MB. kafka-python decodes it into an object per
partition and lagwatch then built its own records from those: 0.29 s of CPU with the garbage collector off
(about 0.5 s with it), on kafka-python's I/O thread, and in a poll twice that while the poll thread competes for
the GIL. Reading the bytes straight into lagwatch's records (with the reader of the `__consumer_offsets`
decoder, and one unpack for the common partition) takes 0.10-0.11 s (bench/offset_fetch_bench.py, which also
checks that both decoders agree on a real broker's answer). The poll at that size went from about 1.05 s
to 0.6 s (bench/daemon_step_bench.py --kafka).

Only version 8 (Kafka 3.0+: every group in one request) is decoded here; older versions, and everything else,
go through kafka-python as before. The request is kafka-python's own; only the class that decodes its answer
differs. A malformed answer raises ValueError, which kafka-python treats as it treats its own decoding errors.
"""

from __future__ import annotations

import struct
from typing import Any

from kafka.protocol.api_header import RequestHeader, ResponseClassRegistry
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from lagwatch.model import CommittedOffset, TopicPartition
from lagwatch.offsets_topic.decode import Malformed, WireReader

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


class _Decoder:
    """What kafka-python asks of a response class: its header, then its body."""

    @staticmethod
    def parse_header(buffer: Any) -> Any:
        return OffsetFetchResponse.parse_header(buffer, version=VERSION)

    @staticmethod
    def decode(buffer: Any) -> OffsetFetchAnswer:
        try:
            return decode(buffer.read())
        except Malformed as e:
            raise ValueError(f"malformed OffsetFetch v{VERSION} answer: {e}") from e


class _Header(RequestHeader, init=False):  # type: ignore[call-arg,misc]
    def get_response_class(self) -> Any:
        if self.request_api_version == VERSION:
            return _Decoder
        return ResponseClassRegistry.get_response_class(self)


class OffsetFetchV8Request(OffsetFetchRequest, init=False):  # type: ignore[call-arg,misc]
    """kafka-python's OffsetFetchRequest, encoded by kafka-python; its v8 answer decoded by `decode`."""

    def with_header(self, correlation_id: int = 0, client_id: str = "kafka-python") -> None:
        self._header = _Header(
            request_api_key=self.API_KEY,
            request_api_version=self.API_VERSION,
            correlation_id=correlation_id,
            client_id=client_id,
        )


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
            for _ in range(r.compact_array_length()):
                fields = r.peek(common)
                if fields is not None and fields[3] == 1 and fields[5] == 0:  # nearly every commit: one unpack
                    index, offset, epoch, _, error_code, _ = fields
                    metadata: str | None = ""
                    skip(common.size)
                else:
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
