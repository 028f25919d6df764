"""OffsetFetch v8 answers (every group's committed offsets, one request per coordinator) decoded by lagwatch.

Why by hand: at 10,000 groups x 10 partitions the answer is 2.2 MB. kafka-python decodes it into an object per
partition and lagwatch then built its own records from those: 0.29 s of CPU with the garbage collector off
(about 0.5 s with it), on kafka-python's I/O thread, and in a poll twice that while the poll thread competes for
the GIL. Reading the bytes straight into lagwatch's records takes 0.10 s (bench/offset_fetch_bench.py, which
also checks that both decoders agree on a real broker's answer). The poll at that size went from about 1.05 s
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

VERSION = 8
_PARTITION = struct.Struct(">iqi")  # partition index, committed offset, committed leader epoch
# A partition with empty metadata and no tagged fields, as nearly all are: index, offset, leader epoch, the
# metadata's compact length (1: empty), error code, tagged field count (0). One unpack instead of four steps.
_COMMON = struct.Struct(">iqiBhB")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


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
        data = buffer.read()
        try:
            return decode(data)
        except (IndexError, UnicodeDecodeError, struct.error) as e:
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


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise ValueError("varint longer than 5 bytes")


def _skip_tags(data: bytes, pos: int) -> int:
    if data[pos] == 0:  # no tagged fields: the usual single byte
        return pos + 1
    count, pos = _uvarint(data, pos)
    for _ in range(count):
        _, pos = _uvarint(data, pos)
        size, pos = _uvarint(data, pos)
        pos += size
    return pos


def _string(data: bytes, pos: int) -> tuple[str | None, int]:
    """A compact nullable string."""
    length, pos = _uvarint(data, pos)
    if length == 0:
        return None, pos
    end = pos + length - 1
    if end > len(data):
        raise ValueError("string past the end of the answer")
    return data[pos:end].decode("utf-8"), end


def decode(data: bytes) -> OffsetFetchAnswer:
    """The body of an OffsetFetch v8 answer (after its header)."""
    unpack_partition, unpack_int16, unpack_common = _PARTITION.unpack_from, _INT16.unpack_from, _COMMON.unpack_from
    new_tuple = tuple.__new__  # CommittedOffset's own __new__ is a Python function around this call
    (throttle,) = _INT32.unpack_from(data, 0)
    pos = 4
    n_groups, pos = _uvarint(data, pos)
    groups: list[tuple[str, int, dict[TopicPartition, CommittedOffset]]] = []
    # One TopicPartition per partition for the whole answer (ten groups on a topic share them): fewer objects
    # built here, and fewer kept by the snapshot and the history's keys.
    interned: dict[str, dict[int, TopicPartition]] = {}
    for _ in range(n_groups - 1 if n_groups else 0):
        group_id, pos = _string(data, pos)
        n_topics, pos = _uvarint(data, pos)
        committed: dict[TopicPartition, CommittedOffset] = {}
        for _ in range(n_topics - 1 if n_topics else 0):
            topic, pos = _string(data, pos)
            if topic is None:
                raise ValueError("null topic name")
            by_index = interned.get(topic)
            if by_index is None:
                by_index = interned[topic] = {}
            n_partitions, pos = _uvarint(data, pos)
            for _ in range(n_partitions - 1 if n_partitions else 0):
                if len(data) - pos >= 20:
                    index, offset, epoch, metadata_length, error_code, tags = unpack_common(data, pos)
                else:
                    metadata_length = tags = -1
                if metadata_length == 1 and tags == 0:  # empty metadata, no tagged fields: nearly every commit
                    metadata: str | None = ""
                    pos += 20
                else:
                    index, offset, epoch = unpack_partition(data, pos)
                    metadata, pos = _string(data, pos + 16)
                    (error_code,) = unpack_int16(data, pos)
                    pos = _skip_tags(data, pos + 2)
                # -1 means "nothing committed"; a partition-level error leaves the partition out.
                if error_code == 0 and offset >= 0:
                    tp = by_index.get(index)
                    if tp is None:
                        tp = by_index[index] = TopicPartition(topic, index)
                    committed[tp] = new_tuple(CommittedOffset, (offset, epoch if epoch >= 0 else None, metadata or ""))
            pos = _skip_tags(data, pos)
        (error_code,) = unpack_int16(data, pos)
        pos = _skip_tags(data, pos + 2)
        if group_id is None:
            raise ValueError("null group id")
        groups.append((group_id, error_code, committed))
    pos = _skip_tags(data, pos)
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes left after the answer")
    return OffsetFetchAnswer(throttle, groups)
