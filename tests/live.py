"""Real traffic for the daemon tests: a steady producer and consumers that behave in the ways rules detect."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from lagwatch.alerts import Notification


class Recorder:
    """A notifier that keeps what it is given (the test's stand-in for a person reading Slack)."""

    name = "record"

    def __init__(self) -> None:
        self.sent: list[Notification] = []
        self.lock = threading.Lock()

    def send(self, notification: Notification, ref: dict[str, Any] | None) -> dict[str, Any] | None:
        with self.lock:
            self.sent.append(notification)
        return {"n": len(self.sent)}

    def kinds(self, group: str) -> list[tuple[str, tuple[str, ...]]]:
        with self.lock:
            return [
                (n.kind, tuple(sorted(a.rule for a in n.firing)))
                for n in self.sent
                if n.group_labels.get("group") == group
            ]


class Background:
    """Threads that run until stop(): a producer at a fixed rate, and a slow consumer."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.threads: list[threading.Thread] = []

    def spawn(self, fn: Any, *args: Any) -> None:
        t = threading.Thread(target=fn, args=args, daemon=True)
        t.start()
        self.threads.append(t)

    def produce(self, bootstrap: str, topic: str, per_second: int) -> None:
        def run() -> None:
            producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
            while not self.stop_event.wait(1.0 / per_second):
                producer.send(topic, b"x", partition=0)
            producer.close()

        self.spawn(run)

    def slow_consumer(self, bootstrap: str, group: str, topic: str, per_second: int) -> None:
        def run() -> None:
            c = KafkaConsumer(
                bootstrap_servers=bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                max_poll_records=per_second,
                metadata_max_age_ms=1000,  # see kafka_scenario.subscribed_consumer
            )
            c.subscribe([topic])
            while not self.stop_event.wait(1.0):
                if c.poll(200, max_records=per_second):
                    c.commit()
            c.close()

        self.spawn(run)

    def stop(self) -> None:
        self.stop_event.set()
        for t in self.threads:
            t.join(10)


def commit(consumer: KafkaConsumer, topic: str, offset: int) -> None:
    consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)})


def poll_until_paged(
    daemon: Any, cluster: str, record: Recorder, groups: Mapping[str, str], timeout: float
) -> dict[str, float]:
    """Polls `cluster` each second until every one of `groups` (name -> group id) was notified, then 5 polls more
    (in which the others must stay quiet); returns how long after the call each was paged."""
    from tests.conftest import wait_for

    started = time.monotonic()
    paged_after: dict[str, float] = {}

    def paged() -> bool:
        daemon.poll_cluster(cluster)
        for name, group in groups.items():
            if name not in paged_after and record.kinds(group):
                paged_after[name] = time.monotonic() - started
        return len(paged_after) == len(groups)

    wait_for(paged, timeout=timeout, interval=1, what=f"{', '.join(groups)} paged")
    for _ in range(5):
        daemon.poll_cluster(cluster)
        time.sleep(1)
    return paged_after


def window_rules(window_s: float, stalled: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rules for a test of `stalled`, `stopped` and `falling_behind` on the real broker: each with a window of
    `window_s` and no `for_s`, `lag` out of the way."""
    window = {"window_s": window_s, "for_s": 0}
    return {
        "lag": {"warning": {"offsets": 100_000}, "for_s": 0},
        "stalled": {**window, **(stalled or {})},
        "stopped": window,
        "falling_behind": window,
    }
