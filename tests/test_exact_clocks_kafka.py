"""Exact clocks on the real broker: lagwatch reads __consumer_offsets and knows when each offset was committed
(also when the same offset is committed again) and when a group became Empty, before its first poll ends."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from kafka import TopicPartition as KafkaTopicPartition

from lagwatch.collect.offsets_reader import OffsetsTopicReader, ReaderState
from lagwatch.config import ClusterConfig
from lagwatch.history import ClusterHistory
from lagwatch.model import TopicPartition
from lagwatch.offsets_topic import Record
from tests import kafka_scenario
from tests.conftest import unique, wait_for
from tests.live import commit

pytestmark = pytest.mark.kafka


class Collected:
    def __init__(self) -> None:
        self.history = ClusterHistory("c")
        self.lock = threading.Lock()

    def sink(self, records: Sequence[Record], caught_up: bool) -> None:
        with self.lock:
            self.history.observe_records(records, caught_up)


def test_reader_gives_exact_commit_and_empty_times(bootstrap: str) -> None:
    prefix = unique("exact")
    topic = f"{prefix}-t"
    kafka_scenario.create_topic(bootstrap, topic, 1)
    kafka_scenario.produce(bootstrap, topic, {0: 10})
    quiet = kafka_scenario.assigned_consumer(bootstrap, f"{prefix}-quiet", [KafkaTopicPartition(topic, 0)])
    first_commit = time.time()
    commit(quiet, topic, 10)
    classic = kafka_scenario.subscribed_consumer(bootstrap, f"{prefix}-classic", [topic])
    commit(classic, topic, 4)
    classic.close()
    left_at = time.time()

    collected = Collected()
    reader = OffsetsTopicReader("c", ClusterConfig(bootstrap_servers=[bootstrap]), collected.sink).start()
    try:
        wait_for(lambda: reader.status().state is ReaderState.LIVE, timeout=30, what="reader to catch up")
        tp = TopicPartition(topic, 0)
        with collected.lock:
            exact = collected.history.exact
            assert exact.ready
            at = exact.commit_time(f"{prefix}-quiet", tp)
            assert at is not None and first_commit - 1 <= at <= first_commit + 2
            empty = exact.group_empty_since(f"{prefix}-classic")
            assert empty is not None and left_at - 5 <= empty <= left_at + 1
        # The same offset committed again: invisible to polls, seen here.
        time.sleep(1.5)
        again = time.time()
        commit(quiet, topic, 10)
        wait_for(
            lambda: (collected.history.exact.commit_time(f"{prefix}-quiet", tp) or 0) >= again - 1,
            timeout=10,
            what="the re-commit",
        )
        assert reader.status().undecodable == 0
    finally:
        reader.stop()
        quiet.close()


def test_reader_denied_says_so_once_and_the_daemon_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """A principal without Read on the topic: the reader reports `denied`, logs one line, and stays alive."""
    from kafka.errors import TopicAuthorizationFailedError

    class DeniedConsumer:
        def __init__(self, **options: object) -> None:
            pass

        def partitions_for_topic(self, topic: str) -> set[int]:
            raise TopicAuthorizationFailedError(topic)

        def close(self) -> None:
            pass

    reader = OffsetsTopicReader(
        "acl", ClusterConfig(bootstrap_servers=["127.0.0.1:1"]), lambda r, c: None, DeniedConsumer
    ).start()
    try:
        wait_for(lambda: reader.status().state is ReaderState.DENIED, timeout=5, what="denied")
        assert "not authorised" in (reader.status().error or "")
        assert sum("exact commit clocks unavailable" in r.getMessage() for r in caplog.records) == 1
    finally:
        reader.stop()


@pytest.mark.parametrize("request_timeout_s", [0.4, 600])
def test_every_request_timeout_the_config_takes_reads_the_offsets_topic(
    bootstrap: str, request_timeout_s: float
) -> None:
    """`request_timeout_s: 540` to 600 (and under 0.5) passed validation, then KafkaConsumer refused its own
    settings (idle timeout > request timeout > fetch wait): the exact clocks were off from the start."""
    kafka_scenario.stopped_group(bootstrap, unique("timeouts"), {0: 1}, {0: 1})  # __consumer_offsets exists
    config = ClusterConfig(bootstrap_servers=[bootstrap], request_timeout_s=request_timeout_s)
    reader = OffsetsTopicReader("c", config, Collected().sink).start()
    try:
        wait_for(lambda: reader.status().state is ReaderState.LIVE, timeout=30, what="reader to catch up")
    finally:
        reader.stop()
