"""One broker of two dies, on a real two-broker cluster: lagwatch goes on monitoring the rest.

The dead broker led partitions of a topic with one replica (offline now: Metadata gives leader -1) and coordinated
groups (their offsets topic has two replicas: the coordinators move). Before, each poll sent the offline
partitions' ListOffsets to node -1, which raised, and every poll failed for as long as the broker was down: no
lag for any group, and `cluster_unreachable` paged after a minute.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.devbroker import LocalBroker
from tests.conftest import KAFKA_VERSION, wait_for
from tests.multibroker import JoiningBroker

pytestmark = pytest.mark.kafka
TOPIC, PARTITIONS, GROUPS = "orders", 4, 10
SETTINGS = {
    "offsets.topic.replication.factor": "2",  # coordinators fail over to the broker left
    "broker.session.timeout.ms": "3000",  # the controller fences a dead broker after 3 s (9 by default)
    "broker.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[LocalBroker, JoiningBroker]]:
    with LocalBroker(kafka_version=KAFKA_VERSION, settings=SETTINGS) as first:
        second = JoiningBroker(first, 2, kafka_version=KAFKA_VERSION, settings=SETTINGS)
        second.start()
        try:
            yield first, second
        finally:
            second.stop()


def _leaders(admin: KafkaAdminClient) -> dict[int, int]:
    (topic,) = admin.describe_topics([TOPIC])
    return {p["partition_index"]: p["leader_id"] for p in topic.get("partitions", [])}


def test_one_broker_dies_and_the_rest_is_still_monitored(
    cluster: tuple[LocalBroker, JoiningBroker], tmp_path: Path
) -> None:
    first, second = cluster
    admin = KafkaAdminClient(bootstrap_servers=first.bootstrap)
    try:
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
        leaders = wait_for(
            lambda: (found := _leaders(admin)) and len(found) == PARTITIONS and min(found.values()) >= 1 and found,
            what="leaders of every partition",
        )
        assert set(leaders.values()) == {1, 2}, leaders  # each broker leads some
        producer = KafkaProducer(bootstrap_servers=first.bootstrap)
        for p in range(PARTITIONS):
            for _ in range(50):
                producer.send(TOPIC, b"x", partition=p)
        producer.flush()
        producer.close()
        offsets = {TopicPartition(TOPIC, p): OffsetAndMetadata(10, "", -1) for p in range(PARTITIONS)}
        for g in range(GROUPS):  # simple groups, 40 records behind on every partition
            wait_for(lambda g=g: _committed(admin, f"g{g}", offsets), what=f"g{g}'s commit")
    finally:
        admin.close()

    settings = load_settings(
        state_dir=tmp_path,
        http={"enabled": False},
        rules={"lag": {"warning": {"offsets": 20}, "for_s": 0}},
        alerts={"group_wait_s": 0},
    )
    config = ClusterConfig(
        bootstrap_servers=[first.bootstrap, second.bootstrap], request_timeout_s=5, exact_clocks=False
    )
    daemon = Daemon(settings, clusters={"c": config}, notifiers={}, reader_factory=None)
    runtime = daemon.clusters["c"]
    try:
        for _ in range(2):
            daemon.poll_cluster("c")
        lag_alerts = {k for k, a in daemon.book.alerts.items() if a.rule == "lag" and a.state == "firing"}
        assert len(lag_alerts) == GROUPS

        second.kill_now()
        orphaned = {TopicPartition(TOPIC, p) for p, leader in leaders.items() if leader == 2}
        good_after_kill = 0
        deadline = time.monotonic() + 60
        while good_after_kill < 3 and time.monotonic() < deadline:
            time.sleep(1)
            daemon.poll_cluster("c")
            # Not one lag alert resolved at any poll, nor anything else fired: the groups are as they were.
            states = {k: daemon.book.alerts[k].state for k in lag_alerts}
            assert set(states.values()) == {"firing"}, states
            assert not [a for a in daemon.book.alerts.values() if a.rule != "lag" and a.state == "firing"]
            latest = runtime.latest
            settled = (
                latest is not None
                and latest.ok
                and all(latest.partitions[tp].log_end is None for tp in orphaned)
                and all(g.error is None for g in latest.groups)  # the coordinators moved to the broker left
            )
            good_after_kill = good_after_kill + 1 if settled else 0
        assert good_after_kill == 3, "no three polls in a row read the cluster after its second broker died"
        latest = runtime.latest
        assert latest is not None
        assert {g.group_id for g in latest.groups if g.error is None} == {f"g{g}" for g in range(GROUPS)}
        for p in range(PARTITIONS):
            offsets_now = latest.partitions[TopicPartition(TOPIC, p)]
            if TopicPartition(TOPIC, p) in orphaned:
                assert offsets_now.log_end is None and offsets_now.error == "LeaderNotAvailableError"
            else:
                assert offsets_now.log_end == 50 and offsets_now.error is None
    finally:
        daemon.stop()


def _committed(admin: KafkaAdminClient, group: str, offsets: dict[TopicPartition, OffsetAndMetadata]) -> bool:
    try:
        errors = admin.alter_group_offsets(group, offsets)
    except Exception:  # the offsets topic is still being created on a fresh cluster
        return False
    return all(e.__name__ == "NoError" for e in errors.values())


def test_a_broker_that_cannot_list_its_groups_does_not_hide_the_others(
    cluster: tuple[LocalBroker, JoiningBroker], monkeypatch: pytest.MonkeyPatch
) -> None:
    """ListGroups failing on one broker (down, or too slow for the request timeout) while another answers: the
    groups lagwatch knows are read from their coordinators, and the poll goes on (it failed as a whole, and every
    other broker's groups with it)."""
    from lagwatch.collect import ClusterPoller
    from lagwatch.collect.wire import Wire

    first, second = cluster
    if not second.running:  # killed by the test before
        second.start()
    admin = KafkaAdminClient(bootstrap_servers=first.bootstrap)
    try:
        wait_for(lambda: len(admin.describe_cluster()["brokers"]) == 2, what="both brokers in the cluster")
        admin.create_topics([NewTopic("listing", 1, 1)])
        wait_for(lambda: _leaders_of(admin, "listing"), what="a leader of the topic")
        offsets = {TopicPartition("listing", 0): OffsetAndMetadata(0, "", -1)}
        groups = {f"listing-g{i}" for i in range(8)}  # their coordinators spread over the offsets topic's leaders
        for g in groups:
            wait_for(lambda g=g: _committed(admin, g, offsets), what=f"{g}'s commit")
    finally:
        admin.close()
    config = ClusterConfig(
        bootstrap_servers=[first.bootstrap], groups=NameFilter(include=["listing-.*"]), exact_clocks=False
    )
    poller = ClusterPoller("c", config)
    try:
        assert {g.group_id for g in poller.poll().groups} == groups
        real = Wire.list_groups

        async def list_groups(self: Wire, broker_ids: list[int]) -> object:
            """The broker that coordinates most of the groups times out; the other answers."""
            from kafka.errors import RequestTimedOutError

            by_broker = {b: (await real(self, [b]))[0] for b in broker_ids}
            busiest = max(by_broker, key=lambda b: sum(g.group_id in groups for g in by_broker[b]))
            lost.update(g.group_id for g in by_broker[busiest] if g.group_id in groups)
            listed = [g for b, gs in by_broker.items() if b != busiest for g in gs]
            return listed, {busiest: RequestTimedOutError()}

        lost: set[str] = set()

        monkeypatch.setattr(Wire, "list_groups", list_groups)
        snapshot = poller.poll()
        assert lost  # groups the failed listing left out
        assert snapshot.ok, snapshot.error
        assert {g.group_id for g in snapshot.groups if g.error is None} == groups
    finally:
        poller.close()


def _leaders_of(admin: KafkaAdminClient, topic: str) -> bool:
    (found,) = admin.describe_topics([topic])
    return bool(found.get("partitions")) and all(p["leader_id"] >= 1 for p in found["partitions"])


def test_a_broker_restarted_with_another_retention_is_read_again_at_once(
    cluster: tuple[LocalBroker, JoiningBroker],
) -> None:
    """offsets.retention.minutes changes only with a restart, and was read again only hourly: lowered, every expiry
    was missed (offsets deleted sooner looked deleted by hand, which pages nothing); raised, a false critical stayed
    up to an hour. A broker connected to anew (restarted, in a rolling restart that fails no poll) is read again."""
    from lagwatch.collect import ClusterPoller

    first, second = cluster
    if not second.running:
        second.start()
    admin = KafkaAdminClient(bootstrap_servers=first.bootstrap)
    try:  # a group to watch: its partitions' Metadata request tells the brokers of the cluster at every poll
        admin.create_topics([NewTopic("retained", 1, 1)])
        wait_for(lambda: _leaders_of(admin, "retained"), what="a leader of the topic")
        offsets = {TopicPartition("retained", 0): OffsetAndMetadata(0, "", -1)}
        wait_for(lambda: _committed(admin, "retained-g", offsets), what="the group's commit")
    finally:
        admin.close()
    config = ClusterConfig(
        bootstrap_servers=[first.bootstrap, second.bootstrap],
        request_timeout_s=5,
        exact_clocks=False,
        groups=NameFilter(include=["retained-g"]),
    )
    poller = ClusterPoller("c", config)
    try:

        def retention(broker: int) -> int | None:
            snapshot = poller.poll()
            return next((b.offsets_retention_minutes for b in snapshot.brokers if b.broker_id == broker), None)

        wait_for(lambda: retention(2) == 10080, what="broker 2's retention, read at the first poll")
        before = poller.poll().requests.get("DescribeConfigs", 0)
        assert before == 0  # not read again while nothing changed
        second.pause()  # a controlled stop, its data kept
        second.settings["offsets.retention.minutes"] = "45"
        second.start()
        wait_for(lambda: retention(2) == 45, timeout=60, what="broker 2's new retention, read once it is back")
    finally:
        poller.close()
