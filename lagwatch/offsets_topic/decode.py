"""Decodes the records of Kafka's internal `__consumer_offsets` topic into plain values.

Every record key starts with an int16 that Kafka calls the record type (the `apiKey` of the key schemas in
apache/kafka group-coordinator/src/main/resources/common/message/); older Kafka called it the key version, so
this module does too. The rest of the key is always the key schema at version 0, which is never flexible:

    0 LegacyOffsetCommitKey, 1 OffsetCommitKey   group string, topic string, partition int32
    2 GroupMetadataKey                           group string
    3+ consumer (KIP-848), share and streams group records: recognised, not decoded

Every non-null value starts with an int16 value version, then the value schema at that version. Versions 4 of
OffsetCommitValue and GroupMetadataValue are "flexible": compact strings, arrays and bytes (unsigned varint
length + 1) and a tagged-fields section after each struct. A null value is a tombstone.

`decode_record` never raises: malformed input comes back as `Undecodable` for the caller to count.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

from mypy_extensions import mypyc_attr

__all__ = [
    "GroupMember",
    "GroupMetadata",
    "GroupTombstone",
    "OffsetCommit",
    "OffsetTombstone",
    "OtherRecord",
    "Record",
    "Undecodable",
    "decode_record",
]

# Key versions 0 (LegacyOffsetCommitKey) and 1 (OffsetCommitKey) share one layout.
_GROUP_METADATA_KEY = 2

_OFFSET_COMMIT_VALUE_VERSIONS = range(5)
_GROUP_METADATA_VALUE_VERSIONS = range(5)
_FIRST_FLEXIBLE_VALUE_VERSION = 4

_CONSUMER_PROTOCOL_TYPE = "consumer"

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group: str
    topic: str
    partition: int
    offset: int
    leader_epoch: int | None  # None when the committer sent none (-1) or the value version predates it (< 3)
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None  # only value version 1 carries it; None when absent or -1
    value_version: int


@dataclass(frozen=True, slots=True)
class OffsetTombstone:
    """The committed offset was deleted (group deleted, offsets deleted or expired)."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    subscribed_topics: tuple[str, ...]  # empty unless the protocol type is "consumer" and the subscription parses


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """A classic group's state as the coordinator last wrote it (on every completed rebalance, and when it empties)."""

    group: str
    protocol_type: str  # "consumer" for consumer groups, "" for groups that only commit offsets
    generation: int
    protocol: str | None  # the chosen assignor, e.g. "range"
    leader: str | None
    current_state_timestamp_ms: int | None  # None when -1 or the value version predates it (< 2)
    members: tuple[GroupMember, ...]
    value_version: int

    @property
    def state_is_empty(self) -> bool:
        return not self.members


@dataclass(frozen=True, slots=True)
class GroupTombstone:
    """The classic group was deleted or expired."""

    group: str


@dataclass(frozen=True, slots=True)
class OtherRecord:
    """A record this module does not decode: KIP-848 consumer groups, share groups, streams groups and later types."""

    key_version: int


@dataclass(frozen=True, slots=True)
class Undecodable:
    reason: str
    key_version: int | None
    value_version: int | None


Record: TypeAlias = OffsetCommit | OffsetTombstone | GroupMetadata | GroupTombstone | OtherRecord | Undecodable


class Malformed(Exception):
    """The bytes do not follow the schema; turned into Undecodable at the top."""


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled (setup.py); the describe decoders' reader extends it
class WireReader:
    """Reads Kafka's protocol primitives from the front of a buffer; raises only Malformed. Also reads the
    OffsetFetch answers of a poll (lagwatch.collect.offset_fetch)."""

    __slots__ = ("_buf", "_pos")

    def __init__(self, data: bytes | memoryview) -> None:
        self._buf = memoryview(data)
        self._pos = 0

    def tell(self) -> int:
        return self._pos

    def remaining(self) -> int:
        return len(self._buf) - self._pos

    def _truncated(self, wanted: int) -> Malformed:
        return Malformed(f"truncated: {wanted} bytes wanted at byte {self._pos}, {self.remaining()} left")

    def _take(self, n: int) -> memoryview:
        start = self._pos
        if n > len(self._buf) - start:
            raise self._truncated(n)
        self._pos = start + n
        return self._buf[start : start + n]

    def peek_run(self, fixed: struct.Struct, count: int) -> Iterator[tuple[Any, ...]] | None:
        """The next `count` records as if each were `fixed`, unpacked lazily from the current position, which does
        not move; None when fewer bytes are left. The caller stops at the first record that is not of that
        shape (the ones after it are misread) and skips what it took."""
        size = fixed.size * count
        if size > len(self._buf) - self._pos:
            return None
        return fixed.iter_unpack(self._buf[self._pos : self._pos + size])

    def skip(self, n: int) -> None:
        if n > len(self._buf) - self._pos:
            raise self._truncated(n)
        self._pos += n

    # The fixed-size readers are the hot path (several per record): struct reports a short buffer itself.
    def int16(self) -> int:
        try:
            value: int = _INT16.unpack_from(self._buf, self._pos)[0]
        except struct.error:
            raise self._truncated(2) from None
        self._pos += 2
        return value

    def int32(self) -> int:
        try:
            value: int = _INT32.unpack_from(self._buf, self._pos)[0]
        except struct.error:
            raise self._truncated(4) from None
        self._pos += 4
        return value

    def int64(self) -> int:
        try:
            value: int = _INT64.unpack_from(self._buf, self._pos)[0]
        except struct.error:
            raise self._truncated(8) from None
        self._pos += 8
        return value

    def uvarint(self) -> int:
        # Kafka's unsigned varints encode an int32: at most 5 bytes of 7 bits each.
        buf, pos = self._buf, self._pos
        if pos < len(buf) and buf[pos] < 0x80:  # one byte: nearly every length and tag count
            self._pos = pos + 1
            return buf[pos]
        result = 0
        for shift in range(0, 35, 7):
            if pos >= len(buf):
                raise self._truncated(1)
            byte = buf[pos]
            pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                if result > 0xFFFFFFFF:
                    raise Malformed("unsigned varint does not fit 32 bits")
                self._pos = pos
                return result
        raise Malformed("unsigned varint longer than 5 bytes")

    def _text(self, length: int) -> str:
        try:
            return str(self._take(length), "utf-8")
        except UnicodeDecodeError as e:
            raise Malformed(f"string is not UTF-8: {e.reason}") from None

    def nullable_string(self) -> str | None:
        length = self.int16()
        if length < 0:
            if length == -1:
                return None
            raise Malformed(f"string length {length}")
        return self._text(length)

    def string(self) -> str:
        length = self.int16()
        if length < 0:
            raise Malformed("null in a non-nullable string" if length == -1 else f"string length {length}")
        return self._text(length)

    def compact_nullable_string(self) -> str | None:
        length_plus_one = self.uvarint()
        return None if length_plus_one == 0 else self._text(length_plus_one - 1)

    def compact_string(self) -> str:
        length_plus_one = self.uvarint()
        if length_plus_one == 0:
            raise Malformed("null in a non-nullable compact string")
        return self._text(length_plus_one - 1)

    def bytes_(self) -> memoryview:
        length = self.int32()
        if length < 0:
            raise Malformed(f"bytes length {length} in a non-nullable bytes field")
        return self._take(length)

    def compact_bytes(self) -> memoryview:
        length_plus_one = self.uvarint()
        if length_plus_one == 0:
            raise Malformed("null in a non-nullable compact bytes field")
        return self._take(length_plus_one - 1)

    def array_length(self) -> int:
        length = self.int32()
        if length < 0:
            raise Malformed(f"array length {length} in a non-nullable array")
        return length

    def compact_array_length(self) -> int:
        length_plus_one = self.uvarint()
        if length_plus_one == 0:
            raise Malformed("null in a non-nullable compact array")
        return length_plus_one - 1

    def skip_tagged_fields(self) -> None:
        # None of the tagged fields matter here (OffsetCommitValue v4 has tag 0, the topic id): skip them all.
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())

    def expect_end(self, what: str) -> None:
        # Kafka writes exactly the schema; leftovers mean the record is not what its version says.
        if self._pos != len(self._buf):
            raise Malformed(f"{self.remaining()} bytes left over after the {what}")


def short_texts(data: bytes, p: int, count: int) -> tuple[list[bytes], int] | None:
    """`count` compact strings from `p`, each shorter than 127 bytes (its length + 1 in one byte), as the answers'
    fast runs read them (lagwatch.collect's ListGroups and DescribeGroups decoders): their bytes and where they end;
    None at one that is longer, or null. IndexError when the data ends first."""
    texts = []
    for _ in range(count):
        n = data[p]
        if not 0 < n < 128:
            return None
        texts.append(data[p + 1 : p + n])
        p += n
    return texts, p


def decode_record(key: bytes | None, value: bytes | None) -> Record:
    """Decodes one `__consumer_offsets` record. Never raises: bad input comes back as Undecodable."""
    if key is None:
        return Undecodable("null key", None, None)
    key_version: int | None = None
    value_version: int | None = None
    try:
        key_reader = WireReader(key)
        key_version = key_reader.int16()
        if key_version < 0:
            return Undecodable(f"negative key version {key_version}", key_version, None)
        if key_version > _GROUP_METADATA_KEY:
            return OtherRecord(key_version)
        group = key_reader.string()
        if key_version == _GROUP_METADATA_KEY:
            key_reader.expect_end("group metadata key")
            if value is None:
                return GroupTombstone(group)
            value_reader = WireReader(value)
            value_version = value_reader.int16()
            return _group_metadata(group, value_version, value_reader)
        topic = key_reader.string()
        partition = key_reader.int32()
        key_reader.expect_end("offset commit key")
        if value is None:
            return OffsetTombstone(group, topic, partition)
        value_reader = WireReader(value)
        value_version = value_reader.int16()
        return _offset_commit(group, topic, partition, value_version, value_reader)
    except Malformed as e:
        return Undecodable(str(e), key_version, value_version)


def _offset_commit(group: str, topic: str, partition: int, version: int, r: WireReader) -> OffsetCommit:
    if version not in _OFFSET_COMMIT_VALUE_VERSIONS:
        raise Malformed(f"unknown offset commit value version {version}")
    flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.compact_string() if flexible else r.string()
    commit_timestamp_ms = r.int64()
    expire_timestamp_ms = r.int64() if version == 1 else -1
    if flexible:
        r.skip_tagged_fields()
    r.expect_end("offset commit value")
    return OffsetCommit(
        group=group,
        topic=topic,
        partition=partition,
        offset=offset,
        leader_epoch=None if leader_epoch == -1 else leader_epoch,
        metadata=metadata,
        commit_timestamp_ms=commit_timestamp_ms,
        expire_timestamp_ms=None if expire_timestamp_ms == -1 else expire_timestamp_ms,
        value_version=version,
    )


def _group_metadata(group: str, version: int, r: WireReader) -> GroupMetadata:
    if version not in _GROUP_METADATA_VALUE_VERSIONS:
        raise Malformed(f"unknown group metadata value version {version}")
    flexible = version >= _FIRST_FLEXIBLE_VALUE_VERSION
    string = r.compact_string if flexible else r.string
    nullable_string = r.compact_nullable_string if flexible else r.nullable_string
    bytes_ = r.compact_bytes if flexible else r.bytes_

    protocol_type = string()
    generation = r.int32()
    protocol = nullable_string()
    leader = nullable_string()
    current_state_timestamp_ms = r.int64() if version >= 2 else -1
    members: list[GroupMember] = []
    for _ in range(r.compact_array_length() if flexible else r.array_length()):
        member_id = string()
        group_instance_id = nullable_string() if version >= 3 else None
        client_id = string()
        client_host = string()
        if version >= 1:
            r.int32()  # rebalance timeout
        r.int32()  # session timeout
        subscription = bytes_()
        bytes_()  # assignment
        if flexible:
            r.skip_tagged_fields()
        topics = _subscribed_topics(subscription) if protocol_type == _CONSUMER_PROTOCOL_TYPE else ()
        members.append(GroupMember(member_id, group_instance_id, client_id, client_host, topics))
    if flexible:
        r.skip_tagged_fields()
    r.expect_end("group metadata value")
    return GroupMetadata(
        group=group,
        protocol_type=protocol_type,
        generation=generation,
        protocol=protocol,
        leader=leader,
        current_state_timestamp_ms=None if current_state_timestamp_ms == -1 else current_state_timestamp_ms,
        members=tuple(members),
        value_version=version,
    )


def _subscribed_topics(subscription: memoryview) -> tuple[str, ...]:
    """The topics of a ConsumerProtocolSubscription (any version; none is flexible, and every version starts with
    int16 version then the topics array), or () if the bytes are not one: a bad subscription must not cost the
    rest of the group's record."""
    r = WireReader(subscription)
    try:
        if r.int16() < 0:
            return ()
        return tuple(r.string() for _ in range(r.array_length()))
    except Malformed:
        return ()
