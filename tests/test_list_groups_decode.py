"""lagwatch's own ListGroups v3-5 decoder against kafka-python's: the same groups, protocol types, states and types
(empty read as None), and the same error, for any answer kafka-python can encode; malformed answers are a
ValueError."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import ListGroupsRequest, ListGroupsResponse

from lagwatch.collect.list_groups import DECODERS, OwnListGroupsRequest
from lagwatch.collect.list_groups_answer import ListedGroup, ListGroupsAnswer, decode
from tests.decode_checks import refuses_damage, sends_kafkas_bytes

Listed = ListGroupsResponse.ListedGroup
_names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=140)  # past 127 bytes too
_group = st.builds(
    lambda gid, ptype, state, kind: Listed(group_id=gid, protocol_type=ptype, group_state=state, group_type=kind),
    _names,
    st.one_of(st.sampled_from(["consumer", "", "connect"]), _names),
    st.one_of(st.sampled_from(["Empty", "Stable", "Dead", ""]), _names),
    st.sampled_from(["classic", "consumer", "share", "streams", ""]),
)


def _encode(groups: list[Any], version: int, throttle: int = 0, error: int = 0) -> bytes:
    response = ListGroupsResponse(throttle_time_ms=throttle, error_code=error, groups=groups)
    response._header = None
    return bytes(response.encode(version=version))


def _theirs(data: bytes, version: int) -> list[ListedGroup]:
    """As lagwatch.collect.wire built its records from kafka-python's objects."""
    response = ListGroupsResponse.decode(memoryview(data), version=version)
    return [
        ListedGroup(
            group_id=g.group_id,
            protocol_type=g.protocol_type or "",
            state=getattr(g, "group_state", None) or None,
            group_type=getattr(g, "group_type", None) or None,
        )
        for g in response.groups
    ]


@given(st.lists(_group, max_size=8), st.sampled_from([3, 4, 5]), st.integers(0, 9999), st.sampled_from([0, 0, 15, 29]))
@settings(max_examples=300, deadline=None)
def test_the_same_groups_as_kafka_python(groups: list[Any], version: int, throttle: int, error: int) -> None:
    data = _encode(groups, version, throttle, error)
    ours = decode(data, version)
    assert (ours.throttle_time_ms, ours.error_code) == (throttle, error)
    assert ours.groups == _theirs(data, version)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_the_fields_of_each_version(version: int) -> None:
    groups = [
        Listed(group_id="a", protocol_type="consumer", group_state="Empty", group_type="classic"),
        Listed(group_id="b" * 200, protocol_type="", group_state="", group_type="share"),
        Listed(group_id="c", protocol_type="consumer", group_state="Stable", group_type="consumer"),
    ]
    answer = decode(_encode(groups, version), version)
    assert [(g.group_id[:2], g.protocol_type, g.state, g.group_type) for g in answer.groups] == [
        ("a", "consumer", "Empty" if version >= 4 else None, "classic" if version >= 5 else None),
        ("bb", "", None, "share" if version >= 5 else None),
        ("c", "consumer", "Stable" if version >= 4 else None, "consumer" if version >= 5 else None),
    ]


@pytest.mark.parametrize("version", [3, 4, 5])
@pytest.mark.parametrize("cut", [1, 3, 7, 12])
def test_a_truncated_answer_is_a_value_error(version: int, cut: int) -> None:
    data = _encode(
        [Listed(group_id="group", protocol_type="consumer", group_state="Empty", group_type="classic")], version
    )
    refuses_damage(DECODERS[version], data, cut, f"ListGroups v{version}", ListGroupsAnswer)


@pytest.mark.parametrize("version", [3, 4, 5])
def test_the_request_is_kafka_pythons_and_its_answer_comes_here(version: int) -> None:
    """The request's bytes are kafka-python's own; only the answer's decoder differs, for versions 3 to 5."""
    sends_kafkas_bytes(OwnListGroupsRequest(), ListGroupsRequest(min_version=0), version, DECODERS[version])
