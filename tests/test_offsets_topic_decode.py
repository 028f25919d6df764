"""The `__consumer_offsets` decoder: hand-built bytes and bytes from Kafka's own serializers for every record version,
never an exception for any input, and every record a real Kafka broker writes for classic, simple, KIP-848,
transactional and deleted groups."""

from __future__ import annotations

import struct
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from lagwatch.devbroker.jars import kafka_major
from lagwatch.offsets_topic.decode import (
    GroupMember,
    GroupMetadata,
    GroupTombstone,
    OffsetCommit,
    OffsetTombstone,
    OtherRecord,
    Record,
    Undecodable,
    WireReader,
    decode_record,
)
from tests.conftest import KAFKA_VERSION, unique, wait_for
from tests.kafka_scenario import admin, create_topic, produce, run_kip848_group, stopped_group, subscribed_consumer

DECODED_TYPES = (OffsetCommit, OffsetTombstone, GroupMetadata, GroupTombstone, OtherRecord, Undecodable)
TS = 1_700_000_000_123
UUID_BYTES = bytes(range(16))


# A tiny encoder for Kafka's protocol primitives, to build records by hand.
def i16(v: int) -> bytes:
    return struct.pack(">h", v)


def i32(v: int) -> bytes:
    return struct.pack(">i", v)


def i64(v: int) -> bytes:
    return struct.pack(">q", v)


def uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def string(s: str | None) -> bytes:
    if s is None:
        return i16(-1)
    data = s.encode()
    return i16(len(data)) + data


def compact_string(s: str | None) -> bytes:
    if s is None:
        return uvarint(0)
    data = s.encode()
    return uvarint(len(data) + 1) + data


def blob(data: bytes) -> bytes:
    return i32(len(data)) + data


def compact_blob(data: bytes) -> bytes:
    return uvarint(len(data) + 1) + data


def tagged(*fields: tuple[int, bytes]) -> bytes:
    return uvarint(len(fields)) + b"".join(uvarint(tag) + uvarint(len(data)) + data for tag, data in fields)


def offset_key(group: str, topic: str, partition: int, key_version: int = 1) -> bytes:
    return i16(key_version) + string(group) + string(topic) + i32(partition)


def group_key(group: str) -> bytes:
    return i16(2) + string(group)


def subscription(topics: list[str], version: int = 0) -> bytes:
    """A ConsumerProtocolSubscription: topics and null user data (v0), then v1+ no owned partitions, v2+ generation,
    v3+ null rack."""
    data = i16(version) + i32(len(topics)) + b"".join(string(t) for t in topics) + i32(-1)
    if version >= 1:
        data += i32(0)
    if version >= 2:
        data += i32(-1)
    if version >= 3:
        data += string(None)
    return data


# ---------------------------------------------------------------------------------------------------------------
# Offset commit values, one per version, written out field by field.

OFFSET_VALUES = {
    0: i16(0) + i64(42) + string("m") + i64(TS),
    1: i16(1) + i64(42) + string("m") + i64(TS) + i64(TS + 86_400_000),
    2: i16(2) + i64(42) + string("m") + i64(TS),
    3: i16(3) + i64(42) + i32(7) + string("m") + i64(TS),
    # Tag 0 is the topic id (a uuid); tag 300 stands for one this decoder has never heard of.
    4: i16(4) + i64(42) + i32(7) + compact_string("m") + i64(TS) + tagged((0, UUID_BYTES), (300, b"future")),
}


@pytest.mark.parametrize("version", sorted(OFFSET_VALUES))
def test_offset_commit_every_value_version(version: int) -> None:
    decoded = decode_record(offset_key("g", "orders", 3), OFFSET_VALUES[version])
    assert decoded == OffsetCommit(
        group="g",
        topic="orders",
        partition=3,
        offset=42,
        leader_epoch=7 if version >= 3 else None,
        metadata="m",
        commit_timestamp_ms=TS,
        expire_timestamp_ms=TS + 86_400_000 if version == 1 else None,
        value_version=version,
    )


def test_legacy_key_version_0_is_an_offset_commit_key_too() -> None:
    assert decode_record(offset_key("g", "t", 0, key_version=0), OFFSET_VALUES[3]) == decode_record(
        offset_key("g", "t", 0, key_version=1), OFFSET_VALUES[3]
    )


def test_offset_commit_without_leader_epoch_or_expiry() -> None:
    v3 = i16(3) + i64(0) + i32(-1) + string("") + i64(TS)
    v1 = i16(1) + i64(0) + string("") + i64(TS) + i64(-1)
    for value in (v3, v1):
        decoded = decode_record(offset_key("g", "t", 0), value)
        assert isinstance(decoded, OffsetCommit)
        assert decoded.leader_epoch is None and decoded.expire_timestamp_ms is None


def test_flexible_offset_commit_with_long_metadata_and_no_tagged_fields() -> None:
    metadata = "é" * 200  # 400 bytes: its compact length takes a two-byte varint
    value = i16(4) + i64(9) + i32(0) + compact_string(metadata) + i64(TS) + tagged()
    decoded = decode_record(offset_key("g", "t", 0), value)
    assert isinstance(decoded, OffsetCommit)
    assert (decoded.metadata, decoded.leader_epoch, decoded.offset) == (metadata, 0, 9)


# ---------------------------------------------------------------------------------------------------------------
# Group metadata values.


def member_bytes(
    version: int, member_id: str, instance: str | None, topics: list[str], *tags: tuple[int, bytes]
) -> bytes:
    flexible = version >= 4
    s = compact_string if flexible else string
    b = compact_blob if flexible else blob
    data = s(member_id)
    if version >= 3:
        data += s(instance)
    data += s(f"client-{member_id}") + s("/127.0.0.1")
    if version >= 1:
        data += i32(300_000)  # rebalance timeout
    data += i32(45_000) + b(subscription(topics, version=min(version, 3))) + b(b"\x00\x03assignment")
    return data + (tagged(*tags) if flexible else b"")


def group_value(version: int, members: list[bytes], protocol_type: str = "consumer", state_ts: int = TS) -> bytes:
    flexible = version >= 4
    s = compact_string if flexible else string
    data = i16(version) + s(protocol_type) + i32(5) + s("range") + s("m-1")
    if version >= 2:
        data += i64(state_ts)
    data += (uvarint(len(members) + 1) if flexible else i32(len(members))) + b"".join(members)
    return data + (tagged((7, b"x")) if flexible else b"")


@pytest.mark.parametrize("version", range(5))
def test_group_metadata_every_value_version(version: int) -> None:
    members = [
        member_bytes(version, "m-1", None, ["orders", "payments"], (0, b"tag")),
        member_bytes(version, "m-2", "static-2", ["orders"]),
    ]
    decoded = decode_record(group_key("g"), group_value(version, members))
    assert decoded == GroupMetadata(
        group="g",
        protocol_type="consumer",
        generation=5,
        protocol="range",
        leader="m-1",
        current_state_timestamp_ms=TS if version >= 2 else None,
        members=(
            GroupMember("m-1", None, "client-m-1", "/127.0.0.1", ("orders", "payments")),
            GroupMember("m-2", "static-2" if version >= 3 else None, "client-m-2", "/127.0.0.1", ("orders",)),
        ),
        value_version=version,
    )
    assert isinstance(decoded, GroupMetadata) and not decoded.state_is_empty


def test_empty_group_and_unset_state_timestamp() -> None:
    decoded = decode_record(group_key("g"), group_value(3, [], state_ts=-1))
    assert isinstance(decoded, GroupMetadata)
    assert decoded.state_is_empty and decoded.members == () and decoded.current_state_timestamp_ms is None


def test_subscriptions_are_read_only_for_the_consumer_protocol() -> None:
    members = [member_bytes(3, "m-1", None, ["orders"])]
    decoded = decode_record(group_key("g"), group_value(3, members, protocol_type="connect"))
    assert isinstance(decoded, GroupMetadata)
    assert decoded.protocol_type == "connect" and decoded.members[0].subscribed_topics == ()


@pytest.mark.parametrize(
    "bad_subscription",
    [
        b"",
        b"\x00",
        i16(-1) + i32(1) + string("t"),
        i16(0) + i32(2) + string("t"),
        i16(0) + i32(1) + b"\x00\x02\xff\xfe",
    ],
    ids=["empty", "truncated-version", "negative-version", "missing-topic", "not-utf8"],
)
def test_unparseable_subscription_leaves_topics_empty(bad_subscription: bytes) -> None:
    member = string("m-1") + string(None) + string("c") + string("h") + i32(1) + i32(1)
    member += blob(bad_subscription) + blob(b"")
    value = i16(3) + string("consumer") + i32(1) + string("range") + string("m-1") + i64(TS) + i32(1) + member
    decoded = decode_record(group_key("g"), value)
    assert isinstance(decoded, GroupMetadata)
    assert decoded.members == (GroupMember("m-1", None, "c", "h", ()),)


# ---------------------------------------------------------------------------------------------------------------
# The same records as Kafka 4.1.2's own generated classes serialize them (MessageUtil.toCoordinatorTypePrefixedBytes
# for keys, toVersionPrefixedBytes for values; subscriptions by ConsumerProtocol.serializeSubscription v3).

KAFKA_OFFSET_KEY_V0 = "0000000367727000066f726465727300000007"
KAFKA_OFFSET_KEY_V1 = "0001000367727000066f726465727300000007"
KAFKA_GROUP_KEY = "00020003677270"
KAFKA_CONSUMER_GROUP_METADATA_KEY = "00030003677270"
KAFKA_OFFSET_VALUES = {
    0: "00000000011f71fb04cb00076d6574612dc3a90000018bcfe5687b",
    1: "00010000011f71fb04cb00076d6574612dc3a90000018bcfe5687b0000018bd50bc47b",
    2: "00020000011f71fb04cb00076d6574612dc3a90000018bcfe5687b",
    3: "00030000011f71fb04cb0000000500076d6574612dc3a90000018bcfe5687b",
    4: "00040000011f71fb04cb00000005086d6574612dc3a90000018bcfe5687b01001000000000000000000000000000000001",
}
_SUB = (
    "0000003600030000000200066f726465727300087061796d656e7473ffffffff0000000100066f72646572730000000100000000"
    "00000009ffff"
)
_SUB_COMPACT = "3700030000000200066f726465727300087061796d656e7473ffffffff0000000100066f72646572730000000100000000"
_SUB_COMPACT += "00000009ffff"
KAFKA_GROUP_VALUES = {
    0: "00000008636f6e73756d657200000003000572616e676500036d2d3100000002"
    f"00036d2d310008636c69656e742d31000a2f3132372e302e302e310000afc8{_SUB}0000000400030000"
    f"00036d2d320008636c69656e742d32000a2f3132372e302e302e320000afc8{_SUB}00000000",
    1: "00010008636f6e73756d657200000003000572616e676500036d2d3100000002"
    f"00036d2d310008636c69656e742d31000a2f3132372e302e302e31000493e00000afc8{_SUB}0000000400030000"
    f"00036d2d320008636c69656e742d32000a2f3132372e302e302e32000493e00000afc8{_SUB}00000000",
    2: "00020008636f6e73756d657200000003000572616e676500036d2d310000018bcfe569c800000002"
    f"00036d2d310008636c69656e742d31000a2f3132372e302e302e31000493e00000afc8{_SUB}0000000400030000"
    f"00036d2d320008636c69656e742d32000a2f3132372e302e302e32000493e00000afc8{_SUB}00000000",
    3: "00030008636f6e73756d657200000003000572616e676500036d2d310000018bcfe569c800000002"
    f"00036d2d31ffff0008636c69656e742d31000a2f3132372e302e302e31000493e00000afc8{_SUB}0000000400030000"
    f"00036d2d3200087374617469632d320008636c69656e742d32000a2f3132372e302e302e32000493e00000afc8{_SUB}00000000",
    4: "000409636f6e73756d6572000000030672616e6765046d2d310000018bcfe569c803"
    f"046d2d310009636c69656e742d310b2f3132372e302e302e31000493e00000afc8{_SUB_COMPACT}050003000000"
    f"046d2d32097374617469632d3209636c69656e742d320b2f3132372e302e302e32000493e00000afc8{_SUB_COMPACT}010000",
}


@pytest.mark.parametrize("version", sorted(KAFKA_OFFSET_VALUES))
@pytest.mark.parametrize("key", [KAFKA_OFFSET_KEY_V0, KAFKA_OFFSET_KEY_V1], ids=["legacy-key", "key"])
def test_offset_commit_values_serialized_by_kafka(key: str, version: int) -> None:
    decoded = decode_record(bytes.fromhex(key), bytes.fromhex(KAFKA_OFFSET_VALUES[version]))
    assert decoded == OffsetCommit(
        group="grp",
        topic="orders",
        partition=7,
        offset=1234567890123,
        leader_epoch=5 if version >= 3 else None,
        metadata="meta-é",
        commit_timestamp_ms=1700000000123,
        expire_timestamp_ms=1700086400123 if version == 1 else None,
        value_version=version,
    )


@pytest.mark.parametrize("version", sorted(KAFKA_GROUP_VALUES))
def test_group_metadata_values_serialized_by_kafka(version: int) -> None:
    decoded = decode_record(bytes.fromhex(KAFKA_GROUP_KEY), bytes.fromhex(KAFKA_GROUP_VALUES[version]))
    topics = ("orders", "payments")
    assert decoded == GroupMetadata(
        group="grp",
        protocol_type="consumer",
        generation=3,
        protocol="range",
        leader="m-1",
        current_state_timestamp_ms=1700000000456 if version >= 2 else None,
        members=(
            GroupMember("m-1", None, "client-1", "/127.0.0.1", topics),
            GroupMember("m-2", "static-2" if version >= 3 else None, "client-2", "/127.0.0.2", topics),
        ),
        value_version=version,
    )


def test_kafka_empty_group_value() -> None:
    value = "00030008636f6e73756d657200000004ffffffff0000018bcfe56b1500000000"
    decoded = decode_record(bytes.fromhex(KAFKA_GROUP_KEY), bytes.fromhex(value))
    assert decoded == GroupMetadata("grp", "consumer", 4, None, None, 1700000000789, (), 3)
    assert decoded.state_is_empty


@pytest.mark.parametrize(
    "hex_subscription",
    [
        "00000000000200066f726465727300087061796d656e747300000003010203",
        "00010000000200066f726465727300087061796d656e7473000000030102030000000200066f7264657273000000010000000000087061"
        "796d656e74730000000100000001",
        "00020000000200066f726465727300087061796d656e7473000000030102030000000200066f7264657273000000010000000000087061"
        "796d656e7473000000010000000100000009",
        "00030000000200066f726465727300087061796d656e7473000000030102030000000200066f7264657273000000010000000000087061"
        "796d656e747300000001000000010000000900067261636b2d61",
    ],
    ids=["v0", "v1", "v2", "v3"],
)
def test_every_kafka_subscription_version(hex_subscription: str) -> None:
    member = string("m") + string(None) + string("c") + string("h") + i32(1) + i32(1)
    member += blob(bytes.fromhex(hex_subscription)) + blob(b"")
    value = i16(3) + string("consumer") + i32(1) + string("range") + string("m") + i64(TS) + i32(1) + member
    decoded = decode_record(group_key("g"), value)
    assert isinstance(decoded, GroupMetadata)
    assert decoded.members[0].subscribed_topics == ("orders", "payments")


# ---------------------------------------------------------------------------------------------------------------
# Tombstones, other record types, and bytes that are not a record.


def test_tombstones() -> None:
    assert decode_record(offset_key("g", "t", 2), None) == OffsetTombstone("g", "t", 2)
    assert decode_record(offset_key("g", "t", 2, key_version=0), None) == OffsetTombstone("g", "t", 2)
    assert decode_record(group_key("g"), None) == GroupTombstone("g")


# 3..8 consumer groups (KIP-848), 10..15 share groups, 16 regular expressions, 17..23 streams groups in Kafka 4.1.
@pytest.mark.parametrize("key_version", [3, 4, 5, 6, 7, 8, 9, 10, 15, 16, 17, 23, 100, 32767])
@pytest.mark.parametrize("value", [None, b"", b"\x00\x00anything", b"\xff"], ids=["null", "empty", "v0", "junk"])
def test_key_versions_from_3_are_other_records(key_version: int, value: bytes | None) -> None:
    assert decode_record(i16(key_version) + string("g") + string("member"), value) == OtherRecord(key_version)


def test_kafka_consumer_group_metadata_key_is_another_record() -> None:
    key = bytes.fromhex(KAFKA_CONSUMER_GROUP_METADATA_KEY)
    assert decode_record(key, bytes.fromhex("0000000000010000000000000000")) == OtherRecord(3)


GOOD_OFFSET_KEY = offset_key("g", "t", 0)


NULL_MEMBERS_V4 = i16(4) + compact_string("") + i32(0) + compact_string(None) * 2 + i64(-1) + uvarint(0) + tagged()


@pytest.mark.parametrize(
    ("key", "value", "key_version", "value_version"),
    [
        pytest.param(None, OFFSET_VALUES[3], None, None, id="null-key"),
        pytest.param(b"", None, None, None, id="empty-key"),
        pytest.param(b"\x00", None, None, None, id="one-byte-key"),
        pytest.param(i16(-1) + string("g"), None, -1, None, id="negative-key-version"),
        pytest.param(i16(1) + string("g") + string("t"), None, 1, None, id="key-without-partition"),
        pytest.param(GOOD_OFFSET_KEY + b"\x00", None, 1, None, id="offset-key-trailing-byte"),
        pytest.param(i16(2) + string("g") + b"\x00", None, 2, None, id="group-key-trailing-byte"),
        pytest.param(i16(2) + b"\x00\x05abc", None, 2, None, id="string-longer-than-key"),
        pytest.param(i16(2) + i16(-1), None, 2, None, id="null-group"),
        pytest.param(i16(2) + i16(-2), None, 2, None, id="negative-string-length"),
        pytest.param(i16(2) + i16(2) + b"\xc3\x28", None, 2, None, id="group-not-utf8"),
        pytest.param(GOOD_OFFSET_KEY, b"", 1, None, id="empty-value"),
        pytest.param(GOOD_OFFSET_KEY, b"\x00", 1, None, id="one-byte-value"),
        pytest.param(GOOD_OFFSET_KEY, i16(5) + OFFSET_VALUES[3][2:], 1, 5, id="offset-value-version-5"),
        pytest.param(GOOD_OFFSET_KEY, i16(-1) + OFFSET_VALUES[3][2:], 1, -1, id="negative-value-version"),
        pytest.param(GOOD_OFFSET_KEY, OFFSET_VALUES[3] + b"\x00", 1, 3, id="value-trailing-byte"),
        pytest.param(GOOD_OFFSET_KEY, OFFSET_VALUES[4][:-1], 1, 4, id="tagged-field-cut-short"),
        pytest.param(GOOD_OFFSET_KEY, i16(3) + i64(1) + i32(-1) + i16(-1) + i64(TS), 1, 3, id="null-metadata"),
        pytest.param(
            GOOD_OFFSET_KEY,
            i16(4) + i64(1) + i32(-1) + uvarint(0) + i64(TS) + tagged(),
            1,
            4,
            id="null-compact-metadata",
        ),
        pytest.param(
            GOOD_OFFSET_KEY, i16(4) + i64(1) + i32(-1) + b"\xff" * 5 + b"\x01" + i64(TS), 1, 4, id="six-byte-varint"
        ),
        pytest.param(
            GOOD_OFFSET_KEY, i16(4) + i64(1) + i32(-1) + b"\xff" * 4 + b"\x7f" + i64(TS), 1, 4, id="varint-over-32-bits"
        ),
        pytest.param(group_key("g"), i16(5) + group_value(3, [])[2:], 2, 5, id="group-value-version-5"),
        pytest.param(group_key("g"), group_value(3, [])[:-4] + i32(-1), 2, 3, id="null-members"),
        pytest.param(group_key("g"), NULL_MEMBERS_V4, 2, 4, id="null-compact-members"),
        pytest.param(
            group_key("g"), group_value(3, [member_bytes(3, "m", None, [])])[:-4], 2, 3, id="member-cut-short"
        ),
        pytest.param(group_key("g"), i16(3) + string(None) + i32(1), 2, 3, id="null-protocol-type"),
    ],
)
def test_malformed_records_are_undecodable(
    key: bytes | None, value: bytes | None, key_version: int | None, value_version: int | None
) -> None:
    decoded = decode_record(key, value)
    assert isinstance(decoded, Undecodable), decoded
    assert (decoded.key_version, decoded.value_version) == (key_version, value_version)
    assert decoded.reason


def _kafka_records() -> list[tuple[bytes, bytes]]:
    offsets = [(bytes.fromhex(KAFKA_OFFSET_KEY_V1), bytes.fromhex(v)) for v in KAFKA_OFFSET_VALUES.values()]
    groups = [(bytes.fromhex(KAFKA_GROUP_KEY), bytes.fromhex(v)) for v in KAFKA_GROUP_VALUES.values()]
    return offsets + groups


@pytest.mark.parametrize(("key", "value"), _kafka_records())
def test_every_cut_of_a_value_is_undecodable(key: bytes, value: bytes) -> None:
    key_version = struct.unpack(">h", key[:2])[0]
    for cut in range(len(value)):
        decoded = decode_record(key, value[:cut])
        assert isinstance(decoded, Undecodable), (cut, decoded)
        assert decoded.key_version == key_version
        assert decoded.value_version == (None if cut < 2 else struct.unpack(">h", value[:2])[0])


@given(st.none() | st.binary(max_size=64), st.none() | st.binary(max_size=256))
def test_never_raises_on_random_bytes(key: bytes | None, value: bytes | None) -> None:
    assert isinstance(decode_record(key, value), DECODED_TYPES)


@given(
    st.sampled_from([GOOD_OFFSET_KEY, group_key("g"), offset_key("g", "t", 1, key_version=0)]),
    st.sampled_from([0, 1, 2, 3, 4, 5, -1]),
    st.binary(max_size=256),
)
def test_never_raises_on_a_good_key_and_random_value(key: bytes, value_version: int, body: bytes) -> None:
    assert isinstance(decode_record(key, i16(value_version) + body), DECODED_TYPES)


@given(st.sampled_from(_kafka_records()), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4))
def test_never_raises_on_damaged_real_records(record: tuple[bytes, bytes], damage: list[tuple[int, int]]) -> None:
    key, value = record
    damaged = bytearray(value)
    for position, byte in damage:
        damaged[position % len(damaged)] = byte
    assert isinstance(decode_record(key, bytes(damaged)), DECODED_TYPES)


@given(
    st.text(max_size=40),
    st.text(max_size=40),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-1, 2**31 - 1),
    st.text(max_size=300),
    st.integers(0, 2**63 - 1),
)
def test_flexible_offset_commit_round_trips(
    group: str, topic: str, partition: int, offset: int, epoch: int, metadata: str, ts: int
) -> None:
    value = i16(4) + i64(offset) + i32(epoch) + compact_string(metadata) + i64(ts) + tagged((0, UUID_BYTES))
    assert decode_record(offset_key(group, topic, partition), value) == OffsetCommit(
        group, topic, partition, offset, None if epoch == -1 else epoch, metadata, ts, None, 4
    )


# ---------------------------------------------------------------------------------------------------------------
# Every record a real broker writes.

OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class LoggedRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    decoded: Record


class OffsetsTopicReader:
    """Reads `__consumer_offsets` from its beginning, like lagwatch will, and decodes every record read."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        self.partitions: list[TopicPartition] = []
        self.records: list[LoggedRecord] = []

    def _assign(self) -> bool:
        # The broker creates the topic at the first FindCoordinator: until then there is nothing to read.
        ids = self.consumer.partitions_for_topic(OFFSETS_TOPIC)
        if not ids:
            return False
        self.partitions = [TopicPartition(OFFSETS_TOPIC, p) for p in sorted(ids)]
        self.consumer.assign(self.partitions)
        self.consumer.seek_to_beginning(*self.partitions)
        return True

    def catch_up(self, timeout: float = 30.0) -> list[LoggedRecord]:
        """Reads every record up to the end offsets as of now; returns all records read so far."""
        if not self.partitions and not self._assign():
            return self.records
        end = self.consumer.end_offsets(self.partitions)
        deadline = time.monotonic() + timeout
        while any(self.consumer.position(tp) < end[tp] for tp in self.partitions):
            assert time.monotonic() < deadline, f"could not read {OFFSETS_TOPIC} to {end}"
            for batch in self.consumer.poll(timeout_ms=200).values():
                for r in batch:
                    self.records.append(
                        LoggedRecord(r.partition, r.offset, r.key, r.value, decode_record(r.key, r.value))
                    )
        return self.records

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture(scope="module")
def offsets_topic(bootstrap: str) -> Iterator[OffsetsTopicReader]:
    reader = OffsetsTopicReader(bootstrap)
    yield reader
    reader.close()


def of_group(records: list[LoggedRecord], group: str) -> list[Record]:
    return [r.decoded for r in records if getattr(r.decoded, "group", None) == group]


def wait_for_group(
    reader: OffsetsTopicReader, group: str, done: Callable[[list[Record]], bool], what: str
) -> list[Record]:
    """Reads on until `done` holds for the group's records (in the order written: one group, one partition)."""

    def check() -> list[Record] | None:
        mine = of_group(reader.catch_up(), group)
        return mine if done(mine) else None

    result: list[Record] = wait_for(check, what=f"{group}: {what}")
    return result


def assert_all_decoded(records: list[LoggedRecord]) -> None:
    bad = [r for r in records if isinstance(r.decoded, Undecodable)]
    assert not bad, bad[:5]


def now_ms() -> int:
    return int(time.time() * 1000)


def commits_of(decoded: list[Record]) -> list[OffsetCommit]:
    return [d for d in decoded if isinstance(d, OffsetCommit)]


def final_offsets(decoded: list[Record]) -> dict[tuple[str, int], int]:
    return {(c.topic, c.partition): c.offset for c in commits_of(decoded)}


@pytest.mark.kafka
def test_classic_group_commits_then_empties(bootstrap: str, offsets_topic: OffsetsTopicReader) -> None:
    topic, group = unique("dec-classic"), unique("dec-classic-g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, {0: 10, 1: 6})
    started = now_ms()
    consumer = subscribed_consumer(bootstrap, group, [topic])
    wait_for(lambda: len(consumer.assignment()) == 2, what="the consumer to own both partitions")
    consumer.commit(
        {
            TopicPartition(topic, 0): OffsetAndMetadata(10, "done", -1),
            TopicPartition(topic, 1): OffsetAndMetadata(4, "", -1),
        }
    )
    committed = now_ms()
    consumer.close()

    def emptied_after_commits(mine: list[Record]) -> bool:
        last_commit = max((i for i, d in enumerate(mine) if isinstance(d, OffsetCommit)), default=len(mine))
        states_after = [d for d in mine[last_commit:] if isinstance(d, GroupMetadata)]
        return bool(states_after) and states_after[-1].state_is_empty

    mine = wait_for_group(offsets_topic, group, emptied_after_commits, "Empty after its commits")
    assert_all_decoded(offsets_topic.records)
    commits = commits_of(mine)
    assert final_offsets(mine) == {(topic, 0): 10, (topic, 1): 4}
    assert {(c.partition, c.metadata) for c in commits} == {(0, "done"), (1, "")}
    assert all(started <= c.commit_timestamp_ms <= committed for c in commits), commits
    assert all(c.expire_timestamp_ms is None for c in commits)

    # A new classic group is first written Empty with no protocol type, generation 0 (Kafka 4.1.2 does), then once
    # per completed rebalance with its members, then Empty again when its last member leaves.
    states = [d for d in mine if isinstance(d, GroupMetadata)]
    stable = next(s for s in states if s.members)
    (member,) = stable.members
    assert (stable.protocol_type, stable.protocol, stable.leader) == ("consumer", "range", member.member_id)
    assert member.member_id.startswith(f"client-{group}-") and member.group_instance_id is None
    assert (member.client_id, member.client_host, member.subscribed_topics) == (
        f"client-{group}",
        "/127.0.0.1",
        (topic,),
    )
    empty = states[-1]
    assert empty.state_is_empty and empty.protocol_type == "consumer" and empty.generation > stable.generation
    assert empty.current_state_timestamp_ms is not None and committed <= empty.current_state_timestamp_ms <= now_ms()


@pytest.mark.kafka
def test_simple_group_commits(bootstrap: str, offsets_topic: OffsetsTopicReader) -> None:
    prefix = unique("dec-simple")
    started = now_ms()
    topic, group = stopped_group(bootstrap, prefix, {0: 8, 1: 8, 2: 8}, {0: 8, 2: 3}, assign=True)
    committed = now_ms()

    mine = wait_for_group(offsets_topic, group, lambda m: len(commits_of(m)) == 2, "two commits")
    assert_all_decoded(offsets_topic.records)
    assert final_offsets(mine) == {(topic, 0): 8, (topic, 2): 3}
    assert all(started <= c.commit_timestamp_ms <= committed and c.metadata == "" for c in commits_of(mine))
    # A group that only commits never joins: any group record it gets has no members and no protocol type
    # (Kafka 4.1.2 writes none at all).
    for state in (d for d in mine if isinstance(d, GroupMetadata)):
        assert state.protocol_type == "" and state.state_is_empty


@pytest.mark.kafka
@pytest.mark.skipif(kafka_major(KAFKA_VERSION) < 4, reason="KIP-848 groups need Kafka 4")
def test_kip848_group_records_are_other_records(
    bootstrap: str, kafka_libs: Path, offsets_topic: OffsetsTopicReader
) -> None:
    topic, group = unique("dec-k848"), unique("dec-k848g")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, {0: 10, 1: 10})
    already_read = len(offsets_topic.catch_up())
    started = now_ms()
    run_kip848_group(kafka_libs, bootstrap, topic, group, 20)
    finished = now_ms()

    everything = {(topic, 0): 10, (topic, 1): 10}
    mine = wait_for_group(offsets_topic, group, lambda m: final_offsets(m) == everything, "every record committed")
    assert_all_decoded(offsets_topic.records)
    assert not [d for d in mine if isinstance(d, GroupMetadata)]  # a KIP-848 group has no classic group record
    assert all(started <= c.commit_timestamp_ms <= finished for c in commits_of(mine))
    # The Java consumer sends the leader epoch it read at (0 on a new topic; -1, None, if it had none yet).
    assert all(c.leader_epoch is None or c.leader_epoch >= 0 for c in commits_of(mine))
    others = Counter(
        r.decoded.key_version for r in offsets_topic.records[already_read:] if isinstance(r.decoded, OtherRecord)
    )
    # Group epoch, subscription metadata, member metadata, target assignment and current assignment records.
    assert {3, 5, 6, 7, 8} <= set(others), others


@pytest.mark.kafka
def test_transactional_offset_commit(bootstrap: str, offsets_topic: OffsetsTopicReader) -> None:
    topic, group = unique("dec-tx"), unique("dec-txg")
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, {0: 5, 1: 5})
    started = now_ms()
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("dec-txid"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"in-the-transaction", partition=0)
        offsets = {
            TopicPartition(topic, 0): OffsetAndMetadata(5, "tx", -1),
            TopicPartition(topic, 1): OffsetAndMetadata(2, "", -1),
        }
        producer.send_offsets_to_transaction(offsets, group)
        producer.commit_transaction()
    finally:
        producer.close()
    committed = now_ms()

    mine = wait_for_group(offsets_topic, group, lambda m: len(commits_of(m)) == 2, "two transactional commits")
    assert_all_decoded(offsets_topic.records)
    assert final_offsets(mine) == {(topic, 0): 5, (topic, 1): 2}
    assert {c.partition: c.metadata for c in commits_of(mine)} == {0: "tx", 1: ""}
    assert all(started <= c.commit_timestamp_ms <= committed for c in commits_of(mine))


@pytest.mark.kafka
def test_deleted_offsets_and_group_are_tombstones(bootstrap: str, offsets_topic: OffsetsTopicReader) -> None:
    topic, group = stopped_group(bootstrap, unique("dec-del"), {0: 5, 1: 5}, {0: 2, 1: 3})
    a = admin(bootstrap)
    try:
        assert {tp: e.__name__ for tp, e in a.delete_group_offsets(group, [TopicPartition(topic, 0)]).items()} == {
            TopicPartition(topic, 0): "NoError"
        }
        mine = wait_for_group(offsets_topic, group, lambda m: OffsetTombstone(group, topic, 0) in m, "offset deleted")
        assert OffsetTombstone(group, topic, 1) not in mine and GroupTombstone(group) not in mine
        assert a.delete_groups([group]) == {group: "OK"}
    finally:
        a.close()

    mine = wait_for_group(offsets_topic, group, lambda m: GroupTombstone(group) in m, "group deleted")
    assert_all_decoded(offsets_topic.records)
    assert final_offsets(mine) == {(topic, 0): 2, (topic, 1): 3}
    tombstones = mine[next(i for i, d in enumerate(mine) if isinstance(d, OffsetTombstone)) :]
    assert set(tombstones) >= {
        OffsetTombstone(group, topic, 0),
        OffsetTombstone(group, topic, 1),
        GroupTombstone(group),
    }
    assert not commits_of(tombstones)  # every commit came before the deletions
    assert mine[-1] == GroupTombstone(group)


@pytest.mark.kafka
def test_record_versions_the_broker_writes(
    bootstrap: str, offsets_topic: OffsetsTopicReader, capsys: pytest.CaptureFixture[str]
) -> None:
    stopped_group(bootstrap, unique("dec-versions"), {0: 3}, {0: 3})  # at least one group and commit, even alone
    records = offsets_topic.catch_up()
    assert_all_decoded(records)
    key_versions = Counter(int.from_bytes(r.key[:2], "big", signed=True) for r in records if r.key is not None)
    value_versions = Counter(
        (type(r.decoded).__name__, int.from_bytes(r.value[:2], "big", signed=True))
        for r in records
        if r.value is not None and not isinstance(r.decoded, OtherRecord)
    )
    kinds = Counter(type(r.decoded).__name__ for r in records)
    with capsys.disabled():
        print(f"\n{OFFSETS_TOPIC} on Kafka {KAFKA_VERSION}: {len(records)} records")
        print(f"  key versions: {dict(sorted(key_versions.items()))}")
        print(f"  value versions (decoded kind, version): {dict(sorted(value_versions.items()))}")
        print(f"  decoded kinds: {dict(sorted(kinds.items()))}")
    assert all(r.key is not None for r in records)
    if KAFKA_VERSION.startswith("4.1."):
        # 4.1 writes OffsetCommitValue v4 (flexible, with the topic id tag) and GroupMetadataValue v3.
        assert {v for (kind, v) in value_versions if kind == "OffsetCommit"} == {4}
        assert {v for (kind, v) in value_versions if kind == "GroupMetadata"} == {3}
        assert not {0} & set(key_versions)  # the legacy offset commit key is read, never written


@given(st.lists(st.integers(0, 2**32 - 1), max_size=8))
def test_unsigned_varints_read_back_whatever_their_length(values: list[int]) -> None:
    """One byte (under 0x80) is read at once, longer ones byte by byte: 127, 128 (0x80 0x01) and the rest alike."""
    reader = WireReader(b"".join(uvarint(v) for v in [127, 128, 16384, *values]))
    assert [reader.uvarint() for _ in range(3 + len(values))] == [127, 128, 16384, *values]
    assert reader.remaining() == 0
