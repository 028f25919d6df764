"""The answers about KIP-848, streams and share groups decoded by lagwatch: ConsumerGroupDescribe v0,
StreamsGroupDescribe v0, ShareGroupDescribe v1 and DescribeShareGroupOffsets v0-1 (the versions of lagwatch's
schemas, `kip848`), read straight into lagwatch's records (`DescribedGroup`, `Member`, `ShareOffset`).

Why by hand: kafka-python decodes them from their JSON schemas into an object per struct (a streams group's
topology, sub-topologies, members, their tasks and offsets), which lagwatch then read into its records. At 1,000
share and 1,000 streams groups (bench/group_kinds_bench.py's groups, their answers from a real Kafka 4.4 broker;
bench/README.md), decoding and reading took per poll: StreamsGroupDescribe 5.6 ms, ShareGroupDescribe 2.6 ms,
DescribeShareGroupOffsets (10,000 share-partitions in 4 answers) 12.6 ms; here 4.0, 1.8 and 7.6 ms (about 8 ms
less a poll, of a step of 1.5 s: no change the step's timing can show). With CPython's collector running (`lagwatch
check`; the daemon pauses it during a poll) kafka-python's objects also set off collections: 45 ms in
StreamsGroupDescribe's decoding in one poll's profile. Memberless groups of one state share one record, and
share-partitions of one figure one `ShareOffset` (nearly all of them on idle queues: no start offset yet).

Other versions go through kafka-python as before. A malformed answer raises ValueError (`own_answers`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lagwatch.collect.kip848 import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
)
from lagwatch.collect.offset_fetch_answer import topic_ahead
from lagwatch.collect.own_answers import AnswerDecoder, OwnAnswer, register
from lagwatch.model import Member, ShareOffset, TopicPartition
from lagwatch.offsets_topic.decode import Malformed, WireReader

CONSUMER_DESCRIBE_VERSION = 0
STREAMS_DESCRIBE_VERSION = 0
SHARE_DESCRIBE_VERSION = 1
SHARE_OFFSETS_VERSIONS = (0, 1)  # 1 (Kafka 4.2+) adds each share-partition's lag

UUID_BYTES = 16
# A share-partition as nearly all are: index, start offset, leader epoch, [lag,] error code, error message null
# (compact length 0), no tagged fields. One unpack instead of seven reads.
_SHARE_PARTITION = {0: struct.Struct(">iqihBB"), 1: struct.Struct(">iqiqhBB")}
_UNKNOWN = ShareOffset(None, None)  # no start offset (no consumer fetched yet): most share-partitions of idle groups


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """What a coordinator's describe answer says of a group (DescribeGroups, ConsumerGroupDescribe,
    StreamsGroupDescribe, ShareGroupDescribe)."""

    state: str
    protocol_type: str
    members: tuple[Member, ...]


class DescribeAnswer:
    """A decoded ConsumerGroupDescribe, StreamsGroupDescribe or ShareGroupDescribe answer: per group, its id, error
    code and message, and what it describes (None with an error)."""

    __slots__ = ("groups", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, groups: list[tuple[str, int, str | None, DescribedGroup | None]]):
        self.throttle_time_ms = throttle_time_ms
        self.groups = groups

    def __repr__(self) -> str:  # kafka-python logs every response at DEBUG: a count, not 1,000 groups
        return f"DescribeAnswer(groups={len(self.groups)})"


class ShareOffsetsAnswer:
    """A decoded DescribeShareGroupOffsets answer: per group, its id, error code and message, and its share-partitions
    (those with an error left out)."""

    __slots__ = ("groups", "throttle_time_ms")

    def __init__(
        self, throttle_time_ms: int, groups: list[tuple[str, int, str | None, dict[TopicPartition, ShareOffset]]]
    ):
        self.throttle_time_ms = throttle_time_ms
        self.groups = groups

    def __repr__(self) -> str:
        return f"ShareOffsetsAnswer(groups={len(self.groups)})"


# The requests: kafka-python's (sent, counted, retried and version-negotiated by it), their answers decoded here.
class OwnConsumerGroupDescribeRequest(OwnAnswer, ConsumerGroupDescribeRequest, init=False):  # type: ignore[call-arg]
    def __repr__(self) -> str:
        return f"OwnConsumerGroupDescribeRequest(groups={len(self.group_ids)})"


class OwnStreamsGroupDescribeRequest(OwnAnswer, StreamsGroupDescribeRequest, init=False):  # type: ignore[call-arg]
    def __repr__(self) -> str:
        return f"OwnStreamsGroupDescribeRequest(groups={len(self.group_ids)})"


class OwnShareGroupDescribeRequest(OwnAnswer, ShareGroupDescribeRequest, init=False):  # type: ignore[call-arg]
    def __repr__(self) -> str:
        return f"OwnShareGroupDescribeRequest(groups={len(self.group_ids)})"


class OwnDescribeShareGroupOffsetsRequest(OwnAnswer, DescribeShareGroupOffsetsRequest, init=False):  # type: ignore[call-arg]
    """Every share-partition of `group_ids` (topics null, as Kafka's own tool asks)."""

    def __init__(self, group_ids: list[str]) -> None:
        group_cls = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
        super().__init__(groups=[group_cls(group_id=g, topics=None) for g in group_ids])

    def __repr__(self) -> str:
        return f"OwnDescribeShareGroupOffsetsRequest(groups={len(self.groups)})"


def capitalised(state: str) -> str:
    """Modern groups' states are lower case ("stable", "not_ready"); classic ones capitalised: shown alike."""
    return state[:1].upper() + state[1:]


class _Reader(WireReader):
    """WireReader and the compound types of these answers."""

    __slots__ = ()

    # The two reads of nearly every field, with their common case inline: a string shorter than 127 bytes, no
    # tagged fields (a method call less each; the rest is WireReader's).
    def text(self) -> str:
        buf, pos = self._buf, self._pos
        if pos < len(buf) and 0 < buf[pos] < 0x80 and pos + buf[pos] <= len(buf):
            end = pos + buf[pos]
            try:
                value = str(buf[pos + 1 : end], "utf-8")
            except UnicodeDecodeError:
                return self.compact_string()  # which says what is wrong
            self._pos = end
            return value
        return self.compact_string()

    def tags(self) -> None:
        pos = self._pos
        if pos < len(self._buf) and self._buf[pos] == 0:
            self._pos = pos + 1
        else:
            self.skip_tagged_fields()

    def strings(self) -> list[str]:
        text = self.text
        return [text() for _ in range(self.compact_array_length())]

    def skip_strings(self) -> None:
        for _ in range(self.compact_array_length()):
            self.skip(self._length())

    def _length(self) -> int:
        length_plus_one = self.uvarint()
        if length_plus_one == 0:
            raise Malformed("null in a non-nullable compact string")
        return length_plus_one - 1

    def int32s(self) -> list[int]:
        count = self.compact_array_length()
        if 4 * count > self.remaining():
            raise self._truncated(4 * count)
        values = list(struct.unpack_from(f">{count}i", self._buf, self._pos))
        self._pos += 4 * count
        return values

    def present(self) -> bool:
        """A nullable struct's marker: -1 null, else present (as Kafka's own readers take it)."""
        marker = self._take(1)[0]
        return marker < 0x80

    def topic_partitions(self) -> list[TopicPartition]:
        """An Assignment of ConsumerGroupDescribe and ShareGroupDescribe: [TopicId, TopicName, [Partitions]]."""
        assigned: list[TopicPartition] = []
        for _ in range(self.compact_array_length()):
            self.skip(UUID_BYTES)
            topic = self.text()
            assigned += [TopicPartition(topic, p) for p in self.int32s()]
            self.tags()
        self.tags()
        return assigned

    def key_values(self) -> None:
        for _ in range(self.compact_array_length()):
            self.skip(self._length())
            self.skip(self._length())
            self.tags()

    def tasks(self) -> list[tuple[str, list[int]]]:
        """TaskIds: [SubtopologyId, [Partitions]]."""
        found = []
        for _ in range(self.compact_array_length()):
            found.append((self.text(), self.int32s()))
            self.tags()
        return found

    def task_offsets(self) -> None:
        for _ in range(self.compact_array_length()):
            self.skip(self._length())
            self.skip(12)  # partition, offset
            self.tags()

    def topic_infos(self) -> list[str]:
        """TopicInfo: [Name, Partitions, ReplicationFactor, [TopicConfigs]]; the names."""
        names = []
        for _ in range(self.compact_array_length()):
            names.append(self.text())
            self.skip(6)
            self.key_values()
            self.tags()
        return names


class _Groups:
    """The groups of one answer, memberless ones of one state sharing one record (as DescribeGroups')."""

    __slots__ = ("_memberless", "_protocol_type", "groups")

    def __init__(self, protocol_type: str) -> None:
        self.groups: list[tuple[str, int, str | None, DescribedGroup | None]] = []
        self._memberless: dict[str, DescribedGroup] = {}
        self._protocol_type = protocol_type

    def add(self, group_id: str, error_code: int, error_message: str | None, state: str, members: list[Member]) -> None:
        if error_code:
            self.groups.append((group_id, error_code, error_message, None))
        elif members:
            described = DescribedGroup(capitalised(state), self._protocol_type, tuple(members))
            self.groups.append((group_id, 0, error_message, described))
        else:
            described_memberless = self._memberless.get(state)
            if described_memberless is None:
                described_memberless = self._memberless[state] = DescribedGroup(
                    capitalised(state), self._protocol_type, ()
                )
            self.groups.append((group_id, 0, error_message, described_memberless))


def _consumer_member(r: _Reader) -> Member:
    member_id = r.text()
    r.compact_nullable_string()  # instance id
    r.compact_nullable_string()  # rack id
    r.int32()  # member epoch
    client_id, client_host = r.text(), r.text()
    subscribed = tuple(r.strings())
    regex = r.compact_nullable_string()
    assignment = tuple(r.topic_partitions())
    r.topic_partitions()  # target assignment
    r.tags()
    return Member(member_id, client_id, client_host, assignment, subscribed, regex or None)


def _share_member(r: _Reader) -> Member:
    member_id = r.text()
    r.compact_nullable_string()  # rack id
    r.int32()  # member epoch
    client_id, client_host = r.text(), r.text()
    subscribed = tuple(r.strings())
    assignment = tuple(r.topic_partitions())
    r.tags()
    return Member(member_id, client_id, client_host, assignment, subscribed)


def _decode_describe(data: bytes, protocol_type: str, member: Callable[[_Reader], Member], name: str) -> DescribeAnswer:
    """ConsumerGroupDescribe's and ShareGroupDescribe's answers: the same groups around members of their own."""
    r = _Reader(data)
    text, nullable_text, skip_tags = r.text, r.compact_nullable_string, r.tags
    throttle = r.int32()
    out = _Groups(protocol_type)
    for _ in range(r.compact_array_length()):
        error_code, error_message = r.int16(), nullable_text()
        group_id, state = text(), text()
        r.skip(8)  # group epoch, assignment epoch
        text()  # assignor name
        members = [member(r) for _ in range(r.compact_array_length())]
        r.int32()  # authorized operations: not asked for
        skip_tags()
        out.add(group_id, error_code, error_message, state, members)
    skip_tags()
    r.expect_end(f"{name} answer")
    return DescribeAnswer(throttle, out.groups)


def decode_consumer_describe(data: bytes) -> DescribeAnswer:
    """The body of a ConsumerGroupDescribe v0 answer (KIP-848 groups)."""
    return _decode_describe(data, "consumer", _consumer_member, "ConsumerGroupDescribe")


def decode_share_describe(data: bytes) -> DescribeAnswer:
    """The body of a ShareGroupDescribe v1 answer: members' assignments are share-partitions (several members may
    share one)."""
    return _decode_describe(data, "share", _share_member, "ShareGroupDescribe")


def decode_streams_describe(data: bytes) -> DescribeAnswer:
    """The body of a StreamsGroupDescribe v0 answer (KIP-1071). Each member's active tasks (sub-topology,
    partitions) are read as the partitions of the sub-topology's source topics it consumes (repartition topics
    included), as Kafka Streams assigns them; every member is subscribed to every source topic of the topology."""
    r = _Reader(data)
    text, nullable_text, int32, skip_tags = r.text, r.compact_nullable_string, r.int32, r.tags
    throttle = int32()
    out = _Groups("streams")
    for _ in range(r.compact_array_length()):
        error_code, error_message = r.int16(), nullable_text()
        group_id, state = text(), text()
        r.skip(8)  # group epoch, assignment epoch
        sources: dict[str, tuple[str, ...]] = {}
        if r.present():  # the topology
            int32()  # its epoch
            subtopologies = r.uvarint()  # a nullable compact array: 0 is null
            for _ in range(subtopologies - 1 if subtopologies else 0):
                subtopology_id = text()
                source_topics = r.strings()
                r.skip_strings()  # repartition sink topics
                r.topic_infos()  # state changelog topics
                repartition_sources = r.topic_infos()
                skip_tags()
                sources[subtopology_id] = (*source_topics, *repartition_sources)
            skip_tags()
        members = []
        count = r.compact_array_length()
        subscribed = tuple(sorted({t for topics in sources.values() for t in topics})) if count else ()
        for _ in range(count):
            member_id = text()
            int32()  # member epoch
            nullable_text()  # instance id
            nullable_text()  # rack id
            client_id, client_host = text(), text()
            int32()  # topology epoch
            text()  # process id
            if r.present():  # user endpoint: host, port
                text()
                r.skip(2)
                skip_tags()
            r.key_values()  # client tags
            r.task_offsets()
            r.task_offsets()  # task end offsets
            active = r.tasks()
            r.tasks()  # standby tasks
            r.tasks()  # warmup tasks
            skip_tags()
            _target_assignment(r)
            r.skip(1)  # is classic
            skip_tags()
            assignment = tuple(
                TopicPartition(topic, p)
                for subtopology_id, partitions in active
                for topic in sources.get(subtopology_id, ())
                for p in partitions
            )
            members.append(Member(member_id, client_id, client_host, assignment, subscribed))
        int32()  # authorized operations
        skip_tags()
        out.add(group_id, error_code, error_message, state, members)
    skip_tags()
    r.expect_end("StreamsGroupDescribe answer")
    return DescribeAnswer(throttle, out.groups)


def _target_assignment(r: _Reader) -> None:
    for _ in range(3):  # active, standby and warmup tasks
        r.tasks()
    r.tags()


def decode_share_offsets(data: bytes, version: int) -> ShareOffsetsAnswer:
    """The body of a DescribeShareGroupOffsets v0 or v1 answer: each share-partition's start offset and (v1, Kafka
    4.2+) lag, -1 read as "not known" (a partition no consumer fetched from yet; any lag in a v0 answer), as Kafka's
    tool shows "-". A partition-level error leaves the partition out."""
    r = _Reader(data)
    common = _SHARE_PARTITION[version]
    has_lag = version >= 1
    shared: dict[tuple[int | None, int | None], ShareOffset] = {(None, None): _UNKNOWN}
    interned: dict[str, dict[int, TopicPartition]] = {}
    throttle = r.int32()
    groups: list[tuple[str, int, str | None, dict[TopicPartition, ShareOffset]]] = []
    for _ in range(r.compact_array_length()):
        group_id = r.text()
        offsets: dict[TopicPartition, ShareOffset] = {}
        for _ in range(r.compact_array_length()):
            topic = r.text()
            r.skip(UUID_BYTES)
            by_index, partitions, run = topic_ahead(r, interned, topic, common)
            done = 0
            for row in run or ():
                if row[-1] or row[-2]:  # tagged fields, or an error message: read field by field below
                    break
                done += 1
                if not row[-3]:  # no error
                    _take(offsets, by_index, topic, row[0], row[1], row[3] if has_lag else -1, shared)
            r.skip(done * common.size)
            for _ in range(partitions - done):
                index, start = r.int32(), r.int64()
                r.int32()  # leader epoch
                lag = r.int64() if has_lag else -1
                error_code = r.int16()
                r.compact_nullable_string()  # error message
                r.tags()
                if not error_code:
                    _take(offsets, by_index, topic, index, start, lag, shared)
            r.tags()
        error_code, error_message = r.int16(), r.compact_nullable_string()
        r.tags()
        groups.append((group_id, error_code, error_message, offsets))
    r.tags()
    r.expect_end("DescribeShareGroupOffsets answer")
    return ShareOffsetsAnswer(throttle, groups)


def _take(
    offsets: dict[TopicPartition, ShareOffset],
    by_index: dict[int, TopicPartition],
    topic: str,
    index: int,
    start: int,
    lag: int,
    shared: dict[tuple[int | None, int | None], ShareOffset],
) -> None:
    tp = by_index.get(index)
    if tp is None:
        tp = by_index[index] = TopicPartition(topic, index)
    key = (start, lag) if start >= 0 and lag >= 0 else (start if start >= 0 else None, None)
    value = shared.get(key)
    if value is None:
        value = shared[key] = ShareOffset(*key)
    offsets[tp] = value


def _share_offsets_decoder(version: int) -> AnswerDecoder:
    return register(DescribeShareGroupOffsetsResponse, version, lambda data: decode_share_offsets(data, version))


# By response class and version: lagwatch's decoder (the tests reach them here).
DECODERS: dict[tuple[Any, int], AnswerDecoder] = {
    (ConsumerGroupDescribeResponse, CONSUMER_DESCRIBE_VERSION): register(
        ConsumerGroupDescribeResponse, CONSUMER_DESCRIBE_VERSION, decode_consumer_describe
    ),
    (StreamsGroupDescribeResponse, STREAMS_DESCRIBE_VERSION): register(
        StreamsGroupDescribeResponse, STREAMS_DESCRIBE_VERSION, decode_streams_describe
    ),
    (ShareGroupDescribeResponse, SHARE_DESCRIBE_VERSION): register(
        ShareGroupDescribeResponse, SHARE_DESCRIBE_VERSION, decode_share_describe
    ),
    **{(DescribeShareGroupOffsetsResponse, v): _share_offsets_decoder(v) for v in SHARE_OFFSETS_VERSIONS},
}
