"""lagwatch's own OffsetFetch v8 decoder against kafka-python's: the same committed offsets and errors for any
answer kafka-python can encode; malformed answers are a ValueError (kafka-python's own decoding-error path)."""

from __future__ import annotations

import io
import struct
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from lagwatch.collect.offset_fetch import OffsetFetchV8Request, _Decoder
from lagwatch.collect.offset_fetch_answer import OffsetFetchAnswer, decode
from lagwatch.collect.wire import GroupAnswers, _offset_fetch_handler
from lagwatch.model import CommittedOffset, TopicPartition
from tests.test_offsets_topic_decode import compact_string, uvarint

Group = OffsetFetchResponse.OffsetFetchResponseGroup
Topic = Group.OffsetFetchResponseTopics
Partition = Topic.OffsetFetchResponsePartitions

_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=12)
_partition = st.builds(
    lambda i, offset, epoch, metadata, error: Partition(
        partition_index=i, committed_offset=offset, committed_leader_epoch=epoch, metadata=metadata, error_code=error
    ),
    st.integers(0, 2**31 - 1),
    st.one_of(st.just(-1), st.integers(0, 2**63 - 1)),
    st.one_of(st.just(-1), st.integers(0, 2**31 - 1)),
    st.one_of(st.none(), st.just(""), _names, st.text(st.characters(codec="utf-8"), max_size=300)),
    st.sampled_from([0, 0, 0, 3, 16]),
)
_topic = st.builds(lambda name, parts: Topic(name=name, partitions=parts), _names, st.lists(_partition, max_size=6))
_group = st.builds(
    lambda gid, topics, error: Group(group_id=gid, topics=topics, error_code=error),
    _names,
    st.lists(_topic, max_size=4),
    st.sampled_from([0, 0, 0, 15, 16, 69]),
)


def _encode(groups: list[Any], throttle: int = 0) -> bytes:
    response = OffsetFetchResponse(throttle_time_ms=throttle, groups=groups)
    response._header = None
    return bytes(response.encode(version=8))


def _answers(response: Any, group_ids: list[str]) -> GroupAnswers:
    answers = GroupAnswers()
    _offset_fetch_handler(group_ids, answers)(response)
    return answers


@given(st.lists(_group, max_size=6, unique_by=lambda g: g.group_id), st.integers(0, 10_000))
@settings(max_examples=300, deadline=None)
def test_the_same_answers_as_kafka_python(groups: list[Any], throttle: int) -> None:
    data = _encode(groups, throttle)
    ids = [g.group_id for g in groups]
    theirs = _answers(OffsetFetchResponse.decode(memoryview(data), version=8), ids)
    ours = decode(data)
    assert ours.throttle_time_ms == throttle
    mine = _answers(ours, ids)
    assert mine.committed == theirs.committed
    assert {g: type(e) for g, e in mine.errors.items()} == {g: type(e) for g, e in theirs.errors.items()}


def test_partitions_of_one_topic_are_shared_between_groups() -> None:
    """Ten groups on a topic hold the same TopicPartition objects (fewer objects per poll and in the history)."""
    parts = [
        Partition(partition_index=i, committed_offset=i, committed_leader_epoch=3, metadata="", error_code=0)
        for i in range(3)
    ]
    data = _encode(
        [Group(group_id=f"g{n}", topics=[Topic(name="t", partitions=parts)], error_code=0) for n in range(10)]
    )
    groups = decode(data).groups
    first = list(groups[0][2])
    assert first == [TopicPartition("t", i) for i in range(3)]
    assert all(a is b for _, _, committed in groups for a, b in zip(committed, first, strict=True))
    assert groups[0][2][TopicPartition("t", 2)] == CommittedOffset(2, 3, "")


def test_tagged_fields_are_skipped() -> None:
    """Fields a newer broker may add as tagged fields, at every level, are stepped over."""
    tags = uvarint(2) + uvarint(0) + uvarint(3) + b"abc" + uvarint(300) + uvarint(1) + b"z"
    partition = struct.pack(">iqi", 4, 1234, 7) + compact_string("meta") + struct.pack(">h", 0) + tags
    topic = compact_string("orders") + uvarint(2) + partition + tags
    group = compact_string("g") + uvarint(2) + topic + struct.pack(">h", 0) + tags
    data = struct.pack(">i", 0) + uvarint(2) + group + tags
    (only,) = decode(data).groups
    assert only == ("g", 0, {TopicPartition("orders", 4): CommittedOffset(1234, 7, "meta")})


@pytest.mark.parametrize("cut", [1, 5, 9, 20, 40])
def test_a_truncated_answer_is_a_value_error(cut: int) -> None:
    parts = [Partition(partition_index=0, committed_offset=5, committed_leader_epoch=-1, metadata="m", error_code=0)]
    data = _encode([Group(group_id="group", topics=[Topic(name="topic", partitions=parts)], error_code=0)])
    with pytest.raises(ValueError):
        _Decoder.decode(io.BytesIO(data[: len(data) - cut]))
    with pytest.raises(ValueError):
        _Decoder.decode(io.BytesIO(data + b"\x00"))  # bytes left over
    assert isinstance(_Decoder.decode(io.BytesIO(data)), OffsetFetchAnswer)


def test_its_repr_is_short() -> None:
    """kafka-python logs every response it receives at DEBUG: a count, not the offsets of 100k partitions."""
    data = _encode([Group(group_id=f"g{n}", topics=[], error_code=0) for n in range(1000)])
    assert repr(decode(data)) == "OffsetFetchAnswer(groups=1000)"


@given(
    group_ids=st.lists(st.text(max_size=200), max_size=300),  # 128+ groups or bytes: two-byte varint lengths
    correlation_id=st.integers(0, 2**31 - 1),
    client_id=st.text(max_size=40),
)
@example(group_ids=[f"g{i}" * 60 for i in range(200)], correlation_id=1, client_id="lagwatch")  # long lengths
@example(group_ids=["é" * 100, "x" * 127, "y" * 128], correlation_id=0, client_id="")  # varint edges
@settings(max_examples=150, deadline=None)
def test_the_request_is_the_bytes_kafka_python_would_send(
    group_ids: list[str], correlation_id: int, client_id: str
) -> None:
    """lagwatch writes the OffsetFetch v8 request's bytes itself (no object per group): they must be exactly
    kafka-python's encoding of the same request (header, frame, every group with topics null), for any names."""
    ours = OffsetFetchV8Request(group_ids)
    theirs = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None) for g in group_ids],
        require_stable=False,
        min_version=8,
        max_version=8,
    )
    for request in (ours, theirs):
        request.API_VERSION = 8  # as kafka-python's version negotiation sets it
        request.with_header(correlation_id=correlation_id, client_id=client_id)
    assert bytes(ours.encode(header=True, framed=True)) == bytes(theirs.encode(header=True, framed=True))
    assert bytes(ours.encode()) == bytes(theirs.encode())
    assert repr(ours) == f"OffsetFetchV8Request(groups={len(group_ids)})"


def test_the_request_refuses_other_versions() -> None:
    request = OffsetFetchV8Request(["g"])
    with pytest.raises(ValueError, match="version 8 only"):
        request.encode(version=7)
