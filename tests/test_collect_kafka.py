"""The collector against a real broker: figures equal Kafka's own kafka-consumer-groups, requests are batched."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter
from lagwatch.devbroker import run_kafka_tool
from lagwatch.lag import LagState, group_lag
from lagwatch.model import GroupKind
from tests import kafka_scenario
from tests.conftest import run_lagwatch, unique

pytestmark = pytest.mark.kafka
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


@pytest.fixture(scope="module")
def scenario(bootstrap: str) -> Iterator[kafka_scenario.Scenario]:
    s = kafka_scenario.build(bootstrap)
    yield s
    s.close()


def _group_regex(s: kafka_scenario.Scenario) -> str:
    return "|".join(s.groups.values())


def kafka_describe(libs: Path, bootstrap: str, groups: list[str]) -> dict[tuple[str, str, int], tuple[str, str, str]]:
    """(group, topic, partition) -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG) as kafka-consumer-groups prints them."""
    args = ["--bootstrap-server", bootstrap, "--describe"]
    for g in groups:
        args += ["--group", g]
    rows = {}
    for line in run_kafka_tool(libs, CONSUMER_GROUP_COMMAND, *args).splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[0] in groups and fields[2].isdigit():
            rows[(fields[0], fields[1], int(fields[2]))] = (fields[3], fields[4], fields[5])
    return rows


def test_check_json_equals_kafka_consumer_groups(scenario: kafka_scenario.Scenario, kafka_libs: Path) -> None:
    done = run_lagwatch(
        "check",
        "--bootstrap-server",
        scenario.bootstrap,
        "--group",
        _group_regex(scenario),
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    ours = {(r["group"], r["topic"], r["partition"]): r for r in json.loads(done.stdout)}
    theirs = kafka_describe(kafka_libs, scenario.bootstrap, list(scenario.groups.values()))

    assert set(ours) == set(theirs) == set(scenario.expected)
    for key, (current, log_end, lag) in theirs.items():
        row = ours[key]
        assert row["committed_offset"] == (None if current == "-" else int(current)), key
        assert row["log_end_offset"] == int(log_end), key
        assert row["lag"] == (None if lag == "-" else int(lag)), key
        assert row["committed_offset"] == scenario.expected[key], key
        assert row["cluster"] == "default" and row["group_state"] in ("Stable", "Empty")


def test_snapshot_states_and_kinds(scenario: kafka_scenario.Scenario) -> None:
    config = ClusterConfig(bootstrap_servers=[scenario.bootstrap], groups=NameFilter(include=[_group_regex(scenario)]))
    poller = ClusterPoller("test", config)
    try:
        snapshot = poller.poll()
    finally:
        poller.close()
    assert snapshot.ok, snapshot.error
    groups = {g.group_id: g for g in snapshot.groups}
    lags = {g.group_id: group_lag(g, snapshot.partitions) for g in snapshot.groups}
    ids = scenario.groups

    active = groups[ids["active"]]
    assert (active.state, active.kind, len(active.members)) == ("Stable", GroupKind.CLASSIC, 1)
    assert lags[ids["active"]].sum_lag == (40 - 10) + 0 + (20 - 5) + 0 + (25 - 20)
    assert {t.topic: t.sum_lag for t in lags[ids["active"]].topics} == {
        next(t for t in scenario.topics if t.startswith("orders")): 45,
        next(t for t in scenario.topics if t.startswith("payments")): 5,
    }
    assert lags[ids["active"]].max_lag == 30

    partly = lags[ids["partly_committed"]]
    uncommitted = [p for p in partly.partitions if p.state is LagState.NO_COMMIT]
    assert len(uncommitted) == 1 and uncommitted[0].lag is None and uncommitted[0].member_id

    stopped = groups[ids["stopped"]]
    assert (stopped.state, stopped.kind, stopped.members) == ("Empty", GroupKind.CLASSIC, ())
    assert lags[ids["stopped"]].sum_lag == (15 - 3) + (25 - 4)

    assert lags[ids["caught_up"]].sum_lag == 0 and lags[ids["caught_up"]].max_lag == 0
    assert groups[ids["simple"]].kind is GroupKind.SIMPLE and groups[ids["simple"]].protocol_type == ""

    below = lags[ids["below_start"]].partitions[0]
    assert below.state is LagState.BELOW_LOG_START
    assert (below.committed, below.log_start, below.log_end, below.lag) == (5, 20, 30, 25)

    assert [b.offsets_retention_minutes for b in snapshot.brokers] == [10080]
    assert [b.offsets_retention_check_interval_ms for b in snapshot.brokers] == [600000]


def _requests_for(bootstrap: str, pattern: str) -> dict[str, int]:
    """The requests of a poll in the steady state. The first poll also finds coordinators and reads broker
    settings; the second also looks, once, at the short tails of idle logs (transaction markers): one Fetch per
    partition leader, whatever the number of groups."""
    poller = ClusterPoller("count", ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[pattern])))
    try:
        poller.poll()
        looked = poller.poll()
        snapshot = poller.poll()
    finally:
        poller.close()
    assert snapshot.ok, snapshot.error
    assert looked.requests.get("Fetch", 0) <= 1  # one broker: one leader
    return dict(snapshot.requests)


def test_requests_per_poll_do_not_grow_with_groups(bootstrap: str) -> None:
    topic = unique("many")
    kafka_scenario.create_topic(bootstrap, topic, 4)
    kafka_scenario.produce(bootstrap, topic, {p: 5 for p in range(4)})
    prefix = unique("batch")
    from kafka import TopicPartition

    for i in range(60):
        c = kafka_scenario.assigned_consumer(bootstrap, f"{prefix}-{i:03d}", [TopicPartition(topic, i % 4)])
        kafka_scenario.commit(c, {TopicPartition(topic, i % 4): i % 5})
        c.close()
    few = _requests_for(bootstrap, f"{prefix}-00[0-4]")
    many = _requests_for(bootstrap, f"{prefix}-.*")
    assert few == many, (few, many)
    # One broker: one coordinator and one leader.
    assert many == {"ListGroups": 1, "DescribeGroups": 1, "OffsetFetch": 1, "Metadata": 1, "ListOffsets": 2}


def test_topic_filter_and_group_filter(scenario: kafka_scenario.Scenario) -> None:
    orders = next(t for t in scenario.topics if t.startswith("orders"))
    config = ClusterConfig(
        bootstrap_servers=[scenario.bootstrap],
        groups=NameFilter(include=[_group_regex(scenario)], exclude=[scenario.groups["simple"]]),
        topics=NameFilter(include=["orders-.*"]),
    )
    poller = ClusterPoller("filtered", config)
    try:
        snapshot = poller.poll()
    finally:
        poller.close()
    ids = {g.group_id for g in snapshot.groups}
    assert scenario.groups["simple"] not in ids and scenario.groups["active"] in ids
    assert {tp.topic for tp in snapshot.partitions} == {orders}
    assert all(tp.topic == orders for g in snapshot.groups for tp in g.committed)
    # The active group's member is assigned payments too: left out, not shown as `no_commit` with offsets unknown.
    active = next(g for g in snapshot.groups if g.group_id == scenario.groups["active"])
    assert active.members and {tp.topic for m in active.members for tp in m.assignment} == {orders}
    assert {row.topic for row in group_lag(active, snapshot.partitions).partitions} == {orders}


def test_check_table_output(scenario: kafka_scenario.Scenario) -> None:
    done = run_lagwatch("check", "--bootstrap-server", scenario.bootstrap, "--group", scenario.groups["stopped"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:7] == ["GROUP", "STATE", "TOPIC", "PARTITION", "COMMITTED", "LOG-END", "LAG"]
    assert any(ln.startswith(scenario.groups["stopped"]) and " 12 " in f" {ln} " for ln in lines)
    assert f"{scenario.groups['stopped']}: classic, Empty, 0 members, total lag 33, max 21" in done.stdout


def test_legacy_offset_fetch_one_request_per_group(
    scenario: kafka_scenario.Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Brokers before 3.0 have no batched OffsetFetch: lagwatch falls back to one per group, same figures."""
    from kafka.protocol.consumer import OffsetFetchRequest

    from lagwatch.collect import wire

    config = ClusterConfig(bootstrap_servers=[scenario.bootstrap], groups=NameFilter(include=[_group_regex(scenario)]))
    batched = ClusterPoller("batched", config)
    expected = batched.poll()
    batched.close()

    real_api_version = wire.Wire.api_version

    def pretend_old_broker(self: wire.Wire, request_cls: object) -> int:
        return 7 if request_cls is OffsetFetchRequest else real_api_version(self, request_cls)

    monkeypatch.setattr(wire.Wire, "api_version", pretend_old_broker)
    legacy = ClusterPoller("legacy", config)
    snapshot = legacy.poll()
    legacy.close()
    assert snapshot.ok, snapshot.error
    assert snapshot.requests["OffsetFetch"] == len(scenario.groups) == 6
    assert {g.group_id: dict(g.committed) for g in snapshot.groups} == {
        g.group_id: dict(g.committed) for g in expected.groups
    }


def test_offset_fetch_in_parts_for_a_coordinator_of_many_groups(
    scenario: kafka_scenario.Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From 2 x OFFSET_FETCH_PART_MIN groups a coordinator's OffsetFetch goes in parts, every other one on the side
    connection (the broker works on two at once): the same offsets and errors as one request, every group read.
    More parts than a connection takes in flight go in rounds, on the side connection too (the sixth request sent
    at once failed its groups), at the first poll (the side connection still connecting) and later ones."""
    from lagwatch.collect import client, wire

    config = ClusterConfig(bootstrap_servers=[scenario.bootstrap], groups=NameFilter(include=[_group_regex(scenario)]))
    whole = ClusterPoller("whole", config)
    expected = whole.poll()
    whole.close()
    assert expected.requests["OffsetFetch"] == 1
    wanted = {g.group_id: (dict(g.committed), g.error) for g in expected.groups}
    assert len(wanted) == 6 and sum(1 for c, _ in wanted.values() if c) >= 4

    monkeypatch.setattr(wire, "OFFSET_FETCH_PART_MIN", 1)
    monkeypatch.setattr(wire, "OFFSET_FETCH_PARTS", 6)  # the scenario's 6 groups: one a part, 3 on each connection
    options = client.admin_client_options
    monkeypatch.setattr(  # 2 in flight a connection: the 3 parts on each take two rounds
        client,
        "admin_client_options",
        lambda name, cluster: {**options(name, cluster), "max_in_flight_requests_per_connection": 2},
    )
    parts = ClusterPoller("parts", config)
    try:
        for _ in range(3):
            snapshot = parts.poll()
            assert snapshot.ok, snapshot.error
            assert snapshot.requests["OffsetFetch"] == 6
            assert {g.group_id: (dict(g.committed), g.error) for g in snapshot.groups} == wanted
        side = dict(parts._admin._manager.lagwatch_side_connections)
    finally:
        parts.close()
    assert list(side) == [next(iter(parts._coordinators.values()))]  # the side parts' connection


def test_exact_lag_seconds_from_the_record_timestamp(bootstrap: str) -> None:
    """Exact mode reads the timestamp of the record at the committed offset: right on the very first poll."""
    import time

    from kafka import KafkaProducer, TopicPartition

    from lagwatch.history import ClusterHistory, measure_group

    topic, group = unique("exact"), unique("exactg")
    kafka_scenario.create_topic(bootstrap, topic, 1)
    hour_ago_ms = int((time.time() - 3600) * 1000)
    producer = KafkaProducer(bootstrap_servers=bootstrap, batch_size=300, linger_ms=0)
    for i in range(40):  # one record a second, an hour ago
        producer.send(topic, b"x" * 40, partition=0, timestamp_ms=hour_ago_ms + i * 1000)
    producer.flush()
    producer.close()
    c = kafka_scenario.assigned_consumer(bootstrap, group, [TopicPartition(topic, 0)])
    kafka_scenario.commit(c, {TopicPartition(topic, 0): 25})
    c.close()
    config = ClusterConfig(
        bootstrap_servers=[bootstrap], groups=NameFilter(include=[group]), exact_lag_seconds_above=10
    )
    poller = ClusterPoller("exact", config)
    snapshot = poller.poll()
    poller.close()
    assert snapshot.ok and snapshot.requests["Fetch"] == 1
    assert snapshot.record_times[(TopicPartition(topic, 0), 25)] == (hour_ago_ms + 25_000) / 1000
    (g,) = snapshot.groups
    history = ClusterHistory("exact")
    history.observe(snapshot)
    measure = measure_group(
        group_lag(g, snapshot.partitions),
        history,
        snapshot.taken_at,
        snapshot.taken_at - 600,
        snapshot.record_times,
    )
    (p,) = measure.partitions
    assert p.lag_time.exact and abs(p.lag_time.seconds - (snapshot.taken_at - (hour_ago_ms / 1000 + 25))) < 1e-6  # type: ignore[operator]


def test_a_consumer_committed_below_a_transaction_marker_has_nothing_to_consume(bootstrap: str) -> None:
    """A transactional producer's records end with a commit marker no consumer receives: a consumer that took
    every record and committed past the last one stays one offset below the log end (kafka-consumer-groups says
    LAG 1, for ever). Once the log is idle, the poll looks at that tail and finds only the marker: lag 0. A
    group one real record behind still lags, as kafka-consumer-groups counts it (the record and the marker)."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.structs import TopicPartition as KafkaTP

    topic, done_group, behind_group = unique("txn"), unique("txn-done"), unique("txn-behind")
    kafka_scenario.create_topic(bootstrap, topic, 1)
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=unique("tx"))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(10):
        producer.send(topic, f"r{i}".encode(), partition=0)
    producer.commit_transaction()
    producer.close()
    for group, offset in ((done_group, 10), (behind_group, 9)):  # 10 records at 0-9, the marker at 10
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
        kafka_scenario.commit(consumer, {KafkaTP(topic, 0): offset})
        consumer.close()
    poller = ClusterPoller(
        "c", ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[done_group, behind_group]))
    )
    try:
        first, second, third = poller.poll(), poller.poll(), poller.poll()
    finally:
        poller.close()

    def lags(snapshot):  # type: ignore[no-untyped-def]
        return {
            g.group_id: [(p.lag, p.state) for p in group_lag(g, snapshot.partitions).partitions]
            for g in snapshot.groups
        }

    (tp,) = second.partitions
    assert first.partitions[tp].log_end == 11 and first.partitions[tp].consumable_end is None
    assert lags(first) == {done_group: [(1, LagState.OK)], behind_group: [(2, LagState.OK)]}  # not looked yet
    assert second.partitions[tp].consumable_end == 10 and second.requests.get("Fetch") == 1
    assert lags(second) == {done_group: [(0, LagState.OK)], behind_group: [(2, LagState.OK)]}
    assert third.partitions[tp].consumable_end == 10 and "Fetch" not in third.requests  # once per log end
