"""lagwatch's own decoders of ConsumerGroupDescribe v0, StreamsGroupDescribe v0, ShareGroupDescribe v1 and
DescribeShareGroupOffsets v0-1 against kafka-python's decoding of the same bytes (then read by wire's handlers as
before): the same groups, states, members, assignments, share-partitions and errors for any answer kafka-python can
encode; malformed answers are a ValueError."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lagwatch.collect.group_describes import (
    DECODERS,
    DescribeAnswer,
    ShareOffsetsAnswer,
    decode_consumer_describe,
    decode_share_describe,
    decode_share_offsets,
    decode_streams_describe,
)
from lagwatch.collect.kip848 import (
    ConsumerGroupDescribeResponse,
    DescribeShareGroupOffsetsResponse,
    ShareGroupDescribeResponse,
    StreamsGroupDescribeResponse,
)
from lagwatch.collect.wire import (
    GroupAnswers,
    _describe_handler,
    _kip848_group,
    _share_group,
    _share_offsets_handler,
    _streams_group,
)
from lagwatch.model import ShareOffset, TopicPartition

_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_long_names = st.one_of(_names, st.text(st.sampled_from("ab"), min_size=120, max_size=300))  # 2-byte lengths
_states = st.sampled_from(["empty", "stable", "assigning", "reconciling", "not_ready", "dead", ""])
_errors = st.sampled_from([0, 0, 0, 15, 16, 69, 29])
_partitions = st.lists(st.integers(0, 2**31 - 1), max_size=4)
_uuid = st.uuids().map(str)
_INT32_MIN = -(2**31)

# kafka-python's classes for each struct
_Share = ShareGroupDescribeResponse.DescribedGroup
_ShareTopicPartitions = _Share.Member.Assignment.TopicPartitions
_Consumer = ConsumerGroupDescribeResponse.DescribedGroup
_ConsumerTopicPartitions = _Consumer.Member.Assignment.TopicPartitions
_Streams = StreamsGroupDescribeResponse.DescribedGroup
_StreamsMember = _Streams.Member
_Subtopology = _Streams.Topology.Subtopology
_OffsetsGroup = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
_OffsetsTopic = _OffsetsGroup.DescribeShareGroupOffsetsResponseTopic
_OffsetsPartition = _OffsetsTopic.DescribeShareGroupOffsetsResponsePartition


def _assignment(cls: Any, tps_cls: Any) -> Any:
    topic_partitions = st.builds(
        lambda tid, name, ps: tps_cls(topic_id=tid, topic_name=name, partitions=ps), _uuid, _names, _partitions
    )
    return st.lists(topic_partitions, max_size=3).map(lambda tps: cls(topic_partitions=tps))


_share_member = st.builds(
    lambda mid, rack, cid, host, subscribed, assignment: _Share.Member(
        member_id=mid,
        rack_id=rack,
        member_epoch=3,
        client_id=cid,
        client_host=host,
        subscribed_topic_names=subscribed,
        assignment=assignment,
    ),
    _long_names,
    st.one_of(st.none(), _names),
    _names,
    _names,
    st.lists(_names, max_size=3),
    _assignment(_Share.Member.Assignment, _ShareTopicPartitions),
)
_consumer_member = st.builds(
    lambda mid, instance, rack, cid, host, subscribed, regex, assignment, target: _Consumer.Member(
        member_id=mid,
        instance_id=instance,
        rack_id=rack,
        member_epoch=5,
        client_id=cid,
        client_host=host,
        subscribed_topic_names=subscribed,
        subscribed_topic_regex=regex,
        assignment=assignment,
        target_assignment=target,
    ),
    _names,
    st.one_of(st.none(), _names),
    st.one_of(st.none(), _names),
    _names,
    _names,
    st.lists(_names, max_size=3),
    st.one_of(st.none(), st.just(""), _names),
    _assignment(_Consumer.Member.Assignment, _ConsumerTopicPartitions),
    _assignment(_Consumer.Member.Assignment, _ConsumerTopicPartitions),
)


def _describe_group(cls: Any, member: Any, with_assignor: bool = True) -> Any:
    return st.builds(
        lambda gid, error, message, state, members, ops: cls(
            error_code=error,
            error_message=message,
            group_id=gid,
            group_state=state,
            group_epoch=7,
            assignment_epoch=6,
            **({"assignor_name": "simple"} if with_assignor else {}),
            members=members,
            authorized_operations=ops,
        ),
        _long_names,
        _errors,
        st.one_of(st.none(), _names),
        _states,
        st.lists(member, max_size=3),
        st.sampled_from([_INT32_MIN, 0, 255]),
    )


_share_group_st = _describe_group(_Share, _share_member)
_consumer_group_st = _describe_group(_Consumer, _consumer_member)

_subtopology_ids = st.sampled_from(["0", "1", "2", "sub-7"])
_key_values = st.lists(st.builds(lambda k, v: (k, v), _names, _names), max_size=2)
_topic_info = st.builds(
    lambda name, n, rf, configs: _Subtopology.TopicInfo(
        name=name,
        partitions=n,
        replication_factor=rf,
        topic_configs=[_Subtopology.TopicInfo.KeyValue(key=k, value=v) for k, v in configs],
    ),
    _names,
    st.integers(-1, 100),
    st.integers(-1, 3),
    _key_values,
)
_subtopology = st.builds(
    lambda sid, sources, sinks, changelogs, repartitions: _Subtopology(
        subtopology_id=sid,
        source_topics=sources,
        repartition_sink_topics=sinks,
        state_changelog_topics=changelogs,
        repartition_source_topics=repartitions,
    ),
    _subtopology_ids,
    st.lists(_names, max_size=3),
    st.lists(_names, max_size=2),
    st.lists(_topic_info, max_size=2),
    st.lists(_topic_info, max_size=2),
)
_topology = st.one_of(
    st.none(),
    st.builds(
        lambda subs: _Streams.Topology(epoch=2, subtopologies=subs),
        st.one_of(st.none(), st.lists(_subtopology, max_size=3)),
    ),
)
_tasks = st.lists(
    st.builds(
        lambda sid, ps: _StreamsMember.Assignment.TaskIds(subtopology_id=sid, partitions=ps),
        _subtopology_ids,
        _partitions,
    ),
    max_size=3,
)
_streams_assignment = st.builds(
    lambda active, standby, warmup: _StreamsMember.Assignment(
        active_tasks=active, standby_tasks=standby, warmup_tasks=warmup
    ),
    _tasks,
    _tasks,
    _tasks,
)
_task_offsets = st.lists(
    st.builds(
        lambda sid, p, o: _StreamsMember.TaskOffset(subtopology_id=sid, partition=p, offset=o),
        _subtopology_ids,
        st.integers(0, 100),
        st.integers(-1, 2**63 - 1),
    ),
    max_size=2,
)
_streams_member = st.builds(
    lambda mid, instance, rack, cid, host, endpoint, tags, offsets, ends, assignment, target, classic: _StreamsMember(
        member_id=mid,
        member_epoch=4,
        instance_id=instance,
        rack_id=rack,
        client_id=cid,
        client_host=host,
        topology_epoch=2,
        process_id="p-1",
        user_endpoint=endpoint,
        client_tags=[_StreamsMember.KeyValue(key=k, value=v) for k, v in tags],
        task_offsets=offsets,
        task_end_offsets=ends,
        assignment=assignment,
        target_assignment=target,
        is_classic=classic,
    ),
    _names,
    st.one_of(st.none(), _names),
    st.one_of(st.none(), _names),
    _names,
    _names,
    st.one_of(
        st.none(), st.builds(lambda h, p: _StreamsMember.Endpoint(host=h, port=p), _names, st.integers(0, 65535))
    ),
    _key_values,
    _task_offsets,
    _task_offsets,
    _streams_assignment,
    _streams_assignment,
    st.booleans(),
)
_streams_group_st = st.builds(
    lambda gid, error, message, state, topology, members, ops: _Streams(
        error_code=error,
        error_message=message,
        group_id=gid,
        group_state=state,
        group_epoch=7,
        assignment_epoch=6,
        topology=topology,
        members=members,
        authorized_operations=ops,
    ),
    _long_names,
    _errors,
    st.one_of(st.none(), _names),
    _states,
    _topology,
    st.lists(_streams_member, max_size=3),
    st.sampled_from([_INT32_MIN, 0, 255]),
)

_offsets_partition = st.builds(
    lambda index, start, epoch, lag, error, message: _OffsetsPartition(
        partition_index=index,
        start_offset=start,
        leader_epoch=epoch,
        lag=lag,
        error_code=error,
        error_message=message,
    ),
    st.integers(0, 2**31 - 1),
    st.sampled_from([-1, -1, 0, 5, 2**40]),
    st.sampled_from([-1, 0, 3]),
    st.sampled_from([-1, 0, 7, 2**40]),
    st.sampled_from([0, 0, 0, 3]),
    st.one_of(st.none(), st.none(), _names),
)
_offsets_group = st.builds(
    lambda gid, topics, error, message: _OffsetsGroup(
        group_id=gid, topics=topics, error_code=error, error_message=message
    ),
    _long_names,
    st.lists(
        st.builds(
            lambda name, tid, ps: _OffsetsTopic(topic_name=name, topic_id=tid, partitions=ps),
            _names,
            _uuid,
            st.lists(_offsets_partition, max_size=5, unique_by=lambda p: p.partition_index),
        ),
        max_size=3,
        unique_by=lambda t: t.topic_name,
    ),
    _errors,
    st.one_of(st.none(), _names),
)

# (response class, version, lagwatch's decoder, wire's reading of kafka-python's group)
_DESCRIBES = {
    "share": (ShareGroupDescribeResponse, 1, decode_share_describe, _share_group),
    "consumer": (ConsumerGroupDescribeResponse, 0, decode_consumer_describe, _kip848_group),
    "streams": (StreamsGroupDescribeResponse, 0, decode_streams_describe, _streams_group),
}


def _encode(cls: Any, version: int, throttle: int, groups: list[Any]) -> bytes:
    response = cls(throttle_time_ms=throttle, groups=groups)
    response._header = None
    return bytes(response.encode(version=version))


def _errors_of(answers: GroupAnswers) -> dict[str, tuple[type, str]]:
    return {g: (type(e), str(e)) for g, e in answers.errors.items()}


def _both_ways(kind: str, groups: list[Any], throttle: int = 0) -> tuple[GroupAnswers, GroupAnswers, DescribeAnswer]:
    cls, version, ours, read = _DESCRIBES[kind]
    data = _encode(cls, version, throttle, groups)
    ids = [g.group_id for g in groups]
    theirs = GroupAnswers()
    _describe_handler(ids, theirs, read)(cls.decode(memoryview(data), version=version))
    answer = ours(data)
    mine = GroupAnswers()
    _describe_handler(ids, mine, read)(answer)
    return theirs, mine, answer


@given(st.lists(_share_group_st, max_size=5, unique_by=lambda g: g.group_id), st.integers(0, 9999))
@settings(max_examples=200, deadline=None)
def test_share_group_describe_the_same_as_kafka_python(groups: list[Any], throttle: int) -> None:
    theirs, mine, answer = _both_ways("share", groups, throttle)
    assert answer.throttle_time_ms == throttle
    assert mine.described == theirs.described
    assert _errors_of(mine) == _errors_of(theirs)


@given(st.lists(_consumer_group_st, max_size=5, unique_by=lambda g: g.group_id))
@settings(max_examples=200, deadline=None)
def test_consumer_group_describe_the_same_as_kafka_python(groups: list[Any]) -> None:
    theirs, mine, _ = _both_ways("consumer", groups)
    assert mine.described == theirs.described
    assert _errors_of(mine) == _errors_of(theirs)


@given(st.lists(_streams_group_st, max_size=4, unique_by=lambda g: g.group_id))
@settings(max_examples=300, deadline=None)
def test_streams_group_describe_the_same_as_kafka_python(groups: list[Any]) -> None:
    theirs, mine, _ = _both_ways("streams", groups)
    assert mine.described == theirs.described
    assert _errors_of(mine) == _errors_of(theirs)


def _share_offsets_both_ways(groups: list[Any], version: int) -> tuple[GroupAnswers, GroupAnswers]:
    data = _encode(DescribeShareGroupOffsetsResponse, version, 0, groups)
    ids = [g.group_id for g in groups]
    theirs, mine = GroupAnswers(), GroupAnswers()
    _share_offsets_handler(ids, theirs)(DescribeShareGroupOffsetsResponse.decode(memoryview(data), version=version))
    answer = decode_share_offsets(data, version)
    assert isinstance(answer, ShareOffsetsAnswer)
    _share_offsets_handler(ids, mine)(answer)
    return theirs, mine


@given(st.lists(_offsets_group, max_size=5, unique_by=lambda g: g.group_id), st.sampled_from([0, 1]))
@settings(max_examples=300, deadline=None)
def test_share_offsets_the_same_as_kafka_python(groups: list[Any], version: int) -> None:
    theirs, mine = _share_offsets_both_ways(groups, version)
    assert mine.share_offsets == theirs.share_offsets
    assert _errors_of(mine) == _errors_of(theirs)


def _streams_group(members: list[Any], subtopologies: list[Any] | None, group_id: str = "app") -> Any:
    return _Streams(
        error_code=0,
        error_message=None,
        group_id=group_id,
        group_state="stable",
        group_epoch=1,
        assignment_epoch=1,
        topology=_Streams.Topology(epoch=1, subtopologies=subtopologies),
        members=members,
        authorized_operations=_INT32_MIN,
    )


def _tasks_of(tasks: dict[str, list[int]]) -> Any:
    task_ids = [_StreamsMember.Assignment.TaskIds(subtopology_id=s, partitions=ps) for s, ps in tasks.items()]
    return _StreamsMember.Assignment(active_tasks=task_ids, standby_tasks=[], warmup_tasks=[])


def test_a_streams_members_active_tasks_are_its_source_partitions() -> None:
    info = _Subtopology.TopicInfo(name="app-repartition", partitions=2, replication_factor=1, topic_configs=[])
    subtopologies = [
        _Subtopology(
            subtopology_id="0",
            source_topics=["orders"],
            repartition_sink_topics=["app-repartition"],
            state_changelog_topics=[],
            repartition_source_topics=[],
        ),
        _Subtopology(
            subtopology_id="1",
            source_topics=[],
            repartition_sink_topics=[],
            state_changelog_topics=[info],
            repartition_source_topics=[info],
        ),
    ]
    member = _StreamsMember(
        member_id="m-1",
        member_epoch=3,
        instance_id=None,
        rack_id=None,
        client_id="app-client",
        client_host="/10.0.0.1",
        topology_epoch=1,
        process_id="p",
        user_endpoint=_StreamsMember.Endpoint(host="app-0", port=8080),
        client_tags=[],
        task_offsets=[],
        task_end_offsets=[],
        assignment=_tasks_of({"0": [0, 2], "1": [1], "9": [5]}),  # "9": no such sub-topology, nothing read
        target_assignment=_tasks_of({}),
        is_classic=False,
    )
    theirs, mine, _ = _both_ways("streams", [_streams_group([member], subtopologies)])
    described = mine.described["app"]
    assert described == theirs.described["app"]
    assert (described.state, described.protocol_type) == ("Stable", "streams")
    (m,) = described.members
    assert m.assignment == (
        TopicPartition("orders", 0),
        TopicPartition("orders", 2),
        TopicPartition("app-repartition", 1),
    )
    assert m.subscribed_topics == ("app-repartition", "orders")


@pytest.mark.parametrize("kind", ["share", "consumer", "streams"])
def test_memberless_groups_of_one_state_share_one_record(kind: str) -> None:
    cls = _DESCRIBES[kind][0]
    groups = []
    for n in range(10):
        fields = {
            "error_code": 0,
            "error_message": None,
            "group_id": f"g{n}",
            "group_state": "empty" if n < 8 else "dead",
            "group_epoch": 1,
            "assignment_epoch": 1,
            "members": [],
            "authorized_operations": _INT32_MIN,
        }
        if kind == "streams":
            fields["topology"] = None
        else:
            fields["assignor_name"] = "simple"
        groups.append(cls.DescribedGroup(**fields))
    theirs, mine, _ = _both_ways(kind, groups)
    assert mine.described == theirs.described
    assert len({id(d) for d in mine.described.values()}) == 2
    assert mine.described["g0"].state == "Empty" and mine.described["g9"].state == "Dead"


def test_share_partitions_of_one_figure_share_one_record() -> None:
    partitions = [
        _OffsetsPartition(partition_index=p, start_offset=-1, leader_epoch=0, lag=-1, error_code=0, error_message=None)
        for p in range(10)
    ]
    topic = _OffsetsTopic(topic_name="queue", topic_id="00000000-0000-0000-0000-000000000001", partitions=partitions)
    groups = [_OffsetsGroup(group_id=f"q{n}", topics=[topic], error_code=0, error_message=None) for n in range(3)]
    theirs, mine = _share_offsets_both_ways(groups, 1)
    assert mine.share_offsets == theirs.share_offsets
    values = {id(v) for offsets in mine.share_offsets.values() for v in offsets.values()}
    assert len(values) == 1 and mine.share_offsets["q0"][TopicPartition("queue", 3)] == ShareOffset(None, None)


def test_a_v0_answers_lag_is_not_known() -> None:
    partition = _OffsetsPartition(
        partition_index=0, start_offset=40, leader_epoch=0, lag=12, error_code=0, error_message=None
    )
    topic = _OffsetsTopic(topic_name="queue", topic_id="00000000-0000-0000-0000-000000000001", partitions=[partition])
    group = _OffsetsGroup(group_id="q", topics=[topic], error_code=0, error_message=None)
    assert _share_offsets_both_ways([group], 1)[1].share_offsets == {
        "q": {TopicPartition("queue", 0): ShareOffset(40, 12)}
    }
    assert _share_offsets_both_ways([group], 0)[1].share_offsets == {"q": {TopicPartition("queue", 0): ShareOffset(40)}}


def _memberless_share(group_id: str) -> Any:
    return _Share(
        error_code=0,
        error_message=None,
        group_id=group_id,
        group_state="empty",
        group_epoch=1,
        assignment_epoch=1,
        assignor_name="simple",
        members=[],
        authorized_operations=_INT32_MIN,
    )


def test_unknown_tagged_fields_are_skipped() -> None:
    data = _encode(ShareGroupDescribeResponse, 1, 0, [_memberless_share("g")])
    assert data[-2:] == b"\x00\x00"  # the group's tagged fields, the answer's
    tagged = data[:-2] + b"\x02\x05\x02xy\x09\x00" + b"\x01\x00\x01z"  # tags 5 and 9 on the group, 0 on the answer
    theirs = ShareGroupDescribeResponse.decode(memoryview(tagged), version=1)
    assert [g.group_id for g in theirs.groups] == ["g"]  # (kafka-python reads it too)
    ours = decode_share_describe(tagged)
    assert [(g, e) for g, e, _, _ in ours.groups] == [("g", 0)]


_SAMPLES: dict[tuple[Any, int], bytes] = {
    (ShareGroupDescribeResponse, 1): _encode(ShareGroupDescribeResponse, 1, 0, [_memberless_share("group")]),
    (ConsumerGroupDescribeResponse, 0): _encode(
        ConsumerGroupDescribeResponse,
        0,
        0,
        [
            _Consumer(
                error_code=0,
                error_message=None,
                group_id="group",
                group_state="stable",
                group_epoch=1,
                assignment_epoch=1,
                assignor_name="uniform",
                members=[],
                authorized_operations=_INT32_MIN,
            )
        ],
    ),
    (StreamsGroupDescribeResponse, 0): _encode(
        StreamsGroupDescribeResponse,
        0,
        0,
        [
            _streams_group(
                [],
                [
                    _Subtopology(
                        subtopology_id="0",
                        source_topics=["t"],
                        repartition_sink_topics=[],
                        state_changelog_topics=[],
                        repartition_source_topics=[],
                    )
                ],
            )
        ],
    ),
    **{
        (DescribeShareGroupOffsetsResponse, v): _encode(
            DescribeShareGroupOffsetsResponse,
            v,
            0,
            [
                _OffsetsGroup(
                    group_id="group",
                    topics=[
                        _OffsetsTopic(
                            topic_name="t",
                            topic_id="00000000-0000-0000-0000-000000000001",
                            partitions=[
                                _OffsetsPartition(
                                    partition_index=0,
                                    start_offset=3,
                                    leader_epoch=0,
                                    lag=1,
                                    error_code=0,
                                    error_message=None,
                                )
                            ],
                        )
                    ],
                    error_code=0,
                    error_message=None,
                )
            ],
        )
        for v in (0, 1)
    },
}


@pytest.mark.parametrize("key", list(_SAMPLES), ids=lambda k: f"{k[0].__name__}-v{k[1]}")
def test_a_truncated_answer_is_a_value_error(key: tuple[Any, int]) -> None:
    data = _SAMPLES[key]
    decoder = DECODERS[key]
    decoder.decode(io.BytesIO(data))  # whole, it decodes
    name = key[0].__name__.removesuffix("Response")
    for cut in range(1, len(data)):
        with pytest.raises(ValueError, match=f"{name} v{key[1]}"):
            decoder.decode(io.BytesIO(data[:cut]))


@pytest.mark.parametrize("key", list(_SAMPLES), ids=lambda k: f"{k[0].__name__}-v{k[1]}")
def test_bytes_left_over_are_a_value_error(key: tuple[Any, int]) -> None:
    with pytest.raises(ValueError, match="left over"):
        DECODERS[key].decode(io.BytesIO(_SAMPLES[key] + b"\x00"))


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        (b"\x00\x00\x00\x00\x00", "null in a non-nullable compact array"),  # the groups: null
        (b"\x00\x00\x00\x00\x02\x00\x00\x00\x00", "null in a non-nullable compact string"),  # the group id: null
        (b"\x00\x00\x00\x00\x02\x00\x00\x00\x03\xff\xfe", "not UTF-8"),
    ],
)
def test_malformed_fields_are_a_value_error(bad: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        DECODERS[(ShareGroupDescribeResponse, 1)].decode(io.BytesIO(bad))
