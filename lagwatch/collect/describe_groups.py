"""DescribeGroups v5-6 answers (every classic group of a coordinator, one request) decoded by lagwatch.

Why by hand: kafka-python decodes each group into objects field by field, and turns its authorized-operations
bitfield (which lagwatch does not ask for: the broker sends INT32_MIN) into a set with a 32-step Python loop. At
10,000 groups that was about as much CPU on kafka-python's I/O thread as the whole OffsetFetch answer of 100k
partitions (py-spy, bench/daemon_step_bench.py --kafka); 5x less here (bench/offset_fetch_bench.py). CPU more than
wall time: the broker answers the OffsetFetch sent with it later, and the poll waits for that one. Read here
straight into lagwatch's records, memberless groups of one state sharing one record.

Versions 5 and 6 (Kafka 2.4+) are decoded here; older versions go through kafka-python as before.
"""

from __future__ import annotations

from typing import NamedTuple

from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse

from lagwatch.collect.own_answers import AnswerDecoder, OwnAnswer, register
from lagwatch.offsets_topic.decode import WireReader, short_texts

VERSIONS = (5, 6)  # 5: the first flexible version; 6 adds each group's error message


class DescribedMember(NamedTuple):
    """A member as the coordinator describes it (what `wire._member` reads of kafka-python's members too)."""

    member_id: str
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


class DescribedAnswer(NamedTuple):
    group_id: str
    error_code: int
    error_message: str | None
    state: str
    protocol_type: str
    members: tuple[DescribedMember, ...]


class DescribeGroupsAnswer:
    __slots__ = ("groups", "throttle_time_ms")

    def __init__(self, throttle_time_ms: int, groups: list[DescribedAnswer]) -> None:
        self.throttle_time_ms = throttle_time_ms
        self.groups = groups

    def __repr__(self) -> str:  # kafka-python logs every response at DEBUG: a count, not 10,000 groups
        return f"DescribeGroupsAnswer(groups={len(self.groups)})"


class OwnDescribeGroupsRequest(OwnAnswer, DescribeGroupsRequest, init=False):  # type: ignore[call-arg,misc]
    """kafka-python's DescribeGroupsRequest for `group_ids`, at version 5 or 6: its answer is decoded by lagwatch."""

    def __init__(self, group_ids: list[str]) -> None:
        super().__init__(groups=group_ids, include_authorized_operations=False, min_version=5, max_version=6)

    def __repr__(self) -> str:
        return f"OwnDescribeGroupsRequest(groups={len(self.groups)})"


def decode(data: bytes, version: int) -> DescribeGroupsAnswer:
    """The body of a DescribeGroups v5 or v6 answer (after its header)."""
    r = WireReader(data)
    text, nullable_text, raw, skip_tags = (
        r.compact_string,
        r.compact_nullable_string,
        r.compact_bytes,
        r.skip_tagged_fields,
    )
    throttle = r.int32()
    groups: list[DescribedAnswer] = []
    left = r.compact_array_length()
    while left:
        # Nearly every group is of the common shape: read a run of them at once, then one group in full.
        start = r.tell()
        read, end = _common_run(data, start, left, version >= 6, groups)
        r.skip(end - start)
        left -= read
        if not left:
            break
        error_code = r.int16()
        error_message = nullable_text() if version >= 6 else None
        group_id, state, protocol_type = text(), text(), text()
        raw()  # the protocol's name (e.g. "range"): not shown
        members: list[DescribedMember] = []
        for _ in range(r.compact_array_length()):
            member_id = text()
            nullable_text()  # group instance id
            client_id, client_host = text(), text()
            metadata, assignment = bytes(raw()), bytes(raw())
            skip_tags()
            members.append(DescribedMember(member_id, client_id, client_host, metadata, assignment))
        r.int32()  # authorized operations: not asked for
        skip_tags()
        groups.append(DescribedAnswer(group_id, error_code, error_message, state, protocol_type, tuple(members)))
        left -= 1
    skip_tags()
    r.expect_end("DescribeGroups answer")
    return DescribeGroupsAnswer(throttle, groups)


def _common_run(data: bytes, pos: int, most: int, v6: bool, out: list[DescribedAnswer]) -> tuple[int, int]:
    """Reads up to `most` groups from `pos` for as long as they have the common shape: no error (nor error
    message), no members, no tagged fields, names shorter than 127 bytes. Returns how many it read and where it
    stopped; the group there, if any, is read in full by `decode`, which also reports anything malformed.
    (bench/offset_fetch_bench.py times it against kafka-python on a real broker's answer.)"""
    new_tuple, no_members = tuple.__new__, ()
    names: dict[bytes, str] = {}  # states and protocol types: a few distinct values, decoded once
    read = 0
    try:
        while read < most:
            if data[pos] or data[pos + 1] or (v6 and data[pos + 2]):  # an error code, or an error message
                break
            # group id, state, protocol type, the protocol's name: compact strings
            found = short_texts(data, pos + (3 if v6 else 2), 4)
            if found is None:
                break
            (group_id, state, protocol_type, _), p = found
            # no members (compact array length 0 + 1), authorized operations (4 bytes), no tagged fields
            if data[p] != 1 or data[p + 5] != 0:
                break
            state_text = names.get(state) or names.setdefault(state, state.decode())
            protocol_text = names.get(protocol_type) or names.setdefault(protocol_type, protocol_type.decode())
            out.append(new_tuple(DescribedAnswer, (group_id.decode(), 0, None, state_text, protocol_text, no_members)))
            pos = p + 6
            read += 1
    except (IndexError, UnicodeDecodeError):
        pass  # cut short or not UTF-8: `decode` reads this group field by field and says what is wrong
    return read, pos


def _decoder(version: int) -> AnswerDecoder:
    return register(DescribeGroupsResponse, version, lambda data: decode(data, version))


DECODERS = {version: _decoder(version) for version in VERSIONS}
