"""Share groups (KIP-932, Kafka 4.1+) on the real broker: this lagwatch does not read their lag yet, and says so,
once, in the log, in /api/v1/clusters and in a metric, rather than leaving a work queue's consumers unwatched
without a word (`check` listed only the classic group beside a share group that `kafka-share-groups` showed)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from lagwatch.collect import ClusterPoller
from lagwatch.config import ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.serve import views
from tests import kafka_scenario
from tests.conftest import KAFKA_VERSION, unique, wait_for

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.skipif(
        tuple(int(x) for x in KAFKA_VERSION.split(".")[:2]) < (4, 1), reason="share groups need Kafka 4.1+"
    ),
]


def test_share_groups_are_said_unwatched_once(
    bootstrap: str, kafka_libs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique("share")
    topic, share_group, classic = f"{prefix}-t", f"{prefix}-queue", f"{prefix}-classic"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 20})
    # Kafka's own console share consumer joins the share group, reads what it is given, and leaves.
    share_consumer = kafka_scenario.java_command(
        kafka_libs,
        "org.apache.kafka.tools.consumer.ConsoleShareConsumer",
        *("--bootstrap-server", bootstrap, "--topic", topic, "--group", share_group, "--timeout-ms", "5000"),
    )
    subprocess.run(share_consumer, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    consumer = kafka_scenario.assigned_consumer(bootstrap, classic, [kafka_scenario.TopicPartition(topic, 0)])
    kafka_scenario.commit(consumer, {kafka_scenario.TopicPartition(topic, 0): 5})
    consumer.close()

    config = ClusterConfig(bootstrap_servers=[bootstrap], groups=NameFilter(include=[f"{prefix}-.*"]))
    poller = ClusterPoller("share", config)
    try:
        snapshot = wait_for(
            lambda: (s := poller.poll()).ok and s.unwatched_groups and s,
            timeout=30,
            what="the share group listed",
        )
    finally:
        poller.close()
    assert snapshot.unwatched_groups == {"share": 1}
    assert [g.group_id for g in snapshot.groups] == [classic]  # watched: the classic one
    from lagwatch.check import render_table
    from lagwatch.lag import group_lag

    table = render_table(snapshot, [group_lag(g, snapshot.partitions) for g in snapshot.groups])
    assert "and 1 share group(s) this lagwatch does not watch yet" in table

    caplog.set_level(logging.INFO)
    settings = load_settings(state_dir=tmp_path / "state", http={"enabled": False})
    daemon = Daemon(settings, clusters={"share": config}, notifiers={})
    try:
        for _ in range(3):
            daemon.poll_cluster("share")
        said = [r.getMessage() for r in caplog.records if "not watched" in r.getMessage()]
        assert said == ["1 share group(s) on this cluster are not watched: this lagwatch does not read their lag "
                        "yet (see /api/v1/clusters and lagwatch_groups_unwatched)"]  # fmt: skip
        assert views.cluster_view(daemon.clusters["share"])["unwatched_groups"] == {"share": 1}
        daemon.render_metrics()
        assert b'lagwatch_groups_unwatched{cluster="share",type="share"} 1' in daemon.metrics_body()
    finally:
        daemon.stop()
