"""Real topics and consumer groups in each of the states lagwatch must report."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition, errors
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.structs import OffsetAndMetadata

from lagwatch.devbroker.jars import java_command
from tests.conftest import unique, wait_for


@dataclass
class Scenario:
    bootstrap: str
    topics: dict[str, int] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)  # role -> group id
    expected: dict[tuple[str, str, int], int | None] = field(default_factory=dict)  # (group, topic, p) -> committed
    consumers: list[KafkaConsumer] = field(default_factory=list)

    def close(self) -> None:
        for c in self.consumers:
            c.close()


def admin(bootstrap: str) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=bootstrap)


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Creates the topic and returns once every partition has a leader: a consumer that joins earlier gets no
    partition metadata, an empty assignment, and no rebalance until its next metadata refresh."""
    a = admin(bootstrap)
    try:
        a.create_topics([NewTopic(name, partitions, 1)])

        def ready() -> bool:
            (topic,) = a.describe_topics([name])
            led = [p for p in topic.get("partitions", []) if p.get("leader_id", -1) >= 0]
            return topic.get("error_code", 0) == 0 and len(led) == partitions

        wait_for(ready, timeout=30, interval=0.1, what=f"topic {name} to have leaders")
    finally:
        a.close()


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for partition, n in counts.items():
        for i in range(n):
            producer.send(topic, f"{topic}-{partition}-{i}".encode(), partition=partition)
    producer.flush()
    producer.close()


def commit(consumer: KafkaConsumer, offsets: dict[TopicPartition, int], timeout_s: float = 60) -> None:
    """Commits `offsets`; a subscribed consumer caught in a rebalance (under load, a metadata refresh can start
    one right after the join) polls to finish it and commits again.

    Bounded by time, not by tries: the broker holds a rejoin until every member it knows rejoins or its session
    ends (10 s for kafka-python's), and CI once saw twenty polls of 0.5 s end before it did."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in offsets.items()})
            return
        except (errors.RebalanceInProgressError, errors.CommitFailedError):
            if time.monotonic() > deadline:
                raise
            consumer.poll(1000)  # drives the rejoin; the records it returns are not needed


def subscribed_consumer(bootstrap: str, group: str, topics: list[str]) -> KafkaConsumer:
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        client_id=f"client-{group}",
        # Under load the first join can come before the client's metadata lists the new topic: it then gets no
        # partitions, and only a metadata refresh (5 min by default) triggers the rebalance that fixes it.
        metadata_max_age_ms=1000,
    )
    # The consumer must know the topics' partitions before it joins: the member that computes the assignment uses
    # its own metadata, and a join before that metadata lists the topic assigns nothing.
    for topic in topics:
        wait_for(lambda t=topic: consumer.partitions_for_topic(t), timeout=30, what=f"{group}: metadata of {topic}")
    consumer.subscribe(topics)
    for _ in range(3):
        try:
            wait_for(
                lambda: consumer.poll(100, max_records=1) is not None and consumer.assignment(),
                timeout=10,
                what=f"{group} assignment",
            )
            return consumer
        except AssertionError:
            consumer.unsubscribe()  # a join that assigned nothing: join again
            consumer.subscribe(topics)
    raise AssertionError(f"{group}: no partitions assigned after three joins")


def assigned_consumer(bootstrap: str, group: str, tps: list[TopicPartition]) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    consumer.assign(tps)
    return consumer


def build(bootstrap: str) -> Scenario:
    s = Scenario(bootstrap)
    orders, payments, audit = unique("orders"), unique("payments"), unique("audit")
    for topic, n in ((orders, 3), (payments, 2), (audit, 1)):
        create_topic(bootstrap, topic, n)
        s.topics[topic] = n
    produce(bootstrap, orders, {0: 40, 1: 30, 2: 20})
    produce(bootstrap, payments, {0: 15, 1: 25})
    produce(bootstrap, audit, {0: 30})

    def orders_p(p: int) -> TopicPartition:
        return TopicPartition(orders, p)

    def payments_p(p: int) -> TopicPartition:
        return TopicPartition(payments, p)

    # Active subscribed consumer with lag on two topics; it commits and then only heartbeats.
    g = s.groups["active"] = unique("active")
    c = subscribed_consumer(bootstrap, g, [orders, payments])
    wait_for(lambda: len(c.assignment()) == 5, what="active consumer owning 5 partitions")
    commit(c, {orders_p(0): 10, orders_p(1): 30, orders_p(2): 5, payments_p(0): 15, payments_p(1): 20})
    s.consumers.append(c)
    s.expected.update(
        {
            (g, orders, 0): 10,
            (g, orders, 1): 30,
            (g, orders, 2): 5,
            (g, payments, 0): 15,
            (g, payments, 1): 20,
        }
    )

    # Active consumer that has never committed on one of its partitions.
    g = s.groups["partly_committed"] = unique("partly")
    c = subscribed_consumer(bootstrap, g, [orders])
    wait_for(lambda: len(c.assignment()) == 3, what="consumer owning 3 partitions")
    commit(c, {orders_p(0): 40, orders_p(1): 12})
    s.consumers.append(c)
    s.expected.update({(g, orders, 0): 40, (g, orders, 1): 12, (g, orders, 2): None})

    # Stopped consumer: committed, then left. The group is Empty and lags.
    g = s.groups["stopped"] = unique("stopped")
    c = subscribed_consumer(bootstrap, g, [payments])
    commit(c, {payments_p(0): 3, payments_p(1): 4})
    c.close()
    s.expected.update({(g, payments, 0): 3, (g, payments, 1): 4})

    # Caught up: committed the log end, then left.
    g = s.groups["caught_up"] = unique("caughtup")
    c = subscribed_consumer(bootstrap, g, [orders])
    commit(c, {orders_p(0): 40, orders_p(1): 30, orders_p(2): 20})
    c.close()
    s.expected.update({(g, orders, 0): 40, (g, orders, 1): 30, (g, orders, 2): 20})

    # Simple group: assign() and commit, no group membership at all.
    g = s.groups["simple"] = unique("simple")
    c = assigned_consumer(bootstrap, g, [orders_p(2), payments_p(1)])
    commit(c, {orders_p(2): 7, payments_p(1): 25})
    c.close()
    s.expected.update({(g, orders, 2): 7, (g, payments, 1): 25})

    # Committed offset below the log start: the records it would resume from get deleted.
    g = s.groups["below_start"] = unique("belowstart")
    c = assigned_consumer(bootstrap, g, [TopicPartition(audit, 0)])
    commit(c, {TopicPartition(audit, 0): 5})
    c.close()
    a = admin(bootstrap)
    try:
        a.delete_records({TopicPartition(audit, 0): 20})
    finally:
        a.close()
    s.expected[(g, audit, 0)] = 5
    return s


def stopped_group(
    bootstrap: str, prefix: str, produced: dict[int, int], committed: dict[int, int], assign: bool = False
) -> tuple[str, str]:
    """Topic `<prefix>-t` with `produced` records per partition, and group `<prefix>-g` that committed `committed`
    and left: an Empty classic group, or with `assign` a simple group. Returns (topic, group)."""
    topic, group = f"{prefix}-t", f"{prefix}-g"
    create_topic(bootstrap, topic, len(produced))
    produce(bootstrap, topic, produced)
    tps = [TopicPartition(topic, p) for p in committed]
    c = assigned_consumer(bootstrap, group, tps) if assign else subscribed_consumer(bootstrap, group, [topic])
    commit(c, {TopicPartition(topic, p): o for p, o in committed.items()})
    c.close()
    return topic, group


def one_cluster(bootstrap: str, prefix: str) -> dict[str, Any]:
    """A daemon's `clusters` setting for the tests' groups `<prefix>-*`: one cluster, "test", polled every second."""
    cluster = {"bootstrap_servers": [bootstrap], "poll_interval_s": 1, "groups": {"include": [f"{prefix}-.*"]}}
    return {"test": {**cluster, "exact_clocks": False}}


def kip848_console_consumer(
    libs: Path, bootstrap: str, topic: str, group: str, *extra: str, max_messages: int | None = None
) -> list[str]:
    """The command line of Kafka's own console consumer in a KIP-848 group (`group.protocol=consumer`): kafka-python
    3 does not speak that protocol as a consumer. With `max_messages` it reads that many and leaves."""
    args = ["--bootstrap-server", bootstrap, "--topic", topic, "--group", group, "--from-beginning"]
    if max_messages is not None:
        args += ["--max-messages", str(max_messages)]
    properties = ["group.protocol=consumer", "auto.commit.interval.ms=200", *extra]
    for prop in properties:
        args += ["--consumer-property", prop]
    return java_command(libs, "org.apache.kafka.tools.consumer.ConsoleConsumer", *args)


def run_kip848_group(libs: Path, bootstrap: str, topic: str, group: str, records: int) -> None:
    """A KIP-848 group that reads `records` records, commits and leaves."""
    subprocess.run(
        kip848_console_consumer(libs, bootstrap, topic, group, max_messages=records),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
        check=True,
    )


def streams_libs(version: str) -> Path:
    """kafka-streams `version` and what it needs beyond the broker's jars, fetched with Maven once (cached)."""
    from lagwatch.devbroker.jars import cache_root

    libs = cache_root() / "kafka-streams" / version / "libs"
    if (libs.parent / ".complete").exists():
        return libs
    libs.parent.mkdir(parents=True, exist_ok=True)
    pom = libs.parent / "pom.xml"
    pom.write_text(
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>io.lagwatch.tests</groupId><artifactId>streams-app</artifactId><version>1</version>"
        "<packaging>pom</packaging><dependencies><dependency><groupId>org.apache.kafka</groupId>"
        f"<artifactId>kafka-streams</artifactId><version>{version}</version></dependency></dependencies></project>"
    )
    subprocess.run(
        ["mvn", "-B", "-q", "-f", str(pom), "dependency:copy-dependencies", f"-DoutputDirectory={libs}"],
        check=True,
        timeout=300,
    )
    (libs.parent / ".complete").write_text("ok\n")
    return libs


def streams_app(
    libs: Path, streams: Path, bootstrap: str, app_id: str, topic: str, sleep_ms: int, hang_after: int = 0
) -> list[str]:
    """The command line of tests/clients/WordApp.java: a Kafka Streams application in a KIP-1071 streams group;
    with `hang_after`, its stream thread blocks for good in that record."""
    source = Path(__file__).parent / "clients" / "WordApp.java"
    return [
        *("java", "-Xmx256m", "-cp", f"{libs}/*:{streams}/*", str(source)),
        *(bootstrap, app_id, topic, str(sleep_ms), "-", str(hang_after)),
    ]


# -- share groups (KIP-932) ------------------------------------------------------------------------------------


def enable_share_groups(libs: Path, bootstrap: str, version: str) -> None:
    """Share groups are off by default before Kafka 4.2: switched on as documented (kafka-features, share.version=1)."""
    from lagwatch.devbroker import run_kafka_tool

    if tuple(int(x) for x in version.split(".")[:2]) >= (4, 2):
        return
    feature = ("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bootstrap)
    described = run_kafka_tool(libs, *feature, "describe")
    if not any("share.version" in line and "FinalizedVersionLevel: 1" in line for line in described.splitlines()):
        run_kafka_tool(libs, *feature, "upgrade", "--feature", "share.version=1")


def group_config(bootstrap: str, group: str, configs: dict[str, str]) -> None:
    """A group's own settings (a share group's share.auto.offset.reset, a streams group's
    streams.session.timeout.ms): an alter of the GROUP config resource, which may precede the group."""
    from kafka.admin import ConfigResource, ConfigResourceType

    client = admin(bootstrap)
    try:
        client.alter_configs([ConfigResource(ConfigResourceType.GROUP, group, configs=configs)], raise_on_unknown=False)
    finally:
        client.close()


def console_share_consumer(libs: Path, bootstrap: str, topic: str, group: str, *extra: str) -> None:
    """Kafka's own console share consumer in `group`: reads what it is given (`--max-messages N`, or until
    `--timeout-ms`) and leaves."""
    command = java_command(
        libs,
        "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
        *("--bootstrap-server", bootstrap, "--topic", topic, "--group", group, *extra),
    )
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)


def queue_worker(libs: Path, bootstrap: str, group: str, topic: str, sleep_ms: int, hang_after: int = 0) -> list[str]:
    """The command line of tests/clients/QueueWorker.java: a share consumer that accepts each record after
    `sleep_ms`, and with `hang_after` stops polling after that many records, holding the ones it acquired."""
    source = Path(__file__).parent / "clients" / "QueueWorker.java"
    return [
        "java",
        "-Xmx128m",
        "-cp",
        f"{libs}/*",
        str(source),
        bootstrap,
        group,
        topic,
        str(sleep_ms),
        str(hang_after),
    ]
