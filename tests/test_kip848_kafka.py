"""A KIP-848 consumer group (group.protocol=consumer, Kafka 4): kind, state, members and offsets."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter
from lagwatch.devbroker.jars import java_command, kafka_major
from lagwatch.model import GroupKind, GroupSnapshot
from tests import kafka_scenario
from tests.conftest import KAFKA_VERSION, unique, wait_for
from tests.test_collect_kafka import kafka_describe

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(kafka_major(KAFKA_VERSION) < 4, reason="KIP-848 groups need Kafka 4"),
]


def _once_committed(poller: ClusterPoller, group: str, records: int, what: str) -> GroupSnapshot:
    """The group as polled once its members have committed `records` in all."""

    def consumed_all() -> GroupSnapshot | None:
        g = next((g for g in poller.poll().groups if g.group_id == group), None)
        done = g is not None and g.members and sum(c.offset for c in g.committed.values()) == records
        return g if done else None

    found: GroupSnapshot = wait_for(consumed_all, timeout=90, interval=0.5, what=what)
    return found


def test_kip848_group_members_and_offsets(bootstrap: str, kafka_libs: Path) -> None:
    topic, group = unique("k848"), unique("k848g")
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.produce(bootstrap, topic, {0: 50, 1: 50})
    consumer = subprocess.Popen(
        kafka_scenario.kip848_console_consumer(kafka_libs, bootstrap, topic, group, "client.id=k848-client"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    poller = ClusterPoller("k848", ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[group])))
    try:
        g = _once_committed(poller, group, 100, "the KIP-848 consumer to commit every record")
        assert g.kind is GroupKind.CONSUMER and g.state == "Stable" and g.error is None
        (member,) = g.members
        assert member.client_id == "k848-client"
        assert sorted(member.assignment) == [(topic, 0), (topic, 1)]
        assert member.subscribed_topics == (topic,)
        theirs = kafka_describe(kafka_libs, bootstrap, [group])
        assert {(t, p): int(cur) for (_, t, p), (cur, _, _) in theirs.items()} == {
            tp: c.offset for tp, c in g.committed.items()
        }
    finally:
        consumer.terminate()
        consumer.wait(30)
        poller.close()


def test_kip848_regex_subscriber_reads_its_pattern(bootstrap: str, kafka_libs: Path) -> None:
    """A member subscribed by a server-side pattern lists no topic names: lagwatch reads the pattern, so the
    topics it matches count as subscribed (Kafka keeps their offsets) even where no member holds a partition."""
    prefix = unique("rx")
    topics = [f"{prefix}-a", f"{prefix}-b"]
    group = unique("rxg")
    for topic in topics:
        kafka_scenario.create_topic(bootstrap, topic, 1)
        kafka_scenario.produce(bootstrap, topic, {0: 20})
    pattern = f"{prefix}-.*"
    source = Path(__file__).parent / "clients" / "RegexConsumer.java"
    consumer = subprocess.Popen(
        java_command(kafka_libs, str(source), bootstrap, group, pattern),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    poller = ClusterPoller("rx", ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[group])))
    try:
        g = _once_committed(poller, group, 40, "the pattern subscriber to commit every record")
        assert g.kind is GroupKind.CONSUMER and g.error is None
        (member,) = g.members
        assert member.subscribed_topics == () and member.subscribed_regex == pattern
        assert sorted(tp.topic for tp in member.assignment) == topics
        between_members = replace(g, members=(replace(member, assignment=()),))
        assert between_members.unsubscribed(g.committed) == []
    finally:
        consumer.terminate()
        consumer.wait(30)
        poller.close()
