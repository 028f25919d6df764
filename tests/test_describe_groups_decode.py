"""lagwatch's own DescribeGroups v5-6 decoder against kafka-python's: the same groups, states, members (with their
assignments) and errors for any answer kafka-python can encode; malformed answers are a ValueError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from lagwatch.collect.describe_groups import DECODERS, DescribeGroupsAnswer, OwnDescribeGroupsRequest, decode
from lagwatch.collect.wire import GroupAnswers, _classic_group, _describe_handler
from tests.decode_checks import refuses_damage, sends_kafkas_bytes

Group = DescribeGroupsResponse.DescribedGroup
Member = Group.DescribedGroupMember

_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)


def _assignment(topics: dict[str, list[int]]) -> bytes:
    tps = [ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in topics.items()]
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=tps, user_data=None).encode(version=0))


def _subscription(topics: list[str]) -> bytes:
    return bytes(ConsumerProtocolSubscription(version=0, topics=topics, user_data=None).encode(version=0))


_topics = st.dictionaries(_names.filter(bool), st.lists(st.integers(0, 1000), max_size=4), max_size=3)
_member = st.builds(
    lambda mid, instance, cid, host, metadata, assignment: Member(
        member_id=mid,
        group_instance_id=instance,
        client_id=cid,
        client_host=host,
        member_metadata=metadata,
        member_assignment=assignment,
    ),
    _names,
    st.one_of(st.none(), _names),
    _names,
    _names,
    st.one_of(st.just(b""), st.lists(_names.filter(bool), max_size=3).map(_subscription), st.binary(max_size=20)),
    st.one_of(st.just(b""), _topics.map(_assignment), st.binary(max_size=20)),
)
_group = st.builds(
    lambda gid, error, message, state, ptype, members, ops: Group(
        error_code=error,
        error_message=message,
        group_id=gid,
        group_state=state,
        protocol_type=ptype,
        protocol_data="range",
        members=members,
        authorized_operations=ops,
    ),
    _names,
    st.sampled_from([0, 0, 0, 15, 16, 69]),
    st.one_of(st.none(), _names),
    st.sampled_from(["Empty", "Stable", "PreparingRebalance", "Dead", ""]),
    st.sampled_from(["consumer", "", "connect"]),
    st.lists(_member, max_size=3),
    st.one_of(st.none(), st.sets(st.integers(0, 30), max_size=4)),
)


def _memberless(group_id: str, state: str = "Empty") -> Any:
    return Group(
        error_code=0,
        error_message=None,
        group_id=group_id,
        group_state=state,
        protocol_type="consumer",
        protocol_data="",
        members=[],
        authorized_operations=None,
    )


def _encode(groups: list[Any], version: int, throttle: int = 0) -> bytes:
    response = DescribeGroupsResponse(throttle_time_ms=throttle, groups=groups)
    response._header = None
    return bytes(response.encode(version=version))


def _answers(response: Any, group_ids: list[str]) -> GroupAnswers:
    answers = GroupAnswers()
    _describe_handler(group_ids, answers, _classic_group)(response)
    return answers


@given(st.lists(_group, max_size=6, unique_by=lambda g: g.group_id), st.sampled_from([5, 6]), st.integers(0, 9999))
@settings(max_examples=300, deadline=None)
def test_the_same_answers_as_kafka_python(groups: list[Any], version: int, throttle: int) -> None:
    data = _encode(groups, version, throttle)
    ids = [g.group_id for g in groups]
    theirs = _answers(DescribeGroupsResponse.decode(memoryview(data), version=version), ids)
    ours = decode(data, version)
    assert ours.throttle_time_ms == throttle
    mine = _answers(ours, ids)
    assert mine.described == theirs.described
    assert {g: (type(e), str(e)) for g, e in mine.errors.items()} == {
        g: (type(e), str(e)) for g, e in theirs.errors.items()
    }


def test_members_and_their_assignments_are_read() -> None:
    member = Member(
        member_id="m-1",
        group_instance_id=None,
        client_id="app",
        client_host="/10.0.0.1",
        member_metadata=_subscription(["orders", "refunds"]),
        member_assignment=_assignment({"orders": [0, 2]}),
    )
    group = Group(
        error_code=0,
        error_message=None,
        group_id="g",
        group_state="Stable",
        protocol_type="consumer",
        protocol_data="range",
        members=[member],
        authorized_operations=None,
    )
    described = _answers(decode(_encode([group], 6), 6), ["g"]).described["g"]
    assert described.state == "Stable"
    (m,) = described.members
    assert (m.member_id, m.client_id, m.client_host) == ("m-1", "app", "/10.0.0.1")
    assert [tuple(tp) for tp in m.assignment] == [("orders", 0), ("orders", 2)]
    assert m.subscribed_topics == ("orders", "refunds")


def test_memberless_groups_of_one_state_share_one_record() -> None:
    groups = [_memberless(f"g{n}", "Empty" if n < 8 else "Dead") for n in range(10)]
    described = _answers(decode(_encode(groups, 6), 6), [g.group_id for g in groups]).described
    assert len({id(d) for d in described.values()}) == 2
    assert described["g0"].state == "Empty" and described["g9"].state == "Dead"


@pytest.mark.parametrize("version", [5, 6])
@pytest.mark.parametrize("cut", [1, 5, 9, 20])
def test_a_truncated_answer_is_a_value_error(version: int, cut: int) -> None:
    data = _encode([_memberless("group")], version)
    refuses_damage(DECODERS[version], data, cut, f"DescribeGroups v{version}", DescribeGroupsAnswer)


@pytest.mark.parametrize("version", [5, 6])
def test_the_request_is_kafka_pythons_and_its_answer_comes_here(version: int) -> None:
    """The request's bytes are kafka-python's own; only the answer's decoder differs, for versions 5 and 6."""
    ours = OwnDescribeGroupsRequest(["a", "b"])
    theirs = DescribeGroupsRequest(groups=["a", "b"], include_authorized_operations=False)
    sends_kafkas_bytes(ours, theirs, version, DECODERS[version])
    assert repr(ours) == "OwnDescribeGroupsRequest(groups=2)"


@pytest.mark.parametrize("version", [5, 6])
def test_long_names_and_errors_between_common_groups_are_read_in_full(version: int) -> None:
    """Runs of common groups are read at once; a name of 127+ bytes (a two-byte length), an error or members
    end a run: the group is read field by field and the next run starts after it."""
    long_name = "g" * 200
    failed = _memberless("failed")
    failed.error_code, failed.error_message = 16, "not coordinator"
    groups = [_memberless("a"), _memberless(long_name, "Dead"), _memberless("b"), failed, _memberless("c")]
    answer = decode(_encode(groups, version), version)
    assert [(g.group_id, g.error_code, g.state) for g in answer.groups] == [
        ("a", 0, "Empty"),
        (long_name, 0, "Dead"),
        ("b", 0, "Empty"),
        ("failed", 16, "Empty"),
        ("c", 0, "Empty"),
    ]
    assert answer.groups[3].error_message == ("not coordinator" if version >= 6 else None)
