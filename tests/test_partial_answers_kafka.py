"""Answers that leave something out, on a real broker: groups ListGroups does not list, groups or partitions that
no broker can answer for this poll. What cannot be read is unknown (its alerts held), never gone, and never takes
the rest of the poll with it.

A broker paused longer than its session (a GC pause, a frozen VM) is fenced; for a few seconds after it comes back,
ListGroups answers without error and without a single group, while the groups' coordinator answers
NOT_COORDINATOR (measured on Kafka 4.1.2: 0 of 10,000 groups listed for 4-5 s, then COORDINATOR_LOAD_IN_PROGRESS).
Taken at its word, every group was gone: `expired` paged for each, every lag alert resolved, and all of it paged
again at the next poll. The faults are injected where the fenced broker makes them, in ListGroups' answer and in
the coordinator's; everything else is the real broker's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kafka.errors as Errors
import pytest
from kafka import TopicPartition

from lagwatch.collect import ClusterPoller
from lagwatch.collect.wire import GroupAnswers, Wire
from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.model import ClusterSnapshot
from tests import kafka_scenario
from tests.conftest import unique

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def groups(bootstrap: str) -> Iterator[tuple[str, list[str]]]:
    """Four groups on one topic, each committed below the log end: (topic, group ids)."""
    prefix = unique("unlisted")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.produce(bootstrap, topic, {0: 30, 1: 30})
    ids = [f"{prefix}-g{i}" for i in range(4)]
    for i, group in enumerate(ids):
        consumer = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
        kafka_scenario.commit(consumer, {TopicPartition(topic, 0): 5 + i, TopicPartition(topic, 1): 3})
        consumer.close()
    yield topic, ids


def _poller(bootstrap: str, ids: list[str]) -> ClusterPoller:
    return ClusterPoller("test", ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=ids)))


def _listing_without(monkeypatch: pytest.MonkeyPatch, left_out: set[str]) -> None:
    """ListGroups answers as a fenced broker does: without error, and without these groups."""
    real = Wire.list_groups

    async def list_groups(self: Wire, broker_ids: list[int]) -> Any:
        listed, failed = await real(self, broker_ids)
        return [g for g in listed if g.group_id not in left_out], failed

    monkeypatch.setattr(Wire, "list_groups", list_groups)


def _coordinator_refuses(monkeypatch: pytest.MonkeyPatch, refused: set[str], error: type[Exception]) -> list[int]:
    """The coordinator answers `error` for these groups (every attempt); returns a list that counts the reads."""
    real, reads = Wire.read_groups, []

    async def read_groups(self: Wire, by_coordinator: Any, kip848: set[str], answers: GroupAnswers) -> None:
        await real(self, by_coordinator, kip848, answers)
        reads.append(1)
        for group_id in refused & {g for ids in by_coordinator.values() for g in ids}:
            answers.described.pop(group_id, None)
            answers.committed.pop(group_id, None)
            answers.errors[group_id] = error()

    monkeypatch.setattr(Wire, "read_groups", read_groups)
    return reads


def _by_id(snapshot: ClusterSnapshot) -> dict[str, Any]:
    assert snapshot.ok, snapshot.error
    return {g.group_id: g for g in snapshot.groups}


def test_a_group_the_coordinator_cannot_read_leaves_the_others_read(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A coordinator moving or loading for one group (a rolling restart): that group is unreadable, after one more
    try, and every other group is read. The poll failed as a whole with a TypeError, and `cluster_unreachable`
    paged for as long as a coordinator moved."""
    topic, ids = groups
    reads = _coordinator_refuses(monkeypatch, {ids[1]}, Errors.NotCoordinatorError)
    poller = _poller(bootstrap, ids)
    try:
        found = _by_id(poller.poll())
    finally:
        poller.close()
    assert len(reads) == 2  # the refused group was tried again once, within the poll
    assert "NotCoordinator" in (found[ids[1]].error or "")
    for i in (0, 2, 3):
        assert found[ids[i]].error is None
        assert found[ids[i]].committed[(topic, 0)].offset == 5 + i


def test_groups_left_out_of_the_listing_are_read_from_their_coordinator(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    topic, ids = groups
    poller = _poller(bootstrap, ids)
    try:
        first = _by_id(poller.poll())
        assert set(first) == set(ids)
        _listing_without(monkeypatch, set(ids))  # the whole listing empty, as the fenced broker answered
        found = _by_id(poller.poll())
        assert set(found) == set(ids)  # not one taken for gone
        for i, group_id in enumerate(ids):
            assert found[group_id].error is None
            assert found[group_id].committed[(topic, 0)].offset == 5 + i
            assert found[group_id].state == first[group_id].state == "Empty"
            assert found[group_id].kind is first[group_id].kind
    finally:
        poller.close()


def test_unlisted_groups_the_coordinator_cannot_answer_for_are_unreadable_not_gone(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fenced broker's own answer: no group listed, and NOT_COORDINATOR for each."""
    _, ids = groups
    poller = _poller(bootstrap, ids)
    try:
        poller.poll()
        _listing_without(monkeypatch, set(ids))
        _coordinator_refuses(monkeypatch, set(ids), Errors.NotCoordinatorError)
        found = _by_id(poller.poll())
        assert set(found) == set(ids)
        assert all("NotCoordinator" in (g.error or "") for g in found.values())
        found = _by_id(poller.poll())  # still asked at the next poll: not forgotten once unreadable
        assert set(found) == set(ids)
    finally:
        poller.close()


def test_a_deleted_group_left_out_of_the_listing_is_gone(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its coordinator's word (GROUP_ID_NOT_FOUND) makes an unlisted group gone, and only that."""
    topic, _ = groups
    prefix = unique("deleted")
    doomed, kept = f"{prefix}-doomed", f"{prefix}-kept"
    for group in (doomed, kept):
        consumer = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
        kafka_scenario.commit(consumer, {TopicPartition(topic, 0): 7})
        consumer.close()
    poller = _poller(bootstrap, [doomed, kept])
    try:
        assert set(_by_id(poller.poll())) == {doomed, kept}
        admin = kafka_scenario.admin(bootstrap)
        try:
            assert admin.delete_groups([doomed]) == {doomed: "OK"}
        finally:
            admin.close()
        _listing_without(monkeypatch, {doomed, kept})
        assert set(_by_id(poller.poll())) == {kept}
        assert set(_by_id(poller.poll())) == {kept}  # and it is not asked of again
    finally:
        poller.close()


def test_a_restarted_daemon_asks_for_the_groups_its_history_knows(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """lagwatch restarted while the broker lists nothing: the groups of its saved history are asked of their
    coordinator at the first poll (forgotten, they all vanished at once: `expired` for every one)."""
    _, ids = groups

    def daemon() -> Daemon:
        settings = load_settings(state_dir=tmp_path, http={"enabled": False})
        cluster = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=ids), exact_clocks=False)
        return Daemon(settings, clusters={"c": cluster}, notifiers={}, reader_factory=None)

    first = daemon()
    try:
        first.poll_cluster("c")
        assert set(first.clusters["c"].history.groups) == set(ids)
    finally:
        first.stop()
    _listing_without(monkeypatch, set(ids))
    second = daemon()
    try:
        second.poll_cluster("c")
        latest = second.clusters["c"].latest
        assert latest is not None and {g.group_id for g in latest.groups} == set(ids)
        history = second.clusters["c"].history
        assert all(history.groups[g].gone_since is None and history.groups[g].vanished is None for g in ids)
    finally:
        second.stop()


def test_a_partition_without_a_leader_leaves_the_rest_of_the_poll_read(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata gives leader -1 for an offline partition (its replicas' brokers down, an election under way). The
    request for it raised in kafka-python (UnknownBrokerIdError: -1) and failed the whole poll, every group's lag
    with it, for as long as the partition was offline: it is now unknown (its alerts held), and the rest read."""
    topic, ids = groups
    offline = TopicPartition(topic, 1)
    real = Wire.partition_leaders

    async def partition_leaders(self: Wire, topics: list[str]) -> Any:
        leaders, errors = await real(self, topics)
        return {tp: (-1 if tp == offline else leader) for tp, leader in leaders.items()}, errors

    monkeypatch.setattr(Wire, "partition_leaders", partition_leaders)
    poller = _poller(bootstrap, ids)
    try:
        snapshot = poller.poll()
    finally:
        poller.close()
    assert snapshot.ok, snapshot.error
    assert snapshot.partitions[offline].log_end is None
    assert snapshot.partitions[offline].error == "LeaderNotAvailableError"
    assert snapshot.partitions[(topic, 0)].log_end == 30 and snapshot.partitions[(topic, 0)].error is None
    assert all(g.error is None and g.committed[(topic, 1)].offset == 3 for g in snapshot.groups)


def test_a_coordinator_the_client_does_not_know_leaves_the_other_groups_read(
    bootstrap: str, groups: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """FindCoordinator naming a broker the client's metadata does not have yet (a broker just added): the requests
    to it fail on their own, the group is unreadable, and the other groups are read (the send raised and failed
    the poll)."""
    topic, ids = groups
    real = Wire.find_coordinators

    async def find_coordinators(self: Wire, group_ids: list[str]) -> Any:
        found, failed = await real(self, group_ids)
        return {g: (99 if g == ids[2] else node) for g, node in found.items()}, failed

    monkeypatch.setattr(Wire, "find_coordinators", find_coordinators)
    poller = _poller(bootstrap, ids)
    try:
        found = _by_id(poller.poll())
    finally:
        poller.close()
    assert "UnknownBrokerId" in (found[ids[2]].error or "")
    for i in (0, 1, 3):
        assert found[ids[i]].error is None and found[ids[i]].committed[(topic, 0)].offset == 5 + i
