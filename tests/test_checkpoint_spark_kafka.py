"""A real Spark Structured Streaming query (Spark's own Kafka source) reading the test broker: lagwatch finds its
offsets in the checkpoint, its lag equals log end minus those offsets, and a stopped query raises `stopped`."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from lagwatch.collect import ClusterPoller
from lagwatch.config import CheckpointConsumerConfig, ClusterConfig, NameFilter, load_settings
from lagwatch.daemon import Daemon
from lagwatch.lag import group_lag
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.live import Recorder

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def log_ends(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        ends = consumer.end_offsets([KafkaTopicPartition(topic, p) for p in range(partitions)])
        return {tp.partition: o for tp, o in ends.items()}
    finally:
        consumer.close()


def start_query(spark: Any, bootstrap: str, topic: str, checkpoint: Path) -> Any:
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 40)  # several batches, so the query is mid-way when stopped
        .load()
    )
    return (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )


def test_checkpoint_consumer_lag_and_stopped(spark: Any, bootstrap: str, tmp_path: Path) -> None:
    prefix = unique("spark")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 2)
    kafka_scenario.produce(bootstrap, topic, {0: 150, 1: 90})
    checkpoint = tmp_path / "checkpoint"
    query = start_query(spark, bootstrap, topic, checkpoint)
    try:
        wait_for(lambda: query.lastProgress and query.lastProgress["numInputRows"] > 0, timeout=120, what="a batch")
        time.sleep(1.0)
    finally:
        query.stop()
    end = query.lastProgress["sources"][0]["endOffset"]  # Spark's own word for where it got to (a JSON string)
    spark_end = (json.loads(end) if isinstance(end, str) else end)[topic]
    processed = {int(p): o for p, o in spark_end.items()}

    cluster = ClusterConfig(
        bootstrap_servers=[bootstrap],
        groups=NameFilter(include=[f"{prefix}-.*"]),
        exact_clocks=False,
        checkpoint_consumers={f"{prefix}-etl": CheckpointConsumerConfig(location=str(checkpoint))},
    )
    poller = ClusterPoller("test", cluster)
    try:
        snapshot = poller.poll()
    finally:
        poller.close()
    (group,) = [g for g in snapshot.groups if g.group_id == f"{prefix}-etl"]
    assert group.kind.value == "checkpoint" and group.error is None
    assert {tp.partition: c.offset for tp, c in group.committed.items()} == processed
    ends = log_ends(bootstrap, topic, 2)
    lag = group_lag(group, snapshot.partitions)
    assert {p.partition: p.lag for p in lag.partitions} == {p: ends[p] - processed[p] for p in ends}
    assert lag.sum_lag > 0, "the query should have stopped mid-way (maxOffsetsPerTrigger)"

    # The query stays stopped while records keep arriving: `stopped`, as for an assign() group.
    settings = load_settings(
        rules={"lag": {"enabled": False}, "stopped": {"window_s": 4}},
        alerts={"group_wait_s": 0},
        state_dir=tmp_path / "state",
        http={"enabled": False},
    )
    recorder = Recorder()
    daemon = Daemon(
        settings, clusters={"test": cluster.model_copy(update={"poll_interval_s": 1})}, notifiers={"r": recorder}
    )
    daemon.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not recorder.kinds(f"{prefix}-etl"):
            kafka_scenario.produce(bootstrap, topic, {0: 5})
            time.sleep(1)
        assert recorder.kinds(f"{prefix}-etl") == [("firing", ("stopped",))]
    finally:
        daemon.stop()
